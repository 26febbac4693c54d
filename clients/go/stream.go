package sluice

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/sluice-ai/sluice/clients/go/wire"
)

// StateStream is a stateful stream (docs/wire.md, "Streams"): the
// appliance keeps the model's recurrent state between steps, so each
// request carries only the step's new inputs. Steps go one at a time (each
// waits for its answer) through one Client, whose one socket reaches the
// appliance worker that holds the state. Not safe for concurrent use.
type StateStream struct {
	c       *Client
	id      uint64
	nextSeq uint32
	ended   bool
}

var streamIDs atomic.Uint64

// ErrStreamEnded: a step on a stream that has ended (its last step ran,
// it was cancelled, or the appliance no longer holds it).
var ErrStreamEnded = errors.New("sluice: the stream has ended")

// NewStateStream is a stream on c with id (0: one drawn from the clock,
// the process id and a counter).
func NewStateStream(c *Client, id uint64) *StateStream {
	if id == 0 {
		x := uint64(time.Now().UnixNano()) ^ uint64(os.Getpid())<<40 ^ streamIDs.Add(1)
		id = x * 0x9e3779b97f4a7c15
		if id == 0 {
			id = 1
		}
	}
	return &StateStream{c: c, id: id}
}

// ID is the stream id.
func (s *StateStream) ID() uint64 { return s.id }

// NextSeq is the seq of the next step.
func (s *StateStream) NextSeq() uint32 { return s.nextSeq }

// Ended reports whether the stream has ended.
func (s *StateStream) Ended() bool { return s.ended }

// Step runs the next step (the first opens the stream). req carries the
// step's inputs, not the state inputs; its Extensions must not hold a
// stream header.
func (s *StateStream) Step(ctx context.Context, req *Request) (*Response, error) {
	return s.send(ctx, req, false)
}

// Finish runs the last step; the appliance frees the stream's slot.
func (s *StateStream) Finish(ctx context.Context, req *Request) (*Response, error) {
	return s.send(ctx, req, true)
}

// Cancel ends the stream at once (the appliance frees its state). model
// and version name the stream's model.
func (s *StateStream) Cancel(ctx context.Context, model, version string) error {
	if s.ended {
		return nil
	}
	s.ended = true
	h := wire.StreamHeader{StreamID: s.id, Seq: s.nextSeq, Flags: wire.StreamCancel}
	r, err := s.c.Infer(ctx, &Request{Model: model, Version: version, Extensions: []wire.Extension{h.Extension()}})
	if err != nil {
		return err
	}
	r.Release()
	return nil
}

func (s *StateStream) send(ctx context.Context, req *Request, end bool) (*Response, error) {
	if s.ended {
		return nil, ErrStreamEnded
	}
	flags := wire.StreamContinue
	if s.nextSeq == 0 {
		flags = wire.StreamOpen
	}
	if end {
		flags |= wire.StreamEnd
	}
	h := wire.StreamHeader{StreamID: s.id, Seq: s.nextSeq, Flags: flags}
	r := *req
	r.Extensions = append(append([]wire.Extension(nil), req.Extensions...), h.Extension())
	resp, err := s.c.Infer(ctx, &r)
	if err != nil {
		if errors.Is(err, ErrUnknownStream) || errors.Is(err, ErrStreamStateMismatch) || errors.Is(err, ErrStreamUnsupported) {
			s.ended = true
		}
		return nil, err
	}
	got, ok := resp.Frame().Stream()
	if !ok {
		// An appliance that keeps no streams ignores the header.
		resp.Release()
		s.ended = true
		return nil, fmt.Errorf("%w: the answer carries no stream header", ErrStreamUnsupported)
	}
	if got.StreamID != s.id || got.Seq != s.nextSeq {
		resp.Release()
		return nil, fmt.Errorf("%w: answer for another stream step", ErrMalformedAnswer)
	}
	s.nextSeq++
	s.ended = end
	return resp, nil
}
