package sluice

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sluice-ai/sluice/clients/go/wire"
)

// FollowQueueMax is how many token frames wait for TokenStream.Next at
// most; beyond it the reader drops them (counted stale), and the stream
// sees a gap (ErrFrameLost).
const FollowQueueMax = 4096

// TokenFrame is one frame of a token stream.
type TokenFrame struct {
	Seq    uint32  // 0, 1, 2, ... within the stream
	Tokens []int64 // at most TokensPerFrame; the END frame may carry none
	// End is the reason on the last frame (EndEOS, EndMaxTokens,
	// EndDeadline, EndCancelled), EndNone on the others.
	End wire.EndReason
}

// Last reports whether f ends the stream.
func (f TokenFrame) Last() bool { return f.End != wire.EndNone }

// TokenStreamOptions are a token stream's OPEN settings.
type TokenStreamOptions struct {
	StreamID       uint64 // 0: one drawn as NewStateStream does
	TokensPerFrame uint16 // 0: 1
	MaxTokens      uint32 // 0: the model's limit
}

// TokenStream is a server-driven stream (docs/wire.md, "Streams"): one
// OPEN request carries the prompt, then the appliance sends token frames
// until the last, marked END. Next yields them in order; a gap in seq
// (UDP loss) is ErrFrameLost and cancels the stream. The frames share the
// OPEN's request id, and the client's reader keeps them apart from other
// answers, so other calls may share the Client meanwhile. Not safe for
// concurrent use; Close it (it cancels a stream left running).
type TokenStream struct {
	c              *Client
	id, rid        uint64
	model, version string
	ch             chan answer
	first          *answer
	nextSeq        uint32
	ended          bool // no more frames for the caller
	live           bool // the appliance may still run it (Close cancels)
	reason         wire.EndReason
}

func (c *Client) follow(id uint64) (chan answer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if len(c.follows) >= c.opts.OutstandingMax {
		return nil, ErrTooManyOutstanding
	}
	ch := make(chan answer, FollowQueueMax)
	c.follows[id] = ch
	return ch, nil
}

func (c *Client) unfollow(id uint64) {
	c.mu.Lock()
	ch := c.follows[id]
	delete(c.follows, id)
	c.mu.Unlock()
	for ch != nil {
		select {
		case a := <-ch:
			c.release(a)
		default:
			return
		}
	}
}

// deliverFollowed hands a frame of a followed id to its stream; false if
// the id is not followed. Never blocks the reader: a full queue drops.
func (c *Client) deliverFollowed(id uint64, f wire.Frame, bp *[]byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.follows[id]
	if !ok {
		return false
	}
	select {
	case ch <- answer{frame: f, buf: bp}:
		c.stats.received.Add(1)
	default:
		c.stats.stale.Add(1)
		c.putBuf(bp)
	}
	return true
}

// OpenTokenStream sends the OPEN of a token stream: req names the
// generative model and carries the prompt (int64 [n], named as the
// model's token input); req.Deadline ends the stream with EndDeadline.
// It waits for the first frame (or the refusal).
func OpenTokenStream(ctx context.Context, c *Client, req *Request, o TokenStreamOptions) (*TokenStream, error) {
	sid := o.StreamID
	if sid == 0 {
		sid = NewStateStream(c, 0).ID()
	}
	tpf := o.TokensPerFrame
	if tpf == 0 {
		tpf = 1
	}
	h := wire.StreamHeader{StreamID: sid, Flags: wire.StreamOpen, TokensPerFrame: tpf, MaxTokens: o.MaxTokens}
	r := *req
	r.Extensions = append(append([]wire.Extension(nil), req.Extensions...), h.Extension())
	if ctx.Err() != nil {
		return nil, c.ctxError(ctx)
	}
	ctxDeadline, _ := ctx.Deadline()
	var scratch [wire.TensorCountMax + 1]wire.TensorRepr
	rid := c.nextID.Add(1)
	// Followed before the send: the frames after the first may come
	// before the first is handed over.
	ch, err := c.follow(rid)
	if err != nil {
		return nil, err
	}
	repr := r.repr(rid, c.opts.TenantID, c.frameDeadline(deadlineUs(req.Deadline, ctxDeadline)), scratch[:0])
	a, err := c.roundTrip(ctx, &repr, wire.KindResponse)
	if err != nil {
		c.unfollow(rid)
		return nil, err
	}
	if _, ok := a.frame.Stream(); !ok {
		c.release(a)
		c.unfollow(rid)
		return nil, fmt.Errorf("%w: the answer carries no stream header", ErrStreamUnsupported)
	}
	return &TokenStream{c: c, id: sid, rid: rid, model: req.Model, version: req.Version, ch: ch, first: &a, live: true}, nil
}

// ID is the stream id.
func (s *TokenStream) ID() uint64 { return s.id }

// Ended reports whether the stream has ended; EndReason says why.
func (s *TokenStream) Ended() bool { return s.ended }

// EndReason is why the stream ended (EndNone while it runs, or after a
// timeout or an error).
func (s *TokenStream) EndReason() wire.EndReason { return s.reason }

// end: no more frames for the caller; reason EndNone when the appliance
// may still run the stream (a timeout), which Close then cancels.
func (s *TokenStream) end(reason wire.EndReason) {
	if !s.ended {
		s.ended, s.reason = true, reason
		s.live = reason == wire.EndNone
		s.c.unfollow(s.rid)
	}
}

// Next is the next frame; io.EOF once the stream has ended. Each wait is
// bounded by ctx and Options.Timeout (ErrTimeout; the stream then counts
// as ended, Close cancels it).
func (s *TokenStream) Next(ctx context.Context) (TokenFrame, error) {
	if s.ended {
		return TokenFrame{}, io.EOF
	}
	var a answer
	if s.first != nil {
		a, s.first = *s.first, nil
	} else {
		t := time.NewTimer(s.c.opts.Timeout)
		defer t.Stop()
		select {
		case a = <-s.ch:
		case <-ctx.Done():
			s.end(wire.EndNone)
			return TokenFrame{}, s.c.ctxError(ctx)
		case <-t.C:
			s.end(wire.EndNone)
			s.c.stats.timeouts.Add(1)
			return TokenFrame{}, fmt.Errorf("%w: no token frame in %v", ErrTimeout, s.c.opts.Timeout)
		case <-s.c.done:
			s.end(wire.EndNone)
			s.live = false
			return TokenFrame{}, ErrClosed
		}
	}
	defer s.c.release(a)
	if a.frame.Kind() == wire.KindError {
		eb, _ := a.frame.ErrorBody()
		s.end(wire.EndError)
		return TokenFrame{}, &ServerError{Code: eb.Code, Message: eb.Message, RequestID: s.rid}
	}
	h, ok := a.frame.Stream()
	switch {
	case a.frame.Kind() != wire.KindResponse || !ok:
		s.end(wire.EndError)
		return TokenFrame{}, fmt.Errorf("%w: a token frame without a stream header", ErrMalformedAnswer)
	case h.StreamID != s.id:
		s.end(wire.EndError)
		return TokenFrame{}, fmt.Errorf("%w: a frame of another stream", ErrMalformedAnswer)
	case h.Seq != s.nextSeq:
		want := s.nextSeq
		_, _ = s.cancel(ctx)
		return TokenFrame{}, fmt.Errorf("%w: expected seq %d, got %d", ErrFrameLost, want, h.Seq)
	}
	s.nextSeq++
	f := TokenFrame{Seq: h.Seq}
	if h.Has(wire.StreamEnd) {
		f.End = h.EndReason
	}
	resp := newResponse(a.frame, nil, nil)
	if len(resp.Outputs) > 0 {
		toks, err := Values[int64](resp.Outputs[0])
		if err != nil {
			s.end(wire.EndError)
			return TokenFrame{}, err
		}
		f.Tokens = append([]int64(nil), toks...)
	}
	if f.Last() {
		s.end(f.End)
	}
	return f, nil
}

// Collect reads the stream to its end: its remaining tokens and the
// reason it ended.
func (s *TokenStream) Collect(ctx context.Context) ([]int64, wire.EndReason, error) {
	var out []int64
	for {
		f, err := s.Next(ctx)
		if errors.Is(err, io.EOF) {
			return out, s.reason, nil
		}
		if err != nil {
			return out, s.reason, err
		}
		out = append(out, f.Tokens...)
	}
}

// Cancel stops the stream before the appliance's next step and returns
// the number of token frames it sent; frames still on the way are
// dropped. On an ended stream it does nothing and returns 0.
func (s *TokenStream) Cancel(ctx context.Context) (uint32, error) {
	if !s.live && s.ended {
		return 0, nil
	}
	return s.cancel(ctx)
}

func (s *TokenStream) cancel(ctx context.Context) (uint32, error) {
	s.end(wire.EndCancelled)
	s.reason, s.live = wire.EndCancelled, false
	h := wire.StreamHeader{StreamID: s.id, Seq: 1, Flags: wire.StreamCancel}
	r, err := s.c.Infer(ctx, &Request{Model: s.model, Version: s.version, Extensions: []wire.Extension{h.Extension()}})
	if err != nil {
		return 0, err
	}
	defer r.Release()
	got, ok := r.Frame().Stream()
	if !ok || got.EndReason != wire.EndCancelled {
		return 0, fmt.Errorf("%w: a cancel answer that is not one", ErrMalformedAnswer)
	}
	return got.Seq, nil
}

// Close cancels the stream if the appliance may still run it, and
// forgets it.
func (s *TokenStream) Close() error {
	if s.first != nil {
		s.c.release(*s.first)
		s.first = nil
	}
	if !s.live {
		s.end(s.reason)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.c.opts.Timeout)
	defer cancel()
	_, err := s.cancel(ctx)
	if errors.Is(err, ErrUnknownStream) {
		return nil // it ended meanwhile
	}
	return err
}
