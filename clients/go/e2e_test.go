//go:build linux

package sluice_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sluice "github.com/sluice-ai/sluice/clients/go"
	"github.com/sluice-ai/sluice/clients/go/wire"
)

// End to end against the real appliance: sluiced (built by
// scripts/build-ffi.sh into .cache/bin) with the Rust engine, io_uring UDP
// on loopback, ONNX Runtime and the bundled models, started from
// cfg/sluice.toml with ephemeral ports. A missing binary fails the tests
// with a hint; it never skips them.

// The demo tenant of cfg/sluice.toml, and a second one limited to echo.
var (
	demoKey, _    = hex.DecodeString("73756963652d64656d6f2d6b65792d30303030303030303030303030303030")
	limitedKey    = []byte("goclient-limited-tenant-key")
	limitedTenant = fmt.Sprintf("\n[[tenants]]\nname = \"limited\"\nid = 2\nkey = \"hex:%x\"\nmodels = [\"echo\"]\nsubjects = [\"goclient-echo-*\"]\n", limitedKey)
	// The large-input model, for tensors over TCP.
	// The bundled stream model (models/accum.onnx: sN = s + x, y = sN/2),
	// its state s <- sN kept by the appliance.
	accumModel = "\n[[routes]]\nname = \"accum\"\nmodel = \"accum\"\nshard = \"hbm2-inference\"\n\n[[models]]\nname = \"accum\"\nversion = \"1\"\nkind = \"onnx\"\npath = \"../models/accum.onnx\"\n[models.stream]\nstate = [{ input = \"s\", output = \"sN\", shape = [1, 8] }]\n"
	// The bundled greedy byte decoder as token-stream models: "decoder"
	// ends at EOS (0) or 32 tokens, "endless" has no EOS.
	decoderModels = decoderModel("decoder", "eos = 0\nmax_tokens = 32") + decoderModel("endless", "max_tokens = 1000000")
	largeModel    = "\n[[routes]]\nname = \"large\"\nmodel = \"large\"\nshard = \"hbm2-inference\"\n\n[[models]]\nname = \"large\"\nversion = \"1\"\nkind = \"onnx\"\npath = \"../models/large.onnx\"\n"
)

type appliance struct {
	cmd   *exec.Cmd
	admin string // host:port
	data  string // host:port
	tcp   string // host:port of the TCP listener (io_uring tcp_listen)
	dir   string
}

var (
	appOnce sync.Once
	app     *appliance
	appErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if app != nil {
		app.stop()
	}
	os.Exit(code)
}

func repoRoot() string {
	root, _ := filepath.Abs("../..")
	return root
}

// engine starts sluiced once for the package and returns it.
func engine(t *testing.T) *appliance {
	t.Helper()
	appOnce.Do(func() { app, appErr = startAppliance() })
	if appErr != nil {
		t.Fatal(appErr)
	}
	return app
}

func startAppliance() (*appliance, error) {
	root := repoRoot()
	bin := os.Getenv("SLUICED")
	if bin == "" {
		bin = filepath.Join(root, ".cache/bin/sluiced")
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s missing: run `eval \"$(scripts/build-ffi.sh)\"` first (or set SLUICED): %v", bin, err)
	}
	src, err := os.ReadFile(filepath.Join(root, "cfg/sluice.toml"))
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sluice-goclient-")
	if err != nil {
		return nil, err
	}
	cfg := strings.NewReplacer(
		"../.cache/onnxruntime/", root+"/.cache/onnxruntime/",
		"../models/", root+"/models/",
		`listen = "127.0.0.1:7070"`, `listen = "127.0.0.1:0"`,
		`admin_listen = "127.0.0.1:7071"`, `admin_listen = "127.0.0.1:0"`,
		`data_dir = "../.cache/sluice-data"`, fmt.Sprintf("data_dir = %q", dir+"/data"),
		`tcp_listen = ""`, `tcp_listen = "127.0.0.1:0"`,
	).Replace(string(src)+largeModel+accumModel+decoderModels) + limitedTenant
	path := filepath.Join(dir, "sluice.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-config", path)
	// Killed with the test binary, even when a test panics.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	a := &appliance{cmd: cmd, dir: dir}
	adminc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			if testing.Verbose() {
				fmt.Fprintln(os.Stderr, "sluiced|", line)
			}
			if _, rest, ok := strings.Cut(line, " admin="); ok {
				adminc <- strings.Fields(rest)[0]
			}
		}
	}()
	select {
	case a.admin = <-adminc:
	case <-time.After(60 * time.Second):
		a.stop()
		return nil, errors.New("sluiced did not report its admin address in 60 s")
	}
	var st struct {
		Engine struct {
			Listen    string `json:"listen"`
			TCPListen string `json:"tcp_listen"`
		} `json:"engine"`
	}
	if err := a.getJSON("/v1/status", &st); err != nil || st.Engine.Listen == "" || st.Engine.TCPListen == "" {
		a.stop()
		return nil, fmt.Errorf("status: %v %+v", err, st)
	}
	a.data = st.Engine.Listen
	a.tcp = st.Engine.TCPListen
	return a, nil
}

func (a *appliance) stop() {
	_ = a.cmd.Process.Kill()
	_ = a.cmd.Wait()
	_ = os.RemoveAll(a.dir)
}

func (a *appliance) getJSON(path string, out any) error {
	resp, err := http.Get("http://" + a.admin + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}

func (a *appliance) post(t *testing.T, path, body string) []byte {
	t.Helper()
	resp, err := http.Post("http://"+a.admin+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
	}
	return b
}

func (a *appliance) client(t *testing.T, o sluice.Options) *sluice.Client {
	t.Helper()
	if o.TenantID == 0 {
		o.TenantID, o.Key = 1, demoKey
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	c, err := sluice.Dial(context.Background(), a.data, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// mlpReference is what models/mlp.onnx computes (dataplane/models,
// bundled::mlp_reference): weights are multiples of 1/16, so f32 results
// are exact and compared with ==.
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

func sixteenths(n, seed int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(((i*7+seed*3)%13)-6) / 16
	}
	return x
}

func TestEngineMLP(t *testing.T) {
	c := engine(t).client(t, sluice.Options{})
	for _, batch := range []int{1, 32} {
		for _, adapter := range []string{"", "formal"} {
			x := sixteenths(4*batch, batch)
			req := sluice.NewRequest("mlp", "1", sluice.NewTensor("x", []uint64{uint64(batch), 4}, x))
			req.Adapter = adapter
			resp, err := c.Infer(context.Background(), req)
			if err != nil {
				t.Fatalf("batch %d adapter %q: %v", batch, adapter, err)
			}
			o, ok := resp.Output("y")
			if !ok || o.DType != wire.F32 || fmt.Sprint(o.Dims) != fmt.Sprintf("[%d 3]", batch) {
				t.Fatalf("outputs %v", resp.Outputs)
			}
			y, err := sluice.Values[float32](o)
			want := mlpReference(x, adapter != "")
			if err != nil || fmt.Sprint(y) != fmt.Sprint(want) {
				t.Fatalf("batch %d adapter %q: y = %v, want %v (%v)", batch, adapter, y, want, err)
			}
			if resp.Model != "mlp" || resp.ModelVersion == "" {
				t.Fatalf("response names %s %s", resp.Model, resp.ModelVersion)
			}
			resp.Release()
		}
	}
	if rtt, err := c.Ping(context.Background()); err != nil || rtt <= 0 {
		t.Fatal(rtt, err)
	}
}

// Two stateful streams on the bundled accum model, interleaved on one
// client: each answers half the running sum of its own inputs (exact in
// f32), the state staying in the appliance; after Finish the stream is gone.
func TestEngineStateStream(t *testing.T) {
	c := engine(t).client(t, sluice.Options{})
	ctx := context.Background()
	streams := []*sluice.StateStream{sluice.NewStateStream(c, 0), sluice.NewStateStream(c, 0)}
	sums := make([][]float32, 2)
	for k := range sums {
		sums[k] = make([]float32, 8)
	}
	for step := 0; step < 20; step++ {
		for k, st := range streams {
			x := sixteenths(8, step*2+k)
			for i := range x {
				sums[k][i] += x[i]
			}
			req := sluice.NewRequest("accum", "1", sluice.NewTensor("x", []uint64{1, 8}, x))
			var resp *sluice.Response
			var err error
			if step == 19 {
				resp, err = st.Finish(ctx, req)
			} else {
				resp, err = st.Step(ctx, req)
			}
			if err != nil {
				t.Fatalf("stream %d step %d: %v", k, step, err)
			}
			if _, ok := resp.Output("sN"); ok {
				t.Fatal("the state left the appliance")
			}
			o, _ := resp.Output("y")
			y, err := sluice.Values[float32](o)
			want := make([]float32, 8)
			for i := range want {
				want[i] = sums[k][i] * 0.5
			}
			if err != nil || fmt.Sprint(y) != fmt.Sprint(want) {
				t.Fatalf("stream %d step %d: y = %v, want %v (%v)", k, step, y, want, err)
			}
			resp.Release()
		}
	}
	again := sluice.NewStateStream(c, streams[0].ID())
	// A fresh stream under a finished one's id opens anew (seq 0).
	resp, err := again.Step(ctx, sluice.NewRequest("accum", "1", sluice.NewTensor("x", []uint64{1, 8}, make([]float32, 8))))
	if err != nil {
		t.Fatal(err)
	}
	resp.Release()
	if err := again.Cancel(ctx, "accum", "1"); err != nil {
		t.Fatal(err)
	}
}

// Every dtype, rank 0 and empty shapes round-trip through the echo model
// byte for byte.
func TestEngineEchoEveryDType(t *testing.T) {
	c := engine(t).client(t, sluice.Options{})
	rng := rand.New(rand.NewSource(7))
	shapes := [][]uint64{{3}, {}, {0}, {2, 0, 3}, {2, 3}}
	for _, d := range wire.DTypes {
		for _, dims := range shapes {
			n := 1
			for _, x := range dims {
				n *= int(x)
			}
			data := make([]byte, n*d.Size())
			rng.Read(data)
			if d == wire.Bool {
				for i := range data {
					data[i] &= 1
				}
			}
			in := sluice.Tensor{Name: "t", DType: d, Dims: dims, Data: data}
			resp, err := c.Infer(context.Background(), sluice.NewRequest("echo", "1", in))
			if err != nil {
				t.Fatalf("%s %v: %v", d, dims, err)
			}
			o := resp.Outputs[0]
			if len(resp.Outputs) != 1 || o.Name != "t" || o.DType != d || fmt.Sprint(o.Dims) != fmt.Sprint(dims) || !bytes.Equal(o.Data, data) {
				t.Fatalf("%s %v: got %v % x", d, dims, o, o.Data)
			}
			resp.Release()
		}
	}
}

func TestEngineErrors(t *testing.T) {
	a := engine(t)
	c := a.client(t, sluice.Options{})
	x := sluice.NewTensor("x", []uint64{1, 4}, []float32{1, 2, 3, 4})
	past := &sluice.Request{Model: "mlp", Version: "1", Inputs: []sluice.Tensor{x}, Deadline: time.Now().Add(-time.Second)}
	cases := []struct {
		name string
		c    *sluice.Client
		req  *sluice.Request
		want error
	}{
		{"no version", c, sluice.NewRequest("mlp", "", x), sluice.ErrModelVersionRequired},
		{"unknown model", c, sluice.NewRequest("nope", "1", x), sluice.ErrUnknownModel},
		{"unknown version", c, sluice.NewRequest("null", "7", x), sluice.ErrUnknownModel},
		{"unknown adapter", c, &sluice.Request{Model: "mlp", Version: "1", Adapter: "casual", Inputs: []sluice.Tensor{x}}, sluice.ErrUnknownAdapter},
		{"bad shape", c, sluice.NewRequest("mlp", "1", sluice.NewTensor("x", []uint64{1, 5}, make([]float32, 5))), sluice.ErrBadTensor},
		{"bad dtype", c, sluice.NewRequest("mlp", "1", sluice.NewTensor("x", []uint64{1, 4}, make([]int32, 4))), sluice.ErrBadTensor},
		{"deadline passed", c, past, sluice.ErrDeadlineExceeded},
		{"wrong key", a.client(t, sluice.Options{TenantID: 1, Key: []byte("wrong")}), sluice.NewRequest("mlp", "1", x), sluice.ErrUnauthenticated},
		{"unsigned", a.client(t, sluice.Options{TenantID: 1, Key: nil, Timeout: 5 * time.Second}), sluice.NewRequest("mlp", "1", x), sluice.ErrUnauthenticated},
		// Not the tenant's: answered as not existing (docs/wire.md, "What a tenant may see").
		{"not the tenant's model", a.client(t, sluice.Options{TenantID: 2, Key: limitedKey}), sluice.NewRequest("mlp", "1", x), sluice.ErrUnknownModel},
	}
	for _, k := range cases {
		_, err := k.c.Infer(context.Background(), k.req)
		var se *sluice.ServerError
		if !errors.Is(err, k.want) || !errors.As(err, &se) || se.Message == "" || sluice.IsRetryable(err) {
			t.Errorf("%s: got %v, want %v", k.name, err, k.want)
		}
	}
	// The limited tenant may use echo.
	if _, err := a.client(t, sluice.Options{TenantID: 2, Key: limitedKey}).Infer(context.Background(), sluice.NewRequest("echo", "1", x)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Negotiate(context.Background(), "no-such-subject", 0); !errors.Is(err, sluice.ErrUnknownSubject) {
		t.Fatalf("negotiate: %v", err)
	}
}

// A context deadline reaches the engine as the frame deadline, and a
// request within it is answered.
func TestEngineContextDeadline(t *testing.T) {
	c := engine(t).client(t, sluice.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := c.Infer(ctx, sluice.NewRequest("echo", "1", sluice.Scalar("s", int64(5))))
	if err != nil {
		t.Fatal(err)
	}
	v, _ := sluice.Values[int64](resp.Outputs[0])
	if len(v) != 1 || v[0] != 5 {
		t.Fatal(v)
	}
}

// A JSON schema registered through the registry is negotiated in-band,
// and requests carrying a section are validated against it.
func TestEngineNegotiationAndSection(t *testing.T) {
	a := engine(t)
	c := a.client(t, sluice.Options{})
	schema := `{"type":"object","properties":{"intent":{"type":"string"},"priority":{"type":"integer","minimum":0}},"required":["intent"]}`
	body, _ := json.Marshal(map[string]string{"schemaType": "JSON", "schema": schema})
	var reg struct {
		ID uint32 `json:"id"`
	}
	if err := json.Unmarshal(a.post(t, "/registry/subjects/goclient-section/versions", string(body)), &reg); err != nil || reg.ID == 0 {
		t.Fatalf("register: %v %+v", err, reg)
	}
	var s *sluice.Schema
	var err error
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(50 * time.Millisecond) {
		if s, err = c.Negotiate(context.Background(), "goclient-section", 0); err == nil {
			break
		}
	}
	if err != nil || s.SchemaID != reg.ID || s.Version != 1 || s.Type != wire.SchemaJSON || string(s.Text) != schema {
		t.Fatalf("negotiate: %+v %v", s, err)
	}
	x := sluice.NewTensor("x", []uint64{1, 4}, sixteenths(4, 1))
	req := &sluice.Request{Model: "mlp", Version: "1", Inputs: []sluice.Tensor{x},
		Section: []byte(`{"intent":"chat","priority":2}`), SchemaID: s.SchemaID, SchemaVersion: s.Version}
	resp, err := c.Infer(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	y, _ := sluice.Values[float32](resp.Outputs[0])
	if fmt.Sprint(y) != fmt.Sprint(mlpReference(sixteenths(4, 1), false)) {
		t.Fatalf("y = %v", y)
	}
	req.Section = []byte(`{"priority":-1}`)
	if _, err := c.Infer(context.Background(), req); !errors.Is(err, sluice.ErrSchemaMismatch) {
		t.Fatalf("bad section: %v", err)
	}
	req.Section, req.SchemaID = []byte(`{"intent":"chat"}`), 999999
	if _, err := c.Infer(context.Background(), req); !errors.Is(err, sluice.ErrUnknownSchema) {
		t.Fatalf("unknown schema: %v", err)
	}
}

// Authentication against the appliance (docs/wire.md, "What the appliance
// checks"): the client writes fresh deadlines, so a context deadline beyond
// the freshness window still works; a negotiation needs the tenant's tag
// and sees only its subjects; a copy of a signed frame is refused as a
// replay, a frame without a deadline as stale.
func TestEngineAuthentication(t *testing.T) {
	a := engine(t)
	c := a.client(t, sluice.Options{})
	x := sluice.NewTensor("x", []uint64{1, 4}, []float32{1, 2, 3, 4})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // beyond the 10 s window
	defer cancel()
	if _, err := c.Infer(ctx, sluice.NewRequest("null", "1", x)); err != nil {
		t.Fatalf("a long context deadline: %v", err)
	}
	// Negotiation: the subject exists, but is not the limited tenant's.
	body, _ := json.Marshal(map[string]string{"schemaType": "JSON", "schema": `{"type":"object"}`})
	a.post(t, "/registry/subjects/goclient-auth/versions", string(body))
	var err error
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(50 * time.Millisecond) {
		if _, err = c.Negotiate(context.Background(), "goclient-auth", 0); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("demo tenant negotiates: %v", err)
	}
	limited := a.client(t, sluice.Options{TenantID: 2, Key: limitedKey})
	_, hidden := limited.Negotiate(context.Background(), "goclient-auth", 0)
	_, missing := limited.Negotiate(context.Background(), "goclient-echo-none", 0)
	if !errors.Is(hidden, sluice.ErrUnknownSubject) || hidden.Error() != missing.Error() {
		t.Fatalf("hidden subject %v, missing subject %v: want the same unknown_subject", hidden, missing)
	}
	wrong := a.client(t, sluice.Options{TenantID: 1, Key: []byte("wrong key, wrong key")})
	if _, err := wrong.Negotiate(context.Background(), "goclient-auth", 0); !errors.Is(err, sluice.ErrUnauthenticated) {
		t.Fatalf("negotiation with a wrong key: %v", err)
	}
	// Raw frames: the same signed bytes twice, and a signed frame without a deadline.
	conn, err := net.Dial("udp", a.data)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	key := wire.NewTenantKey(demoKey)
	send := func(deadline uint64, id uint64) []byte {
		r := wire.Repr{Kind: wire.KindNegotiateRequest, RequestID: id, TenantID: 1, DeadlineUs: deadline,
			Body: &wire.NegotiateRequest{Subject: "goclient-auth"}}
		l, err := r.Layout()
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, l.FrameLen)
		if _, err := r.Emit(b); err != nil {
			t.Fatal(err)
		}
		f, err := wire.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		key.Sign(&f)
		return b
	}
	ask := func(b []byte) wire.Frame {
		if _, err := conn.Write(b); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 65536)
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		f, err := wire.Parse(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	code := func(f wire.Frame) wire.Code {
		eb, _ := f.ErrorBody()
		return eb.Code
	}
	frame := send(uint64(time.Now().Add(2*time.Second).UnixMicro()), 1<<40)
	if f := ask(frame); f.Kind() != wire.KindNegotiateResponse {
		t.Fatalf("first copy: %s %s", f.Kind(), code(f))
	}
	if f := ask(frame); f.Kind() != wire.KindError || code(f) != wire.CodeReplayed {
		t.Fatalf("second copy: %s %s", f.Kind(), code(f))
	}
	if f := ask(send(0, 1<<40+1)); code(f) != wire.CodeStale {
		t.Fatalf("deadline 0: %s", code(f))
	}
	if !errors.Is(sluice.CodeError(wire.CodeReplayed), sluice.ErrReplayed) || !errors.Is(sluice.CodeError(wire.CodeStale), sluice.ErrStale) {
		t.Fatal("sentinels of the new codes")
	}
}

// Many goroutines share one client (one socket); every answer carries the
// data of its own request.
func TestEngineConcurrentGoroutines(t *testing.T) {
	c := engine(t).client(t, sluice.Options{})
	const goroutines, each = 64, 25
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				x := []int32{int32(g), int32(i), int32(g*1000 + i)}
				resp, err := c.Infer(context.Background(), sluice.NewRequest("echo", "1", sluice.NewTensor("x", []uint64{3}, x)))
				if err != nil {
					errs <- fmt.Errorf("goroutine %d request %d: %w", g, i, err)
					return
				}
				y, _ := sluice.Values[int32](resp.Outputs[0])
				if fmt.Sprint(y) != fmt.Sprint(x) {
					errs <- fmt.Errorf("goroutine %d request %d: got %v", g, i, y)
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
	if st := c.Stats(); st.Received != goroutines*each || st.Malformed != 0 || st.Timeouts != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// Over the engine's TCP listener: tensors larger than a datagram through
// models/large.onnx (y = x*0.5 + 0.25, exact for multiples of 1/16), the
// mlp, and many goroutines on the one connection; a connection the
// appliance closes fails the client with ErrConnectionLost.
func TestEngineTCP(t *testing.T) {
	a := engine(t)
	c, err := sluice.Dial(context.Background(), "tcp://"+a.tcp, sluice.Options{TenantID: 1, Key: demoKey, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, n := range []int{1 << 18, 1 << 22} { // 1 MiB and 16 MiB of f32
		x := sixteenths(n, n)
		resp, err := c.Infer(context.Background(), sluice.NewRequest("large", "1", sluice.NewTensor("x", []uint64{1, uint64(n)}, x)))
		if err != nil {
			t.Fatalf("%d floats: %v", n, err)
		}
		o, ok := resp.Output("y")
		y, verr := sluice.Values[float32](o)
		if !ok || verr != nil || len(y) != n {
			t.Fatalf("%d floats: outputs %v (%v)", n, resp.Outputs, verr)
		}
		for i := range y {
			if y[i] != x[i]*0.5+0.25 {
				t.Fatalf("%d floats: y[%d] = %v, want %v", n, i, y[i], x[i]*0.5+0.25)
			}
		}
		resp.Release()
	}
	x := sixteenths(4*8, 8)
	resp, err := c.Infer(context.Background(), sluice.NewRequest("mlp", "1", sluice.NewTensor("x", []uint64{8, 4}, x)))
	if err != nil {
		t.Fatal(err)
	}
	o, _ := resp.Output("y")
	if y, _ := sluice.Values[float32](o); fmt.Sprint(y) != fmt.Sprint(mlpReference(x, false)) {
		t.Fatalf("mlp over TCP: %v", y)
	}
	resp.Release()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				x := make([]float32, 1<<14)
				x[0] = float32(g*100 + i)
				resp, err := c.Infer(context.Background(), sluice.NewRequest("echo", "1", sluice.NewTensor("x", []uint64{1 << 14}, x)))
				if err != nil {
					errs <- err
					return
				}
				y, _ := sluice.Values[float32](resp.Outputs[0])
				if y[0] != x[0] {
					errs <- fmt.Errorf("goroutine %d request %d: got %v", g, i, y[0])
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
	// The appliance closes the connection (DELETE /v1/connections/{id}).
	var conns []struct {
		ID        json.Number `json:"id"`
		Transport string      `json:"transport"`
	}
	if err := a.getJSON("/v1/connections", &conns); err != nil {
		t.Fatal(err)
	}
	for _, k := range conns {
		if k.Transport != "tcp" {
			continue
		}
		req, _ := http.NewRequest(http.MethodDelete, "http://"+a.admin+"/v1/connections/"+k.ID.String(), nil)
		r, err := http.DefaultClient.Do(req)
		if err != nil || r.StatusCode != http.StatusNoContent {
			t.Fatalf("DELETE connection %s: %v %v", k.ID, r, err)
		}
		r.Body.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := c.Infer(context.Background(), sluice.NewRequest("echo", "1", sluice.NewTensor("x", []uint64{1}, []float32{1})))
		if errors.Is(err, sluice.ErrConnectionLost) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the close: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
