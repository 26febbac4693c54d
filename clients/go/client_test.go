package sluice

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-ai/sluice/clients/go/wire"
)

func dial(t *testing.T, addr string, o Options) *Client {
	t.Helper()
	c, err := Dial(context.Background(), addr, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func echoServer(t *testing.T) *fakeServer {
	return startFake(t, func(b []byte) [][]byte { return [][]byte{echoAnswer(b)} })
}

// Many goroutines on one socket: every answer reaches the request that
// asked for it (the data tells them apart).
func TestConcurrentRequestsAreDemultiplexed(t *testing.T) {
	s := echoServer(t)
	c := dial(t, s.addr(), Options{TenantID: 3})
	const goroutines, each = 32, 50
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				x := []float32{float32(g), float32(i), float32(g * i), -1}
				resp, err := c.Infer(context.Background(), NewRequest("echo", "1", NewTensor("x", []uint64{1, 4}, x)))
				if err != nil {
					errs <- err
					return
				}
				y, err := Values[float32](resp.Outputs[0])
				if err != nil || fmt.Sprint(y) != fmt.Sprint(x) {
					errs <- fmt.Errorf("goroutine %d request %d: got %v, want %v (%v)", g, i, y, x, err)
					return
				}
				resp.Release()
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := c.Stats()
	if st.Sent != goroutines*each || st.Received != goroutines*each || c.Outstanding() != 0 {
		t.Fatalf("stats %+v, outstanding %d", st, c.Outstanding())
	}
}

// Garbage, a stale id and a wrongly signed answer on the same socket are
// counted and ignored; the real answer that follows is taken.
func TestJunkOnTheSocketIsIgnored(t *testing.T) {
	key := []byte("tenant key")
	s := startFake(t, func(b []byte) [][]byte {
		f, _ := wire.Parse(b)
		good := echoAnswer(b)
		stale := append([]byte(nil), good...)
		stale[16] ^= 0xff // another request id
		forged := append([]byte(nil), good...)
		g, _ := wire.Parse(forged)
		wire.NewTenantKey([]byte("not the key")).Sign(&g)
		if !wire.NewTenantKey(key).Verify(&f) {
			panic("the client did not sign its request")
		}
		return [][]byte{[]byte("garbage"), {}, good[:50], stale, forged, good}
	})
	c := dial(t, s.addr(), Options{TenantID: 1, Key: key})
	resp, err := c.Infer(context.Background(), NewRequest("echo", "1", NewTensor("x", []uint64{2}, []int64{7, -7})))
	if err != nil {
		t.Fatal(err)
	}
	y, _ := Values[int64](resp.Outputs[0])
	if fmt.Sprint(y) != "[7 -7]" {
		t.Fatalf("got %v", y)
	}
	time.Sleep(50 * time.Millisecond) // the junk after the answer
	st := c.Stats()
	if st.Malformed != 3 || st.Stale != 1 || st.BadTag != 1 || st.Received != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// Every error code comes back as a *ServerError wrapping its sentinel,
// with the message and the retry rule of the code.
func TestServerErrorsMapToSentinels(t *testing.T) {
	c := dial(t, echoServer(t).addr(), Options{})
	for _, code := range append(wire.Codes, 1000) {
		_, err := c.Infer(context.Background(), NewRequest(fmt.Sprintf("fail-%d", code), "1"))
		var se *ServerError
		if !errors.As(err, &se) || se.Code != code || se.Message != "as asked" {
			t.Fatalf("code %d: %v", code, err)
		}
		if !errors.Is(err, CodeError(code)) || IsRetryable(err) != code.Retryable() {
			t.Fatalf("code %d: sentinel or retryability wrong: %v", code, err)
		}
		if got, ok := CodeOf(err); !ok || got != code {
			t.Fatalf("CodeOf %v", got)
		}
	}
	if _, err := c.Infer(context.Background(), NewRequest("fail-1000", "1")); !errors.Is(err, ErrUnknownCode) || IsRetryable(err) {
		t.Fatalf("unknown code: %v", err)
	}
}

func TestRetryableErrorsAreRetried(t *testing.T) {
	var n atomic.Int32
	s := startFake(t, func(b []byte) [][]byte {
		f, _ := wire.Parse(b)
		if n.Add(1) <= 2 {
			return [][]byte{mustEmit(wire.ErrorFor(&f, wire.CodeBusy, "queue full"))}
		}
		return [][]byte{echoAnswer(b)}
	})
	c := dial(t, s.addr(), Options{RetriesMax: 2})
	if _, err := c.Infer(context.Background(), NewRequest("echo", "1")); err != nil {
		t.Fatal(err)
	}
	if c.Stats().Retries != 2 || n.Load() != 3 {
		t.Fatalf("retries %d, sends %d", c.Stats().Retries, n.Load())
	}
	// Out of retries: the last error, still retryable.
	n.Store(0)
	c2 := dial(t, s.addr(), Options{RetriesMax: 1})
	if _, err := c2.Infer(context.Background(), NewRequest("echo", "1")); !errors.Is(err, ErrBusy) || !IsRetryable(err) {
		t.Fatalf("got %v", err)
	}
	// Not retryable: sent once.
	n.Store(100)
	c3 := dial(t, s.addr(), Options{RetriesMax: 5})
	if _, err := c3.Infer(context.Background(), NewRequest("fail-7", "1")); !errors.Is(err, ErrUnknownModel) || c3.Stats().Retries != 0 {
		t.Fatalf("got %v", err)
	}
}

// The context's deadline goes into the frame; no answer before it gives
// ErrTimeout (and context.DeadlineExceeded); a cancel gives Canceled.
func TestDeadlinesAndTimeouts(t *testing.T) {
	got := make(chan uint64, 4)
	s := startFake(t, func(b []byte) [][]byte {
		f, _ := wire.Parse(b)
		got <- f.DeadlineUs()
		return nil // never answers
	})
	c := dial(t, s.addr(), Options{Timeout: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 80*time.Millisecond)
	defer cancel()
	want, _ := ctx.Deadline()
	start := time.Now()
	_, err := c.Infer(ctx, NewRequest("m", "1"))
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || time.Since(start) < 70*time.Millisecond {
		t.Fatalf("got %v after %v", err, time.Since(start))
	}
	if d := <-got; d != uint64(want.UnixMicro()) {
		t.Fatalf("frame deadline %d, want %d", d, want.UnixMicro())
	}
	// An explicit earlier deadline wins; Options.Timeout bounds the wait.
	early := time.Now().Add(time.Hour)
	_, err = c.Infer(context.Background(), &Request{Model: "m", Version: "1", Deadline: early})
	if !errors.Is(err, ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
	if d := <-got; d != uint64(early.UnixMicro()) {
		t.Fatalf("frame deadline %d", d)
	}
	// No deadline anywhere: 0 on the wire.
	_, _ = c.Infer(context.Background(), NewRequest("m", "1"))
	if d := <-got; d != 0 {
		t.Fatalf("frame deadline %d, want 0", d)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() { time.Sleep(10 * time.Millisecond); cancel2() }()
	if _, err := c.Infer(ctx2, NewRequest("m", "1")); !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v", err)
	}
	<-got
	if c.Outstanding() != 0 || c.Stats().Timeouts != 3 {
		t.Fatalf("outstanding %d, stats %+v", c.Outstanding(), c.Stats())
	}
	// A context already done sends nothing.
	if _, err := c.Infer(ctx2, NewRequest("m", "1")); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	select {
	case <-got:
		t.Fatal("a request with a done context was sent")
	case <-time.After(20 * time.Millisecond):
	}
}

// With a key every frame carries a deadline the appliance's freshness rule
// accepts (docs/wire.md, "Clients"): an earlier one of the request's or the
// context's, else now + Options.SignedDeadline; pings and negotiations too.
func TestSignedFramesCarryFreshDeadlines(t *testing.T) {
	type seen struct {
		kind     wire.Kind
		deadline uint64
	}
	got := make(chan seen, 8)
	s := startFake(t, func(b []byte) [][]byte {
		f, _ := wire.Parse(b)
		got <- seen{f.Kind(), f.DeadlineUs()}
		return nil // never answers
	})
	for _, ahead := range []time.Duration{0, 300 * time.Millisecond} {
		want := ahead
		if want == 0 {
			want = SignedDeadlineDefault
		}
		c := dial(t, s.addr(), Options{Key: []byte("k"), TenantID: 1, Timeout: 20 * time.Millisecond, SignedDeadline: ahead})
		within := func(what string, d seen, from time.Time, by time.Duration) {
			t.Helper()
			lo, hi := uint64(from.Add(by).UnixMicro()), uint64(time.Now().Add(by).UnixMicro())
			if d.deadline < lo || d.deadline > hi {
				t.Fatalf("%s (%v): deadline %d not in [%d, %d]", what, ahead, d.deadline, lo, hi)
			}
		}
		from := time.Now()
		_, _ = c.Infer(context.Background(), NewRequest("m", "1"))
		within("no deadline", <-got, from, want)
		from = time.Now()
		_, _ = c.Infer(context.Background(), &Request{Model: "m", Version: "1", Deadline: time.Now().Add(time.Hour)})
		within("a later deadline", <-got, from, want)
		from = time.Now()
		_, _ = c.Infer(context.Background(), &Request{Model: "m", Version: "1", Deadline: time.Now().Add(100 * time.Millisecond)})
		within("an earlier deadline", <-got, from, 100*time.Millisecond)
		from = time.Now()
		_, _ = c.Ping(context.Background())
		within("ping", <-got, from, want)
		from = time.Now()
		_, _ = c.Negotiate(context.Background(), "s", 0)
		if d := <-got; d.kind != wire.KindNegotiateRequest {
			t.Fatalf("kind %s", d.kind)
		} else {
			within("negotiation", d, from, want)
		}
	}
}

// A signed client names itself in every frame with one random sender id,
// its request ids growing (docs/wire.md, "Replay windows"); the tag covers
// the header; an unsigned client names no sender.
func TestSignedFramesNameTheirSender(t *testing.T) {
	type seen struct {
		sender, id uint64
		named      bool
	}
	got := make(chan seen, 8)
	key := []byte("k")
	s := startFake(t, func(b []byte) [][]byte {
		f, _ := wire.Parse(b)
		id, ok := f.SenderID()
		if ok && !wire.NewTenantKey(key).Verify(&f) {
			t.Error("tag does not verify")
		}
		got <- seen{id, f.RequestID(), ok}
		return nil
	})
	c := dial(t, s.addr(), Options{Key: key, TenantID: 1, Timeout: 20 * time.Millisecond})
	if c.SenderID() == 0 {
		t.Fatal("sender id 0")
	}
	_, _ = c.Infer(context.Background(), NewRequest("m", "1"))
	a := <-got
	_, _ = c.Negotiate(context.Background(), "s", 0)
	b := <-got
	if !a.named || !b.named || a.sender != c.SenderID() || b.sender != c.SenderID() || b.id <= a.id {
		t.Fatalf("%+v %+v (sender %d)", a, b, c.SenderID())
	}
	if o := dial(t, s.addr(), Options{Key: key, TenantID: 1}); o.SenderID() == c.SenderID() {
		t.Fatal("two clients, one sender id")
	}
	u := dial(t, s.addr(), Options{Timeout: 20 * time.Millisecond})
	_, _ = u.Infer(context.Background(), NewRequest("m", "1"))
	if d := <-got; d.named {
		t.Fatalf("unsigned frame names sender %d", d.sender)
	}
}

func TestPingNegotiateAndSchemaCache(t *testing.T) {
	c := dial(t, echoServer(t).addr(), Options{})
	if rtt, err := c.Ping(context.Background()); err != nil || rtt <= 0 {
		t.Fatalf("ping %v %v", rtt, err)
	}
	s, err := c.Negotiate(context.Background(), "subj", 3)
	if err != nil || s.SchemaID != 5 || s.Version != 4 || s.Type != wire.SchemaJSON || string(s.Text) != `{"type":"object"}` || s.TTL != time.Minute {
		t.Fatalf("%+v %v", s, err)
	}
	if _, err := c.Negotiate(context.Background(), "subj", 3); err != nil || c.Stats().SchemaCacheHits != 1 {
		t.Fatalf("cache: %v %+v", err, c.Stats())
	}
	c.ClearSchemaCache()
	if _, err := c.Negotiate(context.Background(), "subj", 3); err != nil || c.Stats().SchemaCacheHits != 1 {
		t.Fatal("cleared cache hit")
	}
	if _, err := c.Negotiate(context.Background(), "missing", 0); !errors.Is(err, ErrUnknownSubject) {
		t.Fatal(err)
	}
	if _, err := c.Negotiate(context.Background(), "bad subject", 0); !errors.Is(err, ErrInvalidRequest) || !errors.Is(err, wire.ErrBadString) {
		t.Fatal(err)
	}
}

// An answer of the wrong kind for the request's id is an error, not a hang.
func TestWrongKindAnswer(t *testing.T) {
	s := startFake(t, func(b []byte) [][]byte {
		f, _ := wire.Parse(b)
		return [][]byte{mustEmit(wire.Repr{Kind: wire.KindPong, RequestID: f.RequestID()})}
	})
	c := dial(t, s.addr(), Options{})
	if _, err := c.Infer(context.Background(), NewRequest("m", "1")); !errors.Is(err, ErrMalformedAnswer) {
		t.Fatal(err)
	}
}

func TestInvalidRequestsFailBeforeSending(t *testing.T) {
	var sent atomic.Int32
	s := startFake(t, func(b []byte) [][]byte { sent.Add(1); return [][]byte{echoAnswer(b)} })
	c := dial(t, s.addr(), Options{})
	cases := []struct {
		req  *Request
		want error
	}{
		{NewRequest("m", "1", NewTensor("x", []uint64{70000}, make([]uint8, 70000))), wire.ErrTooLarge},
		{NewRequest("m", "1", NewTensor("x", []uint64{3}, []float32{1, 2})), wire.ErrBadTensorLen},
		{NewRequest("m o", "1"), wire.ErrBadString},
		{NewRequest(string(bytes.Repeat([]byte("m"), 65)), "1"), wire.ErrFieldTooLong},
		{NewRequest("m", "1", make([]Tensor, 17)...), wire.ErrTooManyTensors},
	}
	for _, k := range cases {
		if _, err := c.Infer(context.Background(), k.req); !errors.Is(err, ErrInvalidRequest) || !errors.Is(err, k.want) {
			t.Errorf("%v: got %v", k.want, err)
		}
	}
	if sent.Load() != 0 {
		t.Fatal("an invalid request was sent")
	}
	// The largest request that fits one datagram does go.
	n := DatagramLenMax - 256
	if _, err := c.Infer(context.Background(), NewRequest("m", "1", NewTensor("x", []uint64{uint64(n)}, make([]uint8, n)))); err != nil {
		t.Fatal(err)
	}
}

func TestOutstandingMaxAndClose(t *testing.T) {
	s := startFake(t, func(b []byte) [][]byte { return nil })
	c, err := Dial(context.Background(), s.addr(), Options{OutstandingMax: 2, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() { _, err := c.Infer(context.Background(), NewRequest("m", "1")); errs <- err }()
	}
	for c.Outstanding() < 2 {
		time.Sleep(time.Millisecond)
	}
	if _, err := c.Infer(context.Background(), NewRequest("m", "1")); !errors.Is(err, ErrTooManyOutstanding) {
		t.Fatal(err)
	}
	c.Close()
	for i := 0; i < 2; i++ {
		if err := <-errs; !errors.Is(err, ErrClosed) {
			t.Fatal(err)
		}
	}
	if _, err := c.Infer(context.Background(), NewRequest("m", "1")); !errors.Is(err, ErrClosed) {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal("second close", err)
	}
}

// Nothing listens: the host's ICMP answer fails the request at once rather
// than after the timeout.
func TestNothingListening(t *testing.T) {
	l, _ := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	addr := l.LocalAddr().String()
	l.Close()
	c := dial(t, addr, Options{Timeout: 5 * time.Second})
	start := time.Now()
	_, err := c.Infer(context.Background(), NewRequest("m", "1"))
	if !errors.Is(err, syscall.ECONNREFUSED) || time.Since(start) > 2*time.Second {
		t.Fatalf("got %v after %v", err, time.Since(start))
	}
	// The client stays usable.
	if _, err := c.Ping(context.Background()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatal(err)
	}
}

func TestDialAddresses(t *testing.T) {
	s := echoServer(t)
	for _, a := range []string{s.addr(), "udp://" + s.addr()} {
		c := dial(t, a, Options{})
		if _, err := c.Ping(context.Background()); err != nil {
			t.Fatal(a, err)
		}
	}
	if _, err := Dial(context.Background(), "quic://"+s.addr(), Options{}); err == nil {
		t.Fatal("unknown transport accepted")
	}
}
