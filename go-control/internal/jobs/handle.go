package jobs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	sluice "github.com/sluice-ai/sluice/clients/go"
	"github.com/sluice-ai/sluice/clients/go/wire"
	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/jobs/jobmsg"
)

// handle works one message to its end: a result or a dead letter stored
// and the message acked, or the message nak'ed.
func (s *streamRunner) handle(m jetstream.Msg) {
	defer s.done()
	s.c.received.Add(1)
	meta, err := m.Metadata()
	if err != nil {
		// Not a JetStream delivery: nothing to ack, nothing to name it by.
		s.noteErr(fmt.Errorf("a message without JetStream metadata: %w", err))
		return
	}
	if meta.NumDelivered > 1 {
		s.c.redelivered.Add(1)
	}
	h := m.Headers()
	if h.Get(HeaderKind) != "" {
		// Our own result or dead letter under the filter: never run it.
		s.c.skipped.Add(1)
		s.ack(m)
		return
	}
	out := &outMeta{id: requestID(meta.Stream, meta.Sequence.Stream), subject: m.Subject(), deliveries: meta.NumDelivered,
		inputMsgID: h.Get(HeaderNatsMsgID)}
	j, f := jobmsg.Decode(&s.cfg, m.Subject(), h, m.Data(), s.in.host.Tenant, s.backend)
	model := ""
	if j != nil && s.cfg.MaxDeliver > 0 && meta.NumDelivered > uint64(s.cfg.MaxDeliver) {
		// Its last allowed delivery ended without an outcome (the appliance
		// holding it died): JetStream delivers it again (the consumer has
		// no bound of its own, so nothing is lost there), and it ends here.
		model = j.Model
		f = jobmsg.DeadLetter(jobmsg.CodeGaveUp, "delivery %d is past max_deliver %d (an earlier delivery ended without an outcome)",
			meta.NumDelivered, s.cfg.MaxDeliver)
	} else if j != nil {
		model = j.Model
		out.traceparent = jobmsg.FormatTraceparent(j.Req.Trace)
		f = s.infer(m, meta, out, j)
		if f == nil {
			return // result stored and acked
		}
	}
	if f.Retry {
		if s.cfg.MaxDeliver > 0 && meta.NumDelivered >= uint64(s.cfg.MaxDeliver) {
			f = jobmsg.DeadLetter(jobmsg.CodeGaveUp, "delivery %d of max_deliver %d failed retryably: %s", meta.NumDelivered, s.cfg.MaxDeliver, f)
		} else {
			s.nak(m)
			return
		}
	}
	s.storeDeadLetter(m, out, model, f)
}

// backend tells the models the running config serves by backends: their
// jobs go to the OpenAI front door.
func (s *streamRunner) backend(model, version string) bool {
	return s.in.host.ModelKind(model, version) == config.ModelKindBackend
}

// infer runs j and stores its result; nil means stored and acked.
func (s *streamRunner) infer(m jetstream.Msg, meta *jetstream.MsgMetadata, out *outMeta, j *jobmsg.Job) *jobmsg.Failure {
	var deadline time.Time
	if j.Timeout > 0 {
		deadline = meta.Timestamp.Add(j.Timeout)
	}
	if !j.Req.Deadline.IsZero() && (deadline.IsZero() || j.Req.Deadline.Before(deadline)) {
		deadline = j.Req.Deadline
	}
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		return jobmsg.DeadLetter(jobmsg.CodeExpired, "the deadline %s passed before the request ran (stored %s, X-AI-Timeout %v)",
			deadline.UTC().Format(time.RFC3339Nano), meta.Timestamp.UTC().Format(time.RFC3339Nano), j.Timeout)
	}
	if j.Family == jobmsg.FamilyOpenAI {
		return s.inferOpenAI(m, out, j, deadline)
	}
	c, err := s.in.clients.get(j.Tenant)
	if err != nil {
		return jobmsg.Retryable("internal", "%v", err)
	}
	// One of jobs.concurrency slots while in the data plane.
	if !s.takeSlot() {
		return jobmsg.Retryable("busy", "no data-plane slot free within a third of ack_wait_ms")
	}
	resp, err := s.send(c, j, deadline)
	<-s.in.slots
	if err != nil {
		return jobmsg.Classify(err, !deadline.IsZero() && !time.Now().Before(deadline))
	}
	msg, err := s.resultMsg(out, j, resp)
	resp.Release()
	if err != nil {
		return jobmsg.DeadLetter(wire.CodeResponseTooLarge.String(), "%v", err)
	}
	dup, f := s.publish(msg, out.id)
	if f != nil {
		return f
	}
	if !dup {
		s.c.results.Add(1)
	}
	s.ack(m)
	return nil
}

// takeSlot takes one of jobs.concurrency slots (requests in the data plane
// or at the front door at once), waiting at most a third of ack_wait_ms.
func (s *streamRunner) takeSlot() bool {
	t := time.NewTimer(time.Duration(s.cfg.AckWaitMs) * time.Millisecond / 3)
	defer t.Stop()
	select {
	case s.in.slots <- struct{}{}:
		return true
	case <-t.C:
		return false
	}
}

// send runs the request, resending at once (1 ms, 2 ms, ... apart) when
// the engine answers busy, up to jobs.busy_retries times.
func (s *streamRunner) send(c *sluice.Client, j *jobmsg.Job, deadline time.Time) (*sluice.Response, error) {
	if deadline.IsZero() {
		deadline = time.Now().Add(time.Duration(s.in.cfg.RequestTimeoutMs) * time.Millisecond)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	pause := time.Millisecond
	for attempt := 0; ; attempt++ {
		resp, err := c.Infer(ctx, &j.Req)
		if err == nil || !errors.Is(err, sluice.ErrBusy) || attempt >= s.in.cfg.BusyRetries {
			return resp, err
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return nil, err
		}
		pause *= 2
	}
}

// publish stores msg (a result or dead letter) with the request's
// de-duplication id and waits for the publish ack. dup is JetStream's
// word that a message of that id is stored already (within the duplicate
// window): this request was worked before and its outcome kept.
func (s *streamRunner) publish(msg *nats.Msg, id string) (dup bool, f *jobmsg.Failure) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(s.in.cfg.PublishTimeoutMs)*time.Millisecond)
	defer cancel()
	ack, err := s.in.js.PublishMsg(ctx, msg, jetstream.WithMsgID(msgIDPrefix+id))
	if err != nil {
		s.c.publishErrors.Add(1)
		if errors.Is(err, nats.ErrMaxPayload) {
			return false, jobmsg.DeadLetter(wire.CodeResponseTooLarge.String(), "the result does not fit NATS's max_payload: %v", err)
		}
		s.noteErr(fmt.Errorf("publish to %s: %w", msg.Subject, err))
		if errors.Is(err, jetstream.ErrNoStreamResponse) {
			// Retried like any failed publish (a stream may be on its way),
			// so max_deliver is what ends it.
			return false, jobmsg.Retryable("publish_failed", "no stream stores %s (or none answered): %v", msg.Subject, err)
		}
		return false, jobmsg.Retryable("publish_failed", "storing to %s: %v", msg.Subject, err)
	}
	if ack.Duplicate {
		s.c.duplicates.Add(1)
	}
	return ack.Duplicate, nil
}

// storeDeadLetter publishes the dead letter, then acks; a failed publish
// naks instead, so the message is tried again.
func (s *streamRunner) storeDeadLetter(m jetstream.Msg, out *outMeta, model string, f *jobmsg.Failure) {
	dl := s.deadLetterMsg(out, model, m.Headers(), m.Data(), f)
	dup, pf := s.publish(dl, out.id)
	if pf != nil && !pf.Retry {
		// Too large for max_payload with our headers: keep the code and
		// message, drop the body.
		dl.Data = nil
		dl.Header.Set(HeaderBodyDropped, pf.Msg)
		dup, pf = s.publish(dl, out.id)
	}
	if pf != nil {
		s.nak(m)
		return
	}
	if !dup {
		s.c.deadLetter(f.Code)
	}
	s.ack(m)
}

func (s *streamRunner) ack(m jetstream.Msg) {
	if err := m.Ack(); err != nil {
		// The ack is lost: the message comes back after ack_wait_ms and its
		// result publish is found to be a duplicate.
		s.noteErr(fmt.Errorf("ack: %w", err))
		return
	}
	s.c.acked.Add(1)
}

func (s *streamRunner) nak(m jetstream.Msg) {
	if err := m.NakWithDelay(time.Duration(s.in.cfg.NakDelayMs) * time.Millisecond); err != nil {
		s.noteErr(fmt.Errorf("nak: %w", err))
		return
	}
	s.c.naked.Add(1)
}
