//! The span of one upstream hop (trace kind BACKEND): under the request's
//! trace (its `traceparent`), with the stages the front door saw, pushed to
//! the engine's span ring when the answer's last byte is relayed. The
//! `traceparent` sent upstream names this span as the parent, so the
//! backend's own spans hang under it. Untraced requests cost one test and
//! have their `traceparent` passed on as it came.

use std::cell::Cell;
use std::sync::Arc;

use sluice_engine::trace::{SpanRecord, SpanRing, kind, put_str};
use sluice_wire::TraceContext;

/// Nanoseconds since the Unix epoch.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

thread_local! {
    static IDS: Cell<Option<sluice_engine::trace::SpanIds>> = const { Cell::new(None) };
}

fn next_span_id() -> [u8; 8] {
    IDS.with(|c| {
        let mut ids = c.get().unwrap_or_else(|| {
            use std::hash::{BuildHasher, RandomState};
            let salt = RandomState::new().hash_one(std::thread::current().id()) as usize;
            sluice_engine::trace::SpanIds::new(salt)
        });
        let id = ids.next_id();
        c.set(Some(ids));
        id
    })
}

/// One hop's record while the request runs (`None`: not traced).
#[derive(Debug)]
pub struct Hop {
    rec: Option<SpanRecord>,
    trace: TraceContext,
}

impl Hop {
    /// Starts a hop for a request with this trace context, received at
    /// `recv_ns`; traced when `sampler` says so.
    pub fn start(
        trace: TraceContext,
        sampler: &sluice_engine::trace::Sampler,
        recv_ns: u64,
    ) -> Hop {
        let rec = sampler.decide(trace.flags, || trace).then(|| SpanRecord {
            trace_id: trace.trace_id,
            parent_id: trace.parent_id,
            span_id: next_span_id(),
            kind: kind::BACKEND,
            flags: trace.flags,
            worker: u16::MAX,
            times: sluice_engine::trace::SpanTimes {
                recv_ns,
                ..Default::default()
            },
            ..SpanRecord::default()
        });
        Hop { rec, trace }
    }

    /// Whether it is traced.
    #[cfg(test)]
    pub fn traced(&self) -> bool {
        self.rec.is_some()
    }

    /// Sets one stage's time (a no-op when not traced).
    pub fn mark(&mut self, f: impl FnOnce(&mut sluice_engine::trace::SpanTimes)) {
        if let Some(r) = &mut self.rec {
            f(&mut r.times);
        }
    }

    /// Names what it carried.
    pub fn describe(
        &mut self,
        model: &str,
        version: &str,
        adapter: &str,
        tenant: u32,
        shard: usize,
    ) {
        if let Some(r) = &mut self.rec {
            put_str(&mut r.model, model);
            put_str(&mut r.version, version);
            put_str(&mut r.adapter, adapter);
            r.tenant_id = tenant;
            r.shard = u16::try_from(shard).unwrap_or(u16::MAX);
        }
    }

    /// The `traceparent` to send upstream: this span as the parent when
    /// traced, the caller's as it came when not, none without a trace.
    pub fn traceparent(&self) -> Option<String> {
        let t = &self.trace;
        if !t.is_set() {
            return None;
        }
        let parent = self.rec.as_ref().map_or(t.parent_id, |r| r.span_id);
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        Some(format!(
            "00-{}-{}-{:02x}",
            hex(&t.trace_id),
            hex(&parent),
            t.flags
        ))
    }

    /// Ends it with `outcome` (0 for 2xx, else the HTTP status) and pushes
    /// the record; a full ring drops it.
    pub fn finish(self, outcome: u16, ring: &Arc<SpanRing>) {
        if let Some(mut r) = self.rec {
            r.outcome = outcome;
            if r.times.send_ns == 0 {
                r.times.send_ns = now_ns();
            }
            let _ = ring.push(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_names_this_span_when_traced() {
        let t = crate::semantic::parse_traceparent(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        );
        let sampler = sluice_engine::trace::Sampler::new(0.0);
        let h = Hop::start(t, &sampler, 1);
        assert!(h.traced());
        let tp = h.traceparent().unwrap();
        assert!(tp.starts_with("00-0af7651916cd43dd8448eb211c80319c-"));
        assert!(!tp.contains("b7ad6b7169203331"), "{tp}");
        // Not sampled: passed on as it came.
        let t = crate::semantic::parse_traceparent(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
        );
        let h = Hop::start(t, &sampler, 1);
        assert!(!h.traced());
        assert_eq!(
            h.traceparent().unwrap(),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
        );
        assert!(
            Hop::start(TraceContext::default(), &sampler, 1)
                .traceparent()
                .is_none()
        );
    }
}
