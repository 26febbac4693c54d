//! The worker's side of token streams: between bursts, one decode step per
//! active token stream of every generative model (iteration-level
//! scheduling), token frames sent from the worker's transmit pool, token
//! latencies recorded.

use std::time::Duration;

use sluice_wire::Reject;

use super::Worker;
use crate::stats::{bump, record};
use crate::streams::TokenSink;
use crate::transport::{RxPacket, Transport, TxPacket};

/// Sends token frames through the worker's transport, flushing its send
/// list when full; records time to first token and inter-token latency.
struct Sink<'a, T: Transport> {
    transport: &'a mut T,
    sends: &'a mut Vec<TxPacket>,
    /// The worker's buffers in hand (a model writes each frame).
    hand: &'a mut super::supervise::TxHand,
    no_buffers: u64,
    hist: &'a mut crate::stats::HistSet,
    counters: &'a crate::stats::WorkerCounters,
    /// The token-load heatmap's current second.
    load: &'a mut crate::load::LoadWriter,
    /// The model slot being stepped.
    model: usize,
}

impl<T: Transport> TokenSink for Sink<'_, T> {
    fn send(
        &mut self,
        route: &RxPacket,
        write: &mut dyn FnMut(&mut [u8]) -> Result<usize, Reject>,
    ) -> bool {
        if self.sends.len() == self.sends.capacity() {
            self.transport.tx_burst(self.sends);
            self.sends.clear();
        }
        // A datagram buffer, on TCP a new place in the connection's answer
        // order, on the front door the OPEN's slot (none free:
        // back-pressure, the stream waits a step).
        let Some((tx, conn)) = self.transport.tx_alloc_push(route) else {
            self.no_buffers += 1;
            return false;
        };
        self.hand.hold(tx, Some(conn));
        let written = write(self.transport.tx_bytes(tx));
        self.hand.let_go(tx);
        match written {
            Ok(len) if len > 0 => {
                self.sends.push(TxPacket {
                    buf: tx,
                    len: len as u32,
                    peer: route.peer,
                    conn,
                });
                true
            }
            _ => {
                self.transport.tx_free_push(tx, conn);
                false
            }
        }
    }

    fn token(&mut self, tenant: u32, shard: usize, first: bool, latency_us: u64) {
        let d = Duration::from_micros(latency_us);
        let set = if first {
            &mut self.hist.ttft
        } else {
            &mut self.hist.itl
        };
        if let Some(h) = set.get_mut(shard) {
            record(h, d);
        }
        let c = self.counters;
        c.tenant_tokens.add(tenant, 1);
        if let Some(a) = c.tokens.shard_tokens.get(shard) {
            bump(a, 1);
        }
        if let Some(m) = c.models.get(self.model) {
            m.tokens.token(first, latency_us);
        }
        let k = self.load.key(Some(shard), Some(self.model), tenant);
        self.load.add_tokens(k, 1);
    }

    fn gone(&self, route: &RxPacket) -> bool {
        self.transport.route_gone(route)
    }
}

impl<T: Transport> Worker<T> {
    /// Token streams generating on this worker.
    pub(super) fn count_token_streams(&self) -> usize {
        self.token_slots
            .iter()
            .filter_map(|&s| self.handlers.get(s as usize).and_then(Option::as_ref))
            .map(|h| h.token_active())
            .sum()
    }

    /// Remembers that model slot `slot` may have token streams now (an
    /// `OPEN` or keep-alive ran there).
    pub(super) fn note_token_slot(&mut self, slot: usize) {
        let Some(Some(h)) = self.handlers.get(slot) else {
            return;
        };
        let s = slot as u32;
        if h.token_active() > 0
            && !self.token_slots.contains(&s)
            && self.token_slots.len() < self.token_slots.capacity()
        {
            self.token_slots.push(s);
        }
    }

    /// Tells the transport which token streams of the handler in `slot`
    /// ended since the last call (their routes take no more frames).
    pub(super) fn end_token_routes(&mut self, slot: usize) {
        if let Some(Some(h)) = self.handlers.get_mut(slot) {
            let t = &mut self.transport;
            h.token_ended(false, &mut |r| t.stream_end(r));
        }
    }

    /// Ends every token stream with a last frame saying `error` (after a
    /// panic: their states may be half-written).
    pub(super) fn fail_token_streams(&mut self) {
        let mut sink = Sink {
            transport: &mut self.transport,
            sends: &mut self.sends,
            hand: &mut self.hand,
            no_buffers: 0,
            hist: &mut self.hist,
            counters: &self.counters,
            load: &mut self.load,
            model: 0,
        };
        for (slot, h) in self.handlers.iter_mut().enumerate() {
            let Some(h) = h.as_mut() else {
                continue;
            };
            sink.model = slot;
            if let Some(t) = h.fail_token_streams(&mut sink) {
                self.counters.tokens.add(&t);
            }
        }
        bump(&self.counters.tx_no_buffers, sink.no_buffers);
    }

    /// One decode step for every active token stream.
    pub(super) fn token_iteration(&mut self) {
        // `poll_once` read the wall clock just before (token latencies
        // and deadlines run on it, never behind it).
        let now_us = self.now_us;
        let mut sink = Sink {
            transport: &mut self.transport,
            sends: &mut self.sends,
            hand: &mut self.hand,
            no_buffers: 0,
            hist: &mut self.hist,
            counters: &self.counters,
            load: &mut self.load,
            model: 0,
        };
        let (mut active, mut prefill) = (0, 0);
        let mut k = 0;
        while k < self.token_slots.len() {
            let slot = self.token_slots[k] as usize;
            let t = match self.handlers.get_mut(slot).and_then(Option::as_mut) {
                Some(h) => {
                    sink.model = slot;
                    let t = h.token_iteration(now_us, &mut sink);
                    // The routes of streams that ended take no more frames.
                    let tr = &mut *sink.transport;
                    h.token_ended(false, &mut |r| tr.stream_end(r));
                    t
                }
                None => None,
            };
            let running = t.map_or(0, |t| t.running);
            if let Some(t) = t {
                active += t.running;
                prefill += t.prefill;
                self.counters.tokens.add(&t);
            }
            if running == 0 {
                // Its streams ended (or its handler was replaced).
                self.token_slots.swap_remove(k);
            } else {
                k += 1;
            }
        }
        bump(&self.counters.tx_no_buffers, sink.no_buffers);
        self.counters.tokens.set_running(active, prefill);
        self.tokens_active = active as usize;
    }
}
