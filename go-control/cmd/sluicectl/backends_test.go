package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/sluice-ai/sluice/go-control/internal/daemon"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
)

// withBackends gives the daemon's config one pool of two endpoints.
func withBackends(t *testing.T) func(*daemon.Options) {
	return func(o *daemon.Options) {
		f, err := os.OpenFile(o.ConfigPath, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString("\n[[backends]]\nname = \"llama\"\nprotocol = \"openai\"\nendpoints = [\"http://127.0.0.1:8101\", \"http://127.0.0.1:8102\"]\n"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBackendsCommand(t *testing.T) {
	addr, fake := startDaemon(t, "", withBackends(t))
	env := map[string]string{"SLUICE_ADDR": addr}
	out := mustCtl(t, env, "backends")
	for _, want := range []string{
		"POOL   URL                    STATE  IN_FLIGHT  REQUESTS  FAILURES",
		"llama  http://127.0.0.1:8101  ready  0          0         0",
		"llama  http://127.0.0.1:8102  ready  0          0         0",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("backends lacks %q:\n%s", want, out)
		}
	}
	if out := mustCtl(t, env, "backends", "add", "llama", "http://127.0.0.1:8103"); !strings.Contains(out, "llama http://127.0.0.1:8103 added") {
		t.Fatalf("add:\n%s", out)
	}
	if out := mustCtl(t, env, "backends", "drain", "llama", "http://127.0.0.1:8101"); !strings.Contains(out, "draining") {
		t.Fatalf("drain:\n%s", out)
	}
	if out := mustCtl(t, env, "backends", "remove", "llama", "http://127.0.0.1:8102"); !strings.Contains(out, "removed") {
		t.Fatalf("remove:\n%s", out)
	}
	fake.SetEndpoint("llama", engine.BackendEndpoint{URL: "http://127.0.0.1:8103", Healthy: false, InFlight: 2, Requests: 40, Failures: 3})
	out = mustCtl(t, env, "backends", "ls")
	for _, want := range []string{
		"llama  http://127.0.0.1:8101  draining   0          0         0",
		"llama  http://127.0.0.1:8103  not ready  2          40        3",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("backends lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "8102") {
		t.Fatalf("removed endpoint listed:\n%s", out)
	}
	mustCtl(t, env, "backends", "undrain", "llama", "http://127.0.0.1:8101")
	if eps := fake.Endpoints("llama"); len(eps) != 2 || eps[0].Draining {
		t.Fatalf("engine: %+v", eps)
	}
	var doc engine.BackendsStatus
	if err := json.Unmarshal([]byte(mustCtl(t, env, "-json", "backends")), &doc); err != nil || len(doc.Pools[0].Endpoints) != 2 {
		t.Fatalf("-json: %v %+v", err, doc)
	}
	// The daemon's refusals, and usage errors.
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"backends", "add", "llama", "http://127.0.0.1:8103"}, 1, "(already_exists)"},
		{[]string{"backends", "add", "nope", "http://127.0.0.1:8104"}, 1, "(not_found)"},
		{[]string{"backends", "add", "llama", "127.0.0.1:8104"}, 1, "(invalid_argument)"},
		{[]string{"backends", "remove", "llama", "http://127.0.0.1:8109"}, 1, "(not_found)"},
		{[]string{"backends", "add", "llama"}, 2, "usage: sluicectl backends"},
		{[]string{"backends", "weigh", "llama", "http://127.0.0.1:8101"}, 2, `unknown backends action "weigh"`},
	} {
		code, _, errs := ctl(t, env, c.args...)
		if code != c.code || !strings.Contains(errs, c.msg) {
			t.Fatalf("%v: exit %d: %s", c.args, code, errs)
		}
	}
}

func TestBackendsWithoutPools(t *testing.T) {
	addr, _ := startDaemon(t, "")
	if out := mustCtl(t, map[string]string{"SLUICE_ADDR": addr}, "backends"); !strings.Contains(out, "no [[backends]] configured") {
		t.Fatalf("backends:\n%s", out)
	}
}

func TestEndpointStateAndRows(t *testing.T) {
	for _, c := range []struct {
		e    engine.BackendEndpoint
		want string
	}{
		{engine.BackendEndpoint{Healthy: true}, "ready"},
		{engine.BackendEndpoint{}, "not ready"},
		{engine.BackendEndpoint{Healthy: true, Ejected: true}, "ejected"},
		{engine.BackendEndpoint{Healthy: true, Ejected: true, Draining: true}, "draining"},
	} {
		if got := endpointState(c.e); got != c.want {
			t.Errorf("%+v: %q, want %q", c.e, got, c.want)
		}
	}
	rows := backendRows(engine.BackendsStatus{Pools: []engine.BackendPool{{Name: "empty"}}})
	if len(rows) != 1 || rows[0][2] != "no endpoints" {
		t.Fatalf("rows: %v", rows)
	}
	for _, args := range [][]string{{"add", "p"}, {"drain", "p", "u", "x"}, {"explode", "p", "u"}} {
		if _, err := parseEndpointOp(args); err == nil {
			t.Errorf("%v parsed", args)
		}
	}
	if op, err := parseEndpointOp([]string{"undrain", "p", "u"}); err != nil || op != (engine.EndpointOp{Pool: "p", URL: "u", Action: engine.EndpointUndrain}) {
		t.Fatalf("undrain: %+v %v", op, err)
	}
}
