//! What the engine reports: status and statistics, read from per-worker
//! atomics and published histograms, never from a worker's hot path.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use serde::Serialize;
use sluice_wire::ErrorCode;

use super::*;
use crate::config::{ModelKind, TransportKind};
use crate::stats::{Percentiles, ShardStats, StatsSnapshot, WorkerStats};

/// What `status` reports.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Running or not.
    pub running: bool,
    /// Transport.
    pub transport: String,
    /// Data-plane address.
    pub listen: Option<SocketAddr>,
    /// TCP address (io_uring with `tcp_listen`), beside `listen`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_listen: Option<SocketAddr>,
    /// Workers and their cores.
    pub workers: Vec<WorkerStatus>,
    /// Whether the buffer pools are in hugepages (false = fell back).
    pub hugepages: bool,
    /// A note when the pools fell back to normal pages.
    pub hugepages_note: Option<String>,
    /// Snapshot epoch published.
    pub epoch: u64,
    /// Loaded models.
    pub models: Vec<ModelStatus>,
    /// Schemas held by the data plane.
    pub schemas: usize,
    /// Live schemas the data plane does not fully enforce: "id 7 v2: why".
    /// Requests naming a schema it cannot compile at all are refused.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub schemas_unenforced: Vec<String>,
    /// The KServe v2 / Triton front door, when running: bound addresses
    /// and counters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frontdoor: Option<FrontdoorStatus>,
}

/// The front door in `status`.
#[derive(Debug, Clone, Serialize)]
pub struct FrontdoorStatus {
    /// HTTP address.
    pub http: Option<SocketAddr>,
    /// gRPC address.
    pub grpc: Option<SocketAddr>,
    /// Counters (requests, refusals, bytes copied per path).
    pub stats: serde_json::Value,
    /// Backend pools, endpoints and models (docs/backends.md), when any.
    #[serde(skip_serializing_if = "serde_json::Value::is_null")]
    pub backends: serde_json::Value,
}

/// One worker in `status`.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerStatus {
    /// Index.
    pub index: usize,
    /// Core.
    pub core: usize,
    /// Epoch it runs on.
    pub epoch: u64,
    /// Serving. False while it is down after a panic (restarting or
    /// backing off), once it failed for good, or once the engine stopped.
    pub alive: bool,
    /// Panics caught in its loop.
    pub panics: u64,
    /// Restarts of its loop after a panic.
    pub restarts: u64,
    /// Restarting with back-off: it failed again within
    /// `CRASH_WINDOW_MS` of a restart, and has not run that long since.
    pub crash_looping: bool,
    /// Down for good: recovering from a panic failed too.
    pub failed: bool,
    /// Why it last failed, when it has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// When it last failed, ms since the Unix epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_at_ms: Option<u64>,
}

/// One model in `status`.
#[derive(Debug, Clone, Serialize)]
pub struct ModelStatus {
    /// Name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Aliases.
    pub aliases: Vec<String>,
    /// Backend.
    pub kind: ModelKind,
    /// Adapters.
    pub adapters: Vec<String>,
}

impl Engine {
    /// A statistics snapshot. Reads per-worker atomics and the latest
    /// published histograms; never touches a worker's hot path.
    pub fn stats(&self) -> StatsSnapshot {
        let (_, tables) = self.shared.tables.load();
        let nshards = tables.shards.len();
        // Merge only what exists: histograms cost a few KiB each to set up.
        let mut merged_total = crate::stats::new_hist();
        let mut merged_queue: Vec<_> = (0..nshards).map(|_| crate::stats::new_hist()).collect();
        let mut merged_service: Vec<_> = (0..nshards).map(|_| crate::stats::new_hist()).collect();
        let mut merged_ttft: Vec<_> = (0..nshards).map(|_| crate::stats::new_hist()).collect();
        let mut merged_itl: Vec<_> = (0..nshards).map(|_| crate::stats::new_hist()).collect();
        let mut snap = StatsSnapshot::default();
        for (i, w) in self.workers.iter().enumerate() {
            let c = &w.counters;
            let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            let errors = ErrorCode::ALL
                .iter()
                .map(|&code| (code.as_str().to_string(), ld(&c.errors[code as usize])))
                .filter(|(_, v)| *v > 0)
                .collect();
            let refusals = crate::vocab::Cause::ALL
                .iter()
                .map(|&k| (k.as_str().to_string(), ld(&c.refusals[k as usize])))
                .filter(|(_, v)| *v > 0)
                .collect();
            let mut ws = WorkerStats {
                index: i,
                core: w.core,
                epoch: ld(&c.epoch),
                ok: ld(&c.ok),
                errors,
                refusals,
                pings: ld(&c.pings),
                negotiations: ld(&c.negotiations),
                streams: crate::stats::StreamStats {
                    opened: ld(&c.streams.opened),
                    ended: ld(&c.streams.ended),
                    reclaimed: ld(&c.streams.reclaimed),
                    refused: ld(&c.streams.refused),
                    steps: ld(&c.streams.steps),
                    open: ld(&c.streams.open),
                    moved: ld(&c.streams.moved),
                },
                tokens: crate::stats::TokenStats::of(&c.tokens, &c.tenant_tokens),
                replay: c.replay.read(),
                not_sluice: ld(&c.not_sluice),
                tx_no_buffers: ld(&c.tx_no_buffers),
                payload_bytes_copied: ld(&c.payload_bytes_copied),
                forwarded: ld(&c.forwarded),
                relayed: ld(&c.relayed),
                forward_timeouts: ld(&c.forward_timeouts),
                forward_stale: ld(&c.forward_stale),
                rx_frames: ld(&c.rx_frames),
                tx_frames: ld(&c.tx_frames),
                rx_no_buffers: ld(&c.rx_no_buffers),
                tx_errors: ld(&c.tx_errors),
                rx_in_use: ld(&c.rx_in_use),
                tx_in_use: ld(&c.tx_in_use),
                buffer_reuses: ld(&c.buffer_reuses),
                sleeps: ld(&c.sleeps),
                rx_kernel_drops: ld(&c.rx_kernel_drops),
                alive: c.alive.load(Ordering::Acquire),
                panics: ld(&c.panics),
                restarts: ld(&c.restarts),
                crash_looping: c.crash_looping.load(Ordering::Relaxed),
                pools: c.pool_stats(),
                copies: c.copies(),
                spans_recorded: ld(&c.spans_recorded),
                spans_dropped: ld(&c.spans_dropped),
                spans_unheld: ld(&c.spans_unheld),
                ..WorkerStats::default()
            };
            w.hist.read(|h| {
                ws.latency = Percentiles::of(&h.total);
                let _ = merged_total.add(&h.total);
                for s in 0..nshards {
                    let _ = merged_queue[s].add(&h.queue[s]);
                    let _ = merged_service[s].add(&h.service[s]);
                    let _ = merged_ttft[s].add(&h.ttft[s]);
                    let _ = merged_itl[s].add(&h.itl[s]);
                    ws.shards.push(ShardStats {
                        name: tables.shards[s].name.clone(),
                        local: tables.shards[s].local,
                        requests: ld(&c.shard_requests[s]),
                        errors: ld(&c.shard_errors[s]),
                        queue: Percentiles::of(&h.queue[s]),
                        service: Percentiles::of(&h.service[s]),
                        tokens: ld(&c.tokens.shard_tokens[s]),
                        ttft: Percentiles::of(&h.ttft[s]),
                        itl: Percentiles::of(&h.itl[s]),
                    });
                }
            });
            snap.workers.push(ws);
        }
        snap.latency = Percentiles::of(&merged_total);
        snap.adapter_cache = crate::onnx::adapter_cache_stats();
        for m in tables.models.entries() {
            let mut ms = crate::stats::ModelStats {
                name: m.name.clone(),
                version: m.version.clone(),
                ..Default::default()
            };
            for w in &self.workers {
                if let Some(c) = w.counters.models.get(m.slot) {
                    ms.add(c);
                }
            }
            snap.models.push(ms);
        }
        for s in 0..nshards {
            snap.shards.push(ShardStats {
                name: tables.shards[s].name.clone(),
                local: tables.shards[s].local,
                requests: self
                    .workers
                    .iter()
                    .map(|w| w.counters.shard_requests[s].load(Ordering::Relaxed))
                    .sum(),
                errors: self
                    .workers
                    .iter()
                    .map(|w| w.counters.shard_errors[s].load(Ordering::Relaxed))
                    .sum(),
                queue: Percentiles::of(&merged_queue[s]),
                service: Percentiles::of(&merged_service[s]),
                tokens: self
                    .workers
                    .iter()
                    .map(|w| w.counters.tokens.shard_tokens[s].load(Ordering::Relaxed))
                    .sum(),
                ttft: Percentiles::of(&merged_ttft[s]),
                itl: Percentiles::of(&merged_itl[s]),
            });
        }
        snap
    }

    /// Counters summed over workers and the merged latency, without the
    /// per-shard breakdown: the cheapest read.
    pub fn totals(&self) -> (u64, crate::stats::Totals, Percentiles) {
        let mut t = crate::stats::Totals::default();
        let mut merged = crate::stats::new_hist();
        for w in &self.workers {
            let c = &w.counters;
            let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            t.ok += ld(&c.ok);
            t.errors += c.errors.iter().map(ld).sum::<u64>();
            t.pings += ld(&c.pings);
            t.not_sluice += ld(&c.not_sluice);
            t.rx_frames += ld(&c.rx_frames);
            t.tx_frames += ld(&c.tx_frames);
            t.rx_no_buffers += ld(&c.rx_no_buffers);
            t.tx_no_buffers += ld(&c.tx_no_buffers);
            t.payload_bytes_copied += ld(&c.payload_bytes_copied);
            t.buffer_reuses += ld(&c.buffer_reuses);
            t.rx_kernel_drops += ld(&c.rx_kernel_drops);
            t.workers_failed += u64::from(ld(&c.panics) > 0 && !c.alive.load(Ordering::Acquire));
            t.worker_restarts += ld(&c.restarts);
            w.hist.read(|h| {
                let _ = merged.add(&h.total);
            });
        }
        (self.shared.tables.epoch(), t, Percentiles::of(&merged))
    }

    /// Status for the admin API.
    pub fn status(&self) -> Status {
        let ctl = self.lock_control().ok();
        let models = ctl
            .as_ref()
            .map(|c| {
                c.live
                    .models
                    .iter()
                    .map(|m| ModelStatus {
                        name: m.name.clone(),
                        version: m.version.clone(),
                        aliases: m.aliases.clone(),
                        kind: m.kind,
                        adapters: m.adapters.iter().map(|a| a.id.clone()).collect(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let schemas = ctl.as_ref().map_or(0, |c| c.schemas.len());
        let (_, tables) = self.shared.tables.load();
        let schemas_unenforced = tables
            .schemas
            .unenforced()
            .into_iter()
            .map(|(id, v, why)| format!("id {id} v{v}: {}", why.join("; ")))
            .collect();
        Status {
            running: self.is_running(),
            transport: match self.cfg.engine.transport {
                TransportKind::IoUring => "io_uring",
                TransportKind::Dpdk => "dpdk",
                TransportKind::Rdma => "rdma",
            }
            .to_string(),
            listen: self.listen,
            frontdoor: self.frontdoor.as_ref().map(|h| FrontdoorStatus {
                http: h.http_addr(),
                grpc: h.grpc_addr(),
                stats: h.stats_json(),
                backends: h.backends_json(),
            }),
            tcp_listen: self.tcp_local_addr(),
            workers: self
                .workers
                .iter()
                .enumerate()
                .map(|(i, w)| WorkerStatus {
                    index: i,
                    core: w.core,
                    epoch: w.counters.epoch.load(Ordering::Relaxed),
                    alive: w.counters.alive.load(Ordering::Acquire),
                    panics: w.counters.panics.load(Ordering::Relaxed),
                    restarts: w.counters.restarts.load(Ordering::Relaxed),
                    crash_looping: w.counters.crash_looping.load(Ordering::Relaxed),
                    failed: w.counters.failed.load(Ordering::Acquire),
                    failure: w.counters.failure.lock().ok().and_then(|f| f.clone()),
                    failure_at_ms: Some(w.counters.failure_at_ms.load(Ordering::Relaxed))
                        .filter(|&t| t != 0),
                })
                .collect(),
            hugepages: self.hugepages,
            hugepages_note: (!self.hugepages && self.is_running())
                .then(|| "no 2 MiB hugepages were free: buffer pools use normal pages".to_string()),
            epoch: self.shared.tables.epoch(),
            models,
            schemas,
            schemas_unenforced,
        }
    }
}
