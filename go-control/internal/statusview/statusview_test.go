package statusview

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/engine/enginetest"
)

func fixed() api.StatusDoc {
	return api.StatusDoc{
		Daemon: api.DaemonStatus{Version: "0.1", Config: "/etc/sluice/sluice.toml", Engine: "rust", Store: "embedded", UptimeS: 90, ReloadsOK: 2},
		Engine: engine.Status{Running: true, Transport: "io_uring", Listen: "127.0.0.1:7070", Hugepages: true, Epoch: 3,
			Workers:   []engine.WorkerInfo{{Index: 0, Core: 1, Alive: true}},
			Versions:  map[string]string{"wire": "1", "engine": "0.1"},
			Frontdoor: &engine.FrontdoorStatus{HTTP: "127.0.0.1:8000", Backends: enginetest.Backends()}},
	}
}

// The whole text for the fixed status, as an operator reads it.
func TestWrite(t *testing.T) {
	var b bytes.Buffer
	Write(&b, fixed())
	want := `engine     running (rust)
transport  io_uring on 127.0.0.1:7070
buffers    hugepages
workers    1
models     0
schemas    0
epoch      3
config     /etc/sluice/sluice.toml
store      embedded
uptime     1m30s
reloads    2 ok, 0 refused
version    engine 0.1
version    wire 1
backends   2 pools, 4 endpoints
pool       llama (openai): requests 120, ok 110, retries 3, waiting 2; errors connect 2, status_4xx 3, status_5xx 4, timeout 1; latency p50 120.0ms p99 900.0ms; TTFT p50 35.0ms; ITL p50 9.0ms
endpoint   http://127.0.0.1:8101  ready     in flight 3/4  requests 70  failures 1  models gemma-3-270m
endpoint   http://127.0.0.1:8102  ejected   in flight 0/4  requests 53  failures 6  models gemma-3-270m
endpoint   http://127.0.0.1:8103  draining  in flight 1/4  requests 0   failures 0  models -
pool       triton (kserve-http): requests 0, ok 0, retries 0, waiting 0; errors none; latency p50 - p99 -; TTFT p50 -; ITL p50 -
endpoint   http://10.0.0.7:8000  not ready  in flight 0/16  requests 0  failures 0  models -
`
	if got := b.String(); got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

// No front door, or one without backends: no backends section.
func TestWriteWithoutBackends(t *testing.T) {
	st := fixed()
	st.Engine.Frontdoor.Backends = nil
	var b bytes.Buffer
	Write(&b, st)
	st.Engine.Frontdoor = nil
	Write(&b, st)
	if strings.Contains(b.String(), "backends") || strings.Contains(b.String(), "pool ") {
		t.Fatalf("a backends section without backends:\n%s", b.String())
	}
}

func TestEndpointState(t *testing.T) {
	for _, c := range []struct {
		e    engine.BackendEndpoint
		want string
	}{
		{engine.BackendEndpoint{Healthy: true}, "ready"},
		{engine.BackendEndpoint{}, "not ready"},
		{engine.BackendEndpoint{Healthy: true, Ejected: true}, "ejected"},
		{engine.BackendEndpoint{Ejected: true, Draining: true}, "not ready, ejected, draining"},
	} {
		if got := EndpointState(c.e); got != c.want {
			t.Errorf("%+v: %q, want %q", c.e, got, c.want)
		}
	}
}

func TestDuration(t *testing.T) {
	for us, want := range map[uint64]string{0: "0µs", 850: "850µs", 1_000: "1.0ms", 35_000: "35.0ms", 999_999: "1000.0ms", 1_200_000: "1.20s"} {
		if got := Duration(us); got != want {
			t.Errorf("Duration(%d) = %q, want %q", us, got, want)
		}
	}
}
