//! The worker's side of token streams: between bursts, one decode step per
//! active token stream of every generative model (iteration-level
//! scheduling), token frames sent from the worker's transmit pool, token
//! latencies recorded.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
        // Token streams are datagram streams (checked at OPEN): any free
        // transmit buffer will do, or the front-door slot of the OPEN.
        let Some(tx) = self.transport.stream_alloc(route) else {
            self.no_buffers += 1;
            return false;
        };
        match write(self.transport.tx_bytes(tx)) {
            Ok(len) if len > 0 => {
                self.sends.push(TxPacket {
                    buf: tx,
                    len: len as u32,
                    peer: route.peer,
                    conn: route.conn,
                });
                true
            }
            _ => {
                self.transport.tx_free(tx);
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
}

impl<T: Transport> Worker<T> {
    /// Token streams generating on this worker.
    pub(super) fn count_token_streams(&self) -> usize {
        self.handlers
            .iter()
            .flatten()
            .map(|h| h.token_active())
            .sum()
    }

    /// Tells the transport which token streams of the handler in `slot`
    /// ended since the last call (their routes take no more frames).
    pub(super) fn end_token_routes(&mut self, slot: usize) {
        if let Some(Some(h)) = self.handlers.get_mut(slot) {
            let t = &mut self.transport;
            h.token_ended(false, &mut |r| t.stream_end(r));
        }
    }

    /// One decode step for every active token stream.
    pub(super) fn token_iteration(&mut self) {
        // The burst clock stands still while no frame comes; token
        // latencies and deadlines run on the wall clock (never behind it).
        let wall_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        self.now_us = self.now_us.max(wall_us);
        let now_us = self.now_us;
        let mut sink = Sink {
            transport: &mut self.transport,
            sends: &mut self.sends,
            no_buffers: 0,
            hist: &mut self.hist,
            counters: &self.counters,
            load: &mut self.load,
            model: 0,
        };
        let (mut active, mut prefill) = (0, 0);
        for (slot, h) in self.handlers.iter_mut().enumerate() {
            let Some(h) = h else { continue };
            sink.model = slot;
            let Some(t) = h.token_iteration(now_us, &mut sink) else {
                continue;
            };
            active += t.running;
            prefill += t.prefill;
            self.counters.tokens.add(&t);
        }
        bump(&self.counters.tx_no_buffers, sink.no_buffers);
        for slot in 0..self.handlers.len() {
            self.end_token_routes(slot);
        }
        self.counters.tokens.set_running(active, prefill);
        self.tokens_active = active as usize;
    }
}
