package daemon

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ai/sluice/go-control/internal/api"
)

// recIngress records what the daemon asks of an ingress.
type recIngress struct {
	mu      sync.Mutex
	events  []string
	host    IngressHost
	running func() bool // the engine, seen from Drain
}

func (r *recIngress) note(e string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recIngress) Start(h IngressHost) error { r.host = h; r.note("start"); return nil }
func (r *recIngress) Drain(context.Context) error {
	if r.running() {
		r.note("drain with the engine running")
	} else {
		r.note("drain after the engine stopped")
	}
	return nil
}
func (r *recIngress) Status() api.JobsDoc {
	return api.JobsDoc{Enabled: true, Streams: []api.JobStreamDoc{{Stream: "s", Consumer: "c", State: "consuming", InFlight: 2}}}
}

var recDesc = prometheus.NewDesc("sluice_jobs_test_total", "A metric of the ingress.", nil, nil)

func (r *recIngress) Describe(ch chan<- *prometheus.Desc) { ch <- recDesc }
func (r *recIngress) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(recDesc, prometheus.CounterValue, 7)
}

func TestIngressHook(t *testing.T) {
	// Without an ingress /v1/jobs says so.
	dir := t.TempDir()
	r := start(t, dir, testConfig(t, dir))
	if doc := decodeAs[api.JobsDoc](t, r.must("GET", "/v1/jobs", "", 200)); doc.Enabled || doc.Streams == nil || len(doc.Streams) != 0 {
		t.Fatalf("no ingress: %+v", doc)
	}
	r.shutdown()

	dir = t.TempDir()
	in := &recIngress{}
	src := testConfig(t, dir, `http_listen = ""`, `http_listen = "127.0.0.1:8000"`) +
		"\n[fleet]\nservers = [\"nats://127.0.0.1:4222\"]\n[[jobs.streams]]\nstream = \"s\"\nsubjects = [\"inference.*\"]\ntenant = \"demo\"\n" +
		"[[models]]\nname = \"qwen3-72b\"\nversion = \"1\"\nkind = \"backend\"\nupstream = \"gemma-3-270m\"\n[openai]\ndefault_versions = { \"qwen3-72b\" = \"1\" }\n"
	r = start(t, dir, src, func(o *Options) { o.Ingress = in })
	in.running = func() bool { st, err := r.fake.Status(); return err == nil && st.Running }
	// Started after the engine, given the daemon as its host.
	if l, err := in.host.EngineListen(); err != nil || l == "" {
		t.Fatalf("engine listen: %q %v", l, err)
	}
	if tn, ok := in.host.Tenant("demo", 0); !ok || tn.ID != 1 || !strings.HasPrefix(tn.Key, "hex:") {
		t.Fatalf("tenant by name: %+v %v", tn, ok)
	}
	if tn, ok := in.host.Tenant("", 1); !ok || tn.Name != "demo" {
		t.Fatalf("tenant by id: %+v %v", tn, ok)
	}
	if _, ok := in.host.Tenant("nobody", 0); ok {
		t.Fatal("an unknown tenant was found")
	}
	// Which models are served by backends, and where the OpenAI front door
	// listens (the stand-in engine reports no bound address: the configured one).
	for _, c := range []struct{ name, version, want string }{
		{"qwen3-72b", "", "backend"}, {"qwen3-72b", "1", "backend"}, {"mlp", "1", "onnx"}, {"nope", "", ""},
	} {
		if got := in.host.ModelKind(c.name, c.version); got != c.want {
			t.Errorf("ModelKind(%q, %q) = %q, want %q", c.name, c.version, got, c.want)
		}
	}
	if fd, err := in.host.FrontdoorHTTP(); err != nil || fd != "127.0.0.1:8000" {
		t.Fatalf("front door: %q %v", fd, err)
	}
	if doc := decodeAs[api.JobsDoc](t, r.must("GET", "/v1/jobs", "", 200)); !doc.Enabled || doc.Streams[0].InFlight != 2 {
		t.Fatalf("/v1/jobs: %+v", doc)
	}
	if m := string(r.must("GET", "/metrics", "", 200)); !strings.Contains(m, "sluice_jobs_test_total 7") {
		t.Fatal("the ingress's metrics are not in /metrics")
	}
	// [jobs] changes take a restart.
	if err := os.WriteFile(r.path, []byte(strings.Replace(src, `stream = "s"`, `stream = "t"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if res := decodeAs[api.ReloadResult](t, r.must("POST", "/v1/reload", "", 200)); strings.Join(res.RestartRequired, ",") != "jobs" {
		t.Fatalf("reload: %+v", res)
	}
	// On stop, the ingress drains while the engine still serves.
	r.shutdown()
	if strings.Join(in.events, "; ") != "start; drain with the engine running" {
		t.Fatalf("events: %v", in.events)
	}
}

// [[backends]] and [openai] are read by the engine at start: a reload
// that changes them says so and keeps the running ones.
func TestBackendsTakeARestart(t *testing.T) {
	dir := t.TempDir()
	src := testConfig(t, dir, `http_listen = ""`, `http_listen = "127.0.0.1:8000"`) +
		"\n[[backends]]\nname = \"llama\"\nprotocol = \"openai\"\nendpoints = [\"http://127.0.0.1:8101\"]\n" +
		"[[models]]\nname = \"qwen3-72b\"\nversion = \"1\"\nkind = \"backend\"\naliases = [\"latest\"]\n" +
		"[openai]\ndefault_versions = { \"qwen3-72b\" = \"1\" }\n"
	r := start(t, dir, src)
	next := strings.Replace(src, `"http://127.0.0.1:8101"`, `"http://127.0.0.1:8102"`, 1)
	next = strings.Replace(next, `{ "qwen3-72b" = "1" }`, `{ "qwen3-72b" = "latest" }`, 1)
	if err := os.WriteFile(r.path, []byte(next), 0o600); err != nil {
		t.Fatal(err)
	}
	if res := decodeAs[api.ReloadResult](t, r.must("POST", "/v1/reload", "", 200)); strings.Join(res.RestartRequired, ",") != "backends,openai" {
		t.Fatalf("reload: %+v", res)
	}
	if c := r.fake.Config(); len(c.Backends) != 1 || c.Backends[0].Endpoints[0] != "http://127.0.0.1:8101" || c.OpenAI.DefaultVersions["qwen3-72b"] != "1" {
		t.Fatalf("the engine's backends changed: %+v %+v", c.Backends, c.OpenAI)
	}
	r.shutdown()
}
