//! A worker's part in request tracing: a record per traced request of the
//! burst, filled as it passes the stages, pushed to the worker's span ring
//! once the burst's answers are sent. A traced request a batch holds past
//! its burst takes its record along into a fixed table (`HeldSpans`) and
//! pushes it once answered, with its run times. Untraced requests never get
//! here.

use std::time::Instant;

use sluice_wire::{Frame, flags};

use super::*;
use crate::trace::{SpanRecord, forward_span_id, kind, put_str};

/// `Pending::span` of a request whose record is not held.
pub(super) const NO_SPAN: u16 = u16::MAX;
/// Traced requests whose records can be held past their burst at once;
/// beyond, a held request's span is pushed at the end of its burst, without
/// run times (counted in `spans_unheld`).
pub(super) const HELD_SPANS_MAX: usize = 256;

/// Records of traced requests held by batches, preallocated.
pub(super) struct HeldSpans {
    recs: Box<[SpanRecord]>,
    free: Vec<u16>,
}

impl HeldSpans {
    pub(super) fn new() -> HeldSpans {
        HeldSpans {
            recs: vec![SpanRecord::default(); HELD_SPANS_MAX].into_boxed_slice(),
            free: (0..HELD_SPANS_MAX as u16).rev().collect(),
        }
    }
}

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

    /// Shard `s`'s queue entry `k` ran from `start` to `end`: its record is
    /// the burst's, or the one held for it.
    #[inline]
    pub(super) fn trace_ran(&mut self, s: usize, k: usize, start: Instant, end: Instant) {
        let p = self.queues[s][k];
        if p.span != NO_SPAN {
            let (a, b) = (self.wall_ns(start), self.wall_ns(end));
            let t = &mut self.held_spans.recs[usize::from(p.span)].times;
            t.run_start_ns = a;
            t.run_end_ns = b;
        } else if p.arrived == self.burst_start {
            self.trace_run(usize::from(p.rx_index), start, end);
        }
    }

    /// Shard `s`'s queue entry `k` was answered (`code`: its error frame's,
    /// 0 for a response): a held record is closed and pushed.
    #[inline]
    pub(super) fn trace_held_done(&mut self, s: usize, k: usize, code: u16) {
        let span = self.queues[s][k].span;
        if span == NO_SPAN {
            return;
        }
        self.queues[s][k].span = NO_SPAN;
        let sent = self.wall_ns(Instant::now());
        let r = &mut self.held_spans.recs[usize::from(span)];
        if code != 0 {
            r.outcome = code;
        }
        r.times.send_ns = sent;
        let r = *r;
        self.held_spans.free.push(span);
        self.push_span(r);
    }

    /// Moves the records of this burst's traced requests that a batch
    /// still holds into the held table (before the burst's are pushed).
    fn trace_hold(&mut self) {
        let nshards = self.tables.shards.len().min(self.queues.len());
        for s in 0..nshards {
            for k in 0..self.queues[s].len() {
                let p = self.queues[s][k];
                let i = usize::from(p.rx_index);
                if p.span != NO_SPAN
                    || p.arrived != self.burst_start
                    || p.state == batch::State::Done
                    || i >= self.burst_n
                    || !self.span_open[i]
                {
                    continue;
                }
                let Some(slot) = self.held_spans.free.pop() else {
                    bump(&self.counters.spans_unheld, 1);
                    continue; // pushed with the burst, without run times
                };
                self.held_spans.recs[usize::from(slot)] = self.span_recs[i];
                self.queues[s][k].span = slot;
                self.span_open[i] = false;
            }
        }
    }

    fn push_span(&mut self, r: SpanRecord) {
        if self.spans.push(r) {
            bump(&self.counters.spans_recorded, 1);
        } else {
            bump(&self.counters.spans_dropped, 1);
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
        if self.held > 0 {
            self.trace_hold();
        }
        let sent = self.wall_ns(Instant::now());
        for i in 0..self.burst_n {
            if !std::mem::take(&mut self.span_open[i]) {
                continue;
            }
            let mut r = self.span_recs[i];
            r.times.send_ns = sent;
            self.push_span(r);
        }
    }
}
