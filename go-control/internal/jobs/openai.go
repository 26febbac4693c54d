package jobs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-ai/sluice/clients/go/wire"
	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/fdsign"
	"github.com/sluice-ai/sluice/go-control/internal/jobs/jobmsg"
)

// Jobs for models served by backends (kind = "backend") go to this
// appliance's own OpenAI front door over HTTP, signed with Sluice-HMAC-v2
// by the job's tenant, instead of to the data plane over UDP: the front
// door dispatches them to the [[backends]] (docs/jobs.md, "LLM jobs served
// by backends").

// Bounds of a front-door request.
const (
	// frontdoorDialTimeout bounds a connect to the front door (on this
	// host), within the job's deadline.
	frontdoorDialTimeout = 2 * time.Second
	// frontdoorTimeoutMax is the longest X-AI-Timeout the front door takes
	// (docs/frontdoor.md, "The semantic headers"); a longer remaining time
	// is sent as this.
	frontdoorTimeoutMax = time.Hour
	// frontdoorIdle closes kept-alive connections unused this long.
	frontdoorIdle = 90 * time.Second
)

// HeaderResultVersion is the front door's answer header the result's
// Sluice-Model-Version is taken from, when it sends one.
const HeaderResultVersion = "X-Sluice-Model-Version"

// openAI is the ingress's client of the front door: one http.Client, its
// connections kept alive, and the front door's address.
type openAI struct {
	client   *http.Client
	replyMax int // frontdoor.reply_bytes_max: a longer answer is refused

	mu   sync.Mutex
	addr string // host:port; "" until known
	host interface {
		FrontdoorHTTP() (string, error)
	}
}

func newOpenAI(cfg *config.Config) *openAI {
	tr := &http.Transport{
		Proxy:               nil, // the appliance's own front door, never through a proxy
		DialContext:         (&net.Dialer{Timeout: frontdoorDialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        cfg.Jobs.Concurrency,
		MaxIdleConnsPerHost: cfg.Jobs.Concurrency,
		IdleConnTimeout:     frontdoorIdle,
		DisableCompression:  true, // the completion is stored as it came
	}
	return &openAI{
		client: &http.Client{Transport: tr,
			// An answer is the front door's own; a redirect is a failure.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		replyMax: cfg.Frontdoor.ReplyBytesMax,
	}
}

// address is the front door's host:port to send to, asked of the host
// until it is known; "" while it is off.
func (o *openAI) address() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.addr == "" && o.host != nil {
		if l, err := o.host.FrontdoorHTTP(); err == nil && l != "" {
			if a, err := loopback(l); err == nil {
				o.addr = a
			}
		}
	}
	return o.addr
}

func (o *openAI) close() { o.client.CloseIdleConnections() }

// openAIAnswer is a 200 answer of the front door.
type openAIAnswer struct {
	body    []byte
	version string // HeaderResultVersion, when sent
}

// send posts j to the front door before deadline and reads the answer.
// A Failure says what to do with the message instead.
func (o *openAI) send(j *jobmsg.Job, deadline time.Time, ownDeadline bool) (*openAIAnswer, *jobmsg.Failure) {
	addr := o.address()
	if addr == "" {
		return nil, jobmsg.DeadLetter(jobmsg.CodeNoFrontDoor, "model %s is served by backends, and this appliance's OpenAI front door is off (frontdoor.http_listen)", j.Model)
	}
	key, err := config.DecodeKey(j.Tenant.Key, getenv)
	if err != nil {
		return nil, jobmsg.Retryable("internal", "tenant %q key: %v", j.Tenant.Name, err)
	}
	expired := func() bool { return ownDeadline && !time.Now().Before(deadline) }
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+j.Path, bytes.NewReader(j.Body))
	if err != nil {
		return nil, jobmsg.DeadLetter(jobmsg.CodeBadMessage, "%v", err)
	}
	h := req.Header
	h.Set("Content-Type", jobmsg.ContentJSON)
	h.Set(jobmsg.HeaderTimeout, timeoutHeader(time.Until(deadline)))
	for _, kv := range [][2]string{
		{jobmsg.HeaderModelVersion, j.Req.Version}, {jobmsg.HeaderAdapter, j.Req.Adapter}, {jobmsg.HeaderIntent, j.Req.Intent},
		{jobmsg.HeaderTraceparent, jobmsg.FormatTraceparent(j.Req.Trace)},
	} {
		if kv[1] != "" {
			h.Set(kv[0], kv[1])
		}
	}
	h.Set("Authorization", fdsign.Header(key, &fdsign.Signed{
		Tenant: uint32(j.Tenant.ID), Method: http.MethodPost, Path: j.Path,
		ModelVersion: j.Req.Version, Adapter: j.Req.Adapter, Intent: j.Req.Intent,
		TsMs: uint64(time.Now().UnixMilli()), Nonce: fdsign.Nonce(), BodySHA256: fdsign.BodySHA256(j.Body),
	}))
	resp, err := o.client.Do(req)
	if err != nil {
		if expired() {
			return nil, jobmsg.DeadLetter(jobmsg.CodeExpired, "no answer from the OpenAI front door before the deadline (X-AI-Timeout)")
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, jobmsg.Retryable("timeout", "no answer from the OpenAI front door within jobs.request_timeout_ms")
		}
		return nil, jobmsg.Retryable(wire.CodeConnectionLost.String(), "the OpenAI front door at %s: %v", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(o.replyMax)+1))
	if err != nil {
		if expired() {
			return nil, jobmsg.DeadLetter(jobmsg.CodeExpired, "the OpenAI front door's answer was not read whole before the deadline (X-AI-Timeout)")
		}
		return nil, jobmsg.Retryable(wire.CodeConnectionLost.String(), "reading the OpenAI front door's answer: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, jobmsg.ClassifyHTTP(resp.StatusCode, body, expired())
	}
	if len(body) > o.replyMax {
		return nil, jobmsg.DeadLetter(wire.CodeResponseTooLarge.String(), "the completion is longer than frontdoor.reply_bytes_max (%d bytes)", o.replyMax)
	}
	if f := jobmsg.CheckCompletion(body); f != nil {
		return nil, f
	}
	return &openAIAnswer{body: body, version: resp.Header.Get(HeaderResultVersion)}, nil
}

// timeoutHeader writes the time left as X-AI-Timeout: whole milliseconds
// (at least 1), at most the front door's hour.
func timeoutHeader(left time.Duration) string {
	left = min(max(left, time.Millisecond), frontdoorTimeoutMax)
	return strconv.FormatInt(left.Milliseconds(), 10) + "ms"
}

// inferOpenAI runs a FamilyOpenAI job through the front door and stores
// its result; nil means stored and acked.
func (s *streamRunner) inferOpenAI(m jetstream.Msg, out *outMeta, j *jobmsg.Job, deadline time.Time) *jobmsg.Failure {
	// One of jobs.concurrency slots while at the front door.
	if !s.takeSlot() {
		return jobmsg.Retryable("busy", "no slot free within a third of ack_wait_ms")
	}
	own := !deadline.IsZero()
	if !own {
		deadline = time.Now().Add(time.Duration(s.in.cfg.RequestTimeoutMs) * time.Millisecond)
	}
	// A completion may take longer than ack_wait_ms: the message is told
	// in progress meanwhile, so JetStream does not hand it to another
	// appliance (and run it twice) while this one works it.
	stop := s.keepInProgress(m)
	ans, f := s.in.openai.send(j, deadline, own)
	stop()
	<-s.in.slots
	if f != nil {
		return f
	}
	dup, f := s.publish(s.openAIResultMsg(out, j, ans), out.id)
	if f != nil {
		return f
	}
	if !dup {
		s.c.results.Add(1)
	}
	s.ack(m)
	return nil
}

// keepInProgress tells JetStream every third of ack_wait_ms that m is
// being worked, until the returned func is called.
func (s *streamRunner) keepInProgress(m jetstream.Msg) (stop func()) {
	every := time.Duration(s.cfg.AckWaitMs) * time.Millisecond / 3
	if every <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := m.InProgress(); err != nil {
					s.noteErr(fmt.Errorf("in progress: %w", err))
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// openAIResultMsg is the result of an OpenAI job: the completion JSON as
// the front door returned it, with the headers of every result.
func (s *streamRunner) openAIResultMsg(m *outMeta, j *jobmsg.Job, a *openAIAnswer) *nats.Msg {
	subject := j.ReplyTo
	if subject == "" {
		subject = config.RenderSubject(s.cfg.Results, subjectToken(j.Model), s.cfg.Stream)
	}
	h := m.header(KindResult, "ok")
	h.Set(jobmsg.HeaderContentType, jobmsg.ContentJSON)
	h.Set(HeaderModel, j.Model)
	if a.version != "" {
		h.Set(HeaderVersion, headerText(a.version, 256))
	}
	return &nats.Msg{Subject: subject, Header: h, Data: a.body}
}
