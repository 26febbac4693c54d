package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-ai/sluice/clients/go/npy"
	"github.com/sluice-ai/sluice/clients/go/wire"
	"github.com/sluice-ai/sluice/go-control/internal/daemon"
	// The real engine: `sluicectl infer` is tested against the data plane.
	_ "github.com/sluice-ai/sluice/go-control/internal/rustengine"
)

const demoKey = "hex:73756963652d64656d6f2d6b65792d30303030303030303030303030303030"

// startRealDaemon runs sluiced in-process on the real Rust engine (io_uring
// on loopback, ONNX Runtime, the bundled models) from cfg/sluice.toml with
// ephemeral ports, and returns the admin address.
func startRealDaemon(t *testing.T) string {
	t.Helper()
	root, _ := filepath.Abs("../../..")
	b, err := os.ReadFile(filepath.Join(root, "cfg/sluice.toml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := strings.NewReplacer(
		`admin_listen = "127.0.0.1:7071"`, `admin_listen = "127.0.0.1:0"`,
		`listen = "127.0.0.1:7070"`, `listen = "127.0.0.1:0"`,
		`data_dir = "../.cache/sluice-data"`, `data_dir = "data"`,
		"../models/", root+"/models/",
		"../.cache/onnxruntime/", root+"/.cache/onnxruntime/").Replace(string(b))
	path := filepath.Join(dir, "sluice.toml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	ready := make(chan net.Addr, 1)
	d, err := daemon.New(daemon.Options{ConfigPath: path, Engine: "rust", Ready: func(a net.Addr) { ready <- a },
		ShutdownTimeout: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("daemon did not stop")
		}
	})
	select {
	case a := <-ready:
		return a.String()
	case err := <-done:
		t.Fatalf("daemon: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("daemon not ready")
	}
	return ""
}

type inferOut struct {
	Model   string `json:"model"`
	Version string `json:"version"`
	Outputs map[string]struct {
		DType string          `json:"dtype"`
		Shape []uint64        `json:"shape"`
		Data  json.RawMessage `json:"data"`
	} `json:"outputs"`
}

func inferJSON(t *testing.T, admin string, args ...string) inferOut {
	t.Helper()
	out := mustCtl(t, nil, append([]string{"-addr", admin, "infer"}, args...)...)
	var v inferOut
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	return v
}

func TestInferAgainstTheEngine(t *testing.T) {
	admin := startRealDaemon(t)
	dir := t.TempDir()
	auth := []string{"--tenant", "1", "--key", demoKey}

	// The MLP from an f64 .npy file (numpy's default), converted to f32;
	// the data address comes from the daemon's status.
	x := &npy.Array{DType: wire.F64, Shape: []uint64{2, 4}, Data: make([]byte, 64)}
	for i := 0; i < 8; i++ {
		binary.LittleEndian.PutUint64(x.Data[8*i:], math.Float64bits(float64(i)/8))
	}
	xpath := filepath.Join(dir, "x.npy")
	if err := npy.WriteFile(xpath, x); err != nil {
		t.Fatal(err)
	}
	base := inferJSON(t, admin, append([]string{"mlp", "1", "--input", "x:f32=" + xpath, "--deadline", "2s"}, auth...)...)
	y, ok := base.Outputs["y"]
	if base.Model != "mlp" || !ok || y.DType != "f32" || len(y.Shape) != 2 || y.Shape[0] != 2 || y.Shape[1] != 3 {
		t.Fatalf("mlp: %+v", base)
	}
	// Same input through the LoRA adapter: a different answer.
	tuned := inferJSON(t, admin, append([]string{"mlp", "1", "--adapter", "formal", "--input", "x:f32=" + xpath}, auth...)...)
	if string(tuned.Outputs["y"].Data) == string(y.Data) {
		t.Fatal("the adapter changed nothing")
	}
	// The same request written as .npy: the file holds the printed values.
	outDir := filepath.Join(dir, "out")
	mustCtl(t, nil, append([]string{"-addr", admin, "infer", "mlp", "1", "--input", "x:f32=" + xpath, "--output", "npy", "--out", outDir}, auth...)...)
	ya, err := npy.ReadFile(filepath.Join(outDir, "y.npy"))
	if err != nil {
		t.Fatal(err)
	}
	var printed [][]float32
	if err := json.Unmarshal(y.Data, &printed); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(ya.Data[4*i:])); got != printed[i/3][i%3] {
			t.Fatalf("y.npy[%d] = %v, printed %v", i, got, printed[i/3][i%3])
		}
	}

	// Echo: every input form comes back as given.
	jpath := filepath.Join(dir, "t.json")
	if err := os.WriteFile(jpath, []byte(`{"dtype":"i64","shape":[2,2],"data":[1,-2,9223372036854775807,-9223372036854775808]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	echo := inferJSON(t, admin, append([]string{"echo", "1", "--input", "a=" + jpath, "--input", "b=@[[true,false]]",
		"--input", "c:u8=@7", "--input", "d:f16=@[0.5,-2]", "--input", "e=@[]"}, auth...)...)
	want := map[string][3]string{
		"a": {"i64", "[2 2]", `[[1, -2], [9223372036854775807, -9223372036854775808]]`},
		"b": {"bool", "[1 2]", `[[true, false]]`},
		"c": {"u8", "[]", `7`},
		"d": {"f16", "[2]", `[0.5, -2]`},
		"e": {"f32", "[0]", `[]`},
	}
	for name, w := range want {
		o := echo.Outputs[name]
		if got := [3]string{o.DType, fmt.Sprint(o.Shape), string(o.Data)}; got != w {
			t.Errorf("echo %s: %v, want %v", name, got, w)
		}
	}

	// Errors name their code and exit 1; bad usage exits 2.
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{append([]string{"nope", "1", "--input", "x=@1"}, auth...), 1, "unknown_model"},
		{[]string{"mlp", "1", "--input", "x=@[[1,2,3,4]]", "--tenant", "1", "--key", "wrong"}, 1, "unauthenticated"},
		{append([]string{"mlp", "1", "--input", "x=@[[1,2,3]]"}, auth...), 1, "bad_tensor"},
		{append([]string{"mlp", "1", "--input", "x:f32=@[[1,2,3,4]]", "--adapter", "casual"}, auth...), 1, "unknown_adapter"},
		{[]string{"mlp", "--input", "x=@1"}, 2, "MODEL and VERSION"},
		{[]string{"mlp", "1"}, 2, "--input"},
		{[]string{"mlp", "1", "--input", "x"}, 2, "NAME=FILE.npy"},
		{[]string{"mlp", "1", "--input", "x:f128=@1"}, 2, "unknown dtype"},
		{[]string{"mlp", "1", "--input", "x=@[[1],[2,3]]"}, 1, "ragged"},
		{[]string{"mlp", "1", "--input", "x=" + filepath.Join(dir, "missing.npy")}, 1, "no such file"},
		{[]string{"mlp", "1", "--input", "x=@1", "--output", "csv"}, 2, "json or npy"},
	} {
		code, _, stderr := ctl(t, nil, append([]string{"-addr", admin, "infer"}, c.args...)...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, stderr, c.code, c.want)
		}
	}
}

// A structured section, negotiated by subject, is validated by the engine.
func TestInferSection(t *testing.T) {
	admin := startRealDaemon(t)
	body := `{"schemaType":"JSON","schema":"{\"type\":\"object\",\"required\":[\"intent\"]}"}`
	mustCtlHTTP(t, admin, "/registry/subjects/ctl-section/versions", body)
	auth := []string{"--tenant", "1", "--key", demoKey}
	args := append([]string{"-addr", admin, "infer", "echo", "1", "--input", "x=@[1]", "--subject", "ctl-section"}, auth...)
	var code int
	var stderr string
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(50 * time.Millisecond) {
		if code, _, stderr = ctl(t, nil, append(args, "--section", `@{"intent":"chat"}`)...); code == 0 {
			break
		}
	}
	if code != 0 {
		t.Fatalf("valid section: %s", stderr)
	}
	if code, _, stderr = ctl(t, nil, append(args, "--section", `@{"other":1}`)...); code != 1 || !strings.Contains(stderr, "schema_mismatch") {
		t.Fatalf("invalid section: %d %s", code, stderr)
	}
}

func mustCtlHTTP(t *testing.T, admin, path, body string) {
	t.Helper()
	c := newClient(admin, "", 10*time.Second)
	var raw json.RawMessage = []byte(body)
	if _, err := c.call("POST", path, raw, nil); err != nil {
		t.Fatal(err)
	}
}
