//! One model-server endpoint: its load (requests in flight, held by
//! [`Lease`]s), its health (active checks) and its passive ejection
//! (consecutive failures eject it for a time that doubles per ejection).
//! Every field is an atomic or an RCU pointer: any front-door thread picks
//! and releases without a lock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use arc_swap::ArcSwap;
use sluice_engine::config::backends::EndpointUrl;

/// Counters of one endpoint.
#[derive(Debug, Default)]
pub struct EndpointStats {
    /// Attempts sent to it.
    pub requests: AtomicU64,
    /// Attempts that failed (connect, timeout, 5xx, garbage, cut streams).
    pub failures: AtomicU64,
    /// Times it was ejected.
    pub ejections: AtomicU64,
}

/// Endpoint ids, unique in the process (a removed endpoint's id is never
/// reused, so a retry never mistakes a new endpoint for one it tried).
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// One endpoint of a pool.
#[derive(Debug)]
pub struct Endpoint {
    /// Unique id.
    pub id: u64,
    /// As configured.
    pub url: String,
    /// Parsed.
    pub parsed: EndpointUrl,
    /// `host:port`, the request's authority.
    pub authority: http::uri::Authority,
    in_flight: AtomicU32,
    /// Consecutive failures since the last success.
    fails: AtomicU32,
    /// Ejections in a row (the next one lasts `eject_ms << streak`).
    streak: AtomicU32,
    /// Not picked before this time (ms on the pool's clock).
    ejected_until_ms: AtomicU64,
    /// The last active check passed (starts false: an endpoint is picked
    /// once a check saw it ready).
    healthy: AtomicBool,
    /// Draining: finishes what it holds, takes nothing new.
    draining: AtomicBool,
    /// Model names it serves: configured, or discovered by the checks.
    models: ArcSwap<Vec<String>>,
    /// Counters.
    pub stats: EndpointStats,
}

impl Endpoint {
    /// An endpoint serving `models` (empty: until discovered).
    pub fn new(url: &str, parsed: EndpointUrl, models: Vec<String>) -> Result<Endpoint, String> {
        let authority = format!("{}:{}", parsed.host, parsed.port)
            .parse::<http::uri::Authority>()
            .map_err(|e| format!("{url}: {e}"))?;
        Ok(Endpoint {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            url: url.to_owned(),
            parsed,
            authority,
            in_flight: AtomicU32::new(0),
            fails: AtomicU32::new(0),
            streak: AtomicU32::new(0),
            ejected_until_ms: AtomicU64::new(0),
            healthy: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            models: ArcSwap::from_pointee(models),
            stats: EndpointStats::default(),
        })
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Whether it may take a request for `model` now.
    pub fn eligible(&self, model: &str, now_ms: u64) -> bool {
        self.healthy.load(Ordering::Acquire)
            && !self.draining.load(Ordering::Acquire)
            && self.ejected_until_ms.load(Ordering::Acquire) <= now_ms
            && self.serves(model)
    }

    /// Whether it serves `model`.
    pub fn serves(&self, model: &str) -> bool {
        self.models.load().iter().any(|m| m == model)
    }

    /// The models it serves.
    pub fn models(&self) -> Arc<Vec<String>> {
        self.models.load_full()
    }

    /// Replaces the discovered models.
    pub fn set_models(&self, m: Vec<String>) {
        self.models.store(Arc::new(m));
    }

    /// Takes one of its `max` places; false when all are taken.
    pub fn try_take(&self, max: u32) -> bool {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    /// Gives a place back.
    pub(crate) fn give_back(&self) {
        let prev = self.in_flight.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(prev > 0, "a place given back twice");
    }

    /// An attempt succeeded: the failure streak ends.
    pub fn succeeded(&self) {
        self.fails.store(0, Ordering::Release);
        self.streak.store(0, Ordering::Release);
    }

    /// An attempt failed; ejects after `eject_errors` in a row, for
    /// `eject_ms` doubled per ejection in a row, at most `eject_max_ms`.
    /// Returns whether this failure ejected it.
    pub fn failed(&self, now_ms: u64, eject_errors: u32, eject_ms: u32, eject_max_ms: u32) -> bool {
        self.stats.failures.fetch_add(1, Ordering::Relaxed);
        let n = self.fails.fetch_add(1, Ordering::AcqRel) + 1;
        if n < eject_errors {
            return false;
        }
        self.fails.store(0, Ordering::Release);
        let streak = self.streak.fetch_add(1, Ordering::AcqRel).min(20);
        let ms = (u64::from(eject_ms) << streak).min(u64::from(eject_max_ms));
        self.ejected_until_ms.store(now_ms + ms, Ordering::Release);
        self.stats.ejections.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Whether it is ejected at `now_ms`.
    pub fn ejected(&self, now_ms: u64) -> bool {
        self.ejected_until_ms.load(Ordering::Acquire) > now_ms
    }

    /// The active check's verdict.
    pub fn set_healthy(&self, ok: bool) {
        self.healthy.store(ok, Ordering::Release);
    }

    /// Whether the last active check passed.
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }

    /// Starts or ends draining.
    pub fn set_draining(&self, on: bool) {
        self.draining.store(on, Ordering::Release);
    }

    /// Whether it is draining.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_engine::config::backends::parse_endpoint;

    fn ep() -> Endpoint {
        let u = "http://127.0.0.1:9";
        Endpoint::new(u, parse_endpoint(u).unwrap(), vec!["m".into()]).unwrap()
    }

    #[test]
    fn places_are_bounded() {
        let e = ep();
        assert!(e.try_take(2));
        assert!(e.try_take(2));
        assert!(!e.try_take(2));
        e.give_back();
        assert!(e.try_take(2));
        assert_eq!(e.in_flight(), 2);
    }

    #[test]
    fn ejection_doubles_and_success_resets() {
        let e = ep();
        e.set_healthy(true);
        assert!(e.eligible("m", 0));
        assert!(!e.eligible("other", 0));
        assert!(!e.failed(0, 2, 100, 1000));
        assert!(e.failed(0, 2, 100, 1000));
        assert!(e.ejected(99) && !e.ejected(100));
        assert!(!e.failed(100, 2, 100, 1000));
        assert!(e.failed(100, 2, 100, 1000));
        assert!(e.ejected(299) && !e.ejected(300), "second ejection doubles");
        e.succeeded();
        assert!(!e.failed(300, 2, 100, 1000));
        assert!(e.failed(300, 2, 100, 1000));
        assert!(!e.ejected(400), "a success ends the streak");
        assert_eq!(e.stats.ejections.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn draining_and_unhealthy_take_nothing() {
        let e = ep();
        assert!(!e.eligible("m", 0), "unchecked");
        e.set_healthy(true);
        e.set_draining(true);
        assert!(!e.eligible("m", 0));
    }
}
