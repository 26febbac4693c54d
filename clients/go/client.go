package sluice

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-ai/sluice/clients/go/wire"
)

// Options configure a client. The zero value works: tenant 0, no key, UDP,
// a 1 s timeout.
type Options struct {
	// TenantID is written into every frame.
	TenantID uint32
	// Key, when set, signs every frame (HMAC-SHA256 tag), and signed
	// answers other than error frames are verified: a bad tag drops the
	// answer (counted in Stats.BadTag).
	Key []byte
	// Timeout bounds the wait for one answer when the context has no
	// deadline. Default 1 s. It is not written into the frame; a context
	// deadline (or Request.Deadline) is.
	Timeout time.Duration
	// RetriesMax is how often Infer resends after a retryable server error
	// (busy, peer_down, ...), each time under a new request id. 0 never
	// retries. Timeouts are not retried.
	RetriesMax int
	// RetryBackoff is the pause before each retry. Default 1 ms.
	RetryBackoff time.Duration
	// OutstandingMax bounds the requests in flight at once; beyond it calls
	// fail with ErrTooManyOutstanding. Default 4096.
	OutstandingMax int
	// SchemaCacheMax bounds the cached negotiation answers. Default 1024.
	SchemaCacheMax int
	// Transport for Dial: "udp" (default) or "tcp". An address of the form
	// "tcp://host:port" overrides it.
	Transport string
	// SocketBufferBytes sizes a UDP socket's kernel buffers. Default 4 MiB
	// (the kernel caps it at net.core.rmem_max); negative keeps the OS
	// default.
	SocketBufferBytes int
	// FrameLenMax is the largest frame accepted over TCP. Default and
	// maximum: the wire limit, 256 MiB.
	FrameLenMax int
	// SignedDeadline: with a Key, the furthest ahead a frame's deadline
	// lies. The appliance refuses a signed frame without a deadline, or
	// with one beyond its freshness window (auth.freshness_window_ms,
	// default 10 s), as ErrStale (docs/wire.md, "Clients"). A request's or
	// context's earlier deadline is kept; negotiations and pings get this.
	// Default 2 s.
	SignedDeadline time.Duration
}

// Defaults.
const (
	TimeoutDefault           = time.Second
	RetryBackoffDefault      = time.Millisecond
	OutstandingMaxDefault    = 4096
	SchemaCacheMaxDefault    = 1024
	SocketBufferBytesDefault = 4 << 20
	SignedDeadlineDefault    = 2 * time.Second
)

func (o Options) frameLenMax() int {
	if o.FrameLenMax <= 0 || o.FrameLenMax > wire.FrameLenMax {
		return wire.FrameLenMax
	}
	return o.FrameLenMax
}

func (o *Options) fill() {
	if o.Timeout <= 0 {
		o.Timeout = TimeoutDefault
	}
	if o.RetryBackoff <= 0 {
		o.RetryBackoff = RetryBackoffDefault
	}
	if o.OutstandingMax <= 0 {
		o.OutstandingMax = OutstandingMaxDefault
	}
	if o.SchemaCacheMax <= 0 {
		o.SchemaCacheMax = SchemaCacheMaxDefault
	}
	if o.SocketBufferBytes == 0 {
		o.SocketBufferBytes = SocketBufferBytesDefault
	}
	if o.SignedDeadline <= 0 {
		o.SignedDeadline = SignedDeadlineDefault
	}
}

// Stats count what the client saw. Monotonic.
type Stats struct {
	Sent            uint64 // frames sent (requests, retries, negotiations, pings)
	Received        uint64 // answers matched to a request in flight
	Stale           uint64 // valid frames whose request id is not in flight (late answers, duplicates)
	Malformed       uint64 // received bytes that are not a valid frame; ignored
	BadTag          uint64 // signed answers whose tag did not verify; ignored
	Timeouts        uint64 // requests whose wait ended by deadline or Options.Timeout
	Retries         uint64 // resends after retryable errors
	SchemaCacheHits uint64 // negotiations answered from the cache
}

type stats struct {
	sent, received, stale, malformed, badTag, timeouts, retries, schemaCacheHits atomic.Uint64
}

// Client sends requests to one Sluice endpoint over one transport (one UDP
// socket, or one TCP connection). It is safe for concurrent use: any
// number of goroutines may call it at once; answers are matched to their
// requests by request id.
type Client struct {
	tr     Transport
	opts   Options
	key    *wire.TenantKey
	nextID atomic.Uint64
	// sender names the client in its signed frames (docs/wire.md, "Replay
	// windows"): nextID is then one counter, and the appliance keeps one
	// replay window for it instead of one entry per frame.
	sender  wire.Extension
	recvBuf sync.Pool // *[]byte of tr.ReadBufferLen(), 64-byte aligned
	sendBuf sync.Pool // *[]byte of min(FrameLenMax, 64 KiB)
	calls   sync.Pool // *call

	mu      sync.Mutex
	pending map[uint64]*call
	follows map[uint64]chan answer // token streams' later frames (tokens.go)
	closed  bool
	lost    error // set when a stream transport broke

	schemas schemaCache
	stats   stats
	done    chan struct{} // closed when the reader exits
}

type call struct {
	expect wire.Kind
	ch     chan answer // buffered 1: the reader never blocks on it
}

type answer struct {
	frame wire.Frame
	buf   *[]byte // pooled buffer holding the frame, or nil
	err   error
}

// Dial connects to a Sluice endpoint: "host:port" (Options.Transport, UDP
// by default), "udp://host:port" or "tcp://host:port".
func Dial(ctx context.Context, addr string, opts Options) (*Client, error) {
	network, hostport := splitAddr(addr, opts.Transport)
	opts.fill()
	tr, err := DialTransport(ctx, network, hostport, opts)
	if err != nil {
		return nil, err
	}
	return New(tr, opts), nil
}

// New makes a client over a connected transport, which it owns from now
// on (Close closes it).
func New(tr Transport, opts Options) *Client {
	opts.fill()
	c := &Client{tr: tr, opts: opts, pending: make(map[uint64]*call), follows: make(map[uint64]chan answer), done: make(chan struct{})}
	if opts.Key != nil {
		c.key = wire.NewTenantKey(opts.Key)
	}
	c.nextID.Store(initialRequestID())
	c.sender = wire.SenderExtension(randomSenderID())
	rlen := tr.ReadBufferLen()
	c.recvBuf.New = func() any { b := alignedBuffer(rlen); return &b }
	slen := min(tr.FrameLenMax(), 64<<10)
	c.sendBuf.New = func() any { b := make([]byte, slen); return &b }
	c.calls.New = func() any { return &call{ch: make(chan answer, 1)} }
	c.schemas.init(opts.SchemaCacheMax)
	go c.readLoop()
	return c
}

// initialRequestID starts ids at a random point so that late answers meant
// for an earlier process are not taken for this one's.
func initialRequestID() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return uint64(time.Now().UnixNano())>>1 | 1
	}
	// Below 2^63, so that the ids (a sender's counter) do not wrap.
	return binary.LittleEndian.Uint64(b[:])>>1 | 1
}

// hasSender reports whether the caller named a sender already.
func hasSender(exts []wire.Extension) bool {
	for _, e := range exts {
		if e.Key == wire.SenderExtKey {
			return true
		}
	}
	return false
}

// randomSenderID is a random sender id, not 0.
func randomSenderID() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return uint64(time.Now().UnixNano()) | 1
	}
	return binary.LittleEndian.Uint64(b[:]) | 1
}

// SenderID is the sender id the client names in its signed frames.
func (c *Client) SenderID() uint64 {
	return binary.LittleEndian.Uint64(c.sender.Value)
}

// Close closes the transport; requests in flight fail with ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	err := c.tr.Close()
	<-c.done
	c.failAll(ErrClosed)
	return err
}

// Stats returns the counters.
func (c *Client) Stats() Stats {
	s := &c.stats
	return Stats{Sent: s.sent.Load(), Received: s.received.Load(), Stale: s.stale.Load(),
		Malformed: s.malformed.Load(), BadTag: s.badTag.Load(), Timeouts: s.timeouts.Load(),
		Retries: s.retries.Load(), SchemaCacheHits: s.schemaCacheHits.Load()}
}

// Outstanding is the number of requests in flight.
func (c *Client) Outstanding() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// Transport is the client's transport.
func (c *Client) Transport() Transport { return c.tr }

// Infer sends a request and waits for its answer. The context bounds the
// wait and its deadline goes into the frame (the engine then answers
// deadline_exceeded instead of running a request that is too late).
// Retryable server errors are retried Options.RetriesMax times.
func (c *Client) Infer(ctx context.Context, req *Request) (*Response, error) {
	for attempt := 0; ; attempt++ {
		a, err := c.inferOnce(ctx, req)
		if err == nil {
			return newResponse(a.frame, a.buf, &c.recvBuf), nil
		}
		if !IsRetryable(err) || attempt >= c.opts.RetriesMax {
			return nil, err
		}
		c.stats.retries.Add(1)
		t := time.NewTimer(c.opts.RetryBackoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w; last error: %w", c.ctxError(ctx), err)
		}
	}
}

// ctxError is why a wait ended with the context: a timeout (ErrTimeout
// and context.DeadlineExceeded) or a cancellation (context.Canceled).
func (c *Client) ctxError(ctx context.Context) error {
	err := ctx.Err()
	if errors.Is(err, context.DeadlineExceeded) {
		c.stats.timeouts.Add(1)
		return fmt.Errorf("%w (%w)", ErrTimeout, err)
	}
	return fmt.Errorf("sluice: %w", err)
}

func (c *Client) inferOnce(ctx context.Context, req *Request) (answer, error) {
	if ctx.Err() != nil {
		return answer{}, c.ctxError(ctx)
	}
	ctxDeadline, _ := ctx.Deadline()
	var scratch [wire.TensorCountMax + 1]wire.TensorRepr
	id := c.nextID.Add(1)
	r := req.repr(id, c.opts.TenantID, c.frameDeadline(deadlineUs(req.Deadline, ctxDeadline)), scratch[:0])
	return c.roundTrip(ctx, &r, wire.KindResponse)
}

// frameDeadline is the deadline written into a frame: asked (µs since the
// epoch, 0 for none) for an unsigned frame; for a signed one asked unless
// it lies later than now + Options.SignedDeadline, so that the appliance's
// freshness rule accepts it.
func (c *Client) frameDeadline(asked uint64) uint64 {
	if c.key == nil {
		return asked
	}
	limit := uint64(time.Now().Add(c.opts.SignedDeadline).UnixMicro())
	if asked == 0 || asked > limit {
		return limit
	}
	return asked
}

// Ping sends a ping and returns the round-trip time.
func (c *Client) Ping(ctx context.Context) (time.Duration, error) {
	r := wire.Repr{Kind: wire.KindPing, RequestID: c.nextID.Add(1), TenantID: c.opts.TenantID, DeadlineUs: c.frameDeadline(0)}
	start := time.Now()
	a, err := c.roundTrip(ctx, &r, wire.KindPong)
	if err != nil {
		return 0, err
	}
	c.release(a)
	return time.Since(start), nil
}

func (c *Client) release(a answer) {
	if a.buf != nil {
		c.recvBuf.Put(a.buf)
	}
}

// roundTrip emits r (signed when the client has a key), sends it and waits
// for the answer of kind expect.
func (c *Client) roundTrip(ctx context.Context, r *wire.Repr, expect wire.Kind) (answer, error) {
	if c.key != nil && len(r.Extensions) < wire.ExtCountMax && !hasSender(r.Extensions) {
		named := *r
		named.Extensions = append(r.Extensions[:len(r.Extensions):len(r.Extensions)], c.sender)
		r = &named
	}
	l, err := r.Layout()
	if err != nil {
		return answer{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	if l.FrameLen > c.tr.FrameLenMax() {
		return answer{}, fmt.Errorf("%w: frame of %d bytes exceeds the transport's %d: %w",
			ErrInvalidRequest, l.FrameLen, c.tr.FrameLenMax(), wire.ErrTooLarge)
	}
	bp := c.sendBuf.Get().(*[]byte)
	defer c.sendBuf.Put(bp)
	buf := *bp
	if len(buf) < l.FrameLen {
		buf = make([]byte, l.FrameLen)
	}
	if _, err := r.Emit(buf); err != nil {
		return answer{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	frame := buf[:l.FrameLen]
	if c.key != nil {
		f, err := wire.Parse(frame)
		if err != nil {
			return answer{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
		}
		c.key.Sign(&f)
	}
	cl, err := c.register(r.RequestID, expect)
	if err != nil {
		return answer{}, err
	}
	if err := c.tr.WriteFrame(frame); err != nil {
		c.unregister(r.RequestID, cl)
		return answer{}, fmt.Errorf("sluice: send: %w", err)
	}
	c.stats.sent.Add(1)
	return c.wait(ctx, r.RequestID, cl)
}

func (c *Client) register(id uint64, expect wire.Kind) (*call, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return nil, ErrClosed
	case c.lost != nil:
		return nil, c.lost
	case len(c.pending) >= c.opts.OutstandingMax:
		return nil, ErrTooManyOutstanding
	}
	cl := c.calls.Get().(*call)
	cl.expect = expect
	c.pending[id] = cl
	return cl, nil
}

// unregister forgets a request. When the reader has already taken it out
// (an answer is on its way into cl.ch), the answer is drained and dropped,
// so that cl can be reused.
func (c *Client) unregister(id uint64, cl *call) {
	c.mu.Lock()
	_, mine := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if !mine {
		c.release(<-cl.ch)
	}
	c.calls.Put(cl)
}

func (c *Client) wait(ctx context.Context, id uint64, cl *call) (answer, error) {
	expect := cl.expect // cl goes back to the pool once answered
	var expired <-chan time.Time
	if _, ok := ctx.Deadline(); !ok {
		t := time.NewTimer(c.opts.Timeout)
		defer t.Stop()
		expired = t.C
	}
	var a answer
	select {
	case a = <-cl.ch:
		c.calls.Put(cl)
	case <-ctx.Done():
		c.unregister(id, cl)
		return answer{}, c.ctxError(ctx)
	case <-expired:
		c.stats.timeouts.Add(1)
		c.unregister(id, cl)
		return answer{}, fmt.Errorf("%w after %v", ErrTimeout, c.opts.Timeout)
	}
	if a.err != nil {
		return answer{}, a.err
	}
	switch k := a.frame.Kind(); {
	case k == expect:
		return a, nil
	case k == wire.KindError:
		eb, _ := a.frame.ErrorBody()
		c.release(a)
		return answer{}, &ServerError{Code: eb.Code, Message: eb.Message, RequestID: id}
	default:
		c.release(a)
		return answer{}, fmt.Errorf("%w: a %s frame answers a %s", ErrMalformedAnswer, k, expect)
	}
}

// readLoop receives every frame, checks it, and hands it to the request
// that waits for its id. Garbage, stale ids and bad tags are counted and
// dropped; nothing a peer sends can block or crash it.
func (c *Client) readLoop() {
	defer close(c.done)
	failed := false // the previous read failed too
	for {
		bp := c.recvBuf.Get().(*[]byte)
		b, err := c.tr.ReadFrame(*bp)
		if err != nil {
			c.recvBuf.Put(bp)
			if c.isClosed() {
				return
			}
			if c.tr.Stream() {
				c.breakConnection(err)
				return
			}
			// A datagram socket reports an ICMP error (nothing listens on
			// the server port) on the next read: the requests in flight
			// will not be answered.
			c.failAll(fmt.Errorf("sluice: receive: %w", err))
			if failed {
				time.Sleep(time.Millisecond) // an error that repeats must not spin
			}
			failed = true
			continue
		}
		failed = false
		if len(b) == 0 || &b[0] != &(*bp)[0] {
			c.recvBuf.Put(bp) // the transport allocated a bigger buffer
			bp = nil
		}
		f, err := wire.Parse(b)
		if err != nil {
			c.stats.malformed.Add(1)
			c.putBuf(bp)
			continue
		}
		// Error frames are taken even with a bad tag: a server that refuses
		// a wrongly signed request cannot sign with the key the client used.
		if c.key != nil && f.Flags()&wire.FlagAuthenticated != 0 && f.Kind() != wire.KindError && !c.key.Verify(&f) {
			c.stats.badTag.Add(1)
			c.putBuf(bp)
			continue
		}
		id := f.RequestID()
		c.mu.Lock()
		cl := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if cl == nil {
			if c.deliverFollowed(id, f, bp) {
				continue
			}
			c.stats.stale.Add(1)
			c.putBuf(bp)
			continue
		}
		c.stats.received.Add(1)
		cl.ch <- answer{frame: f, buf: bp}
	}
}

func (c *Client) putBuf(bp *[]byte) {
	if bp != nil {
		c.recvBuf.Put(bp)
	}
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// breakConnection marks a stream transport as lost: requests in flight and
// later ones fail with ErrConnectionLost (retryable on a new client).
func (c *Client) breakConnection(cause error) {
	err := fmt.Errorf("%w: %w", ErrConnectionLost, cause)
	if errors.Is(cause, ErrConnectionLost) {
		err = cause
	}
	c.mu.Lock()
	c.lost = err
	c.mu.Unlock()
	c.failAll(err)
}

// failAll answers every request in flight with err.
func (c *Client) failAll(err error) {
	c.mu.Lock()
	calls := c.pending
	c.pending = make(map[uint64]*call)
	c.mu.Unlock()
	for _, cl := range calls {
		cl.ch <- answer{err: err}
	}
}
