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

use arc_swap::ArcSwap;
use sluice_engine::config::backends::limits::ENDPOINTS_PER_POOL_MAX;
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
    /// Its endpoints, replaced whole when one is added or removed (a
    /// removed endpoint lives on while leases hold it: what it holds
    /// finishes).
    endpoints: ArcSwap<Vec<Arc<Endpoint>>>,
    /// Serializes changes to `endpoints` (the admin API; never the data
    /// path).
    change: std::sync::Mutex<()>,
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
            endpoints.push(Arc::new(Endpoint::new(u, parsed, cfg.models.clone())?));
        }
        Ok(Pool {
            cfg,
            endpoints: ArcSwap::from_pointee(endpoints),
            change: std::sync::Mutex::new(()),
            waiting: AtomicU32::new(0),
            stats: PoolStats::default(),
            retries_taken: AtomicU64::new(0),
        })
    }

    /// Its endpoints now.
    pub fn endpoints(&self) -> Arc<Vec<Arc<Endpoint>>> {
        self.endpoints.load_full()
    }

    /// Adds an endpoint (used once a health check saw it ready).
    pub fn add_endpoint(&self, url: &str) -> Result<(), EndpointError> {
        let _g = self
            .change
            .lock()
            .map_err(|_| EndpointError::Invalid("lock poisoned".into()))?;
        let cur = self.endpoints.load_full();
        if cur.iter().any(|e| e.url == url) {
            return Err(EndpointError::Exists(format!(
                "{url} is in pool {}",
                self.cfg.name
            )));
        }
        if cur.len() >= ENDPOINTS_PER_POOL_MAX {
            return Err(EndpointError::Invalid(format!(
                "pool {} has {ENDPOINTS_PER_POOL_MAX} endpoints",
                self.cfg.name
            )));
        }
        let parsed =
            parse_endpoint(url).map_err(|m| EndpointError::Invalid(format!("{url}: {m}")))?;
        let e =
            Endpoint::new(url, parsed, self.cfg.models.clone()).map_err(EndpointError::Invalid)?;
        let mut next = (*cur).clone();
        next.push(Arc::new(e));
        self.endpoints.store(Arc::new(next));
        Ok(())
    }

    /// Starts (or ends) draining an endpoint: it takes nothing new and
    /// finishes what it holds.
    pub fn drain_endpoint(&self, url: &str, on: bool) -> Result<(), EndpointError> {
        let cur = self.endpoints.load();
        let e = cur.iter().find(|e| e.url == url).ok_or_else(|| {
            EndpointError::NotFound(format!("{url} is not in pool {}", self.cfg.name))
        })?;
        e.set_draining(on);
        Ok(())
    }

    /// Removes an endpoint: nothing new goes to it; requests it holds
    /// finish (their leases keep it).
    pub fn remove_endpoint(&self, url: &str) -> Result<(), EndpointError> {
        let _g = self
            .change
            .lock()
            .map_err(|_| EndpointError::Invalid("lock poisoned".into()))?;
        let cur = self.endpoints.load_full();
        let Some(e) = cur.iter().find(|e| e.url == url) else {
            return Err(EndpointError::NotFound(format!(
                "{url} is not in pool {}",
                self.cfg.name
            )));
        };
        e.set_draining(true);
        let next: Vec<_> = cur.iter().filter(|e| e.url != url).cloned().collect();
        self.endpoints.store(Arc::new(next));
        Ok(())
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

/// Why an endpoint could not be changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointError {
    /// No such pool or endpoint.
    NotFound(String),
    /// The endpoint is in the pool already.
    Exists(String),
    /// A bad URL, or a full pool.
    Invalid(String),
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
    /// The endpoint.
    endpoint: Arc<Endpoint>,
}

impl Lease {
    /// The pool.
    pub fn pool(&self) -> &Pool {
        &self.backends.pools[self.pool]
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
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

    /// Applies a change to a pool's endpoints.
    pub fn endpoint_op(
        &self,
        op: &sluice_engine::config::backends::EndpointOp,
    ) -> Result<(), EndpointError> {
        use sluice_engine::config::backends::EndpointAction as A;
        let pool = self
            .pools
            .iter()
            .find(|p| p.cfg.name == op.pool)
            .ok_or_else(|| EndpointError::NotFound(format!("no backend pool {:?}", op.pool)))?;
        match op.action {
            A::Add => pool.add_endpoint(&op.url),
            A::Drain => pool.drain_endpoint(&op.url, true),
            A::Undrain => pool.drain_endpoint(&op.url, false),
            A::Remove => pool.remove_endpoint(&op.url),
        }
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
                    && p.endpoints.load().iter().any(|e| e.serves(model))
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
        tried: &[u64],
    ) -> Result<Lease, NoEndpoint> {
        let now = self.now_ms();
        let start = self.rr.fetch_add(1, Ordering::Relaxed);
        let mut any_eligible = false;
        let mut best: Option<(u32, usize, Arc<Endpoint>)> = None;
        for &p in pools {
            let pool = &self.pools[p];
            let eps = pool.endpoints.load();
            let n = eps.len();
            for k in 0..n {
                let ep = &eps[(start + k) % n];
                if tried.contains(&ep.id) || !ep.eligible(model, now) {
                    continue;
                }
                any_eligible = true;
                let load = ep.in_flight();
                if load < pool.cfg.max_concurrency
                    && best.as_ref().is_none_or(|(b, _, _)| load < *b)
                {
                    best = Some((load, p, Arc::clone(ep)));
                }
            }
        }
        // The least loaded may fill between the scan and the take: try the
        // others in the same order before giving up.
        if let Some((_, p, ep)) = best
            && ep.try_take(self.pools[p].cfg.max_concurrency)
        {
            return Ok(self.lease(p, ep));
        }
        for &p in pools {
            let pool = &self.pools[p];
            for ep in pool.endpoints.load().iter() {
                if !tried.contains(&ep.id)
                    && ep.eligible(model, now)
                    && ep.try_take(pool.cfg.max_concurrency)
                {
                    return Ok(self.lease(p, Arc::clone(ep)));
                }
            }
        }
        Err(if any_eligible {
            NoEndpoint::QueueFull
        } else {
            NoEndpoint::Unavailable
        })
    }

    fn lease(self: &Arc<Self>, pool: usize, endpoint: Arc<Endpoint>) -> Lease {
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
        tried: &[u64],
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
            for e in p.endpoints().iter() {
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
        assert_ne!(
            l1.endpoint().id,
            l2.endpoint().id,
            "the idle endpoint is chosen"
        );
        // Both full: one waits (queue_depth 1), the next is refused.
        let b2 = Arc::clone(&b);
        let p2 = pools.clone();
        let waiter = tokio::spawn(async move {
            b2.acquire(&p2, "m", &[], far)
                .await
                .map(|l| l.endpoint().id)
        });
        while b.pools[0].waiting() == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            b.acquire(&pools, "m", &[], far).await.unwrap_err(),
            NoEndpoint::QueueFull
        );
        let freed = l1.endpoint().id;
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
        let id = held.endpoint().id;
        drop(held);
        assert_eq!(
            b.acquire(&pools, "m", &[id], soon).await.unwrap_err(),
            NoEndpoint::Unavailable
        );
        assert_eq!(
            b.acquire(&[], "m", &[], soon).await.unwrap_err(),
            NoEndpoint::NotServed
        );
    }

    #[tokio::test]
    async fn endpoints_change_at_run_time() {
        use sluice_engine::config::backends::{EndpointAction as A, EndpointOp};
        let b = Backends::new(&[cfg("a", &["http://127.0.0.1:1"], 4, 0, "x")], &[]).unwrap();
        up(&b);
        let pools = b.serving(&labels("x"), "m", BackendProtocol::Openai);
        let far = tokio::time::Instant::now() + Duration::from_secs(5);
        let op = |url: &str, action| EndpointOp {
            pool: "a".into(),
            url: url.into(),
            action,
        };
        let held = b.acquire(&pools, "m", &[], far).await.unwrap();
        // Draining: nothing new, the held request goes on.
        b.endpoint_op(&op("http://127.0.0.1:1", A::Drain)).unwrap();
        assert_eq!(
            b.acquire(&pools, "m", &[], far).await.unwrap_err(),
            NoEndpoint::Unavailable
        );
        // A new endpoint takes requests once checked ready.
        b.endpoint_op(&op("http://127.0.0.1:2", A::Add)).unwrap();
        assert_eq!(
            b.endpoint_op(&op("http://127.0.0.1:2", A::Add))
                .unwrap_err(),
            EndpointError::Exists("http://127.0.0.1:2 is in pool a".into())
        );
        up(&b);
        let l2 = b.acquire(&pools, "m", &[], far).await.unwrap();
        assert_eq!(l2.endpoint().url, "http://127.0.0.1:2");
        // Removing the first: its held request still finishes.
        b.endpoint_op(&op("http://127.0.0.1:1", A::Remove)).unwrap();
        assert_eq!(b.pools[0].endpoints().len(), 1);
        assert_eq!(held.endpoint().in_flight(), 1);
        drop(held);
        assert!(matches!(
            b.endpoint_op(&op("http://127.0.0.1:1", A::Undrain)),
            Err(EndpointError::NotFound(_))
        ));
        assert!(matches!(
            b.endpoint_op(&EndpointOp {
                pool: "zz".into(),
                url: "http://h:1".into(),
                action: A::Add
            }),
            Err(EndpointError::NotFound(_))
        ));
        assert!(matches!(
            b.endpoint_op(&op("ftp://h", A::Add)),
            Err(EndpointError::Invalid(_))
        ));
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
