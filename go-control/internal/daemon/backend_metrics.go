package daemon

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
)

// backendDescs are the model-server pools of the OpenAI front door
// (engine status frontdoor.backends; dataplane/backends/src/stats.rs).
// Cardinality is bounded by the config: pools and their endpoints are
// [[backends]] entries; models are the names the backends serve.
//
// The engine keeps its timings as microsecond histograms and reports
// p50/p90/p99 only (no buckets), so they are gauges labelled by quantile,
// in µs as the engine measures them.
type backendDescs struct {
	requests, ok, retries, errors, waiting       *prometheus.Desc
	epInFlight, epHealthy, epEjected, epDraining *prometheus.Desc
	epRequests, epFailures, epEjections          *prometheus.Desc
	latency, ttft, itl                           *prometheus.Desc
	mRequests, mLatency, mTTFT, mITL             *prometheus.Desc
}

func newBackendDescs() backendDescs {
	p, e := []string{"pool"}, []string{"pool", "endpoint"}
	pq, mq := []string{"pool", "quantile"}, []string{"model", "quantile"}
	return backendDescs{
		requests:    desc("backend_requests_total", "Requests the OpenAI front door dispatched to the backend pool (requests, not attempts).", p...),
		ok:          desc("backend_ok_total", "Requests of the pool answered 2xx.", p...),
		retries:     desc("backend_retries_total", "Attempts retried on another endpoint of the pool (within retries and retry_budget_pct).", p...),
		errors:      desc("backend_errors_total", "Failed attempts and requests of the pool, by cause: connect, timeout, status_5xx, status_4xx (passed on: the request's fault), garbage, stream_cut, unavailable, queue_full (429), cancelled (the client went away).", "pool", "cause"),
		waiting:     desc("backend_waiting", "Requests waiting for a place in the pool now (every endpoint at max_concurrency; at most queue_depth).", p...),
		epInFlight:  desc("backend_endpoint_in_flight", "Requests in flight to the endpoint now (at most the pool's max_concurrency).", e...),
		epHealthy:   desc("backend_endpoint_healthy", "1 if the endpoint's last active health check passed.", e...),
		epEjected:   desc("backend_endpoint_ejected", "1 while the endpoint is ejected after errors in a row (eject_errors; for eject_ms, doubling up to eject_max_ms).", e...),
		epDraining:  desc("backend_endpoint_draining", "1 while the endpoint is draining: it takes no new request.", e...),
		epRequests:  desc("backend_endpoint_requests_total", "Attempts sent to the endpoint.", e...),
		epFailures:  desc("backend_endpoint_failures_total", "Attempts to the endpoint that failed (connect, timeout, 5xx, garbage, stream cut).", e...),
		epEjections: desc("backend_endpoint_ejections_total", "Times the endpoint was ejected.", e...),
		latency:     desc("backend_latency_us", "Whole-request latency at Sluice (first byte sent upstream to the last byte relayed), µs, by quantile (0.5, 0.9, 0.99); absent before the pool's first request.", pq...),
		ttft:        desc("backend_ttft_us", "Streams: time to the first token (upstream send to the first event with content), µs, by quantile.", pq...),
		itl:         desc("backend_itl_us", "Streams: time between two token events, µs, by quantile.", pq...),
		mRequests:   desc("backend_model_requests_total", "Requests for the model (its upstream name), over every pool.", "model"),
		mLatency:    desc("backend_model_latency_us", "Whole-request latency for the model, µs, by quantile.", mq...),
		mTTFT:       desc("backend_model_ttft_us", "Streams: time to the first token for the model, µs, by quantile.", mq...),
		mITL:        desc("backend_model_itl_us", "Streams: time between token events for the model, µs, by quantile.", mq...),
	}
}

func (b backendDescs) all() []*prometheus.Desc {
	return []*prometheus.Desc{b.requests, b.ok, b.retries, b.errors, b.waiting,
		b.epInFlight, b.epHealthy, b.epEjected, b.epDraining, b.epRequests, b.epFailures, b.epEjections,
		b.latency, b.ttft, b.itl, b.mRequests, b.mLatency, b.mTTFT, b.mITL}
}

func flag(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

// histQuantiles exports p50/p90/p99 as one gauge each (label quantile),
// none while the histogram is empty (an empty one reports 0 µs, which is
// no latency).
func histQuantiles(ch chan<- prometheus.Metric, d *prometheus.Desc, h engine.Hist, name string) {
	if h.Count == 0 {
		return
	}
	gauge(ch, d, float64(h.P50US), name, "0.5")
	gauge(ch, d, float64(h.P90US), name, "0.9")
	gauge(ch, d, float64(h.P99US), name, "0.99")
}

// collect exports the pools, endpoints and models of one status (nil: no
// backends configured, nothing exported).
func (b backendDescs) collect(ch chan<- prometheus.Metric, bs *engine.BackendsStatus) {
	if bs == nil {
		return
	}
	for _, p := range bs.Pools {
		counter(ch, b.requests, p.Requests, p.Name)
		counter(ch, b.ok, p.OK, p.Name)
		counter(ch, b.retries, p.Retries, p.Name)
		causes := make([]string, 0, len(p.Errors))
		for c := range p.Errors {
			causes = append(causes, c)
		}
		sort.Strings(causes)
		for _, c := range causes {
			counter(ch, b.errors, p.Errors[c], p.Name, c)
		}
		gauge(ch, b.waiting, float64(p.Waiting), p.Name)
		histQuantiles(ch, b.latency, p.Latency, p.Name)
		histQuantiles(ch, b.ttft, p.TTFT, p.Name)
		histQuantiles(ch, b.itl, p.ITL, p.Name)
		for _, e := range p.Endpoints {
			gauge(ch, b.epInFlight, float64(e.InFlight), p.Name, e.URL)
			gauge(ch, b.epHealthy, flag(e.Healthy), p.Name, e.URL)
			gauge(ch, b.epEjected, flag(e.Ejected), p.Name, e.URL)
			gauge(ch, b.epDraining, flag(e.Draining), p.Name, e.URL)
			counter(ch, b.epRequests, e.Requests, p.Name, e.URL)
			counter(ch, b.epFailures, e.Failures, p.Name, e.URL)
			counter(ch, b.epEjections, e.Ejections, p.Name, e.URL)
		}
	}
	models := make([]string, 0, len(bs.Models))
	for m := range bs.Models {
		models = append(models, m)
	}
	sort.Strings(models)
	for _, m := range models {
		t := bs.Models[m]
		counter(ch, b.mRequests, t.Requests, m)
		histQuantiles(ch, b.mLatency, t.Latency, m)
		histQuantiles(ch, b.mTTFT, t.TTFT, m)
		histQuantiles(ch, b.mITL, t.ITL, m)
	}
}
