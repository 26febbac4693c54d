//! Statistics. Counters are per-worker atomics written by one thread only
//! (a plain load+store, no locked instruction). Histograms are owned by the
//! worker and handed to readers through a pair of preallocated buffers, so
//! neither side locks or allocates on the hot path.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use hdrhistogram::Histogram;
use serde::Serialize;
use sluice_wire::ErrorCode;

use crate::vocab::{CAUSE_COUNT, Cause};
// Copy paths are vocabulary; kept here for the callers that know them from stats.
pub use crate::vocab::{COPY_PATHS, CopyPath};

mod replay;
mod tokens;
use crate::config::limits::{MODEL_SLOT_COUNT_MAX, SHARD_COUNT_MAX};
pub use replay::{ReplayCounters, ReplayStats};
pub use tokens::{
    ModelTokenCounters, ModelTokenStats, TOKEN_LATENCY_BOUNDS_US, TenantTokens, TokenCounters,
    TokenStats,
};

/// Highest error code value tracked.
pub const ERROR_CODE_SLOTS: usize = 32;

/// A pool's counters as atomics a worker publishes (one writer).
#[derive(Debug, Default)]
pub struct PoolAtomics {
    /// Buffers in the pool.
    pub capacity: AtomicU64,
    /// Taken now.
    pub in_use: AtomicU64,
    /// Bytes behind the pool.
    pub bytes: AtomicU64,
    /// 1 when in hugepages.
    pub huge: AtomicU64,
    /// Handed out.
    pub allocs: AtomicU64,
    /// Handed out again.
    pub reuses: AtomicU64,
    /// Distinct buffers handed out.
    pub touched: AtomicU64,
}

impl PoolAtomics {
    /// Stores a transport's reading.
    pub fn store(&self, p: &crate::pool::PoolCounters) {
        let set = |a: &AtomicU64, v: u64| a.store(v, Relaxed);
        set(&self.capacity, u64::from(p.capacity));
        set(&self.in_use, u64::from(p.in_use));
        set(&self.bytes, p.bytes);
        set(&self.huge, u64::from(p.huge));
        set(&self.allocs, p.allocs);
        set(&self.reuses, p.reuses);
        set(&self.touched, u64::from(p.touched));
    }

    /// Reads them for a snapshot (`None`: no such pool).
    pub fn read(&self, name: &str) -> Option<PoolStats> {
        let ld = |a: &AtomicU64| a.load(Relaxed);
        let capacity = ld(&self.capacity);
        if capacity == 0 {
            return None;
        }
        let (allocs, reuses, bytes, huge) = (
            ld(&self.allocs),
            ld(&self.reuses),
            ld(&self.bytes),
            ld(&self.huge) != 0,
        );
        Some(PoolStats {
            pool: name.to_string(),
            capacity,
            in_use: ld(&self.in_use),
            allocs,
            reuses,
            first_touches: allocs - reuses.min(allocs),
            touched: ld(&self.touched),
            reuse_ratio: if allocs == 0 {
                0.0
            } else {
                reuses as f64 / allocs as f64
            },
            huge_bytes: if huge { bytes } else { 0 },
            normal_bytes: if huge { 0 } else { bytes },
        })
    }
}

/// Adds to a counter that only the calling thread writes.
#[inline]
pub fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}

/// A worker's counters.
#[derive(Debug)]
pub struct WorkerCounters {
    /// Error frames sent, by code.
    pub errors: [AtomicU64; ERROR_CODE_SLOTS],
    /// Refusals by cause (`auth::Cause`): what the error codes do not
    /// tell apart, such as a model outside the tenant's list from one
    /// that does not exist.
    pub refusals: [AtomicU64; CAUSE_COUNT],
    /// Requests answered with a response.
    pub ok: AtomicU64,
    /// Pings answered.
    pub pings: AtomicU64,
    /// Negotiations answered.
    pub negotiations: AtomicU64,
    /// Datagrams that were not Sluice frames (dropped without answer).
    pub not_sluice: AtomicU64,
    /// Frames dropped because no transmit buffer was free.
    pub tx_no_buffers: AtomicU64,
    /// Payload bytes copied by handlers.
    pub payload_bytes_copied: AtomicU64,
    /// Bursts with at least one frame.
    pub bursts: AtomicU64,
    /// Times an adaptive worker slept.
    pub sleeps: AtomicU64,
    /// Snapshot epoch this worker runs on.
    pub epoch: AtomicU64,
    /// Control messages applied.
    pub control_applied: AtomicU64,
    /// Requests per shard.
    pub shard_requests: [AtomicU64; SHARD_COUNT_MAX],
    /// Error frames per shard (after routing).
    pub shard_errors: [AtomicU64; SHARD_COUNT_MAX],
    /// Requests forwarded to peers.
    pub forwarded: AtomicU64,
    /// Peer answers relayed to clients.
    pub relayed: AtomicU64,
    /// Forwards whose peer did not answer in time.
    pub forward_timeouts: AtomicU64,
    /// Peer answers with no pending request (late or unknown).
    pub forward_stale: AtomicU64,
    /// Bytes copied to forward or relay (0 where the transport sends from
    /// the receive buffer).
    pub forward_bytes_copied: AtomicU64,
    /// Transport: frames received.
    pub rx_frames: AtomicU64,
    /// Transport: frames sent.
    pub tx_frames: AtomicU64,
    /// Transport: receives lost for lack of buffers.
    pub rx_no_buffers: AtomicU64,
    /// Transport: send errors.
    pub tx_errors: AtomicU64,
    /// Pool: receive buffers in use.
    pub rx_in_use: AtomicU64,
    /// Pool: transmit buffers in use.
    pub tx_in_use: AtomicU64,
    /// Pool: buffer allocations that reused a buffer.
    pub buffer_reuses: AtomicU64,
    /// Batch members that found no transmit buffer and waited for the
    /// next pass.
    pub batch_tx_waits: AtomicU64,
    /// Per model slot: runs, batches, queue delays (`MODEL_SLOT_COUNT_MAX`
    /// entries, on the heap: 224 B each).
    pub models: Box<[ModelCounters]>,
    /// Transport: datagrams the kernel dropped in this worker's socket
    /// queue before the worker saw them (SO_RXQ_OVFL; 0 where the
    /// transport cannot tell).
    pub rx_kernel_drops: AtomicU64,
    /// Per pool (`pool::kind`), as the transport last reported.
    pub pools: [PoolAtomics; crate::pool::kind::COUNT],
    /// Payload bytes copied, by path (`CopyPath`).
    pub copied_bytes: [AtomicU64; COPY_PATHS],
    /// Frames that took a copy, by path.
    pub copied_frames: [AtomicU64; COPY_PATHS],
    /// Span records pushed to the worker's ring (traced requests).
    pub spans_recorded: AtomicU64,
    /// Span records dropped because the ring was full.
    pub spans_dropped: AtomicU64,
    /// Traced requests held past their burst by a batch when the held
    /// table was full: their spans have no run times.
    pub spans_unheld: AtomicU64,
    /// Serving: set once the worker runs, cleared while it is down after a
    /// panic (restarting or backing off) and when its loop ends.
    pub alive: AtomicBool,
    /// Panics caught in the worker's loop.
    pub panics: AtomicU64,
    /// Times the supervisor restarted the loop after a panic.
    pub restarts: AtomicU64,
    /// When the last panic was caught, ms since the Unix epoch (0: never).
    pub failure_at_ms: AtomicU64,
    /// Restarting with back-off: it failed again soon after a restart.
    pub crash_looping: AtomicBool,
    /// Down for good: recovering from a panic failed too, so the
    /// supervisor gave up on it.
    pub failed: AtomicBool,
    /// Why the worker last failed (written off the hot path).
    pub failure: Mutex<Option<String>>,
    /// What the stream tables did (docs/wire.md "Streams").
    pub streams: StreamCounters,
    /// Replay check: windows, tag table, fallbacks.
    pub replay: ReplayCounters,
    /// What the token streams did.
    pub tokens: TokenCounters,
    /// Tokens per tenant.
    pub tenant_tokens: TenantTokens,
}

/// A worker's stream counts, summed over its stream models.
#[derive(Debug, Default)]
pub struct StreamCounters {
    /// Streams opened.
    pub opened: AtomicU64,
    /// Streams ended (END, CANCEL, a refusal that ends them, unload).
    pub ended: AtomicU64,
    /// Streams reclaimed after `streams.idle_ms`.
    pub reclaimed: AtomicU64,
    /// Stream frames refused.
    pub refused: AtomicU64,
    /// Steps run.
    pub steps: AtomicU64,
    /// Streams open at the last tick (a gauge).
    pub open: AtomicU64,
    /// Streams moved to another version of their model (an alias switch
    /// to one with the same state shapes; the state copied once).
    pub moved: AtomicU64,
}

impl StreamCounters {
    /// Adds a table's counts since its last tick.
    pub fn add(&self, c: &crate::streams::TableCounts) {
        bump(&self.opened, c.opened);
        bump(&self.ended, c.ended);
        bump(&self.reclaimed, c.reclaimed);
        bump(&self.refused, c.refused);
        bump(&self.steps, c.steps);
    }
}

/// One worker's stream counts in a snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StreamStats {
    /// Streams opened.
    pub opened: u64,
    /// Streams ended.
    pub ended: u64,
    /// Streams reclaimed idle.
    pub reclaimed: u64,
    /// Stream frames refused.
    pub refused: u64,
    /// Steps run.
    pub steps: u64,
    /// Streams open.
    pub open: u64,
    /// Streams moved across an alias switch.
    pub moved: u64,
}

/// Upper bounds of the batch-size buckets (rows per run); a last bucket
/// takes the rest.
pub const BATCH_SIZE_BOUNDS: [u64; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];
/// Upper bounds of the queue-delay buckets, µs (receive to start of the
/// run that answered the request).
pub const QUEUE_DELAY_BOUNDS_US: [u64; 12] = [
    10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 25_000, 100_000,
];

/// One model slot's counters on one worker: what Triton reports as
/// `nv_inference_request_success`, `nv_inference_count`,
/// `nv_inference_exec_count`, a batch-size histogram and a queue-delay
/// histogram. Fixed buckets, so recording is two stores.
#[derive(Debug, Default)]
pub struct ModelCounters {
    /// Requests answered by a run of the model.
    pub requests: AtomicU64,
    /// Rows (dimension 0) of those requests: one per request for models
    /// that do not batch.
    pub inferences: AtomicU64,
    /// Model executions: single runs plus batched runs.
    pub executions: AtomicU64,
    /// Batched runs that failed and were run again one request at a time.
    pub batch_fallbacks: AtomicU64,
    /// Executions by rows run, bucketed by [`BATCH_SIZE_BOUNDS`].
    pub batch_size: [AtomicU64; BATCH_SIZE_BOUNDS.len() + 1],
    /// Requests by queue delay, bucketed by [`QUEUE_DELAY_BOUNDS_US`].
    pub queue_delay: [AtomicU64; QUEUE_DELAY_BOUNDS_US.len() + 1],
    /// Sum of queue delays, ns.
    pub queue_delay_ns: AtomicU64,
    /// Token streams of a generative model.
    pub tokens: ModelTokenCounters,
}

fn bucket(bounds: &[u64], v: u64) -> usize {
    bounds.iter().position(|&b| v <= b).unwrap_or(bounds.len())
}

impl ModelCounters {
    /// Counts one execution that answered `requests` requests of `rows`
    /// rows in all.
    #[inline]
    pub fn execution(&self, requests: u64, rows: u64) {
        bump(&self.executions, 1);
        bump(&self.requests, requests);
        bump(&self.inferences, rows);
        bump(&self.batch_size[bucket(&BATCH_SIZE_BOUNDS, rows)], 1);
    }

    /// Counts one request's wait from receive to the start of its run.
    #[inline]
    pub fn queued(&self, d: Duration) {
        let ns = d.as_nanos() as u64;
        bump(
            &self.queue_delay[bucket(&QUEUE_DELAY_BOUNDS_US, ns / 1000)],
            1,
        );
        bump(&self.queue_delay_ns, ns);
    }
}

impl Default for WorkerCounters {
    fn default() -> Self {
        WorkerCounters {
            errors: std::array::from_fn(|_| AtomicU64::new(0)),
            refusals: std::array::from_fn(|_| AtomicU64::new(0)),
            ok: AtomicU64::new(0),
            pings: AtomicU64::new(0),
            negotiations: AtomicU64::new(0),
            streams: StreamCounters::default(),
            replay: ReplayCounters::default(),
            tokens: TokenCounters::default(),
            tenant_tokens: TenantTokens::default(),
            not_sluice: AtomicU64::new(0),
            tx_no_buffers: AtomicU64::new(0),
            payload_bytes_copied: AtomicU64::new(0),
            bursts: AtomicU64::new(0),
            sleeps: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            control_applied: AtomicU64::new(0),
            shard_requests: std::array::from_fn(|_| AtomicU64::new(0)),
            shard_errors: std::array::from_fn(|_| AtomicU64::new(0)),
            forwarded: AtomicU64::new(0),
            relayed: AtomicU64::new(0),
            forward_timeouts: AtomicU64::new(0),
            forward_stale: AtomicU64::new(0),
            forward_bytes_copied: AtomicU64::new(0),
            rx_frames: AtomicU64::new(0),
            tx_frames: AtomicU64::new(0),
            rx_no_buffers: AtomicU64::new(0),
            tx_errors: AtomicU64::new(0),
            rx_in_use: AtomicU64::new(0),
            tx_in_use: AtomicU64::new(0),
            buffer_reuses: AtomicU64::new(0),
            batch_tx_waits: AtomicU64::new(0),
            models: (0..MODEL_SLOT_COUNT_MAX)
                .map(|_| ModelCounters::default())
                .collect(),
            rx_kernel_drops: AtomicU64::new(0),
            pools: std::array::from_fn(|_| PoolAtomics::default()),
            spans_recorded: AtomicU64::new(0),
            spans_dropped: AtomicU64::new(0),
            spans_unheld: AtomicU64::new(0),
            copied_bytes: std::array::from_fn(|_| AtomicU64::new(0)),
            copied_frames: std::array::from_fn(|_| AtomicU64::new(0)),
            alive: AtomicBool::new(false),
            panics: AtomicU64::new(0),
            restarts: AtomicU64::new(0),
            failure_at_ms: AtomicU64::new(0),
            crash_looping: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
        }
    }
}

impl WorkerCounters {
    /// Counts an error frame.
    #[inline]
    pub fn error(&self, code: ErrorCode) {
        bump(&self.errors[(code as usize).min(ERROR_CODE_SLOTS - 1)], 1);
    }

    /// Counts a copy of `bytes` on `path` (nothing when 0).
    #[inline]
    pub fn copied(&self, path: CopyPath, bytes: u64) {
        if bytes > 0 {
            bump(&self.copied_bytes[path as usize], bytes);
            bump(&self.copied_frames[path as usize], 1);
        }
    }

    /// Copies by path, for a snapshot (paths that never copied left out).
    pub fn copies(&self) -> Vec<CopyStats> {
        CopyPath::ALL
            .iter()
            .map(|&p| CopyStats {
                path: p.as_str(),
                reason: p.reason(),
                frames: self.copied_frames[p as usize].load(Relaxed),
                bytes: self.copied_bytes[p as usize].load(Relaxed),
            })
            .filter(|c| c.frames > 0)
            .collect()
    }

    /// Pools, for a snapshot.
    pub fn pool_stats(&self) -> Vec<PoolStats> {
        self.pools
            .iter()
            .zip(crate::pool::kind::NAMES)
            .filter_map(|(p, n)| p.read(n))
            .collect()
    }

    /// Counts a refusal's cause (its error frame is counted by `error`).
    #[inline]
    pub fn refused(&self, cause: Cause) {
        bump(&self.refusals[cause as usize], 1);
    }
}

/// Latency histograms of one worker, in nanoseconds.
#[derive(Debug, Clone)]
pub struct HistSet {
    /// Receive to reply, every answered frame.
    pub total: Histogram<u32>,
    /// Per shard: receive to start of service.
    pub queue: Vec<Histogram<u32>>,
    /// Per shard: time in the handler.
    pub service: Vec<Histogram<u32>>,
    /// Per shard: token streams' time to first token (OPEN to the step
    /// that chose it).
    pub ttft: Vec<Histogram<u32>>,
    /// Per shard: token streams' time between tokens.
    pub itl: Vec<Histogram<u32>>,
}

const HIST_MAX_NS: u64 = 10_000_000_000;

/// An empty latency histogram with the engine's bounds.
pub fn new_hist() -> Histogram<u32> {
    // 2 significant digits keeps each histogram near 10 KiB.
    #[allow(
        clippy::expect_used,
        reason = "constant bounds, valid by hdrhistogram's rules (1 <= low, 2 * low <= high, sigfig <= 5); every stats test builds one"
    )]
    Histogram::new_with_bounds(1, HIST_MAX_NS, 2).expect("static histogram bounds are valid")
}

impl HistSet {
    /// Empty histograms for every shard slot.
    pub fn new() -> HistSet {
        HistSet {
            total: new_hist(),
            queue: (0..SHARD_COUNT_MAX).map(|_| new_hist()).collect(),
            service: (0..SHARD_COUNT_MAX).map(|_| new_hist()).collect(),
            ttft: (0..SHARD_COUNT_MAX).map(|_| new_hist()).collect(),
            itl: (0..SHARD_COUNT_MAX).map(|_| new_hist()).collect(),
        }
    }

    /// Copies `other` into self without allocating (same bounds).
    pub fn copy_from(&mut self, other: &HistSet) {
        copy_hist(&mut self.total, &other.total);
        for (a, b) in self.queue.iter_mut().zip(&other.queue) {
            copy_hist(a, b);
        }
        for (a, b) in self.service.iter_mut().zip(&other.service) {
            copy_hist(a, b);
        }
        for (a, b) in self.ttft.iter_mut().zip(&other.ttft) {
            copy_hist(a, b);
        }
        for (a, b) in self.itl.iter_mut().zip(&other.itl) {
            copy_hist(a, b);
        }
    }
}

impl Default for HistSet {
    fn default() -> Self {
        HistSet::new()
    }
}

fn copy_hist(dst: &mut Histogram<u32>, src: &Histogram<u32>) {
    dst.reset();
    // Same bounds and precision: add() walks the counts and never resizes.
    let _ = dst.add(src);
}

/// Records a duration, saturating at the histogram's range.
#[inline]
pub fn record(h: &mut Histogram<u32>, d: Duration) {
    let ns = (d.as_nanos() as u64).clamp(1, HIST_MAX_NS);
    let _ = h.record(ns);
}

/// Two preallocated histogram sets passed between a worker and readers.
#[derive(Debug)]
pub struct HistExchange {
    free: ArrayQueue<Box<HistSet>>,
    ready: ArrayQueue<Box<HistSet>>,
}

impl HistExchange {
    /// Allocates both buffers.
    pub fn new() -> HistExchange {
        let x = HistExchange {
            free: ArrayQueue::new(2),
            ready: ArrayQueue::new(2),
        };
        let _ = x.free.push(Box::new(HistSet::new()));
        let _ = x.free.push(Box::new(HistSet::new()));
        x
    }

    /// Worker side: publishes a copy of `live` if a buffer is free.
    pub fn publish(&self, live: &HistSet) {
        let buf = match self.free.pop() {
            Some(b) => b,
            None => match self.ready.pop() {
                Some(b) => b,
                None => return, // both held by readers; try next time
            },
        };
        let mut buf = buf;
        buf.copy_from(live);
        if let Err(b) = self.ready.push(buf) {
            let _ = self.free.push(b);
        }
    }

    /// Reader side: runs `f` on the latest published set.
    pub fn read<R>(&self, f: impl FnOnce(&HistSet) -> R) -> Option<R> {
        let b = self.ready.pop()?;
        let r = f(&b);
        // Put it back as ready unless the worker published a newer one.
        if self.ready.is_empty() {
            let _ = self.ready.push(b);
        } else {
            let _ = self.free.push(b);
        }
        Some(r)
    }
}

impl Default for HistExchange {
    fn default() -> Self {
        HistExchange::new()
    }
}

/// Percentiles of a histogram, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// Samples.
    pub count: u64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Maximum.
    pub max_ns: u64,
    /// Sum of all samples (mean × count), for Prometheus summaries.
    pub sum_ns: u64,
}

impl Percentiles {
    /// Reads a histogram.
    pub fn of(h: &Histogram<u32>) -> Percentiles {
        if h.is_empty() {
            return Percentiles::default();
        }
        Percentiles {
            count: h.len(),
            p50_ns: h.value_at_quantile(0.5),
            p90_ns: h.value_at_quantile(0.9),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
            sum_ns: (h.mean() * h.len() as f64) as u64,
        }
    }
}

/// One pool's use in a snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PoolStats {
    /// `rx`, `tx` or `large`.
    pub pool: String,
    /// Buffers.
    pub capacity: u64,
    /// Taken now.
    pub in_use: u64,
    /// Handed out (receives or allocations).
    pub allocs: u64,
    /// Handed out again: the same pages reused for a new frame.
    pub reuses: u64,
    /// Handed out for the first time.
    pub first_touches: u64,
    /// Distinct buffers ever handed out.
    pub touched: u64,
    /// `reuses / allocs` (0 before the first).
    pub reuse_ratio: f64,
    /// Bytes of the pool in 2 MiB hugepages.
    pub huge_bytes: u64,
    /// Bytes of the pool in normal pages.
    pub normal_bytes: u64,
}

/// Payload bytes copied on one path, and why.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CopyStats {
    /// Path name (`CopyPath::as_str`).
    pub path: &'static str,
    /// Why it copies.
    pub reason: &'static str,
    /// Frames copied.
    pub frames: u64,
    /// Bytes copied.
    pub bytes: u64,
}

/// One shard's view in a snapshot.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ShardStats {
    /// Shard name.
    pub name: String,
    /// Whether served here.
    pub local: bool,
    /// Requests routed here.
    pub requests: u64,
    /// Error frames after routing.
    pub errors: u64,
    /// Receive to start of service.
    pub queue: Percentiles,
    /// Time in the handler.
    pub service: Percentiles,
    /// Tokens generated by token streams of this shard.
    pub tokens: u64,
    /// Token streams: time to first token.
    pub ttft: Percentiles,
    /// Token streams: inter-token latency.
    pub itl: Percentiles,
}

/// One worker's view in a snapshot.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WorkerStats {
    /// Worker index.
    pub index: usize,
    /// Pinned core.
    pub core: usize,
    /// Snapshot epoch in use.
    pub epoch: u64,
    /// Responses sent.
    pub ok: u64,
    /// Error frames by code name.
    pub errors: Vec<(String, u64)>,
    /// Refusals by cause name (docs/operations.md, "Refusals").
    pub refusals: Vec<(String, u64)>,
    /// Pings.
    pub pings: u64,
    /// Negotiations.
    pub negotiations: u64,
    /// Streams.
    pub streams: StreamStats,
    /// Replay check (docs/wire.md, "Replay windows").
    pub replay: ReplayStats,
    /// Token streams.
    pub tokens: TokenStats,
    /// Non-Sluice datagrams dropped.
    pub not_sluice: u64,
    /// Frames dropped for lack of a transmit buffer.
    pub tx_no_buffers: u64,
    /// Payload bytes copied.
    pub payload_bytes_copied: u64,
    /// Requests forwarded to peers.
    pub forwarded: u64,
    /// Peer answers relayed.
    pub relayed: u64,
    /// Forwards that timed out.
    pub forward_timeouts: u64,
    /// Late or unknown peer answers dropped.
    pub forward_stale: u64,
    /// Frames received.
    pub rx_frames: u64,
    /// Frames sent.
    pub tx_frames: u64,
    /// Receives lost for lack of buffers.
    pub rx_no_buffers: u64,
    /// Send errors.
    pub tx_errors: u64,
    /// Receive buffers in use.
    pub rx_in_use: u64,
    /// Transmit buffers in use.
    pub tx_in_use: u64,
    /// Buffer reuses.
    pub buffer_reuses: u64,
    /// Times slept (adaptive mode).
    pub sleeps: u64,
    /// Datagrams the kernel dropped in the socket queue (SO_RXQ_OVFL).
    pub rx_kernel_drops: u64,
    /// Whether the worker serves (false while down after a panic, once
    /// stopped, or once failed for good).
    pub alive: bool,
    /// Panics caught in the worker's loop.
    pub panics: u64,
    /// Restarts of the loop after a panic.
    pub restarts: u64,
    /// Restarting with back-off (it failed again soon after a restart).
    pub crash_looping: bool,
    /// Buffer pools: use, reuse, pages.
    pub pools: Vec<PoolStats>,
    /// Payload bytes copied, by path and reason.
    pub copies: Vec<CopyStats>,
    /// Span records of traced requests pushed to the ring.
    pub spans_recorded: u64,
    /// Span records dropped (ring full).
    pub spans_dropped: u64,
    /// Traced requests held past their burst when the held table was
    /// full: their spans carry no run times.
    pub spans_unheld: u64,
    /// Receive to reply.
    pub latency: Percentiles,
    /// Per shard.
    pub shards: Vec<ShardStats>,
}

/// A histogram with fixed buckets: `counts[i]` values at most
/// `bounds[i]` (and above `bounds[i-1]`); the last count is above every bound.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Buckets {
    /// Upper bounds, ascending.
    pub bounds: Vec<u64>,
    /// Values per bucket (not cumulative), `bounds.len() + 1` entries.
    pub counts: Vec<u64>,
    /// Sum of the values (in the unit the histogram names).
    pub sum: u64,
}

impl Buckets {
    fn add(&mut self, bounds: &[u64], counts: &[AtomicU64], sum: u64) {
        if self.bounds.is_empty() {
            self.bounds = bounds.to_vec();
            self.counts = vec![0; counts.len()];
        }
        for (a, c) in self.counts.iter_mut().zip(counts) {
            *a += c.load(Relaxed);
        }
        self.sum += sum;
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// One model version's view in a snapshot, merged over workers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ModelStats {
    /// Model name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Requests answered by a run (Triton's `nv_inference_request_success`).
    pub requests: u64,
    /// Rows of those requests (`nv_inference_count`).
    pub inferences: u64,
    /// Model executions, single or batched (`nv_inference_exec_count`).
    pub executions: u64,
    /// Batched runs that failed and were retried one request at a time.
    pub batch_fallbacks: u64,
    /// Executions by rows run; `sum` is the rows.
    pub batch_size: Buckets,
    /// Requests by queue delay in µs (receive to start of their run);
    /// `sum` is in ns.
    pub queue_delay_us: Buckets,
    /// Token streams: tokens, time to first token, inter-token latency.
    pub tokens: ModelTokenStats,
}

impl ModelStats {
    /// Adds one worker's counters of this model's slot.
    pub fn add(&mut self, c: &ModelCounters) {
        let ld = |a: &AtomicU64| a.load(Relaxed);
        self.requests += ld(&c.requests);
        self.inferences += ld(&c.inferences);
        self.executions += ld(&c.executions);
        self.batch_fallbacks += ld(&c.batch_fallbacks);
        self.batch_size
            .add(&BATCH_SIZE_BOUNDS, &c.batch_size, ld(&c.inferences));
        self.queue_delay_us.add(
            &QUEUE_DELAY_BOUNDS_US,
            &c.queue_delay,
            ld(&c.queue_delay_ns),
        );
        self.tokens.add(&c.tokens);
    }
}

/// A statistics snapshot of the whole engine.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StatsSnapshot {
    /// Per worker.
    pub workers: Vec<WorkerStats>,
    /// Per shard, merged over workers.
    pub shards: Vec<ShardStats>,
    /// Merged receive-to-reply latency.
    pub latency: Percentiles,
    /// Per loaded model version, merged over workers: runs, batch sizes,
    /// queue delays.
    pub models: Vec<ModelStats>,
    /// LoRA adapters loaded on demand and evicted, all models and workers
    /// of the process.
    pub adapter_cache: AdapterCacheStats,
}

/// The adapter caches' counters (process-wide; zero without ONNX models).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct AdapterCacheStats {
    /// Adapters loaded on demand (cache misses that loaded).
    pub loads: u64,
    /// Adapters evicted (least recently used) to make room.
    pub evictions: u64,
    /// Misses whose adapter file could not be loaded (the request got
    /// `inference_failed`).
    pub load_failures: u64,
}

impl StatsSnapshot {
    /// Sum of a counter over workers.
    pub fn total(&self, f: impl Fn(&WorkerStats) -> u64) -> u64 {
        self.workers.iter().map(f).sum()
    }

    /// Error frames with `code`, over all workers.
    pub fn errors(&self, code: ErrorCode) -> u64 {
        self.workers
            .iter()
            .flat_map(|w| w.errors.iter())
            .filter(|(n, _)| n == code.as_str())
            .map(|(_, v)| *v)
            .sum()
    }
}

/// Counters summed over workers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Responses sent.
    pub ok: u64,
    /// Error frames sent.
    pub errors: u64,
    /// Pings answered.
    pub pings: u64,
    /// Foreign datagrams dropped.
    pub not_sluice: u64,
    /// Frames received.
    pub rx_frames: u64,
    /// Frames sent.
    pub tx_frames: u64,
    /// Receives lost for lack of buffers.
    pub rx_no_buffers: u64,
    /// Frames dropped for lack of a transmit buffer.
    pub tx_no_buffers: u64,
    /// Payload bytes copied by handlers.
    pub payload_bytes_copied: u64,
    /// Buffer reuses.
    pub buffer_reuses: u64,
    /// Datagrams the kernel dropped in socket queues (SO_RXQ_OVFL).
    pub rx_kernel_drops: u64,
    /// Workers down now because their loop failed: restarting, backing
    /// off, or down for good.
    pub workers_failed: u64,
    /// Restarts of worker loops after a panic.
    pub worker_restarts: u64,
}
