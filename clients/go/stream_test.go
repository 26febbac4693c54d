package sluice

import (
	"context"
	"errors"
	"testing"

	"github.com/sluice-ai/sluice/clients/go/wire"
)

// streamAnswer plays an appliance's stream table for one stream: it
// checks each frame's seq against the one it expects and answers with the
// stream header echoed, or stream_sequence / unknown_stream. Model
// "plain" answers without a stream header (an appliance that keeps none).
func streamAnswer(t *testing.T) func(b []byte) [][]byte {
	next := map[uint64]uint32{}
	return func(b []byte) [][]byte {
		f, err := wire.Parse(b)
		if err != nil {
			t.Errorf("client sent a bad frame: %v", err)
			return nil
		}
		h, ok := f.Stream()
		if !ok {
			t.Errorf("no stream header")
			return nil
		}
		if f.Model() == "plain" {
			return [][]byte{echoAnswer(b)}
		}
		want, open := next[h.StreamID]
		switch {
		case h.Has(wire.StreamCancel) && open:
			delete(next, h.StreamID)
		case h.Has(wire.StreamOpen) && !open && h.Seq == 0:
			next[h.StreamID] = 1
		case h.Has(wire.StreamContinue) && open && h.Seq == want:
			next[h.StreamID] = want + 1
		case !open:
			return [][]byte{mustEmit(wire.ErrorFor(&f, wire.CodeUnknownStream, "unknown or expired stream"))}
		default:
			return [][]byte{mustEmit(wire.ErrorFor(&f, wire.CodeStreamSequence, "stream frame out of sequence"))}
		}
		if h.Has(wire.StreamEnd) {
			delete(next, h.StreamID)
		}
		reply := wire.StreamHeader{StreamID: h.StreamID, Seq: h.Seq, Flags: h.Flags}
		return [][]byte{mustEmit(wire.Repr{Kind: wire.KindResponse, RequestID: f.RequestID(), TenantID: f.TenantID(),
			Model: f.Model(), ModelVersion: f.ModelVersion(), Extensions: []wire.Extension{reply.Extension()}})}
	}
}

func TestStateStreamNumbersItsSteps(t *testing.T) {
	s := startFake(t, streamAnswer(t))
	c := dial(t, s.addr(), Options{TenantID: 3})
	ctx := context.Background()
	st := NewStateStream(c, 0)
	if st.ID() == 0 {
		t.Fatal("stream id 0")
	}
	for i := 0; i < 5; i++ {
		r, err := st.Step(ctx, NewRequest("vad", "1"))
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if h, _ := r.Frame().Stream(); h.Seq != uint32(i) {
			t.Fatalf("step %d answered as seq %d", i, h.Seq)
		}
		r.Release()
	}
	r, err := st.Finish(ctx, NewRequest("vad", "1"))
	if err != nil || !st.Ended() || st.NextSeq() != 6 {
		t.Fatalf("finish: %v ended %v seq %d", err, st.Ended(), st.NextSeq())
	}
	r.Release()
	if _, err := st.Step(ctx, NewRequest("vad", "1")); !errors.Is(err, ErrStreamEnded) {
		t.Fatalf("step after finish: %v", err)
	}
	// The fake forgot the stream at END: a step under its id is unknown.
	again := NewStateStream(c, st.ID())
	again.nextSeq = 6
	if _, err := again.Step(ctx, NewRequest("vad", "1")); !errors.Is(err, ErrUnknownStream) || !again.Ended() {
		t.Fatalf("unknown stream: %v, ended %v", err, again.Ended())
	}
}

func TestStateStreamRefusalsAndCancel(t *testing.T) {
	s := startFake(t, streamAnswer(t))
	c := dial(t, s.addr(), Options{TenantID: 3})
	ctx := context.Background()
	st := NewStateStream(c, 77)
	if _, err := st.Step(ctx, NewRequest("vad", "1")); err != nil {
		t.Fatal(err)
	}
	st.nextSeq = 4
	if _, err := st.Step(ctx, NewRequest("vad", "1")); !errors.Is(err, ErrStreamSequence) || st.Ended() {
		t.Fatalf("gap: %v, ended %v", err, st.Ended())
	}
	st.nextSeq = 1
	if err := st.Cancel(ctx, "vad", "1"); err != nil || !st.Ended() {
		t.Fatalf("cancel: %v", err)
	}
	plain := NewStateStream(c, 78)
	if _, err := plain.Step(ctx, NewRequest("plain", "1")); !errors.Is(err, ErrStreamUnsupported) || !plain.Ended() {
		t.Fatalf("no stream header in the answer: %v", err)
	}
}
