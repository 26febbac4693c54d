//! Token-stream metrics, as vLLM and TGI report them: time to first token
//! and inter-token latency (per shard as histograms, per model as fixed
//! buckets), tokens generated per tenant, shard and model, streams running
//! (and in prefill). Written by one worker, read by snapshots.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::Serialize;

use super::{Buckets, bump};
use crate::config::limits::SHARD_COUNT_MAX;
use crate::streams::GenTally;

/// Upper bounds of the per-model token latency buckets, µs.
pub const TOKEN_LATENCY_BOUNDS_US: [u64; 12] = [
    50, 100, 250, 500, 1000, 2500, 5000, 10_000, 25_000, 100_000, 250_000, 1_000_000,
];

/// Tenants whose tokens a worker counts one by one; the rest are summed
/// under tenant id `u32::MAX` (a fixed table: no allocation on the path).
pub const TENANT_TOKEN_SLOTS: usize = 256;

const END_REASONS: [&str; 7] = [
    "none",
    "eos",
    "max_tokens",
    "deadline",
    "cancelled",
    "client",
    "error",
];

/// A worker's token-stream counts.
#[derive(Debug, Default)]
pub struct TokenCounters {
    /// Tokens generated.
    pub tokens: AtomicU64,
    /// Steps run (prompt and decode).
    pub steps: AtomicU64,
    /// Token frames sent.
    pub frames: AtomicU64,
    /// Model calls the steps took (fewer than steps when batched).
    pub runs: AtomicU64,
    /// Token streams ended because their connection closed.
    pub conn_closed: AtomicU64,
    /// State bytes copied into and out of batch buffers.
    pub state_bytes_copied: AtomicU64,
    /// Token streams ended, by end reason.
    pub ended: [AtomicU64; 7],
    /// Token streams generating after the last iteration (a gauge).
    pub running: AtomicU64,
    /// Of those, streams still in their prompt (a gauge).
    pub prefill: AtomicU64,
    /// Tokens per shard.
    pub shard_tokens: [AtomicU64; SHARD_COUNT_MAX],
}

impl TokenCounters {
    /// Adds one model's iteration.
    pub fn add(&self, t: &GenTally) {
        bump(&self.tokens, t.tokens);
        bump(&self.steps, t.steps);
        bump(&self.frames, t.frames);
        bump(&self.runs, t.runs);
        bump(&self.conn_closed, t.conn_closed);
        bump(&self.state_bytes_copied, t.state_bytes_copied);
        for (a, &n) in self.ended.iter().zip(&t.ended) {
            bump(a, n);
        }
    }

    /// Sets the gauges after an iteration over every model.
    pub fn set_running(&self, running: u64, prefill: u64) {
        self.running.store(running, Relaxed);
        self.prefill.store(prefill, Relaxed);
    }
}

/// Tokens per tenant on one worker: open addressing over a fixed table.
#[derive(Debug)]
pub struct TenantTokens {
    /// Tenant id + 1 (0: empty).
    keys: Box<[AtomicU64]>,
    counts: Box<[AtomicU64]>,
}

impl Default for TenantTokens {
    fn default() -> Self {
        TenantTokens {
            keys: (0..TENANT_TOKEN_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            counts: (0..TENANT_TOKEN_SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl TenantTokens {
    /// Counts `n` tokens of `tenant` (only the worker writes).
    pub fn add(&self, tenant: u32, n: u64) {
        let key = u64::from(tenant) + 1;
        let cap = self.keys.len();
        let mut at = (tenant as usize).wrapping_mul(0x9e37_79b9) % cap;
        for _ in 0..cap {
            let k = self.keys[at].load(Relaxed);
            if k == key {
                bump(&self.counts[at], n);
                return;
            }
            if k == 0 {
                self.keys[at].store(key, Relaxed);
                bump(&self.counts[at], n);
                return;
            }
            at = (at + 1) % cap;
        }
        // Full: the last slot sums the rest.
        self.keys[cap - 1].store(u64::from(u32::MAX) + 1, Relaxed);
        bump(&self.counts[cap - 1], n);
    }

    /// (tenant, tokens) pairs with tokens, for a snapshot.
    pub fn read(&self, into: &mut Vec<(u32, u64)>) {
        for (k, c) in self.keys.iter().zip(self.counts.iter()) {
            let (k, c) = (k.load(Relaxed), c.load(Relaxed));
            if k == 0 || c == 0 {
                continue;
            }
            let t = (k - 1) as u32;
            match into.iter_mut().find(|(x, _)| *x == t) {
                Some(e) => e.1 += c,
                None => into.push((t, c)),
            }
        }
    }
}

/// One model slot's token counters on one worker.
#[derive(Debug, Default)]
pub struct ModelTokenCounters {
    /// Tokens generated.
    pub tokens: AtomicU64,
    /// Time to first token, by [`TOKEN_LATENCY_BOUNDS_US`].
    pub ttft: [AtomicU64; TOKEN_LATENCY_BOUNDS_US.len() + 1],
    /// Sum of times to first token, µs.
    pub ttft_sum_us: AtomicU64,
    /// Inter-token latency, by [`TOKEN_LATENCY_BOUNDS_US`].
    pub itl: [AtomicU64; TOKEN_LATENCY_BOUNDS_US.len() + 1],
    /// Sum of inter-token latencies, µs.
    pub itl_sum_us: AtomicU64,
}

impl ModelTokenCounters {
    /// Counts one token and its latency.
    pub fn token(&self, first: bool, us: u64) {
        bump(&self.tokens, 1);
        let b = super::bucket(&TOKEN_LATENCY_BOUNDS_US, us);
        if first {
            bump(&self.ttft[b], 1);
            bump(&self.ttft_sum_us, us);
        } else {
            bump(&self.itl[b], 1);
            bump(&self.itl_sum_us, us);
        }
    }
}

/// A model's token counts in a snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ModelTokenStats {
    /// Tokens generated.
    pub tokens: u64,
    /// Time to first token, µs buckets (`sum` in µs).
    pub ttft_us: Buckets,
    /// Inter-token latency, µs buckets (`sum` in µs).
    pub itl_us: Buckets,
}

impl ModelTokenStats {
    /// Adds one worker's counters.
    pub fn add(&mut self, c: &ModelTokenCounters) {
        self.tokens += c.tokens.load(Relaxed);
        self.ttft_us.add(
            &TOKEN_LATENCY_BOUNDS_US,
            &c.ttft,
            c.ttft_sum_us.load(Relaxed),
        );
        self.itl_us
            .add(&TOKEN_LATENCY_BOUNDS_US, &c.itl, c.itl_sum_us.load(Relaxed));
    }
}

/// A worker's token streams in a snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TokenStats {
    /// Tokens generated.
    pub tokens: u64,
    /// Steps run.
    pub steps: u64,
    /// Token frames sent.
    pub frames: u64,
    /// Model calls the steps took (fewer than steps when batched).
    pub runs: u64,
    /// Streams ended because their connection closed.
    pub conn_closed: u64,
    /// State bytes copied into and out of batch buffers.
    pub state_bytes_copied: u64,
    /// Streams generating now.
    pub running: u64,
    /// Of those, in their prompt.
    pub prefill: u64,
    /// Streams ended, by reason (reasons never seen left out).
    pub ended: Vec<(String, u64)>,
    /// Tokens per tenant id.
    pub by_tenant: Vec<(u32, u64)>,
}

impl TokenStats {
    /// Reads a worker's counters.
    pub fn of(c: &TokenCounters, tenants: &TenantTokens) -> TokenStats {
        let ld = |a: &AtomicU64| a.load(Relaxed);
        let mut by_tenant = Vec::new();
        tenants.read(&mut by_tenant);
        by_tenant.sort_unstable();
        TokenStats {
            tokens: ld(&c.tokens),
            steps: ld(&c.steps),
            frames: ld(&c.frames),
            runs: ld(&c.runs),
            conn_closed: ld(&c.conn_closed),
            state_bytes_copied: ld(&c.state_bytes_copied),
            running: ld(&c.running),
            prefill: ld(&c.prefill),
            ended: END_REASONS
                .iter()
                .zip(&c.ended)
                .map(|(n, a)| (n.to_string(), ld(a)))
                .filter(|(_, v)| *v > 0)
                .collect(),
            by_tenant,
        }
    }
}
