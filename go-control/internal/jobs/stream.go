package jobs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/jobs/jobmsg"
)

// Timings of a stream's loop.
const (
	// InfoInterval is how often the consumer's lag is read.
	InfoInterval = 2 * time.Second
	// SetupBackoffMax caps the wait between attempts to find or create the
	// stream and consumer, and after a failed fetch.
	SetupBackoffMax = 5 * time.Second
	// adminTimeout bounds one stream or consumer API call.
	adminTimeout = 5 * time.Second
)

// States of a stream (api.JobStreamDoc.State).
const (
	stateStarting  = "starting"
	stateConsuming = "consuming"
	stateDraining  = "draining"
	stateStopped   = "stopped"
)

// streamRunner pulls one stream's durable consumer and handles its
// messages, at most cfg.InflightMax at once.
type streamRunner struct {
	in  *Ingress
	cfg config.JobStream

	slots    chan struct{} // inflight_max
	inflight atomic.Int64
	c        counters

	mu         sync.Mutex
	state      string
	lastErr    string
	lag        uint64
	ackPending uint64
}

// counters are monotonic, except inflight above.
type counters struct {
	received, redelivered, acked, naked, results, duplicates   atomic.Uint64
	deadLettered, expired, skipped, publishErrors, fetchErrors atomic.Uint64

	mu    sync.Mutex
	codes map[string]uint64 // dead letters by code
}

func (c *counters) deadLetter(code string) {
	c.deadLettered.Add(1)
	if code == jobmsg.CodeExpired {
		c.expired.Add(1)
	}
	c.mu.Lock()
	if c.codes == nil {
		c.codes = map[string]uint64{}
	}
	c.codes[code]++
	c.mu.Unlock()
}

func (c *counters) snapshot() api.JobCounters {
	c.mu.Lock()
	codes := make(map[string]uint64, len(c.codes))
	for k, v := range c.codes {
		codes[k] = v
	}
	c.mu.Unlock()
	return api.JobCounters{
		Received: c.received.Load(), Redelivered: c.redelivered.Load(), Acked: c.acked.Load(), Naked: c.naked.Load(),
		Results: c.results.Load(), Duplicates: c.duplicates.Load(), DeadLettered: c.deadLettered.Load(),
		Expired: c.expired.Load(), Skipped: c.skipped.Load(), PublishErrors: c.publishErrors.Load(),
		FetchErrors: c.fetchErrors.Load(), DeadLetterCodes: codes,
	}
}

func newStreamRunner(in *Ingress, cfg config.JobStream) *streamRunner {
	return &streamRunner{in: in, cfg: cfg, slots: make(chan struct{}, cfg.InflightMax), state: stateStarting}
}

func (s *streamRunner) setState(st string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state = st
	if err != nil {
		s.lastErr = err.Error()
	}
}

func (s *streamRunner) noteErr(err error) {
	s.mu.Lock()
	s.lastErr = err.Error()
	s.mu.Unlock()
}

func (s *streamRunner) status() api.JobStreamDoc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return api.JobStreamDoc{
		Stream: s.cfg.Stream, Consumer: s.cfg.Consumer, State: s.state, LastError: s.lastErr,
		Lag: s.lag, AckPending: s.ackPending, MaxAckPending: s.cfg.MaxAckPending,
		InFlight: int(s.inflight.Load()), Counters: s.c.snapshot(),
	}
}

// sleep waits d unless the ingress drains first; false when it does.
func (s *streamRunner) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.in.stop:
		return false
	}
}

// run finds (or creates) the stream and consumer, then fetches until the
// ingress drains; it starts over when the consumer disappears.
func (s *streamRunner) run() {
	defer s.in.loops.Done()
	defer func() { s.setState(stateStopped, nil) }()
	backoff := 100 * time.Millisecond
	for !s.in.draining.Load() {
		cons, err := s.ensure()
		if err != nil {
			s.noteErr(err)
			s.in.log.Warn("jobs stream not ready; retrying", "stream", s.cfg.Stream, "err", err)
			if !s.sleep(backoff) {
				return
			}
			backoff = min(2*backoff, SetupBackoffMax)
			continue
		}
		backoff = 100 * time.Millisecond
		s.setState(stateConsuming, nil)
		infoDone := make(chan struct{})
		go s.pollInfo(cons, infoDone)
		err = s.consume(cons)
		close(infoDone)
		if err != nil {
			s.noteErr(err)
			s.in.log.Warn("jobs consumer lost; setting it up again", "stream", s.cfg.Stream, "err", err)
		}
	}
}

// ensure looks the stream up (creating it when missing and allowed) and
// creates or updates the durable consumer, then checks that the results
// and dead letters of this stream are stored by some stream.
func (s *streamRunner) ensure() (jetstream.Consumer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	js := s.in.js
	_, err := js.Stream(ctx, s.cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) && s.cfg.Create {
		storage := jetstream.FileStorage
		if s.cfg.Storage == "memory" {
			storage = jetstream.MemoryStorage
		}
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name: s.cfg.Stream, Subjects: s.cfg.Subjects, Storage: storage, Replicas: s.cfg.Replicas,
			Duplicates: time.Duration(s.cfg.DuplicateWindowMs) * time.Millisecond,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			_, err = js.Stream(ctx, s.cfg.Stream) // another appliance was first
		}
		if err == nil {
			s.in.log.Info("jobs stream created", "stream", s.cfg.Stream, "subjects", s.cfg.Subjects)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", s.cfg.Stream, err)
	}
	cc := jetstream.ConsumerConfig{
		Durable: s.cfg.Consumer, AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
		// No bound here: max_deliver is applied by the appliance (handle.go),
		// so a last delivery lost with its appliance is delivered again and
		// dead-lettered then, instead of stopping in the stream with no
		// outcome, as JetStream's own bound would leave it.
		AckWait: time.Duration(s.cfg.AckWaitMs) * time.Millisecond, MaxDeliver: -1,
		MaxAckPending:   s.cfg.MaxAckPending,
		MaxRequestBatch: config.JobFetchMaxMax,
	}
	if len(s.cfg.FilterSubjects) == 1 {
		cc.FilterSubject = s.cfg.FilterSubjects[0]
	} else {
		cc.FilterSubjects = s.cfg.FilterSubjects
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, s.cfg.Stream, cc)
	if err != nil {
		return nil, fmt.Errorf("consumer %s on %s: %w", s.cfg.Consumer, s.cfg.Stream, err)
	}
	var stores [2]string
	for i, t := range []string{s.cfg.Results, s.cfg.DeadLetters} {
		sub := config.RenderSubject(t, "model", s.cfg.Stream)
		name, err := js.StreamNameBySubject(ctx, sub)
		if err != nil {
			return nil, fmt.Errorf("%s (from %q) is stored by no stream (%w): its results could never be stored, so nothing is consumed", sub, t, err)
		}
		stores[i] = name
	}
	if stores[0] != stores[1] {
		s.in.log.Warn("results and dead letters go to different streams: a message whose result was stored but not acked, then redelivered past its X-AI-Timeout, can end with both",
			"stream", s.cfg.Stream, "results", stores[0], "dead_letters", stores[1])
	}
	return cons, nil
}

// pollInfo reads the consumer's lag and ack-pending count until done.
func (s *streamRunner) pollInfo(cons jetstream.Consumer, done chan struct{}) {
	t := time.NewTicker(InfoInterval)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
		info, err := cons.Info(ctx)
		cancel()
		if err == nil {
			s.mu.Lock()
			s.lag, s.ackPending = info.NumPending, uint64(info.NumAckPending)
			s.mu.Unlock()
		}
		select {
		case <-done:
			return
		case <-s.in.stop:
			return
		case <-t.C:
		}
	}
}

// consume fetches batches of up to fetch_max messages, as many as there
// are free slots, and hands each to its own goroutine. It returns nil when
// the ingress drains, an error when the consumer is gone.
func (s *streamRunner) consume(cons jetstream.Consumer) error {
	wait := time.Duration(s.in.cfg.FetchWaitMs) * time.Millisecond
	backoff := 100 * time.Millisecond
	for {
		select {
		case s.slots <- struct{}{}:
		case <-s.in.stop:
			s.setState(stateDraining, nil)
			return nil
		}
		n := 1
	more:
		for n < s.cfg.FetchMax {
			select {
			case s.slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		batch, err := cons.Fetch(n, jetstream.FetchMaxWait(wait))
		if err != nil {
			s.release(n)
			s.c.fetchErrors.Add(1)
			if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) {
				return err
			}
			s.noteErr(fmt.Errorf("fetch: %w", err))
			if !s.sleep(backoff) {
				s.setState(stateDraining, nil)
				return nil
			}
			backoff = min(2*backoff, SetupBackoffMax)
			continue
		}
		got := 0
		for m := range batch.Messages() {
			got++
			s.inflight.Add(1)
			s.in.held.Add(1)
			go s.handle(m)
		}
		s.release(n - got)
		if err := batch.Error(); err != nil {
			s.c.fetchErrors.Add(1)
			s.noteErr(fmt.Errorf("fetch: %w", err))
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
				return err
			}
			if got == 0 && !s.sleep(backoff) {
				s.setState(stateDraining, nil)
				return nil
			}
			backoff = min(2*backoff, SetupBackoffMax)
			continue
		}
		backoff = 100 * time.Millisecond
	}
}

func (s *streamRunner) release(n int) {
	for range n {
		<-s.slots
	}
}

// done settles one message's bookkeeping.
func (s *streamRunner) done() {
	s.inflight.Add(-1)
	<-s.slots
	s.in.held.Done()
}
