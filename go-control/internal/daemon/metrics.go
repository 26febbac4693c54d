package daemon

import (
	"net/http"
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
)

const ns = 1e-9 // nanoseconds to seconds

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("sluice_"+name, help, labels, nil)
}

// collector reads one engine stats snapshot per scrape and turns it into
// metrics; nothing is cached between scrapes.
type collector struct {
	d *Daemon

	up, reloads *prometheus.Desc

	wRequests, wRx, wTx, wErrors, wPool, wPoolUse, wReuse, wExhausted *prometheus.Desc
	wService, wServiceHist, wServiceMax                               *prometheus.Desc

	sRequests, sErrors, sForwarded, sDepth, sInFlight *prometheus.Desc
	sQueue, sQueueHist, sQueueMax                     *prometheus.Desc
	sService, sServiceHist, sServiceMax               *prometheus.Desc
}

func newCollector(d *Daemon) *collector {
	w, s := []string{"worker", "core"}, []string{"shard"}
	return &collector{
		d:       d,
		up:      desc("engine_stats_up", "1 if the engine answered the stats call of this scrape."),
		reloads: desc("config_reloads_total", "Config reloads, by result.", "result"),

		wRequests:    desc("worker_requests_total", "Requests handled by the worker.", w...),
		wRx:          desc("worker_rx_frames_total", "Frames received by the worker.", w...),
		wTx:          desc("worker_tx_frames_total", "Frames sent by the worker.", w...),
		wErrors:      desc("worker_errors_total", "Error replies by wire error code.", append(w, "code")...),
		wPool:        desc("worker_pool_buffers", "Buffers in the worker's pool.", w...),
		wPoolUse:     desc("worker_pool_in_use", "Pool buffers taken now.", w...),
		wReuse:       desc("worker_buffer_reuses_total", "Pool buffers handed out again.", w...),
		wExhausted:   desc("worker_pool_exhausted_total", "Times the worker found its pool empty.", w...),
		wService:     desc("worker_service_seconds", "Receive-to-reply time on the worker (quantiles from the engine's HDR histogram).", w...),
		wServiceHist: desc("worker_service_latency_seconds", "Receive-to-reply time on the worker, as a histogram.", w...),
		wServiceMax:  desc("worker_service_max_seconds", "Longest receive-to-reply time on the worker.", w...),

		sRequests:    desc("shard_requests_total", "Requests routed to the shard.", s...),
		sErrors:      desc("shard_errors_total", "Error replies by wire error code.", append(s, "code")...),
		sForwarded:   desc("shard_forwarded_total", "Requests forwarded to a peer that carries the shard.", s...),
		sDepth:       desc("shard_queue_depth", "Requests queued now.", s...),
		sInFlight:    desc("shard_in_flight", "Requests running now.", s...),
		sQueue:       desc("shard_queue_seconds", "Time queued before running (quantiles).", s...),
		sQueueHist:   desc("shard_queue_latency_seconds", "Time queued before running, as a histogram.", s...),
		sQueueMax:    desc("shard_queue_max_seconds", "Longest time queued.", s...),
		sService:     desc("shard_service_seconds", "Run-to-reply time (quantiles).", s...),
		sServiceHist: desc("shard_service_latency_seconds", "Run-to-reply time, as a histogram.", s...),
		sServiceMax:  desc("shard_service_max_seconds", "Longest run-to-reply time.", s...),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.reloads, c.wRequests, c.wRx, c.wTx, c.wErrors, c.wPool, c.wPoolUse,
		c.wReuse, c.wExhausted, c.wService, c.wServiceHist, c.wServiceMax, c.sRequests, c.sErrors, c.sForwarded,
		c.sDepth, c.sInFlight, c.sQueue, c.sQueueHist, c.sQueueMax, c.sService, c.sServiceHist, c.sServiceMax} {
		ch <- d
	}
}

// emit sends a metric, dropping (never panicking on) a malformed one.
func emit(ch chan<- prometheus.Metric, m prometheus.Metric, err error) {
	if err == nil {
		ch <- m
	}
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v uint64, labels ...string) {
	m, err := prometheus.NewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	emit(ch, m, err)
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, v, labels...)
	emit(ch, m, err)
}

func errorCounters(ch chan<- prometheus.Metric, d *prometheus.Desc, byCode map[string]uint64, labels ...string) {
	codes := make([]string, 0, len(byCode))
	for c := range byCode {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	for _, code := range codes {
		counter(ch, d, byCode[code], append(labels, code)...)
	}
}

func latency(ch chan<- prometheus.Metric, sum, hist, maxD *prometheus.Desc, l engine.Latency, labels ...string) {
	q := map[float64]float64{0.5: float64(l.P50Ns) * ns, 0.9: float64(l.P90Ns) * ns, 0.99: float64(l.P99Ns) * ns, 0.999: float64(l.P999Ns) * ns}
	m, err := prometheus.NewConstSummary(sum, l.Count, float64(l.SumNs)*ns, q, labels...)
	emit(ch, m, err)
	gauge(ch, maxD, float64(l.MaxNs)*ns, labels...)
	if len(l.Buckets) > 0 {
		b := make(map[float64]uint64, len(l.Buckets))
		for _, bk := range l.Buckets {
			b[float64(bk.LeNs)*ns] = bk.Count
		}
		m, err := prometheus.NewConstHistogram(hist, l.Count, float64(l.SumNs)*ns, b, labels...)
		emit(ch, m, err)
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ok, ko := c.d.state.reloadCounts()
	counter(ch, c.reloads, ok, "ok")
	counter(ch, c.reloads, ko, "error")
	st, err := c.d.eng.Stats() // one batched call per scrape
	if err != nil {
		gauge(ch, c.up, 0)
		return
	}
	gauge(ch, c.up, 1)
	for _, w := range st.Workers {
		l := []string{strconv.Itoa(w.ID), strconv.Itoa(w.Core)}
		counter(ch, c.wRequests, w.Requests, l...)
		counter(ch, c.wRx, w.RxFrames, l...)
		counter(ch, c.wTx, w.TxFrames, l...)
		errorCounters(ch, c.wErrors, w.Errors, l...)
		gauge(ch, c.wPool, float64(w.PoolBuffers), l...)
		gauge(ch, c.wPoolUse, float64(w.PoolInUse), l...)
		counter(ch, c.wReuse, w.BufferReuses, l...)
		counter(ch, c.wExhausted, w.PoolExhausted, l...)
		latency(ch, c.wService, c.wServiceHist, c.wServiceMax, w.Service, l...)
	}
	for _, s := range st.Shards {
		counter(ch, c.sRequests, s.Requests, s.Name)
		errorCounters(ch, c.sErrors, s.Errors, s.Name)
		counter(ch, c.sForwarded, s.Forwarded, s.Name)
		gauge(ch, c.sDepth, float64(s.Depth), s.Name)
		gauge(ch, c.sInFlight, float64(s.InFlight), s.Name)
		latency(ch, c.sQueue, c.sQueueHist, c.sQueueMax, s.Queue, s.Name)
		latency(ch, c.sService, c.sServiceHist, c.sServiceMax, s.Service, s.Name)
	}
}

func (s *state) reloadCounts() (uint64, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloadsOK, s.reloadsKO
}

func (d *Daemon) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newCollector(d), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, MaxRequestsInFlight: 4})
}
