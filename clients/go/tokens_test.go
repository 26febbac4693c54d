package sluice

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluice-ai/sluice/clients/go/wire"
)

// tokenAnswer plays a token-stream appliance: an OPEN gets five frames of
// one token each (seq 0..4, the last with END max_tokens); model "gappy"
// leaves out seq 2; a CANCEL is answered with END cancelled and counted.
func tokenAnswer(t *testing.T, cancels *atomic.Int32) func(b []byte) [][]byte {
	return func(b []byte) [][]byte {
		f, err := wire.Parse(b)
		if err != nil {
			t.Errorf("client sent a bad frame: %v", err)
			return nil
		}
		h, ok := f.Stream()
		if !ok || strings.HasPrefix(f.Model(), "fail-") {
			return [][]byte{echoAnswer(b)}
		}
		frame := func(seq uint32, flags uint8, reason wire.EndReason, toks []int64) []byte {
			sh := wire.StreamHeader{StreamID: h.StreamID, Seq: seq, Flags: flags, EndReason: reason}
			r := wire.Repr{Kind: wire.KindResponse, RequestID: f.RequestID(), TenantID: f.TenantID(),
				Model: f.Model(), ModelVersion: f.ModelVersion(), Extensions: []wire.Extension{sh.Extension()}}
			if toks != nil {
				data := make([]byte, 8*len(toks))
				for i, v := range toks {
					binary.LittleEndian.PutUint64(data[8*i:], uint64(v))
				}
				r.Tensors = []wire.TensorRepr{{Name: "next", DType: wire.I64, Dims: []uint64{uint64(len(toks))}, Data: data}}
			}
			return mustEmit(r)
		}
		if h.Has(wire.StreamCancel) {
			cancels.Add(1)
			return [][]byte{frame(3, wire.StreamContinue|wire.StreamEnd, wire.EndCancelled, nil)}
		}
		var out [][]byte
		for seq := uint32(0); seq < 5; seq++ {
			if f.Model() == "gappy" && seq == 2 {
				continue
			}
			flags, reason := wire.StreamContinue, wire.EndNone
			if seq == 4 {
				flags, reason = wire.StreamContinue|wire.StreamEnd, wire.EndMaxTokens
			}
			out = append(out, frame(seq, flags, reason, []int64{int64(65 + seq)}))
		}
		return out
	}
}

func TestTokenStreamYieldsFramesInOrder(t *testing.T) {
	var cancels atomic.Int32
	s := startFake(t, tokenAnswer(t, &cancels))
	c := dial(t, s.addr(), Options{TenantID: 3})
	ctx := context.Background()
	req := NewRequest("dec", "1", NewTensor("token", []uint64{1}, []int64{104}))
	ts, err := OpenTokenStream(ctx, c, req, TokenStreamOptions{StreamID: 9, MaxTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	toks, reason, err := ts.Collect(ctx)
	if err != nil || reason != wire.EndMaxTokens || len(toks) != 5 || toks[0] != 65 || toks[4] != 69 {
		t.Fatalf("collect: %v %v %v", toks, reason, err)
	}
	if _, err := ts.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("after END: %v", err)
	}
	if err := ts.Close(); err != nil || cancels.Load() != 0 {
		t.Fatalf("close of an ended stream: %v, %d cancels", err, cancels.Load())
	}
}

func TestTokenStreamReportsAGapAndCancels(t *testing.T) {
	var cancels atomic.Int32
	s := startFake(t, tokenAnswer(t, &cancels))
	c := dial(t, s.addr(), Options{TenantID: 3})
	ctx := context.Background()
	req := NewRequest("gappy", "1", NewTensor("token", []uint64{1}, []int64{104}))
	ts, err := OpenTokenStream(ctx, c, req, TokenStreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if f, err := ts.Next(ctx); err != nil || f.Seq != uint32(i) {
			t.Fatalf("frame %d: %+v %v", i, f, err)
		}
	}
	if _, err := ts.Next(ctx); !errors.Is(err, ErrFrameLost) {
		t.Fatalf("gap: %v", err)
	}
	if cancels.Load() != 1 || !ts.Ended() || ts.EndReason() != wire.EndCancelled {
		t.Fatalf("after the gap: %d cancels, ended %v, reason %v", cancels.Load(), ts.Ended(), ts.EndReason())
	}
	// A refusal of the OPEN is the server's error.
	bad := NewRequest("fail-18", "1", NewTensor("token", []uint64{1}, []int64{104}))
	if _, err := OpenTokenStream(ctx, c, bad, TokenStreamOptions{}); err == nil {
		t.Fatal("a refused OPEN opened")
	}
}
