//! A worker's part in request tracing: a record per traced request of the
//! burst, filled as it passes the stages, pushed to the worker's span ring
//! once the burst's answers are sent. Untraced requests never get here.

use std::time::Instant;

use sluice_wire::{Frame, flags};

use super::*;
use crate::trace::{SpanRecord, forward_span_id, kind, put_str};

impl<T: Transport> Worker<T> {
    /// ns since the Unix epoch of an instant in this burst.
    #[inline]
    fn wall_ns(&self, at: Instant) -> u64 {
        self.burst_wall_ns + at.saturating_duration_since(self.burst_start).as_nanos() as u64
    }

    /// Opens the record of frame `i`, just classified as traced.
    pub(super) fn trace_begin(&mut self, i: usize, verdict: &Verdict) {
        let pkt = self.rx[i];
        let (shard, forward) = match *verdict {
            Verdict::Admit { shard, .. } => (shard as u16, false),
            Verdict::Forward { shard } => (shard as u16, true),
            _ => (u16::MAX, false),
        };
        let m = self.marks;
        let times = crate::trace::SpanTimes {
            recv_ns: self.burst_wall_ns,
            auth_ns: m.auth.map_or(0, |t| self.wall_ns(t)),
            validate_ns: m.validate.map_or(0, |t| self.wall_ns(t)),
            route_ns: m.route.map_or(0, |t| self.wall_ns(t)),
            ..Default::default()
        };
        let next = self.span_ids.next_id();
        let worker = self.p.index as u16;
        let f = Frame::new_unchecked(self.transport.rx_bytes(&pkt));
        let trace = f.trace();
        let rid = f.request_id();
        let r = &mut self.span_recs[i];
        *r = SpanRecord {
            trace_id: trace.trace_id,
            // A forwarded frame arrives unchanged (it is signed): its parent
            // is the span the forwarding appliance derived from it.
            parent_id: if f.flags() & flags::FORWARDED != 0 {
                forward_span_id(&trace, rid)
            } else {
                trace.parent_id
            },
            span_id: if forward {
                forward_span_id(&trace, rid)
            } else {
                next
            },
            times,
            request_id: rid,
            tenant_id: f.tenant_id(),
            token_count: f.token_count(),
            outcome: 0,
            shard,
            worker,
            kind: if forward { kind::FORWARD } else { kind::LOCAL },
            flags: trace.flags,
            ..SpanRecord::default()
        };
        put_str(&mut r.model, f.model());
        put_str(&mut r.version, f.model_version());
        put_str(&mut r.adapter, f.adapter());
        self.span_open[i] = true;
        self.spans_open = true;
    }

    /// The model ran for frame `i` from `start` to `end`.
    #[inline]
    pub(super) fn trace_run(&mut self, i: usize, start: Instant, end: Instant) {
        if self.span_open[i] {
            let (s, e) = (self.wall_ns(start), self.wall_ns(end));
            let t = &mut self.span_recs[i].times;
            t.run_start_ns = s;
            t.run_end_ns = e;
        }
    }

    /// Frame `i` was answered with an error frame `code` (a traced frame
    /// answered with a response keeps outcome 0).
    #[inline]
    pub(super) fn trace_outcome(&mut self, i: usize, code: u16) {
        if self.span_open[i] {
            self.span_recs[i].outcome = code;
        }
    }

    /// After the burst's sends: closes the burst's records and pushes them
    /// to the ring; a full ring drops them, counted.
    pub(super) fn trace_flush(&mut self) {
        if !self.spans_open {
            return;
        }
        self.spans_open = false;
        let sent = self.wall_ns(Instant::now());
        for i in 0..self.burst_n {
            if !std::mem::take(&mut self.span_open[i]) {
                continue;
            }
            let mut r = self.span_recs[i];
            r.times.send_ns = sent;
            if self.spans.push(r) {
                bump(&self.counters.spans_recorded, 1);
            } else {
                bump(&self.counters.spans_dropped, 1);
            }
        }
    }
}
