//go:build linux

package sluice_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
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

// The token-stream figures reach sluiced's /metrics from the engine's
// stats (per shard, worker and tenant), read as Prometheus text.
func TestEngineTokenMetrics(t *testing.T) {
	a := engine(t)
	c := a.client(t, sluice.Options{Timeout: 10 * time.Second})
	ctx := context.Background()
	s, err := sluice.OpenTokenStream(ctx, c, prompt("metrics"), sluice.TokenStreamOptions{MaxTokens: 6})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	req := prompt("cancel me")
	req.Model = "endless"
	s2, err := sluice.OpenTokenStream(ctx, c, req, sluice.TokenStreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	// Metric name prefix -> a line that must be there with a value > 0.
	want := []string{
		`sluice_shard_generated_tokens_total{local="true",shard="hbm2-inference"}`,
		`sluice_shard_time_to_first_token_seconds_count{local="true",shard="hbm2-inference"}`,
		`sluice_shard_inter_token_latency_seconds_count{local="true",shard="hbm2-inference"}`,
		`sluice_worker_generated_tokens_total{`,
		`sluice_worker_token_streams_ended_total{core=`,
		`sluice_worker_streams_opened_total{`,
		`sluice_tenant_generated_tokens_total{tenant="1"}`,
		`sluice_model_generated_tokens_total{model="decoder",version="1"}`,
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		body := scrapeMetrics(t, a)
		var missing []string
		for _, w := range want {
			if !hasPositive(body, w) {
				missing = append(missing, w)
			}
		}
		// The CANCEL ends a stream of the stream table (streams_ended);
		// the engine now also tallies it under token_streams_ended
		// reason="cancelled" at the worker's next iteration.
		if !hasValueAtLeast(body, `sluice_worker_streams_ended_total{`, 2) {
			missing = append(missing, "two ended streams")
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks %q", missing)
		}
		time.Sleep(100 * time.Millisecond) // the engine publishes every 50 ms
	}
}

func scrapeMetrics(t *testing.T, a *appliance) string {
	t.Helper()
	resp, err := http.Get("http://" + a.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// hasValueAtLeast reports whether a line of body starts with prefix and
// ends with a value of at least v.
func hasValueAtLeast(body, prefix string, v float64) bool {
	for _, line := range strings.Split(body, "\n") {
		if f := strings.Fields(line); strings.HasPrefix(line, prefix) && len(f) > 0 {
			if got, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil && got >= v {
				return true
			}
		}
	}
	return false
}

// hasPositive reports whether a line of body starts with prefix, holds
// every one of also, and ends with a value above 0.
func hasPositive(body, prefix string, also ...string) bool {
next:
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		for _, a := range also {
			if !strings.Contains(line, a) {
				continue next
			}
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil && v > 0 {
			return true
		}
	}
	return false
}
