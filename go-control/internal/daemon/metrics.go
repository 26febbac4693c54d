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

	up, reloads, changes, refused *prometheus.Desc

	wRequests, wErrors, wRefusals, wRx, wTx, wRxNoBuf, wTxNoBuf, wTxErr, wForeign *prometheus.Desc
	wPings, wNegotiations, wCopied, wSleeps, wPool, wPoolUse, wReuse              *prometheus.Desc
	wLat, wLatHist, wLatMax                                                       *prometheus.Desc
	wUp, wPanics, wRestarts, wCrashLoop, wKernelDrops                             *prometheus.Desc
	pAllocs, pReuses, pFirst, pTouched, pRatio, pBytes, wCopiedBy, wCopiedFrames  *prometheus.Desc
	wSpans, wSpansDropped                                                         *prometheus.Desc

	sRequests, sErrors                      *prometheus.Desc
	sQueue, sQueueHist, sQueueMax           *prometheus.Desc
	sService, sServiceHist, sServiceMax     *prometheus.Desc
	sTokens, sTTFT, sTTFTMax, sITL, sITLMax *prometheus.Desc

	// Stream tables and token streams, per worker; tokens per tenant.
	stOpened, stEnded, stReclaimed, stRefused, stSteps, stOpen, stMoved                                       *prometheus.Desc
	rpWindowFrames, rpTagFrames, rpFallbacks, rpOpened, rpLive                                                *prometheus.Desc
	tkTokens, tkFrames, tkSteps, tkRuns, tkConnClosed, tkStateCopied, tkRunning, tkPrefill, tkEnded, tkTenant *prometheus.Desc

	mRequests, mInferences, mExecutions, mFallbacks, mBatch, mQueue *prometheus.Desc
	mTokens, mTTFT, mITL                                            *prometheus.Desc

	aCache *prometheus.Desc

	cOpen, cAccepted, cClosed, cRx, cRxBytes, cRxLarge, cTx, cTxBytes, cTxLarge, cErrors *prometheus.Desc
	cTCPCloses                                                                           *prometheus.Desc

	tCalls, tQuarantines, tQuarantined, tBytesIn, tBytesOut        *prometheus.Desc
	fRequests, fRefusals, fCopied, fSlow, fConnRefused             *prometheus.Desc
	fConnClosed, fGRPCUnread, fGRPCRead, fHMACRefused, fSlowReader *prometheus.Desc

	load     loadDescs
	backends backendDescs
}

func newCollector(d *Daemon) *collector {
	w, wp, s := []string{"worker", "core"}, []string{"worker", "core", "pool"}, []string{"shard", "local"}
	mv := []string{"model", "version"}
	// Per transport and worker, never per connection: bounded cardinality.
	cw := []string{"transport", "worker"}
	return &collector{
		d:        d,
		load:     newLoadDescs(),
		backends: newBackendDescs(),
		up:       desc("engine_stats_up", "1 if the engine answered the stats call of this scrape."),
		reloads:  desc("config_reloads_total", "Config reloads, by result.", "result"),
		changes:  desc("control_changes_total", "Control changes made through the admin API, SIGHUP or the fleet (each one audit log line), by kind and outcome (ok, refused, failed).", "kind", "outcome"),
		refused:  desc("admin_requests_refused_total", "Admin API requests refused before any handler, by cause: unauthorized (401), host (421: not a local name on loopback), origin (403: a write from another site), content_type (415).", "cause"),

		wRequests:     desc("worker_requests_total", "Requests answered by the worker (ok plus error frames).", w...),
		wErrors:       desc("worker_errors_total", "Error frames by wire error code.", append(w, "code")...),
		wRefusals:     desc("worker_refusals_total", "Refusals by authentication or a tenant's lists, by cause (docs/wire.md, \"What a tenant may see\"): what the error codes do not tell apart, such as a model outside the tenant's list (tenant_model) from one that does not exist. Each is also one error frame in worker_errors_total.", append(w, "cause")...),
		wRx:           desc("worker_rx_frames_total", "Frames received.", w...),
		wTx:           desc("worker_tx_frames_total", "Frames sent.", w...),
		wRxNoBuf:      desc("worker_rx_no_buffers_total", "Receives lost for lack of a buffer.", w...),
		wTxNoBuf:      desc("worker_tx_no_buffers_total", "Replies dropped for lack of a transmit buffer.", w...),
		wTxErr:        desc("worker_tx_errors_total", "Send errors.", w...),
		wForeign:      desc("worker_not_sluice_total", "Datagrams that were not Sluice frames, dropped.", w...),
		wPings:        desc("worker_pings_total", "Ping frames answered.", w...),
		wNegotiations: desc("worker_negotiations_total", "Schema negotiations answered with a schema (refusals are error frames, in worker_errors_total).", w...),
		wCopied:       desc("worker_payload_bytes_copied_total", "Payload bytes copied on the way to the model (0 is the design).", w...),
		wSleeps:       desc("worker_sleeps_total", "Times an adaptive worker slept.", w...),
		wPool:         desc("worker_pool_buffers", "Buffers in the worker's pool (from the config).", wp...),
		wPoolUse:      desc("worker_pool_in_use", "Pool buffers taken now.", wp...),
		wReuse:        desc("worker_buffer_reuses_total", "Pool buffers handed out again.", w...),
		wLat:          desc("worker_latency_seconds", "Receive-to-reply time on the worker (quantiles from the engine's HDR histogram).", w...),
		wLatHist:      desc("worker_latency_hist_seconds", "Receive-to-reply time on the worker, as a histogram.", w...),
		wLatMax:       desc("worker_latency_max_seconds", "Longest receive-to-reply time on the worker.", w...),
		wUp:           desc("worker_up", "1 while the worker serves; 0 while it is down after a panic (restarting or backing off), or once it failed for good (sluiced then exits to be restarted).", w...),
		wPanics:       desc("worker_panics_total", "Panics caught in the worker's loop (the engine restarts the loop after each).", w...),
		wRestarts:     desc("worker_restarts_total", "Restarts of the worker's loop after a panic.", w...),
		wCrashLoop:    desc("worker_crash_looping", "1 while the worker restarts with back-off (it failed again soon after a restart).", w...),
		wKernelDrops:  desc("worker_rx_kernel_drops_total", "Datagrams the kernel dropped in the worker's socket queue before it read them (SO_RXQ_OVFL).", w...),

		pAllocs:       desc("pool_allocs_total", "Buffers handed out by the pool (receives or allocations).", wp...),
		pReuses:       desc("pool_reuses_total", "Buffers handed out again: the same pages reused for a new frame.", wp...),
		pFirst:        desc("pool_first_touches_total", "Buffers handed out for the first time (pages first touched by a frame).", wp...),
		pTouched:      desc("pool_buffers_touched", "Distinct pool buffers handed out at least once.", wp...),
		pRatio:        desc("pool_page_reuse_ratio", "Pool reuses / allocs: how often a frame lands in pages used before.", wp...),
		pBytes:        desc("pool_bytes", "Bytes of memory behind the pool, by page kind (huge = 2 MiB hugepages, normal).", append(wp, "pages")...),
		wCopiedBy:     desc("worker_bytes_copied_total", "Payload bytes copied, by path and the reason that path copies.", append(w, "path", "reason")...),
		wCopiedFrames: desc("worker_frames_copied_total", "Frames whose payload was copied, by path and reason.", append(w, "path", "reason")...),

		wSpans:        desc("worker_spans_recorded_total", "Span records of traced requests the worker pushed to its ring (docs/observability.md).", w...),
		wSpansDropped: desc("worker_spans_dropped_total", "Span records dropped because the worker's ring was full.", w...),

		sRequests:    desc("shard_requests_total", "Requests routed to the shard.", s...),
		sErrors:      desc("shard_errors_total", "Error frames after routing.", s...),
		sQueue:       desc("shard_queue_seconds", "Receive to start of service (quantiles).", s...),
		sQueueHist:   desc("shard_queue_hist_seconds", "Receive to start of service, as a histogram.", s...),
		sQueueMax:    desc("shard_queue_max_seconds", "Longest receive to start of service.", s...),
		sService:     desc("shard_service_seconds", "Time in the handler (quantiles).", s...),
		sServiceHist: desc("shard_service_hist_seconds", "Time in the handler, as a histogram.", s...),
		sServiceMax:  desc("shard_service_max_seconds", "Longest time in the handler.", s...),

		// Per model version, as Triton's nv_inference_* counters.
		aCache:      desc("adapter_cache_total", "LoRA adapters of the bounded per-worker caches, process-wide, by event: load (a miss that loaded the adapter file), eviction (the least recently used one dropped to make room), load_failure (a miss whose file could not be loaded; the request got inference_failed).", "event"),
		mRequests:   desc("model_request_success_total", "Requests answered by a run of the model version (nv_inference_request_success).", mv...),
		mInferences: desc("model_inference_count_total", "Inferences: rows (dimension 0) of the requests answered (nv_inference_count).", mv...),
		mExecutions: desc("model_inference_exec_count_total", "Model executions, single or batched (nv_inference_exec_count); inferences/executions is the mean batch size.", mv...),
		mFallbacks:  desc("model_batch_fallbacks_total", "Batched runs that failed and were run again one request at a time.", mv...),
		mBatch:      desc("model_batch_size", "Rows per model execution (dynamic batching), as a histogram.", mv...),
		mQueue:      desc("model_queue_delay_seconds", "Receive to start of the run that answered the request, as a histogram.", mv...),
		sTokens:     desc("shard_generated_tokens_total", "Tokens generated by the shard's token streams.", s...),
		sTTFT:       desc("shard_time_to_first_token_seconds", "Token streams: OPEN to the step that chose the first token (quantiles).", s...),
		sTTFTMax:    desc("shard_time_to_first_token_max_seconds", "Token streams: longest time to first token.", s...),
		sITL:        desc("shard_inter_token_latency_seconds", "Token streams: time between a stream's tokens (quantiles).", s...),
		sITLMax:     desc("shard_inter_token_latency_max_seconds", "Token streams: longest time between tokens.", s...),

		stOpened:       desc("worker_streams_opened_total", "Streams opened (stateful and token streams).", w...),
		stEnded:        desc("worker_streams_ended_total", "Streams ended: END, CANCEL, a refusal that ends them, an unload.", w...),
		stReclaimed:    desc("worker_streams_reclaimed_total", "Idle streams reclaimed after streams.idle_ms.", w...),
		stRefused:      desc("worker_stream_frames_refused_total", "Stream frames refused (unknown_stream, stream_sequence, stream_limit, ...).", w...),
		stSteps:        desc("worker_stream_steps_total", "Stateful stream steps run.", w...),
		stOpen:         desc("worker_streams_open", "Streams open now.", w...),
		stMoved:        desc("worker_streams_moved_total", "Streams moved to another version of their model across an alias switch.", w...),
		rpWindowFrames: desc("worker_replay_window_frames_total", "Signed frames accepted through their sender's replay window (docs/wire.md, \"Replay windows\").", w...),
		rpTagFrames:    desc("worker_replay_tag_frames_total", "Signed frames accepted through the replay tag table: no sender id, or a fallback.", w...),
		rpFallbacks:    desc("worker_replay_fallbacks_total", "Frames naming a sender that found no free replay window: they went to the tag table.", w...),
		rpOpened:       desc("worker_replay_windows_opened_total", "Replay windows opened (a sender without a live window on the worker).", w...),
		rpLive:         desc("worker_replay_windows_live", "Replay windows live at the worker's last sweep of its table.", w...),
		tkTokens:       desc("worker_generated_tokens_total", "Tokens generated by the worker's token streams.", w...),
		tkFrames:       desc("worker_token_frames_total", "Token frames sent.", w...),
		tkSteps:        desc("worker_token_steps_total", "Token-stream steps run (prompt and decode).", w...),
		tkRuns:         desc("worker_token_model_runs_total", "Model calls the token-stream steps took (fewer than the steps when decode steps are batched across streams).", w...),
		tkConnClosed:   desc("worker_token_streams_conn_closed_total", "Token streams ended because their TCP connection closed.", w...),
		tkStateCopied:  desc("worker_token_state_bytes_copied_total", "Bytes of stream state copied into and out of the batch buffers (the copy batched decode steps cost).", w...),
		tkRunning:      desc("worker_token_streams_running", "Token streams generating now (admitted between decode steps; an OPEN over the limits is refused with stream_limit, there is no waiting queue).", w...),
		tkPrefill:      desc("worker_token_streams_prefill", "Of the running token streams, those still running their prompt (no token yet).", w...),
		tkEnded:        desc("worker_token_streams_ended_total", "Token streams ended, by reason (eos, max_tokens, deadline, cancelled, client, error).", append(w, "reason")...),
		tkTenant:       desc("tenant_generated_tokens_total", "Tokens generated for the tenant (by id; summed over workers).", "tenant"),

		mTokens: desc("model_generated_tokens_total", "Tokens generated by the model's token streams.", mv...),
		mTTFT:   desc("model_time_to_first_token_seconds", "Token streams: OPEN to the step that chose the first token, as a histogram.", mv...),
		mITL:    desc("model_inter_token_latency_seconds", "Token streams: time between a stream's tokens, as a histogram.", mv...),

		cOpen:      desc("connections_open", "Connections open now (RDMA, TCP), by transport.", "transport"),
		cAccepted:  desc("connections_accepted_total", "Connections accepted by the worker.", cw...),
		cClosed:    desc("connections_closed_total", "Connections closed (by either side) and released by the worker.", cw...),
		cRx:        desc("connection_rx_frames_total", "Frames received on the worker's connections.", cw...),
		cRxBytes:   desc("connection_rx_bytes_total", "Bytes received on the worker's connections.", cw...),
		cRxLarge:   desc("connection_rx_large_frames_total", "Frames received by RDMA WRITE into a granted slot.", cw...),
		cTx:        desc("connection_tx_frames_total", "Frames sent on the worker's connections.", cw...),
		cTxBytes:   desc("connection_tx_bytes_total", "Bytes sent on the worker's connections.", cw...),
		cTxLarge:   desc("connection_tx_large_frames_total", "Frames sent by RDMA WRITE into a client's reply slot.", cw...),
		cErrors:    desc("connection_errors_total", "Failed or refused operations on the worker's connections.", cw...),
		cTCPCloses: desc("connection_tcp_closes_total", "TCP connections the worker refused or closed, by cause: connections_max, per_source (at accept), stalled, idle, frame_timeout, send_timeout (time limits), unauthenticated, stale (a large frame's header before it got a slot), oversized, malformed.", append(cw, "cause")...),

		// Per registered transform (at most 64); counters start again from 0
		// when a module is replaced (fresh instances).
		tCalls:       desc("transform_calls_total", "Schema transform calls by outcome: ok, refused, trap, timeout, out_of_memory, bad_output, quarantined (docs/transforms.md).", "subject", "from", "to", "outcome"),
		tQuarantines: desc("transform_quarantines_total", "Times a worker's instance of the transform was quarantined after faults in a row.", "subject", "from", "to"),
		tQuarantined: desc("transform_quarantined_workers", "Workers whose instance of the transform is quarantined now.", "subject", "from", "to"),
		tBytesIn:     desc("transform_bytes_in_total", "Bytes lowered into the transform's memory.", "subject", "from", "to"),
		tBytesOut:    desc("transform_bytes_copied_total", "Bytes the transform's output cost: the one copy into the rebuilt request.", "subject", "from", "to"),
		fRequests:    desc("frontdoor_requests_total", "Requests to the KServe v2 / Triton front door, by protocol.", "protocol"),
		fRefusals:    desc("frontdoor_refusals_total", "Front-door answers that were refusals, by status class (4xx, 5xx); worker refusals are also in worker_errors_total by code.", "class"),
		fCopied:      desc("frontdoor_bytes_copied_total", "Tensor bytes the front door copied (request: into the aligned slot; reply: into gRPC messages) or converted from JSON.", "what"),
		fSlow:        desc("frontdoor_slow_clients_total", "Clients cut off for sending a body too slowly (body_timeout_ms)."),
		fConnRefused: desc("frontdoor_connections_refused_total", "Connections closed at accept (connections_max)."),
		fConnClosed:  desc("frontdoor_connections_closed_total", "Connections the front door closed, by cause: a timeout (handshake, idle, header, body, write), evicted (the one idle longest, to make room at connections_max) or at accept (per_source: connections_per_source_max; sources_full: sources_max).", "cause"),
		fGRPCUnread:  desc("frontdoor_grpc_refused_unread_total", "gRPC calls refused on their credentials before any of their message was read."),
		fGRPCRead:    desc("frontdoor_grpc_bytes_read_total", "gRPC request bytes read (message framing included)."),
		fHMACRefused: desc("frontdoor_hmac_refused_total", "Sluice-HMAC-v2 requests refused, by cause (malformed, stale, bad_signature, replayed, nonces_full, body_mismatch, old_format).", "cause"),
		fSlowReader:  desc("frontdoor_streams_slow_reader_total", "Token streams given up because their client read nothing for write_timeout_ms."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.reloads, c.changes, c.refused, c.wRequests, c.wErrors, c.wRefusals, c.wRx, c.wTx, c.wRxNoBuf, c.wTxNoBuf,
		c.wTxErr, c.wForeign, c.wPings, c.wNegotiations, c.wCopied, c.wSleeps, c.wPool, c.wPoolUse, c.wReuse,
		c.wLat, c.wLatHist, c.wLatMax, c.wUp, c.wPanics, c.wRestarts, c.wCrashLoop, c.wKernelDrops,
		c.pAllocs, c.pReuses, c.pFirst, c.pTouched, c.pRatio, c.pBytes, c.wCopiedBy, c.wCopiedFrames, c.wSpans, c.wSpansDropped, c.sRequests, c.sErrors, c.sQueue, c.sQueueHist, c.sQueueMax,
		c.sService, c.sServiceHist, c.sServiceMax,
		c.mRequests, c.mInferences, c.mExecutions, c.mFallbacks, c.mBatch, c.mQueue, c.aCache,
		c.mTokens, c.mTTFT, c.mITL,
		c.sTokens, c.sTTFT, c.sTTFTMax, c.sITL, c.sITLMax,
		c.stOpened, c.stEnded, c.stReclaimed, c.stRefused, c.stSteps, c.stOpen, c.stMoved,
		c.rpWindowFrames, c.rpTagFrames, c.rpFallbacks, c.rpOpened, c.rpLive,
		c.tkTokens, c.tkFrames, c.tkSteps, c.tkRuns, c.tkConnClosed, c.tkStateCopied, c.tkRunning, c.tkPrefill, c.tkEnded, c.tkTenant,
		c.cOpen, c.cAccepted, c.cClosed, c.cRx, c.cRxBytes, c.cRxLarge, c.cTx, c.cTxBytes, c.cTxLarge, c.cErrors, c.cTCPCloses,
		c.fRequests, c.fRefusals, c.fCopied, c.fSlow, c.fConnRefused, c.fConnClosed, c.fGRPCUnread, c.fGRPCRead, c.fHMACRefused, c.fSlowReader,
		c.tCalls, c.tQuarantines, c.tQuarantined, c.tBytesIn, c.tBytesOut} {
		ch <- d
	}
	for _, d := range c.load.all() {
		ch <- d
	}
	for _, d := range c.backends.all() {
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

// latency exports the quantiles as a summary (sum is 0 when the engine
// does not report one), the max as a gauge, and
// the buckets as a histogram when there are any.
func latency(ch chan<- prometheus.Metric, sum, hist, maxD *prometheus.Desc, l engine.Latency, labels ...string) {
	q := map[float64]float64{0.5: float64(l.P50Ns) * ns, 0.9: float64(l.P90Ns) * ns, 0.99: float64(l.P99Ns) * ns, 0.999: float64(l.P999Ns) * ns}
	total := float64(l.SumNs) * ns
	m, err := prometheus.NewConstSummary(sum, l.Count, total, q, labels...)
	emit(ch, m, err)
	gauge(ch, maxD, float64(l.MaxNs)*ns, labels...)
	if len(l.Buckets) > 0 {
		b := make(map[float64]uint64, len(l.Buckets))
		for _, bk := range l.Buckets {
			b[float64(bk.LeNs)*ns] = bk.Count
		}
		m, err := prometheus.NewConstHistogram(hist, l.Count, total, b, labels...)
		emit(ch, m, err)
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ok, ko := c.d.state.reloadCounts()
	counter(ch, c.reloads, ok, "ok")
	counter(ch, c.reloads, ko, "error")
	for _, a := range c.d.audits.snapshot() {
		counter(ch, c.changes, a.n, a.kind, a.outcome)
	}
	for _, cause := range refusalCauses {
		counter(ch, c.refused, c.d.refused.get(cause), cause)
	}
	c.connections(ch)
	c.transforms(ch)
	c.frontdoor(ch)
	st, err := c.d.eng.Stats() // one batched call per scrape
	if err != nil {
		gauge(ch, c.up, 0)
		return
	}
	gauge(ch, c.up, 1)
	c.collectLoad(ch, st)
	cfg := c.d.state.snapshot()
	for _, w := range st.Workers {
		l := []string{strconv.Itoa(w.Index), strconv.Itoa(w.Core)}
		counter(ch, c.wRequests, w.Requests(), l...)
		codes := make([]string, 0, len(w.Errors))
		for code := range w.Errors {
			codes = append(codes, code)
		}
		sort.Strings(codes)
		for _, code := range codes {
			counter(ch, c.wErrors, w.Errors[code], append(l, code)...)
		}
		causes := make([]string, 0, len(w.Refusals))
		for cause := range w.Refusals {
			causes = append(causes, cause)
		}
		sort.Strings(causes)
		for _, cause := range causes {
			counter(ch, c.wRefusals, w.Refusals[cause], append(l, cause)...)
		}
		counter(ch, c.wRx, w.RxFrames, l...)
		counter(ch, c.wTx, w.TxFrames, l...)
		counter(ch, c.wRxNoBuf, w.RxNoBuffers, l...)
		counter(ch, c.wTxNoBuf, w.TxNoBuffers, l...)
		counter(ch, c.wTxErr, w.TxErrors, l...)
		counter(ch, c.wForeign, w.NotSluice, l...)
		counter(ch, c.wPings, w.Pings, l...)
		counter(ch, c.wNegotiations, w.Negotiations, l...)
		counter(ch, c.wCopied, w.PayloadBytesCopied, l...)
		counter(ch, c.wSleeps, w.Sleeps, l...)
		gauge(ch, c.wPool, float64(cfg.IOUring.RxBuffers), append(l, "rx")...)
		gauge(ch, c.wPool, float64(cfg.IOUring.TxBuffers), append(l, "tx")...)
		gauge(ch, c.wPoolUse, float64(w.RxInUse), append(l, "rx")...)
		gauge(ch, c.wPoolUse, float64(w.TxInUse), append(l, "tx")...)
		counter(ch, c.wReuse, w.BufferReuses, l...)
		latency(ch, c.wLat, c.wLatHist, c.wLatMax, w.Latency, l...)
		up := 0.0
		if w.Alive {
			up = 1
		}
		gauge(ch, c.wUp, up, l...)
		counter(ch, c.wPanics, w.Panics, l...)
		counter(ch, c.wRestarts, w.Restarts, l...)
		looping := 0.0
		if w.CrashLooping {
			looping = 1
		}
		gauge(ch, c.wCrashLoop, looping, l...)
		counter(ch, c.wKernelDrops, w.RxKernelDrops, l...)
		counter(ch, c.wSpans, w.SpansRecorded, l...)
		counter(ch, c.wSpansDropped, w.SpansDropped, l...)
		for _, p := range w.Pools {
			pl := append(append([]string{}, l...), p.Pool)
			counter(ch, c.pAllocs, p.Allocs, pl...)
			counter(ch, c.pReuses, p.Reuses, pl...)
			counter(ch, c.pFirst, p.FirstTouches, pl...)
			gauge(ch, c.pTouched, float64(p.Touched), pl...)
			gauge(ch, c.pRatio, p.ReuseRatio, pl...)
			gauge(ch, c.pBytes, float64(p.HugeBytes), append(pl, "huge")...)
			gauge(ch, c.pBytes, float64(p.NormalBytes), append(pl, "normal")...)
		}
		for _, cp := range w.Copies {
			cl := append(append([]string{}, l...), cp.Path, cp.Reason)
			counter(ch, c.wCopiedBy, cp.Bytes, cl...)
			counter(ch, c.wCopiedFrames, cp.Frames, cl...)
		}
		c.streams(ch, w, l)
	}
	c.tenantTokens(ch, st.Workers)
	for _, s := range st.Shards {
		l := []string{s.Name, strconv.FormatBool(s.Local)}
		counter(ch, c.sRequests, s.Requests, l...)
		counter(ch, c.sErrors, s.Errors, l...)
		latency(ch, c.sQueue, c.sQueueHist, c.sQueueMax, s.Queue, l...)
		latency(ch, c.sService, c.sServiceHist, c.sServiceMax, s.Service, l...)
		if s.Tokens > 0 || s.TTFT.Count > 0 {
			counter(ch, c.sTokens, s.Tokens, l...)
			quantiles(ch, c.sTTFT, c.sTTFTMax, s.TTFT, l...)
			quantiles(ch, c.sITL, c.sITLMax, s.ITL, l...)
		}
	}
	counter(ch, c.aCache, st.AdapterCache.Loads, "load")
	counter(ch, c.aCache, st.AdapterCache.Evictions, "eviction")
	counter(ch, c.aCache, st.AdapterCache.LoadFailures, "load_failure")
	for _, m := range st.Models {
		l := []string{m.Name, m.Version}
		counter(ch, c.mRequests, m.Requests, l...)
		counter(ch, c.mInferences, m.Inferences, l...)
		counter(ch, c.mExecutions, m.Executions, l...)
		counter(ch, c.mFallbacks, m.BatchFallbacks, l...)
		h, err := prometheus.NewConstHistogram(c.mBatch, m.BatchSize.Count(), float64(m.BatchSize.Sum), m.BatchSize.Cumulative(), l...)
		emit(ch, h, err)
		q := make(map[float64]uint64, len(m.QueueDelayUs.Bounds))
		for le, n := range m.QueueDelayUs.Cumulative() {
			q[le*1e-6] = n
		}
		h, err = prometheus.NewConstHistogram(c.mQueue, m.QueueDelayUs.Count(), float64(m.QueueDelayUs.Sum)*ns, q, l...)
		emit(ch, h, err)
		if m.Tokens.Tokens > 0 {
			counter(ch, c.mTokens, m.Tokens.Tokens, l...)
			usHist(ch, c.mTTFT, m.Tokens.TTFTUs, l...)
			usHist(ch, c.mITL, m.Tokens.ITLUs, l...)
		}
	}
}

// connections exports the per-worker connection totals (one engine call);
// an engine that cannot answer leaves them out of this scrape.
func (c *collector) connections(ch chan<- prometheus.Metric) {
	tot, err := c.d.eng.ConnectionTotals()
	if err != nil {
		return
	}
	open := map[string]uint64{}
	for _, t := range tot {
		open[t.Transport] += t.Open
		l := []string{t.Transport, strconv.Itoa(t.Worker)}
		counter(ch, c.cAccepted, t.Accepted, l...)
		counter(ch, c.cClosed, t.Closed, l...)
		counter(ch, c.cRx, t.RxFrames, l...)
		counter(ch, c.cRxBytes, t.RxBytes, l...)
		counter(ch, c.cRxLarge, t.RxLarge, l...)
		counter(ch, c.cTx, t.TxFrames, l...)
		counter(ch, c.cTxBytes, t.TxBytes, l...)
		counter(ch, c.cTxLarge, t.TxLarge, l...)
		counter(ch, c.cErrors, t.Errors, l...)
		if t.Transport == "tcp" {
			for _, k := range t.TCPCloses() {
				counter(ch, c.cTCPCloses, k.N, append(l, k.Cause)...)
			}
		}
	}
	for tr, n := range open {
		gauge(ch, c.cOpen, float64(n), tr)
	}
}

// transforms exports each schema transform's counters (one engine call).
func (c *collector) transforms(ch chan<- prometheus.Metric) {
	ts, err := c.d.eng.Transforms()
	if err != nil {
		return
	}
	for _, t := range ts {
		l := []string{t.Subject, strconv.Itoa(t.From), strconv.Itoa(t.To)}
		for _, o := range []struct {
			name string
			v    uint64
		}{{"ok", t.OK}, {"refused", t.Refused}, {"trap", t.Traps}, {"timeout", t.Timeouts},
			{"out_of_memory", t.OutOfMemory}, {"bad_output", t.BadOutputs}, {"quarantined", t.RejectedQuarantined}} {
			counter(ch, c.tCalls, o.v, append(l, o.name)...)
		}
		counter(ch, c.tQuarantines, t.Quarantines, l...)
		gauge(ch, c.tQuarantined, float64(t.QuarantinedWorkers), l...)
		counter(ch, c.tBytesIn, t.BytesIn, l...)
		counter(ch, c.tBytesOut, t.BytesOut, l...)
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
	reg.MustRegister(d.opts.Collectors...)
	if d.opts.Ingress != nil {
		reg.MustRegister(d.opts.Ingress)
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, MaxRequestsInFlight: 4})
}

// frontdoor exports the front door's counters and its backend pools from
// the engine's status (one call); absent when the front door is off.
func (c *collector) frontdoor(ch chan<- prometheus.Metric) {
	st, err := c.d.eng.Status()
	if err != nil || st.Frontdoor == nil {
		return
	}
	f := st.Frontdoor.Stats
	counter(ch, c.fRequests, f["http_requests"], "http")
	counter(ch, c.fRequests, f["grpc_requests"], "grpc")
	counter(ch, c.fRefusals, f["refused_4xx"], "4xx")
	counter(ch, c.fRefusals, f["failed_5xx"], "5xx")
	counter(ch, c.fCopied, f["payload_bytes_copied"], "request")
	counter(ch, c.fCopied, f["reply_bytes_copied"], "reply")
	counter(ch, c.fCopied, f["json_bytes_converted"], "json_converted")
	counter(ch, c.fSlow, f["slow_clients"])
	counter(ch, c.fConnRefused, f["connections_refused"])
	for _, cause := range []string{"handshake", "idle", "header", "body", "write"} {
		counter(ch, c.fConnClosed, f["closed_"+cause+"_timeout"], cause)
	}
	counter(ch, c.fConnClosed, f["closed_evicted"], "evicted")
	counter(ch, c.fConnClosed, f["refused_per_source"], "per_source")
	counter(ch, c.fConnClosed, f["refused_sources_full"], "sources_full")
	counter(ch, c.fGRPCUnread, f["grpc_refused_unread"])
	counter(ch, c.fGRPCRead, f["grpc_bytes_read"])
	for _, cause := range []string{"malformed", "stale", "bad_signature", "replayed", "nonces_full", "body_mismatch", "old_format"} {
		counter(ch, c.fHMACRefused, f["hmac_"+cause], cause)
	}
	counter(ch, c.fSlowReader, f["streams_slow_reader"])
	c.backends.collect(ch, st.Frontdoor.Backends)
}

// usHist exports fixed µs buckets (sum in µs) as a histogram in seconds.
func usHist(ch chan<- prometheus.Metric, d *prometheus.Desc, b engine.Buckets, l ...string) {
	q := make(map[float64]uint64, len(b.Bounds))
	for le, n := range b.Cumulative() {
		q[le*1e-6] = n
	}
	h, err := prometheus.NewConstHistogram(d, b.Count(), float64(b.Sum)*1e-6, q, l...)
	emit(ch, h, err)
}

// streams exports one worker's stream tables and token streams.
func (c *collector) streams(ch chan<- prometheus.Metric, w engine.WorkerStats, l []string) {
	s, t := w.Streams, w.Tokens
	counter(ch, c.stOpened, s.Opened, l...)
	counter(ch, c.stEnded, s.Ended, l...)
	counter(ch, c.stReclaimed, s.Reclaimed, l...)
	counter(ch, c.stRefused, s.Refused, l...)
	counter(ch, c.stSteps, s.Steps, l...)
	gauge(ch, c.stOpen, float64(s.Open), l...)
	counter(ch, c.stMoved, s.Moved, l...)
	r := w.Replay
	counter(ch, c.rpWindowFrames, r.WindowFrames, l...)
	counter(ch, c.rpTagFrames, r.TagFrames, l...)
	counter(ch, c.rpFallbacks, r.Fallbacks, l...)
	counter(ch, c.rpOpened, r.WindowsOpened, l...)
	gauge(ch, c.rpLive, float64(r.WindowsLive), l...)
	counter(ch, c.tkTokens, t.Tokens, l...)
	counter(ch, c.tkFrames, t.Frames, l...)
	counter(ch, c.tkSteps, t.Steps, l...)
	counter(ch, c.tkRuns, t.Runs, l...)
	counter(ch, c.tkConnClosed, t.ConnClosed, l...)
	counter(ch, c.tkStateCopied, t.StateBytesCopied, l...)
	gauge(ch, c.tkRunning, float64(t.Running), l...)
	gauge(ch, c.tkPrefill, float64(t.Prefill), l...)
	reasons := make([]string, 0, len(t.Ended))
	for r := range t.Ended {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		counter(ch, c.tkEnded, t.Ended[r], append(append([]string{}, l...), r)...)
	}
}

// tenantTokens exports tokens per tenant, summed over workers (one series
// per tenant, not per tenant and worker: the engine bounds the tenants a
// worker counts one by one, the rest sum under id 4294967295).
func (c *collector) tenantTokens(ch chan<- prometheus.Metric, workers []engine.WorkerStats) {
	sum := map[uint32]uint64{}
	for _, w := range workers {
		for t, n := range w.Tokens.ByTenant {
			sum[t] += n
		}
	}
	ids := make([]uint32, 0, len(sum))
	for t := range sum {
		ids = append(ids, t)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, t := range ids {
		counter(ch, c.tkTenant, sum[t], strconv.FormatUint(uint64(t), 10))
	}
}

// quantiles exports the engine's percentiles as a summary and the max as
// a gauge (the token latencies per shard carry no buckets).
func quantiles(ch chan<- prometheus.Metric, sum, maxD *prometheus.Desc, l engine.Latency, labels ...string) {
	q := map[float64]float64{0.5: float64(l.P50Ns) * ns, 0.9: float64(l.P90Ns) * ns, 0.99: float64(l.P99Ns) * ns, 0.999: float64(l.P999Ns) * ns}
	m, err := prometheus.NewConstSummary(sum, l.Count, float64(l.SumNs)*ns, q, labels...)
	emit(ch, m, err)
	gauge(ch, maxD, float64(l.MaxNs)*ns, labels...)
}
