//! Counters per pool and per model (relaxed atomics, read by status, the
//! Go daemon's metrics, `sluicectl status` and the heatmap page).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::hist::Hist;
use crate::pool::Backends;

/// Why an attempt or a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The connection could not be made.
    Connect,
    /// No answer (or no first byte) before the deadline.
    Timeout,
    /// The endpoint answered 5xx.
    Status5xx,
    /// The endpoint answered 4xx (the request's fault: passed on, not an
    /// endpoint failure).
    Status4xx,
    /// The answer was not what the protocol says (not JSON, a cut body).
    Garbage,
    /// A stream ended without its end (the endpoint went away mid-stream).
    StreamCut,
    /// No endpoint serves the model, or none is available.
    Unavailable,
    /// Every place taken and the queue full (429).
    QueueFull,
    /// The client went away: the upstream request was cancelled.
    Cancelled,
}

/// A pool's counters.
#[derive(Debug, Default)]
pub struct PoolStats {
    /// Requests dispatched to the pool (not attempts).
    pub requests: AtomicU64,
    /// Requests answered 2xx.
    pub ok: AtomicU64,
    /// Attempts retried on another endpoint.
    pub retries: AtomicU64,
    /// Failures by cause.
    pub connect: AtomicU64,
    /// ...
    pub timeout: AtomicU64,
    /// ...
    pub status_5xx: AtomicU64,
    /// ...
    pub status_4xx: AtomicU64,
    /// ...
    pub garbage: AtomicU64,
    /// ...
    pub stream_cut: AtomicU64,
    /// ...
    pub unavailable: AtomicU64,
    /// ...
    pub queue_full: AtomicU64,
    /// ...
    pub cancelled: AtomicU64,
    /// Whole-request latency at Sluice (first byte sent upstream to the
    /// last byte relayed).
    pub latency: Hist,
    /// Time to the first token (streams): upstream send to the first
    /// event with content.
    pub ttft: Hist,
    /// Time between two token events (streams).
    pub itl: Hist,
}

impl PoolStats {
    /// Counts a failure.
    pub fn failed(&self, c: Cause) {
        let n = match c {
            Cause::Connect => &self.connect,
            Cause::Timeout => &self.timeout,
            Cause::Status5xx => &self.status_5xx,
            Cause::Status4xx => &self.status_4xx,
            Cause::Garbage => &self.garbage,
            Cause::StreamCut => &self.stream_cut,
            Cause::Unavailable => &self.unavailable,
            Cause::QueueFull => &self.queue_full,
            Cause::Cancelled => &self.cancelled,
        };
        n.fetch_add(1, Ordering::Relaxed);
    }
}

/// A model's counters (its upstream name), over every pool.
#[derive(Debug, Default)]
pub struct ModelStats {
    /// Requests.
    pub requests: AtomicU64,
    /// Whole-request latency.
    pub latency: Hist,
    /// Time to the first token.
    pub ttft: Hist,
    /// Time between tokens.
    pub itl: Hist,
}

fn g(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

impl Backends {
    /// Every pool, endpoint and model, for status pages.
    pub fn to_json(&self) -> serde_json::Value {
        let now = self.now_ms();
        let pools: Vec<_> = self
            .pools
            .iter()
            .map(|p| {
                let s = &p.stats;
                let eps: Vec<_> = p
                    .endpoints()
                    .iter()
                    .map(|e| {
                        serde_json::json!({
                            "url": e.url,
                            "healthy": e.healthy(),
                            "ejected": e.ejected(now),
                            "draining": e.draining(),
                            "in_flight": e.in_flight(),
                            "requests": g(&e.stats.requests),
                            "failures": g(&e.stats.failures),
                            "ejections": g(&e.stats.ejections),
                            "models": *e.models(),
                        })
                    })
                    .collect();
                serde_json::json!({
                    "name": p.cfg.name,
                    "protocol": p.cfg.protocol,
                    "labels": p.cfg.labels,
                    "max_concurrency": p.cfg.max_concurrency,
                    "queue_depth": p.cfg.queue_depth,
                    "waiting": p.waiting(),
                    "requests": g(&s.requests),
                    "ok": g(&s.ok),
                    "retries": g(&s.retries),
                    "errors": {
                        "connect": g(&s.connect),
                        "timeout": g(&s.timeout),
                        "status_5xx": g(&s.status_5xx),
                        "status_4xx": g(&s.status_4xx),
                        "garbage": g(&s.garbage),
                        "stream_cut": g(&s.stream_cut),
                        "unavailable": g(&s.unavailable),
                        "queue_full": g(&s.queue_full),
                        "cancelled": g(&s.cancelled),
                    },
                    "latency": s.latency.to_json(),
                    "ttft": s.ttft.to_json(),
                    "itl": s.itl.to_json(),
                    "endpoints": eps,
                })
            })
            .collect();
        let models: serde_json::Map<String, serde_json::Value> = self
            .model_list()
            .map(|(n, m)| {
                (
                    n.to_owned(),
                    serde_json::json!({
                        "requests": g(&m.requests),
                        "latency": m.latency.to_json(),
                        "ttft": m.ttft.to_json(),
                        "itl": m.itl.to_json(),
                    }),
                )
            })
            .collect();
        serde_json::json!({ "pools": pools, "models": models })
    }
}
