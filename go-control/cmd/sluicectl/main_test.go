package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/daemon"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/engine/enginetest"
)

// startDaemon runs sluiced in-process on the fake engine, on an ephemeral
// loopback port with the given admin token, and returns its address.
func startDaemon(t *testing.T, token string, edits ...func(*daemon.Options)) (string, *enginetest.Fake) {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile("../../../cfg/sluice.toml")
	if err != nil {
		t.Fatal(err)
	}
	src := strings.NewReplacer(`admin_listen = "127.0.0.1:7071"`, `admin_listen = "127.0.0.1:0"`,
		`data_dir = "../.cache/sluice-data"`, `data_dir = "data"`,
		`admin_token = ""`, `admin_token = "`+token+`"`).Replace(string(b))
	path := filepath.Join(dir, "sluice.toml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	ready := make(chan net.Addr, 1)
	opts := daemon.Options{ConfigPath: path, Engine: "fake", Ready: func(a net.Addr) { ready <- a },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, e := range edits {
		e(&opts)
	}
	d, err := daemon.New(opts)
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
		case <-time.After(10 * time.Second):
			t.Error("daemon did not stop")
		}
	})
	select {
	case a := <-ready:
		return a.String(), d.Engine().(*enginetest.Fake)
	case err := <-done:
		t.Fatalf("daemon: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("daemon not ready")
	}
	return "", nil
}

func ctl(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, func(k string) string { return env[k] }, &out, &errb)
	return code, out.String(), errb.String()
}

func mustCtl(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	code, out, errs := ctl(t, env, args...)
	if code != 0 {
		t.Fatalf("sluicectl %v: exit %d: %s", args, code, errs)
	}
	return out
}

func TestCommands(t *testing.T) {
	addr, fake := startDaemon(t, "tok")
	env := map[string]string{"SLUICE_ADDR": addr, "SLUICE_TOKEN": "tok"}

	if out := mustCtl(t, env, "status"); !strings.Contains(out, "engine     running (fake)") || !strings.Contains(out, "transport  io_uring on 127.0.0.1:7070") {
		t.Fatalf("status:\n%s", out)
	}
	out := mustCtl(t, env, "routes", "get")
	if !strings.Contains(out, "training  *") || !strings.Contains(out, "(4 routes from the file; first match wins)") {
		t.Fatalf("routes get:\n%s", out)
	}
	// routes set from TOML, then from JSON.
	dir := t.TempDir()
	tomlFile := filepath.Join(dir, "r.toml")
	os.WriteFile(tomlFile, []byte("[[routes]]\nname = \"all\"\nintent = \"x\"\nshard = \"gddr6-training\"\n"), 0o600)
	if out := mustCtl(t, env, "routes", "set", tomlFile); !strings.Contains(out, "(1 routes from the api") {
		t.Fatalf("routes set:\n%s", out)
	}
	if r := fake.Config().Routes; len(r) != 1 || r[0].Intent != "x" {
		t.Fatalf("engine routes: %+v", r)
	}
	badFile := filepath.Join(dir, "bad.json")
	os.WriteFile(badFile, []byte(`[{"name":"x","shard":"nowhere"}]`), 0o600)
	if code, _, errs := ctl(t, env, "routes", "set", badFile); code != 1 || !strings.Contains(errs, `unknown shard "nowhere" (invalid_config)`) {
		t.Fatalf("bad set: %d %s", code, errs)
	}
	badTOML := filepath.Join(dir, "bad.toml")
	os.WriteFile(badTOML, []byte("[[routes]]\nname = \"a\"\nshard = \"s\"\nwat = 1\n"), 0o600)
	if code, _, errs := ctl(t, env, "routes", "set", badTOML); code != 1 || !strings.Contains(errs, "bad.toml") {
		t.Fatalf("bad toml: %d %s", code, errs)
	}
	// The -json output of "routes get" is a valid input of "routes set".
	jsonFile := filepath.Join(dir, "r.json")
	os.WriteFile(jsonFile, []byte(mustCtl(t, env, "-json", "routes", "get")), 0o600)
	mustCtl(t, env, "routes", "set", jsonFile)
	if r := fake.Config().Routes; len(r) != 1 || r[0].Intent != "x" {
		t.Fatalf("engine routes after round trip: %+v", r)
	}
	mustCtl(t, env, "routes", "reset")
	if r := fake.Config().Routes; len(r) != 4 {
		t.Fatalf("after reset: %+v", r)
	}

	if out := mustCtl(t, env, "tenants"); !strings.Contains(out, "demo  1") || strings.Contains(out, "hex:") {
		t.Fatalf("tenants:\n%s", out)
	}
	mustCtl(t, env, "models", "load", "-name", "mlp", "-version", "2.0.0", "-kind", "null")
	mustCtl(t, env, "alias", "set", "mlp", "1", "2.0.0")
	if out := mustCtl(t, env, "models"); !strings.Contains(out, "mlp    2.0.0    null  1") {
		t.Fatalf("models:\n%s", out)
	}
	if out := mustCtl(t, env, "models", "unload", "mlp", "2.0.0"); !strings.Contains(out, "unloaded mlp 2.0.0") {
		t.Fatalf("unload: %s", out)
	}
	if out := mustCtl(t, env, "models"); strings.Contains(out, "2.0.0") {
		t.Fatalf("models after unload:\n%s", out)
	}
	if code, _, errs := ctl(t, env, "models", "unload", "mlp", "2.0.0"); code != 1 || !strings.Contains(errs, "(not_found)") {
		t.Fatalf("unload twice: %d %s", code, errs)
	}
	if code, _, _ := ctl(t, env, "models", "unload", "mlp"); code != 2 {
		t.Fatalf("unload without a version: exit %d, want usage (2)", code)
	}
	mustCtl(t, env, "peers", "add", "east", "127.0.0.1:7170", "hardware.gpu.memory=gddr6")
	if out := mustCtl(t, env, "peers", "ls"); !strings.Contains(out, "east  127.0.0.1:7170  hardware.gpu.memory=gddr6") {
		t.Fatalf("peers:\n%s", out)
	}
	mustCtl(t, env, "peers", "rm", "east")
	if code, _, errs := ctl(t, env, "peers", "rm", "east"); code != 1 || !strings.Contains(errs, "(not_found)") {
		t.Fatalf("rm twice: %d %s", code, errs)
	}

	fake.Record(0, "hbm2-inference", "busy", 1000, 4000)
	fake.SetPools(0, []engine.PoolStats{{Pool: "rx", Capacity: 64, Allocs: 10, Reuses: 6, FirstTouches: 4, ReuseRatio: 0.6, NormalBytes: 4 << 20}},
		[]engine.CopyStats{{Path: "relay", Reason: "why", Frames: 2, Bytes: 300}})
	if out := mustCtl(t, env, "stats"); !strings.Contains(out, "shard hbm2-inference service") || !strings.Contains(out, "busy=1") ||
		!regexp.MustCompile(`worker 0\s+pool rx\s+64\s+0\s+10\s+4\s+6\s+0\.600\s+normal 4096 KiB`).MatchString(out) ||
		!strings.Contains(out, "300 B (why)") || !strings.Contains(out, "kernel drops") {
		t.Fatalf("stats:\n%s", out)
	}
	var st engine.Stats
	if err := json.Unmarshal([]byte(mustCtl(t, env, "-json", "stats")), &st); err != nil || st.Workers[0].Errors["busy"] != 1 || st.Shards[0].Errors != 1 {
		t.Fatalf("stats -json: %v %+v", err, st)
	}
	// Connections: listed with counters, closed by id.
	if out := mustCtl(t, env, "connections"); !strings.Contains(out, "(0 connections)") {
		t.Fatalf("no connections:\n%s", out)
	}
	id, err := fake.Connect(engine.Connection{Transport: "rdma", Listen: "10.99.0.1:7471", Worker: 0, Peer: "10.99.0.2:40000", Device: "rxe0"})
	if err != nil {
		t.Fatal(err)
	}
	fake.CountConnection(id, 7, 700, 6, 600, 0)
	out = mustCtl(t, env, "connections")
	if !strings.Contains(out, "1   rdma       0       10.99.0.2:40000  rxe0    up     7          700       6          600") || !strings.Contains(out, "(1 connections)") {
		t.Fatalf("connections:\n%s", out)
	}
	if code, _, errs := ctl(t, env, "connections", "close", "x"); code != 1 || !strings.Contains(errs, "(invalid_argument)") {
		t.Fatalf("close x: %d %s", code, errs)
	}
	if code, _, errs := ctl(t, env, "connections", "close", "99"); code != 1 || !strings.Contains(errs, "no connection 99 (not_found)") {
		t.Fatalf("close 99: %d %s", code, errs)
	}
	if out := mustCtl(t, env, "connections", "close", "1"); !strings.Contains(out, "connection 1: closing") {
		t.Fatalf("close:\n%s", out)
	}
	if cs, _ := fake.Connections(); len(cs) != 0 {
		t.Fatalf("still open: %+v", cs)
	}
	if code, _, _ := ctl(t, env, "connections", "drop", "1"); code != 2 {
		t.Fatalf("bad subcommand: %d", code)
	}
	if out := mustCtl(t, env, "reload"); !strings.Contains(out, "reloaded") {
		t.Fatalf("reload:\n%s", out)
	}
	mustCtl(t, env, "workers")
	mustCtl(t, env, "shards")
}

func TestAuthAndUsage(t *testing.T) {
	addr, _ := startDaemon(t, "tok")
	code, _, errs := ctl(t, map[string]string{"SLUICE_ADDR": addr}, "status")
	if code != 1 || !strings.Contains(errs, "unauthorized") {
		t.Fatalf("no token: %d %s", code, errs)
	}
	// The flag wins over the environment.
	code, _, errs = ctl(t, map[string]string{"SLUICE_ADDR": addr, "SLUICE_TOKEN": "wrong"}, "-token", "tok", "status")
	if code != 0 {
		t.Fatalf("-token: %d %s", code, errs)
	}
	if code, _, _ := ctl(t, nil, "frobnicate"); code != 2 {
		t.Fatalf("unknown command: %d", code)
	}
	if code, _, _ := ctl(t, nil, "alias", "set", "m"); code != 2 {
		t.Fatalf("short alias: %d", code)
	}
	// Nothing listening: a clear error, not a hang.
	if code, _, errs := ctl(t, map[string]string{"SLUICE_ADDR": "127.0.0.1:1"}, "status"); code != 1 || !strings.Contains(errs, "connect") {
		t.Fatalf("no daemon: %d %s", code, errs)
	}
}

// status names a failed worker and why.
func TestStatusShowsAFailedWorker(t *testing.T) {
	addr, fake := startDaemon(t, "", func(o *daemon.Options) { o.WorkerCheckEvery = time.Hour })
	env := map[string]string{"SLUICE_ADDR": addr}
	if out := mustCtl(t, env, "status"); strings.Contains(out, "FAILED") {
		t.Fatalf("status before the fault:\n%s", out)
	}
	fake.FailWorker(0, "injected fault")
	if out := mustCtl(t, env, "status"); !strings.Contains(out, "FAILED     worker 0 (core 1): injected fault") {
		t.Fatalf("status after the fault:\n%s", out)
	}
}

// The CLI speaks the API through internal/api: it links neither the daemon
// nor the engine's cgo wrapper.
func TestCLIDependsOnTheAPITypesOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range []string{"/internal/daemon", "/internal/rustengine", "/internal/engine/enginetest"} {
		if strings.Contains(string(out), "go-control"+pkg+"\n") {
			t.Errorf("sluicectl links %s", pkg)
		}
	}
}
