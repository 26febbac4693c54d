//! Pools and the choice of an endpoint: among the endpoints of the pools
//! whose labels a shard's match, that serve the model, are healthy, not
//! ejected, not draining and below `max_concurrency`, the one with the
//! fewest requests in flight (ties rotate). When none has room, the request
//! waits, at most `queue_depth` per pool, until a place frees or its
//! deadline passes; beyond that it is refused `busy` (HTTP 429).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use sluice_engine::config::backends::parse_endpoint;
use sluice_engine::config::{BackendCfg, BackendProtocol};
use tokio::sync::Notify;

use crate::endpoint::Endpoint;
use crate::stats::{ModelStats, PoolStats};

/// One `[[backends]]` pool.
#[derive(Debug)]
pub struct Pool {
    /// As configured.
    pub cfg: BackendCfg,
    /// Its endpoints.
    pub endpoints: Vec<Endpoint>,
    /// Requests waiting for a place now.
    waiting: AtomicU32,
    /// Counters.
    pub stats: PoolStats,
    /// Retries taken (for the budget).
    retries_taken: AtomicU64,
}

impl Pool {
    fn new(cfg: BackendCfg) -> Result<Pool, String> {
        let mut endpoints = Vec::with_capacity(cfg.endpoints.len());
        for u in &cfg.endpoints {
            let parsed = parse_endpoint(u).map_err(|m| format!("{u}: {m}"))?;
            endpoints.push(Endpoint::new(u, parsed, cfg.models.clone())?);
        }
        Ok(Pool {
            cfg,
            endpoints,
            waiting: AtomicU32::new(0),
            stats: PoolStats::default(),
            retries_taken: AtomicU64::new(0),
        })
    }

    /// Whether it carries every label of `shard`.
    pub fn matches(&self, shard: &BTreeMap<String, String>) -> bool {
        shard
            .iter()
            .all(|(k, v)| self.cfg.labels.get(k).is_some_and(|x| x == v))
    }

    /// Requests waiting for a place.
    pub fn waiting(&self) -> u32 {
        self.waiting.load(Ordering::Acquire)
    }

    /// Takes one retry from the budget: at most `retry_budget_pct` of the
    /// pool's requests are retries.
    pub fn take_retry(&self) -> bool {
        let requests = self.stats.requests.load(Ordering::Relaxed);
        let pct = u64::from(self.cfg.retry_budget_pct);
        // At least one retry while the pool is young, unless retries are off.
        let allowed = if pct == 0 {
            0
        } else {
            (requests * pct / 100).max(1)
        };
        self.retries_taken
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < allowed).then_some(n + 1)
            })
            .is_ok()
    }
}

/// Why no endpoint was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoEndpoint {
    /// No pool carries the shard's labels and serves the model.
    NotServed,
    /// Every endpoint that serves it is unhealthy, ejected or draining.
    Unavailable,
    /// Every place is taken and the queue is full.
    QueueFull,
    /// The deadline passed while waiting.
    Deadline,
}

/// A place at an endpoint, held while its request runs; dropped, it gives
/// the place back and wakes the requests waiting.
#[derive(Debug)]
pub struct Lease {
    backends: Arc<Backends>,
    /// The pool.
    pub pool: usize,
    /// The endpoint in it.
    pub endpoint: usize,
}

impl Lease {
    /// The pool.
    pub fn pool(&self) -> &Pool {
        &self.backends.pools[self.pool]
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &Endpoint {
        &self.pool().endpoints[self.endpoint]
    }

    /// The per-model counters of `model` (upstream name), if kept.
    pub fn model_stats(&self, model: &str) -> Option<&ModelStats> {
        self.backends.model_stats(model)
    }

    /// Milliseconds on the backends' clock.
    pub fn now_ms(&self) -> u64 {
        self.backends.now_ms()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.endpoint().give_back();
        self.backends.freed.notify_waiters();
    }
}

/// Every pool.
#[derive(Debug)]
pub struct Backends {
    /// The pools, in config order.
    pub pools: Vec<Pool>,
    /// Per upstream model name.
    models: Vec<(String, ModelStats)>,
    freed: Notify,
    rr: AtomicUsize,
    epoch: Instant,
}

impl Backends {
    /// Pools from `[[backends]]`; `models` are the upstream names kept
    /// per-model counters for.
    pub fn new(cfgs: &[BackendCfg], models: &[String]) -> Result<Arc<Backends>, String> {
        let pools = cfgs
            .iter()
            .map(|c| Pool::new(c.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut names: Vec<String> = models.to_vec();
        names.sort();
        names.dedup();
        Ok(Arc::new(Backends {
            pools,
            models: names
                .into_iter()
                .map(|n| (n, ModelStats::default()))
                .collect(),
            freed: Notify::new(),
            rr: AtomicUsize::new(0),
            epoch: Instant::now(),
        }))
    }

    /// Milliseconds since the pools were made.
    pub fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The per-model counters of an upstream name.
    pub fn model_stats(&self, model: &str) -> Option<&ModelStats> {
        self.models.iter().find(|(n, _)| n == model).map(|(_, s)| s)
    }

    /// Every upstream model name with its counters.
    pub fn model_list(&self) -> impl Iterator<Item = (&str, &ModelStats)> {
        self.models.iter().map(|(n, s)| (n.as_str(), s))
    }

    /// The pools speaking `protocol` that carry `labels` and list or
    /// discovered `model`.
    pub fn serving(
        &self,
        labels: &BTreeMap<String, String>,
        model: &str,
        protocol: BackendProtocol,
    ) -> Vec<usize> {
        self.pools
            .iter()
            .enumerate()
            .filter(|(_, p)| {
                p.cfg.protocol == protocol
                    && p.matches(labels)
                    && p.endpoints.iter().any(|e| e.serves(model))
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// The least-loaded eligible endpoint of `pools` with room, not in
    /// `tried`, with its place taken.
    fn pick(
        self: &Arc<Self>,
        pools: &[usize],
        model: &str,
        tried: &[(usize, usize)],
    ) -> Result<Lease, NoEndpoint> {
        let now = self.now_ms();
        let start = self.rr.fetch_add(1, Ordering::Relaxed);
        let mut any_eligible = false;
        let mut best: Option<(u32, usize, usize)> = None;
        for &p in pools {
            let pool = &self.pools[p];
            let n = pool.endpoints.len();
            for k in 0..n {
                let e = (start + k) % n;
                let ep = &pool.endpoints[e];
                if tried.contains(&(p, e)) || !ep.eligible(model, now) {
                    continue;
                }
                any_eligible = true;
                let load = ep.in_flight();
                if load < pool.cfg.max_concurrency && best.is_none_or(|(b, _, _)| load < b) {
                    best = Some((load, p, e));
                }
            }
        }
        // The least loaded may fill between the scan and the take: try the
        // others in the same order before giving up.
        if let Some((_, p, e)) = best
            && self.pools[p].endpoints[e].try_take(self.pools[p].cfg.max_concurrency)
        {
            return Ok(self.lease(p, e));
        }
        for &p in pools {
            let pool = &self.pools[p];
            for (e, ep) in pool.endpoints.iter().enumerate() {
                if !tried.contains(&(p, e))
                    && ep.eligible(model, now)
                    && ep.try_take(pool.cfg.max_concurrency)
                {
                    return Ok(self.lease(p, e));
                }
            }
        }
        Err(if any_eligible {
            NoEndpoint::QueueFull
        } else {
            NoEndpoint::Unavailable
        })
    }

    fn lease(self: &Arc<Self>, pool: usize, endpoint: usize) -> Lease {
        Lease {
            backends: Arc::clone(self),
            pool,
            endpoint,
        }
    }

    /// A place at an endpoint of `pools` serving `model`, waiting (in the
    /// first pool's queue) until `deadline` when all are taken.
    pub async fn acquire(
        self: &Arc<Self>,
        pools: &[usize],
        model: &str,
        tried: &[(usize, usize)],
        deadline: tokio::time::Instant,
    ) -> Result<Lease, NoEndpoint> {
        let Some(&first) = pools.first() else {
            return Err(NoEndpoint::NotServed);
        };
        match self.pick(pools, model, tried) {
            Err(NoEndpoint::QueueFull) => {}
            other => return other,
        }
        let queue = &self.pools[first];
        let admitted = queue
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < queue.cfg.queue_depth).then_some(n + 1)
            })
            .is_ok();
        if !admitted {
            return Err(NoEndpoint::QueueFull);
        }
        let _waiting = Waiting(&queue.waiting);
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match self.pick(pools, model, tried) {
                Err(NoEndpoint::QueueFull) => {}
                other => return other,
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return Err(NoEndpoint::Deadline);
            }
        }
    }
}

/// Counts a waiting request until dropped.
struct Waiting<'a>(&'a AtomicU32);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn cfg(name: &str, eps: &[&str], max: u32, queue: u32, gpu: &str) -> BackendCfg {
        let toml = format!(
            "name = {name:?}\nprotocol = \"openai\"\nendpoints = {eps:?}\nmodels = [\"m\"]\nmax_concurrency = {max}\nqueue_depth = {queue}\nlabels = {{ gpu = {gpu:?} }}\n"
        );
        let c: BackendCfg = toml::from_str(&toml).unwrap();
        assert_eq!(c.protocol, BackendProtocol::Openai);
        c
    }

    fn up(b: &Backends) {
        for p in &b.pools {
            for e in &p.endpoints {
                e.set_healthy(true);
            }
        }
    }

    fn labels(gpu: &str) -> BTreeMap<String, String> {
        [("gpu".to_string(), gpu.to_string())].into()
    }

    #[tokio::test]
    async fn least_loaded_then_queue_then_busy() {
        let b = Backends::new(
            &[cfg(
                "a",
                &["http://127.0.0.1:1", "http://127.0.0.1:2"],
                1,
                1,
                "hbm2",
            )],
            &["m".into()],
        )
        .unwrap();
        up(&b);
        let pools = b.serving(&labels("hbm2"), "m", BackendProtocol::Openai);
        assert_eq!(pools, vec![0]);
        assert!(
            b.serving(&labels("gddr6"), "m", BackendProtocol::Openai)
                .is_empty()
        );
        assert!(
            b.serving(&labels("hbm2"), "other", BackendProtocol::Openai)
                .is_empty()
        );
        let far = tokio::time::Instant::now() + Duration::from_secs(5);
        let l1 = b.acquire(&pools, "m", &[], far).await.unwrap();
        let l2 = b.acquire(&pools, "m", &[], far).await.unwrap();
        assert_ne!(l1.endpoint, l2.endpoint, "the idle endpoint is chosen");
        // Both full: one waits (queue_depth 1), the next is refused.
        let b2 = Arc::clone(&b);
        let p2 = pools.clone();
        let waiter =
            tokio::spawn(async move { b2.acquire(&p2, "m", &[], far).await.map(|l| l.endpoint) });
        while b.pools[0].waiting() == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            b.acquire(&pools, "m", &[], far).await.unwrap_err(),
            NoEndpoint::QueueFull
        );
        let freed = l1.endpoint;
        drop(l1);
        assert_eq!(waiter.await.unwrap().unwrap(), freed);
        assert_eq!(b.pools[0].waiting(), 0);
        drop(l2);
    }

    #[tokio::test]
    async fn deadline_and_unavailable() {
        let b = Backends::new(&[cfg("a", &["http://127.0.0.1:1"], 1, 4, "x")], &[]).unwrap();
        let pools = b.serving(&labels("x"), "m", BackendProtocol::Openai);
        let soon = tokio::time::Instant::now() + Duration::from_millis(20);
        assert_eq!(
            b.acquire(&pools, "m", &[], soon).await.unwrap_err(),
            NoEndpoint::Unavailable,
            "not checked healthy yet"
        );
        up(&b);
        let held = b.acquire(&pools, "m", &[], soon).await.unwrap();
        assert_eq!(
            b.acquire(&pools, "m", &[], soon).await.unwrap_err(),
            NoEndpoint::Deadline
        );
        // A tried endpoint is skipped.
        drop(held);
        assert_eq!(
            b.acquire(&pools, "m", &[(0, 0)], soon).await.unwrap_err(),
            NoEndpoint::Unavailable
        );
        assert_eq!(
            b.acquire(&[], "m", &[], soon).await.unwrap_err(),
            NoEndpoint::NotServed
        );
    }

    #[test]
    fn retry_budget() {
        let b = Backends::new(&[cfg("a", &["http://127.0.0.1:1"], 1, 1, "x")], &[]).unwrap();
        let p = &b.pools[0];
        p.stats.requests.store(10, Ordering::Relaxed);
        // 20% of 10 requests: 2 retries.
        assert!(p.take_retry());
        assert!(p.take_retry());
        assert!(!p.take_retry());
    }
}
