//go:build jobs_e2e

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// mlpReference is what models/mlp.onnx computes: the formula of
// dataplane/models (bundled::mlp_reference), as clients/go's end-to-end
// test writes it. Weights are multiples of 1/16, so with inputs that are
// too the f32 results are exact and compared with ==.
func mlpReference(x []float32, lora bool) []float32 {
	const in, hidden, out, rank = 4, 8, 3, 2
	q := func(k int) float32 { return float32(k) / 16 }
	n := len(x) / in
	y := make([]float32, n*out)
	for r := 0; r < n; r++ {
		h := make([]float32, hidden)
		for j := 0; j < hidden; j++ {
			var acc float32
			for i := 0; i < in; i++ {
				acc += x[r*in+i] * q((i*5+j*3)%9-4)
			}
			h[j] = max(acc+q(j%5-2), 0)
		}
		for k := 0; k < out; k++ {
			var acc float32
			for j := 0; j < hidden; j++ {
				acc += h[j] * q((j*7+k*2)%11-5)
			}
			y[r*out+k] = acc + q(k-1)
		}
		if lora {
			xa := make([]float32, rank)
			for s := 0; s < rank; s++ {
				for i := 0; i < in; i++ {
					xa[s] += x[r*in+i] * q((i+2*s)%5-2)
				}
			}
			for k := 0; k < out; k++ {
				var d float32
				for s := 0; s < rank; s++ {
					d += xa[s] * q((3*s+k)%7-3)
				}
				y[r*out+k] += d
			}
		}
	}
	return y
}

// ortReference runs onnxruntime-python on each input (testdata/ort_reference.py).
func ortReference(t *testing.T, reqs []seedLine) [][]float32 {
	t.Helper()
	py := os.Getenv("SLUICE_PYTHON")
	if py == "" {
		py = filepath.Join(repoRoot(t), ".cache/python-client/bin/python")
	}
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("%s missing (%v): scripts/setup.sh makes the venv with onnxruntime, or set SLUICE_PYTHON", py, err)
	}
	var in bytes.Buffer
	for _, r := range reqs {
		b, _ := json.Marshal(map[string]any{"x": r.X, "batch": r.Batch, "adapter": r.Adapter})
		in.Write(append(b, '\n'))
	}
	cmd := exec.Command(py, "testdata/ort_reference.py", filepath.Join(repoRoot(t), "models"))
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("onnxruntime reference: %v\n%s", err, stderr.Bytes())
	}
	var ys [][]float32
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var y []float32
		if err := json.Unmarshal(sc.Bytes(), &y); err != nil {
			t.Fatal(err)
		}
		ys = append(ys, y)
	}
	if len(ys) != len(reqs) {
		t.Fatalf("reference gave %d answers for %d inputs", len(ys), len(reqs))
	}
	return ys
}

// seedLine is what seedjob prints (seedjob.Line).
type seedLine struct {
	Seq       uint64    `json:"seq"`
	Adapter   string    `json:"adapter"`
	X         []float32 `json:"x"`
	Batch     int       `json:"batch"`
	Status    string    `json:"status"`
	RequestID string    `json:"request_id"`
	Model     string    `json:"model"`
	Version   string    `json:"version"`
	Y         []float32 `json:"y"`
	Shape     []int     `json:"shape"`
}

// The seed's snippet, unmodified but for X-Model-Version: a Go program
// (seedjob) adds the stream and publishes to inference.llm with the
// seed's headers; sluiced (already running, so it made the stream first)
// runs each request through its engine and the bundled MLP; the program
// reads the results back. They equal onnxruntime-python's answers and the
// exact in-process reference.
func TestSeedSnippet(t *testing.T) {
	dir := t.TempDir()
	nodes := startNATS(t, dir, 1)
	a := newAppliance(t, dir, "sluiced", jobsConfig(t, dir, "sluiced", []string{nodes[0].url()}, 1))
	a.start()
	a.waitConsuming(t)

	const n = 24
	cmd := exec.Command("go", "run", "./seedjob", "-server", nodes[0].url(), "-n", fmt.Sprint(n))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("seedjob: %v\n%s", err, stderr.Bytes())
	}
	var lines []seedLine
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var sl seedLine
		if err := json.Unmarshal([]byte(l), &sl); err != nil {
			t.Fatalf("%v: %q", err, l)
		}
		lines = append(lines, sl)
	}
	if len(lines) != n {
		t.Fatalf("%d results for %d requests:\n%s", len(lines), n, out)
	}
	ref := ortReference(t, lines)
	for i, l := range lines {
		if l.Status != "ok" || l.Model != "mlp" || l.Version != "1.0.0" || fmt.Sprint(l.Shape) != fmt.Sprintf("[%d 3]", l.Batch) ||
			l.RequestID != fmt.Sprintf("ai-inference:%d", l.Seq) {
			t.Fatalf("result %+v", l)
		}
		if want := mlpReference(l.X, l.Adapter != ""); fmt.Sprint(l.Y) != fmt.Sprint(want) {
			t.Fatalf("request %d (adapter %q): y = %v, want %v", l.Seq, l.Adapter, l.Y, want)
		}
		for k, v := range ref[i] {
			if math.Abs(float64(v-l.Y[k])) > 1e-6 {
				t.Fatalf("request %d (adapter %q): y = %v, onnxruntime %v", l.Seq, l.Adapter, l.Y, ref[i])
			}
		}
	}
	doc, err := a.jobs()
	if err != nil {
		t.Fatal(err)
	}
	c := doc.Streams[0].Counters
	if c["results"].(float64) != n || c["acked"].(float64) < n || c["dead_lettered"].(float64) != 0 {
		t.Fatalf("counters %v", c)
	}
	t.Logf("%d requests through inference.llm: every result equals onnxruntime-python and the exact reference", n)
}
