//go:build linux

package sluice_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	sluice "github.com/sluice-ai/sluice/clients/go"
	"github.com/sluice-ai/sluice/clients/go/wire"
)

// Token streams against the real appliance serving the bundled decoder
// (models/decoder.onnx in ONNX Runtime): the tokens equal onnxruntime-
// python's reference loop (tests/streams/decoder_reference.py, run with
// SLUICE_PYTHON or python3; a missing onnxruntime fails the test).

func decoderModel(name, gen string) string {
	return fmt.Sprintf("\n[[routes]]\nname = %q\nmodel = %q\nshard = \"hbm2-inference\"\n\n[[models]]\nname = %q\nversion = \"1\"\nkind = \"onnx\"\npath = \"../models/decoder.onnx\"\n"+
		"[models.stream]\nstate = [{ input = \"h\", output = \"hN\", shape = [1, 16] }]\n[models.stream.generate]\ntoken_input = \"token\"\ntoken_output = \"next\"\n%s\n", name, name, name, gen)
}

var tokenPrompts = []string{"hello", "zz", "token streams"}

func decoderReference(t *testing.T, maxTokens int) map[string][]int64 {
	t.Helper()
	py := os.Getenv("SLUICE_PYTHON")
	if py == "" {
		py = "python3"
	}
	root := repoRoot()
	args := append([]string{filepath.Join(root, "tests/streams/decoder_reference.py"), filepath.Join(root, "models/decoder.onnx"), fmt.Sprint(maxTokens)}, tokenPrompts...)
	out, err := exec.Command(py, args...).Output()
	if err != nil {
		t.Fatalf("decoder_reference.py (needs onnxruntime and numpy: scripts/setup.sh; SLUICE_PYTHON): %v", err)
	}
	var ref map[string][]int64
	if err := json.Unmarshal(out, &ref); err != nil {
		t.Fatal(err)
	}
	return ref
}

func prompt(p string) *sluice.Request {
	toks := make([]int64, len(p))
	for i := range p {
		toks[i] = int64(p[i])
	}
	return sluice.NewRequest("decoder", "1", sluice.NewTensor("token", []uint64{uint64(len(toks))}, toks))
}

func TestEngineTokenStream(t *testing.T) {
	want := decoderReference(t, 32)
	c := engine(t).client(t, sluice.Options{Timeout: 10 * time.Second})
	ctx := context.Background()
	for _, p := range tokenPrompts {
		s, err := sluice.OpenTokenStream(ctx, c, prompt(p), sluice.TokenStreamOptions{TokensPerFrame: 3})
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		var seq uint32
		var last sluice.TokenFrame
		for {
			f, err := s.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%q: %v", p, err)
			}
			if f.Seq != seq || len(f.Tokens) > 3 {
				t.Fatalf("%q: frame %+v, want seq %d with at most 3 tokens", p, f, seq)
			}
			if seq == 1 {
				// A plain call on the same client mid-stream.
				if _, err := c.Ping(ctx); err != nil {
					t.Fatal(err)
				}
			}
			seq++
			got = append(got, f.Tokens...)
			last = f
		}
		if fmt.Sprint(got) != fmt.Sprint(want[p]) {
			t.Fatalf("%q: tokens %v, want %v (onnxruntime-python)", p, got, want[p])
		}
		reason := wire.EndEOS
		if len(want[p]) == 32 {
			reason = wire.EndMaxTokens
		}
		if last.End != reason || s.EndReason() != reason || !s.Ended() {
			t.Fatalf("%q: ended %v / %v, want %v", p, last.End, s.EndReason(), reason)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// Collect with max_tokens.
	s, err := sluice.OpenTokenStream(ctx, c, prompt("hello"), sluice.TokenStreamOptions{MaxTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	toks, reason, err := s.Collect(ctx)
	if err != nil || fmt.Sprint(toks) != fmt.Sprint(want["hello"][:5]) || reason != wire.EndMaxTokens {
		t.Fatalf("collect: %v %v %v", toks, reason, err)
	}
}

func TestEngineTokenStreamCancelDeadlineRefusal(t *testing.T) {
	c := engine(t).client(t, sluice.Options{Timeout: 10 * time.Second})
	ctx := context.Background()
	req := prompt("forever")
	req.Model = "endless"
	s, err := sluice.OpenTokenStream(ctx, c, req, sluice.TokenStreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if f, err := s.Next(ctx); err != nil || f.Last() || len(f.Tokens) != 1 {
			t.Fatalf("frame %d: %+v %v", i, f, err)
		}
	}
	sent, err := s.Cancel(ctx)
	if err != nil || sent < 4 || s.EndReason() != wire.EndCancelled {
		t.Fatalf("cancel: sent %d, %v, reason %v", sent, err, s.EndReason())
	}
	if _, err := s.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("after cancel: %v", err)
	}
	// Close cancels a stream left running.
	s2, err := sluice.OpenTokenStream(ctx, c, req, sluice.TokenStreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.Close(); err != nil || s2.EndReason() != wire.EndCancelled {
		t.Fatalf("close: %v %v", err, s2.EndReason())
	}
	// A deadline ends the stream with its reason.
	dl := prompt("slow")
	dl.Model = "endless"
	dl.Deadline = time.Now().Add(50 * time.Millisecond)
	s3, err := sluice.OpenTokenStream(ctx, c, dl, sluice.TokenStreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	toks, reason, err := s3.Collect(ctx)
	if err != nil || reason != wire.EndDeadline || len(toks) == 0 {
		t.Fatalf("deadline: %d tokens, %v, %v", len(toks), reason, err)
	}
	// An unknown model is refused with the server's error.
	bad := prompt("x")
	bad.Model = "nosuch"
	var se *sluice.ServerError
	if _, err := sluice.OpenTokenStream(ctx, c, bad, sluice.TokenStreamOptions{}); !errors.As(err, &se) {
		t.Fatalf("unknown model: %v", err)
	}
}
