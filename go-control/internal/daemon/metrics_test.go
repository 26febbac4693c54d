package daemon

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
)

func scrape(t *testing.T, r *running) map[string]*dto.MetricFamily {
	t.Helper()
	b := r.must("GET", "/metrics", "", 200)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("metrics do not parse: %v\n%s", err, b)
	}
	return fams
}

// find returns the metric of family name whose labels include want.
func find(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("no family %s", name)
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		return m
	}
	t.Fatalf("no %s with labels %v", name, want)
	return nil
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12+1e-9*math.Abs(b) }

func TestMetrics(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	// 100 requests on worker 0 / shard hbm2: service 1..100 µs, queue 2 µs;
	// three of them failed with no_route, one with busy.
	for i := 1; i <= 100; i++ {
		code := ""
		switch {
		case i <= 3:
			code = "no_route"
		case i == 4:
			code = "busy"
		}
		r.fake.Record(0, "hbm2-inference", code, 2_000, uint64(i)*1_000)
	}
	// Two refusals before routing: a model outside the tenant's list
	// answered as unknown, and a replay.
	r.fake.Refuse(0, "unknown_model", "tenant_model")
	r.fake.Refuse(0, "replayed", "replayed")
	calls := r.fake.StatsCalls()
	fams := scrape(t, r)
	if got := r.fake.StatsCalls() - calls; got != 1 {
		t.Fatalf("one scrape made %d Stats calls, want 1", got)
	}
	hbm := map[string]string{"shard": "hbm2-inference", "local": "true"}
	if v := find(t, fams, "sluice_engine_stats_up", nil).GetGauge().GetValue(); v != 1 {
		t.Fatalf("engine_stats_up = %v", v)
	}
	if v := find(t, fams, "sluice_shard_requests_total", hbm).GetCounter().GetValue(); v != 100 {
		t.Fatalf("shard requests = %v", v)
	}
	if v := find(t, fams, "sluice_shard_errors_total", hbm).GetCounter().GetValue(); v != 4 {
		t.Fatalf("shard errors = %v", v)
	}
	if v := find(t, fams, "sluice_worker_errors_total", map[string]string{"worker": "0", "code": "no_route"}).GetCounter().GetValue(); v != 3 {
		t.Fatalf("no_route = %v", v)
	}
	for cause, code := range map[string]string{"tenant_model": "unknown_model", "replayed": "replayed"} {
		if v := find(t, fams, "sluice_worker_refusals_total", map[string]string{"worker": "0", "cause": cause}).GetCounter().GetValue(); v != 1 {
			t.Fatalf("refusals %s = %v", cause, v)
		}
		if v := find(t, fams, "sluice_worker_errors_total", map[string]string{"worker": "0", "code": code}).GetCounter().GetValue(); v != 1 {
			t.Fatalf("errors %s = %v", code, v)
		}
	}
	if v := find(t, fams, "sluice_worker_requests_total", map[string]string{"worker": "0"}).GetCounter().GetValue(); v != 102 {
		t.Fatalf("worker requests = %v", v)
	}
	if v := find(t, fams, "sluice_worker_errors_total", map[string]string{"worker": "0", "core": "1", "code": "busy"}).GetCounter().GetValue(); v != 1 {
		t.Fatalf("worker busy = %v", v)
	}
	// The idle shard is exported with zero counts.
	if v := find(t, fams, "sluice_shard_requests_total", map[string]string{"shard": "gddr6-training", "local": "false"}).GetCounter().GetValue(); v != 0 {
		t.Fatalf("idle shard requests = %v", v)
	}
	// Quantiles come from the engine in ns and are exported in seconds.
	sum := find(t, fams, "sluice_shard_service_seconds", hbm).GetSummary()
	if sum.GetSampleCount() != 100 || !near(sum.GetSampleSum(), 5050e-6) {
		t.Fatalf("summary count/sum: %v %v", sum.GetSampleCount(), sum.GetSampleSum())
	}
	wantQ := map[float64]float64{0.5: 50e-6, 0.9: 90e-6, 0.99: 99e-6, 0.999: 100e-6}
	for _, q := range sum.Quantile {
		if w, ok := wantQ[q.GetQuantile()]; !ok || !near(q.GetValue(), w) {
			t.Fatalf("quantile %v = %v, want %v", q.GetQuantile(), q.GetValue(), w)
		}
		delete(wantQ, q.GetQuantile())
	}
	if len(wantQ) != 0 {
		t.Fatalf("missing quantiles %v", wantQ)
	}
	if v := find(t, fams, "sluice_shard_service_max_seconds", hbm).GetGauge().GetValue(); !near(v, 100e-6) {
		t.Fatalf("max = %v", v)
	}
	// Histogram buckets: 10 µs holds 10 samples, 100 µs all 100.
	h := find(t, fams, "sluice_shard_service_hist_seconds", hbm).GetHistogram()
	wantB := map[float64]uint64{10e-6: 10, 100e-6: 100, 1e-3: 100}
	for _, b := range h.Bucket {
		for le, n := range wantB {
			if near(b.GetUpperBound(), le) && b.GetCumulativeCount() != n {
				t.Fatalf("bucket le=%v: %d, want %d", le, b.GetCumulativeCount(), n)
			}
		}
	}
	if q := find(t, fams, "sluice_shard_queue_seconds", hbm).GetSummary(); q.GetSampleCount() != 100 || !near(q.GetSampleSum(), 200e-6) {
		t.Fatalf("queue summary: %v", q)
	}
	if v := find(t, fams, "sluice_worker_pool_buffers", map[string]string{"worker": "0", "pool": "tx"}).GetGauge().GetValue(); v != 256 {
		t.Fatalf("pool buffers = %v", v)
	}
	if f := fams["sluice_config_reloads_total"]; f == nil || len(f.Metric) != 2 {
		t.Fatalf("reload counters: %v", f)
	}
	// Worker latency is receive to reply: queue + service on the Fake.
	if v := find(t, fams, "sluice_worker_latency_max_seconds", map[string]string{"worker": "0"}).GetGauge().GetValue(); !near(v, 102e-6) {
		t.Fatalf("worker max = %v", v)
	}
	if v := find(t, fams, "sluice_worker_payload_bytes_copied_total", map[string]string{"worker": "0"}).GetCounter().GetValue(); v != 0 {
		t.Fatalf("bytes copied = %v", v)
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Fatal("Go runtime metrics missing")
	}
	// Counters grow between scrapes.
	r.fake.Record(0, "hbm2-inference", "", 1_000, 1_000)
	fams = scrape(t, r)
	if v := find(t, fams, "sluice_shard_requests_total", hbm).GetCounter().GetValue(); v != 101 {
		t.Fatalf("after one more: %v", v)
	}
}

func TestConnectionMetrics(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	// io_uring: no connections, so no connection series at all.
	fams := scrape(t, r)
	if _, ok := fams["sluice_connections_open"]; ok {
		t.Fatal("connections_open exported with no connection-oriented transport")
	}
	rdma := func(worker int) engine.Connection {
		return engine.Connection{Transport: "rdma", Listen: "10.99.0.1:7471", Worker: worker, Device: "rxe0"}
	}
	a, _ := r.fake.Connect(rdma(0))
	b, _ := r.fake.Connect(rdma(0))
	c, _ := r.fake.Connect(rdma(1))
	r.fake.CountConnection(a, 10, 1000, 10, 2000, 0)
	r.fake.CountConnection(b, 5, 500, 4, 400, 1)
	r.fake.CountConnection(c, 1, 100, 1, 100, 0)
	fams = scrape(t, r)
	if v := find(t, fams, "sluice_connections_open", map[string]string{"transport": "rdma"}).GetGauge().GetValue(); v != 3 {
		t.Fatalf("open = %v", v)
	}
	w0 := map[string]string{"transport": "rdma", "worker": "0"}
	if v := find(t, fams, "sluice_connection_rx_frames_total", w0).GetCounter().GetValue(); v != 15 {
		t.Fatalf("worker 0 rx frames = %v", v)
	}
	// A closed connection's counts stay: the counters never go down.
	if err := r.fake.CloseConnection(a); err != nil {
		t.Fatal(err)
	}
	fams = scrape(t, r)
	if v := find(t, fams, "sluice_connections_open", map[string]string{"transport": "rdma"}).GetGauge().GetValue(); v != 2 {
		t.Fatalf("open after close = %v", v)
	}
	for name, want := range map[string]float64{
		"sluice_connection_rx_frames_total": 15, "sluice_connection_rx_bytes_total": 1500,
		"sluice_connection_tx_frames_total": 14, "sluice_connection_tx_bytes_total": 2400,
		"sluice_connection_errors_total": 1, "sluice_connections_accepted_total": 2, "sluice_connections_closed_total": 1,
	} {
		if v := find(t, fams, name, w0).GetCounter().GetValue(); v != want {
			t.Fatalf("%s = %v, want %v", name, v, want)
		}
	}
	// One series per worker, not per connection.
	if f := fams["sluice_connection_rx_frames_total"]; len(f.Metric) != 2 {
		t.Fatalf("rx frames series: %d", len(f.Metric))
	}
}

// The per-model counters of dynamic batching, as Triton's nv_inference_*:
// requests, inferences (rows), executions, and the batch-size and
// queue-delay histograms.
func TestModelBatchMetrics(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	// Two batched runs (8 rows from 5 requests, 3 rows from 3) and one
	// single run of 1 row.
	r.fake.RecordRun("mlp", "1.0.0", 8, 5_000, 20_000, 40_000, 120_000, 600_000)
	r.fake.RecordRun("mlp", "1.0.0", 3, 1_000, 1_000, 1_000)
	r.fake.RecordRun("mlp", "1.0.0", 1, 3_000)
	fams := scrape(t, r)
	mv := map[string]string{"model": "mlp", "version": "1.0.0"}
	for name, want := range map[string]float64{
		"sluice_model_request_success_total":      9,
		"sluice_model_inference_count_total":      12,
		"sluice_model_inference_exec_count_total": 3,
		"sluice_model_batch_fallbacks_total":      0,
	} {
		if v := find(t, fams, name, mv).GetCounter().GetValue(); v != want {
			t.Fatalf("%s = %v, want %v", name, v, want)
		}
	}
	h := find(t, fams, "sluice_model_batch_size", mv).GetHistogram()
	if h.GetSampleCount() != 3 || h.GetSampleSum() != 12 {
		t.Fatalf("batch size: count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
	}
	le := map[float64]uint64{}
	for _, b := range h.GetBucket() {
		le[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	if le[1] != 1 || le[2] != 1 || le[4] != 2 || le[8] != 3 || le[256] != 3 {
		t.Fatalf("batch size buckets: %v", le)
	}
	q := find(t, fams, "sluice_model_queue_delay_seconds", mv).GetHistogram()
	if q.GetSampleCount() != 9 || !near(q.GetSampleSum(), 791e-6) {
		t.Fatalf("queue delay: count %d sum %v", q.GetSampleCount(), q.GetSampleSum())
	}
	qle := map[float64]uint64{}
	for _, b := range q.GetBucket() {
		qle[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	// 1,1,1,3,5 µs ≤ 10 µs; 20 ≤ 25; 40 ≤ 50; 120 ≤ 250; 600 ≤ 1000.
	for bound, want := range map[float64]uint64{10e-6: 5, 25e-6: 6, 50e-6: 7, 100e-6: 7, 250e-6: 8, 1e-3: 9, 0.1: 9} {
		got := uint64(math.MaxUint64)
		for b, n := range qle {
			if near(b, bound) {
				got = n
			}
		}
		if got != want {
			t.Fatalf("queue delay ≤ %v s: %d, want %d (%v)", bound, got, want, qle)
		}
	}
	// Models without runs are exported with zeros.
	if v := find(t, fams, "sluice_model_inference_exec_count_total", map[string]string{"model": "echo"}).GetCounter().GetValue(); v != 0 {
		t.Fatalf("echo executions = %v", v)
	}
}

// Each worker's liveness and caught panics are exported, and so are the
// datagrams the kernel dropped before a worker read them.
func TestWorkerLivenessMetrics(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""), func(o *Options) { o.WorkerCheckEvery = time.Hour })
	fams := scrape(t, r)
	if v := find(t, fams, "sluice_worker_up", map[string]string{"worker": "0"}).GetGauge().GetValue(); v != 1 {
		t.Fatalf("worker_up before the fault = %v", v)
	}
	if v := find(t, fams, "sluice_worker_rx_kernel_drops_total", map[string]string{"worker": "0"}).GetCounter().GetValue(); v != 0 {
		t.Fatalf("rx_kernel_drops = %v", v)
	}
	r.fake.FailWorker(0, "injected fault")
	fams = scrape(t, r)
	if v := find(t, fams, "sluice_worker_up", map[string]string{"worker": "0"}).GetGauge().GetValue(); v != 0 {
		t.Fatalf("worker_up after the fault = %v", v)
	}
	if v := find(t, fams, "sluice_worker_panics_total", map[string]string{"worker": "0"}).GetCounter().GetValue(); v != 1 {
		t.Fatalf("worker_panics_total = %v", v)
	}
	st := decodeAs[api.StatusDoc](t, r.must("GET", "/v1/status", "", 200))
	if w := st.Engine.Workers[0]; w.Alive || !w.Failed() || w.Failure != "injected fault" {
		t.Fatalf("status of the failed worker: %+v", w)
	}
}

// A worker the engine restarted after a panic is exported with its
// restarts and crash-loop state, and stays up.
func TestWorkerRestartMetrics(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""), func(o *Options) { o.WorkerCheckEvery = time.Hour })
	r.fake.RestartWorker(0, "injected fault", false)
	r.fake.RestartWorker(0, "injected fault", true)
	fams := scrape(t, r)
	w0 := map[string]string{"worker": "0"}
	if v := find(t, fams, "sluice_worker_restarts_total", w0).GetCounter().GetValue(); v != 2 {
		t.Fatalf("worker_restarts_total = %v", v)
	}
	if v := find(t, fams, "sluice_worker_panics_total", w0).GetCounter().GetValue(); v != 2 {
		t.Fatalf("worker_panics_total = %v", v)
	}
	if v := find(t, fams, "sluice_worker_crash_looping", w0).GetGauge().GetValue(); v != 1 {
		t.Fatalf("worker_crash_looping = %v", v)
	}
	if v := find(t, fams, "sluice_worker_up", w0).GetGauge().GetValue(); v != 1 {
		t.Fatalf("worker_up of a restarted worker = %v", v)
	}
	st := decodeAs[api.StatusDoc](t, r.must("GET", "/v1/status", "", 200))
	if w := st.Engine.Workers[0]; !w.Alive || w.Failed() || w.Restarts != 2 || !w.CrashLooping || w.Failure != "injected fault" {
		t.Fatalf("status of the restarted worker: %+v", w)
	}
}

// Pools and copies: every field of the engine's report becomes a series.
func TestPoolAndCopyMetrics(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	r.fake.SetPools(0, []engine.PoolStats{
		{Pool: "rx", Capacity: 64, Allocs: 200, Reuses: 150, FirstTouches: 50, Touched: 50, ReuseRatio: 0.75, HugeBytes: 4 << 20},
		{Pool: "tx", Capacity: 64, Allocs: 200, Reuses: 199, FirstTouches: 1, Touched: 1, ReuseRatio: 0.995, NormalBytes: 1 << 20},
	}, []engine.CopyStats{{Path: "echo_reply", Reason: "echo answers with its inputs", Frames: 200, Bytes: 1600}})
	fams := scrape(t, r)
	rx := map[string]string{"worker": "0", "pool": "rx"}
	for name, want := range map[string]float64{
		"sluice_pool_allocs_total":        200,
		"sluice_pool_reuses_total":        150,
		"sluice_pool_first_touches_total": 50,
		"sluice_pool_buffers_touched":     50,
		"sluice_pool_page_reuse_ratio":    0.75,
	} {
		m := find(t, fams, name, rx)
		v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
		if !near(v, want) {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
	if v := find(t, fams, "sluice_pool_bytes", map[string]string{"pool": "rx", "pages": "huge"}).GetGauge().GetValue(); v != 4<<20 {
		t.Errorf("rx huge bytes = %v", v)
	}
	if v := find(t, fams, "sluice_pool_bytes", map[string]string{"pool": "tx", "pages": "normal"}).GetGauge().GetValue(); v != 1<<20 {
		t.Errorf("tx normal bytes = %v", v)
	}
	cl := map[string]string{"worker": "0", "path": "echo_reply", "reason": "echo answers with its inputs"}
	if v := find(t, fams, "sluice_worker_bytes_copied_total", cl).GetCounter().GetValue(); v != 1600 {
		t.Errorf("bytes copied = %v", v)
	}
	if v := find(t, fams, "sluice_worker_frames_copied_total", cl).GetCounter().GetValue(); v != 200 {
		t.Errorf("frames copied = %v", v)
	}
}

// A generative model's token streams: tokens, time to first token and
// inter-token latency histograms in seconds.
func TestModelTokenMetrics(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	r.fake.RecordTokens("mlp", "1.0.0", 800, 40, 60, 300)
	r.fake.RecordTokens("mlp", "1.0.0", 2000)
	fams := scrape(t, r)
	mv := map[string]string{"model": "mlp", "version": "1.0.0"}
	if v := find(t, fams, "sluice_model_generated_tokens_total", mv).GetCounter().GetValue(); v != 5 {
		t.Fatalf("tokens = %v, want 5", v)
	}
	ttft := find(t, fams, "sluice_model_time_to_first_token_seconds", mv).GetHistogram()
	if ttft.GetSampleCount() != 2 || !near(ttft.GetSampleSum(), 2800e-6) {
		t.Fatalf("ttft: count %d sum %v", ttft.GetSampleCount(), ttft.GetSampleSum())
	}
	itl := find(t, fams, "sluice_model_inter_token_latency_seconds", mv).GetHistogram()
	if itl.GetSampleCount() != 3 || !near(itl.GetSampleSum(), 400e-6) {
		t.Fatalf("itl: count %d sum %v", itl.GetSampleCount(), itl.GetSampleSum())
	}
	for _, b := range itl.GetBucket() {
		// 40 and 60 µs are ≤ 100 µs; 300 µs ≤ 500 µs.
		if near(b.GetUpperBound(), 100e-6) && b.GetCumulativeCount() != 2 {
			t.Fatalf("itl ≤ 100 µs: %d", b.GetCumulativeCount())
		}
		if near(b.GetUpperBound(), 500e-6) && b.GetCumulativeCount() != 3 {
			t.Fatalf("itl ≤ 500 µs: %d", b.GetCumulativeCount())
		}
	}
}

// The adapter caches' loads, evictions and load failures, by event.
func TestAdapterCacheMetrics(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	r.fake.SetAdapterCache(engine.AdapterCacheStats{Loads: 40, Evictions: 36, LoadFailures: 2})
	fams := scrape(t, r)
	for event, want := range map[string]float64{"load": 40, "eviction": 36, "load_failure": 2} {
		m := find(t, fams, "sluice_adapter_cache_total", map[string]string{"event": event})
		if v := m.GetCounter().GetValue(); v != want {
			t.Fatalf("adapter_cache_total{event=%q} = %v, want %v", event, v, want)
		}
	}
}

// Token streams per shard (tokens, time to first token, inter-token
// latency), per worker (running and prefill streams, tokens, frames,
// streams ended by reason, reclaimed) and per tenant.
func TestTokenStreamMetrics(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	r.fake.RecordTokenStream(0, "hbm2-inference", 1, "max_tokens", 800_000, 40_000, 60_000)
	r.fake.RecordTokenStream(0, "hbm2-inference", 2, "cancelled", 2_000_000)
	r.fake.RecordTokenStream(0, "hbm2-inference", 1, "eos", 1_000_000, 50_000)
	r.fake.ReclaimStream(0)
	r.fake.SetTokenGauges(0, 3, 1)
	fams := scrape(t, r)
	hbm := map[string]string{"shard": "hbm2-inference", "local": "true"}
	if v := find(t, fams, "sluice_shard_generated_tokens_total", hbm).GetCounter().GetValue(); v != 6 {
		t.Fatalf("shard tokens = %v, want 6", v)
	}
	ttft := find(t, fams, "sluice_shard_time_to_first_token_seconds", hbm).GetSummary()
	if ttft.GetSampleCount() != 3 || !near(ttft.GetSampleSum(), 3.8e-3) {
		t.Fatalf("ttft: count %d sum %v", ttft.GetSampleCount(), ttft.GetSampleSum())
	}
	for _, q := range ttft.GetQuantile() {
		if q.GetQuantile() == 0.5 && !near(q.GetValue(), 1e-3) {
			t.Fatalf("ttft p50 = %v, want 1 ms", q.GetValue())
		}
	}
	if v := find(t, fams, "sluice_shard_time_to_first_token_max_seconds", hbm).GetGauge().GetValue(); !near(v, 2e-3) {
		t.Fatalf("ttft max = %v", v)
	}
	itl := find(t, fams, "sluice_shard_inter_token_latency_seconds", hbm).GetSummary()
	if itl.GetSampleCount() != 3 || !near(itl.GetSampleSum(), 150e-6) {
		t.Fatalf("itl: count %d sum %v", itl.GetSampleCount(), itl.GetSampleSum())
	}
	w0 := map[string]string{"worker": "0"}
	for name, want := range map[string]float64{
		"sluice_worker_generated_tokens_total": 6, "sluice_worker_token_frames_total": 6,
		"sluice_worker_streams_opened_total": 4, "sluice_worker_streams_ended_total": 3,
		"sluice_worker_streams_reclaimed_total": 1,
	} {
		if v := find(t, fams, name, w0).GetCounter().GetValue(); v != want {
			t.Fatalf("%s = %v, want %v", name, v, want)
		}
	}
	if v := find(t, fams, "sluice_worker_token_streams_running", w0).GetGauge().GetValue(); v != 3 {
		t.Fatalf("running = %v", v)
	}
	if v := find(t, fams, "sluice_worker_token_streams_prefill", w0).GetGauge().GetValue(); v != 1 {
		t.Fatalf("prefill = %v", v)
	}
	for reason, want := range map[string]float64{"max_tokens": 1, "cancelled": 1, "eos": 1} {
		m := find(t, fams, "sluice_worker_token_streams_ended_total", map[string]string{"worker": "0", "reason": reason})
		if v := m.GetCounter().GetValue(); v != want {
			t.Fatalf("ended{reason=%q} = %v, want %v", reason, v, want)
		}
	}
	for tenant, want := range map[string]float64{"1": 5, "2": 1} {
		if v := find(t, fams, "sluice_tenant_generated_tokens_total", map[string]string{"tenant": tenant}).GetCounter().GetValue(); v != want {
			t.Fatalf("tenant %s tokens = %v, want %v", tenant, v, want)
		}
	}
}

// The engine's stats JSON (dataplane/engine/src/stats.rs) decodes into the
// stream and token fields: ended reasons and tenants as pairs.
func TestTokenStatsDecode(t *testing.T) {
	var w engine.WorkerStats
	raw := `{"index":0,"core":1,"streams":{"opened":5,"ended":4,"reclaimed":1,"refused":2,"steps":9,"open":1,"moved":0},
	  "tokens":{"tokens":70,"steps":80,"frames":70,"running":1,"prefill":0,"ended":[["cancelled",1],["eos",3]],"by_tenant":[[7,60],[9,10]]}}`
	if err := json.Unmarshal([]byte(raw), &w); err != nil {
		t.Fatal(err)
	}
	if w.Streams.Reclaimed != 1 || w.Tokens.Ended["cancelled"] != 1 || w.Tokens.ByTenant[7] != 60 || w.Tokens.ByTenant[9] != 10 {
		t.Fatalf("decoded %+v", w)
	}
	var s engine.ShardStats
	if err := json.Unmarshal([]byte(`{"name":"s","local":true,"tokens":12,"ttft":{"count":2,"p50_ns":5,"p90_ns":6,"p99_ns":7,"p999_ns":8,"max_ns":9,"sum_ns":11},"itl":{"count":0,"p50_ns":0,"p90_ns":0,"p99_ns":0,"p999_ns":0,"max_ns":0}}`), &s); err != nil {
		t.Fatal(err)
	}
	if s.Tokens != 12 || s.TTFT.Count != 2 || s.TTFT.SumNs != 11 {
		t.Fatalf("decoded %+v", s)
	}
	if err := json.Unmarshal([]byte(`{"tokens":{"by_tenant":[[4294967296,1]]}}`), &w); err == nil {
		t.Fatal("a tenant id past u32 decoded")
	}
}
