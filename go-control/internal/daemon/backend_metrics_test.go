package daemon

import (
	"strings"
	"testing"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/engine/enginetest"
)

func TestBackendMetrics(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	// No front door: no backend series at all.
	for name := range scrape(t, r) {
		if strings.HasPrefix(name, "sluice_backend_") {
			t.Fatalf("%s exported without a front door", name)
		}
	}
	r.fake.SetFrontdoor(&engine.FrontdoorStatus{HTTP: "127.0.0.1:8000", Stats: map[string]uint64{"http_requests": 7},
		Backends: enginetest.Backends()})
	fams := scrape(t, r)
	// The front door's own counters come from the same status call.
	if v := find(t, fams, "sluice_frontdoor_requests_total", map[string]string{"protocol": "http"}).GetCounter().GetValue(); v != 7 {
		t.Fatalf("frontdoor http requests = %v", v)
	}
	llama, triton := map[string]string{"pool": "llama"}, map[string]string{"pool": "triton"}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"sluice_backend_requests_total", llama, 120},
		{"sluice_backend_ok_total", llama, 110},
		{"sluice_backend_retries_total", llama, 3},
		{"sluice_backend_requests_total", triton, 0},
		{"sluice_backend_errors_total", map[string]string{"pool": "llama", "cause": "status_5xx"}, 4},
		{"sluice_backend_errors_total", map[string]string{"pool": "llama", "cause": "connect"}, 2},
		{"sluice_backend_errors_total", map[string]string{"pool": "llama", "cause": "queue_full"}, 0},
		{"sluice_backend_endpoint_ejections_total", map[string]string{"pool": "llama", "endpoint": "http://127.0.0.1:8102"}, 1},
		{"sluice_backend_endpoint_requests_total", map[string]string{"pool": "llama", "endpoint": "http://127.0.0.1:8101"}, 70},
		{"sluice_backend_endpoint_failures_total", map[string]string{"pool": "llama", "endpoint": "http://127.0.0.1:8102"}, 6},
		{"sluice_backend_model_requests_total", map[string]string{"model": "gemma-3-270m"}, 110},
	} {
		if v := find(t, fams, c.name, c.labels).GetCounter().GetValue(); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	ep := func(url string) map[string]string { return map[string]string{"pool": "llama", "endpoint": url} }
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"sluice_backend_waiting", llama, 2},
		{"sluice_backend_endpoint_in_flight", ep("http://127.0.0.1:8101"), 3},
		{"sluice_backend_endpoint_healthy", ep("http://127.0.0.1:8101"), 1},
		{"sluice_backend_endpoint_ejected", ep("http://127.0.0.1:8101"), 0},
		{"sluice_backend_endpoint_ejected", ep("http://127.0.0.1:8102"), 1},
		{"sluice_backend_endpoint_draining", ep("http://127.0.0.1:8103"), 1},
		{"sluice_backend_endpoint_healthy", map[string]string{"pool": "triton", "endpoint": "http://10.0.0.7:8000"}, 0},
		{"sluice_backend_latency_us", map[string]string{"pool": "llama", "quantile": "0.5"}, 120000},
		{"sluice_backend_latency_us", map[string]string{"pool": "llama", "quantile": "0.99"}, 900000},
		{"sluice_backend_ttft_us", map[string]string{"pool": "llama", "quantile": "0.5"}, 35000},
		{"sluice_backend_ttft_us", map[string]string{"pool": "llama", "quantile": "0.9"}, 70000},
		{"sluice_backend_itl_us", map[string]string{"pool": "llama", "quantile": "0.99"}, 30000},
		{"sluice_backend_model_ttft_us", map[string]string{"model": "gemma-3-270m", "quantile": "0.5"}, 35000},
		{"sluice_backend_model_itl_us", map[string]string{"model": "gemma-3-270m", "quantile": "0.5"}, 9000},
		{"sluice_backend_model_latency_us", map[string]string{"model": "gemma-3-270m", "quantile": "0.9"}, 300000},
	} {
		if v := find(t, fams, c.name, c.labels).GetGauge().GetValue(); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	// Every cause the engine reports, zeros included: 9 per pool.
	if n := len(fams["sluice_backend_errors_total"].Metric); n != 18 {
		t.Errorf("%d error series, want 18 (9 causes x 2 pools)", n)
	}
	// An empty histogram exports no quantile (0 µs would read as a latency).
	for _, name := range []string{"sluice_backend_latency_us", "sluice_backend_ttft_us", "sluice_backend_itl_us"} {
		for _, m := range fams[name].Metric {
			for _, l := range m.Label {
				if l.GetName() == "pool" && l.GetValue() == "triton" {
					t.Errorf("%s exported for triton, which has no request", name)
				}
			}
		}
		if n := len(fams[name].Metric); n != 3 {
			t.Errorf("%s: %d series, want 3 (llama's p50, p90, p99)", name, n)
		}
	}
	for _, m := range fams["sluice_backend_model_ttft_us"].Metric {
		for _, l := range m.Label {
			if l.GetName() == "model" && l.GetValue() == "resnet50" {
				t.Error("model TTFT exported for resnet50, which has no stream")
			}
		}
	}
	if v := find(t, fams, "sluice_backend_model_requests_total", map[string]string{"model": "resnet50"}).GetCounter().GetValue(); v != 0 {
		t.Errorf("resnet50 requests = %v", v)
	}
	// A front door without backends exports its counters and no pool.
	r.fake.SetFrontdoor(&engine.FrontdoorStatus{HTTP: "127.0.0.1:8000", Stats: map[string]uint64{}})
	for name := range scrape(t, r) {
		if strings.HasPrefix(name, "sluice_backend_") {
			t.Fatalf("%s exported without backends", name)
		}
	}
}
