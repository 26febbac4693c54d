//! The shard scheduler and dynamic batching.
//!
//! Requests wait in their shard's queue in arrival order. A request whose
//! model version batches in that shard (`batch_max` above 1, the model able
//! to stack along dimension 0) is run together with the queue's other
//! requests of the same version and batch key, up to `batch_max` rows, as
//! Triton's dynamic batcher does. A request that would take the batch past
//! `batch_max` waits for the next run. A batch runs when it is full, when
//! no more can join it, when its first request has waited `batch_delay_us`
//! (0: at once, with what this burst brought), when a member's deadline
//! would not survive more waiting, or when the worker must answer everything
//! (draining, stopping, a control change). Until then its requests stay in
//! the queue with their receive buffers, across loop iterations; nothing
//! accepted is dropped.
//!
//! A batch of one takes the zero-copy path. A larger one costs one gather
//! copy of the inputs into the batch buffer and one copy of each request's
//! output rows into its reply (both counted in `payload_bytes_copied`).

use std::time::{Duration, Instant};

use sluice_wire::{ErrorCode, Frame};

use super::*;
use crate::config::limits::BATCH_MAX;
use crate::handler::BatchSlot;
use crate::stats::bump;

/// Most requests a shard queue holds past a burst for batching.
pub(super) const HOLD_MAX: usize = BATCH_MAX as usize;

/// Bytes of each batch buffer (gather and output), per worker. Allocated at
/// start-up; pages become resident only as batches touch them.
pub const BATCH_BUFFER_BYTES: usize = 16 << 20;

/// Room left before a member's deadline when deciding to stop waiting, on
/// top of twice the last batched run's duration: a scheduler tick or a
/// slow burst must not push the run past the deadline.
const DEADLINE_MARGIN_US: u64 = 1000;

/// The latest time (µs since the epoch) a request may still wait for others
/// to batch with: half of the time it had left when it arrived, and never
/// closer to its deadline than the margin. `u64::MAX` without a deadline.
fn hold_limit_us(arrived_us: u64, deadline_us: u64) -> u64 {
    if deadline_us == 0 {
        return u64::MAX;
    }
    let half = arrived_us + deadline_us.saturating_sub(arrived_us) / 2;
    half.min(deadline_us.saturating_sub(DEADLINE_MARGIN_US))
}

/// A queued request's state within one pass of the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// Not answered.
    Waiting,
    /// In a batch that keeps waiting; looked at again next pass.
    Deferred,
    /// Taken by a run that has not answered it yet (what a worker that
    /// fails mid-run still holds).
    Running,
    /// Answered (or handed to the transport); removed after the pass.
    Done,
}

/// A 64-byte aligned region of a byte vector.
struct Aligned {
    // Drop order: the only field; the region is an index range into it.
    mem: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let align = sluice_wire::TENSOR_ALIGN;
        let mem = vec![0u8; len + align];
        let start = mem.as_ptr().align_offset(align).min(align);
        Aligned { mem, start, len }
    }

    fn bytes(&self) -> &[u8] {
        &self.mem[self.start..self.start + self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.mem[self.start..self.start + self.len]
    }
}

/// The worker's batch pool: one gather buffer for the stacked inputs and one
/// for the batched outputs (a worker runs one batch at a time).
pub(super) struct BatchBufs {
    input: Aligned,
    output: Aligned,
}

impl BatchBufs {
    pub(super) fn new() -> BatchBufs {
        BatchBufs {
            input: Aligned::new(BATCH_BUFFER_BYTES),
            output: Aligned::new(BATCH_BUFFER_BYTES),
        }
    }
}

impl<T: Transport> Worker<T> {
    /// Runs queued requests, shard by shard, `max_concurrency` runs per
    /// shard per round (a batch is one run); batches that are not due stay
    /// queued. `force`: every batch is due.
    pub(super) fn run_queues(&mut self, force: bool) {
        let nshards = self.tables.shards.len().min(SHARD_COUNT_MAX);
        let mut quotas = [0usize; SHARD_COUNT_MAX];
        for (q, s) in quotas.iter_mut().zip(&self.tables.shards) {
            *q = s.max_concurrency as usize;
        }
        let now = Instant::now();
        self.next_due_us = u64::MAX;
        let mut heads = [0usize; SHARD_COUNT_MAX];
        loop {
            let mut progressed = false;
            for s in 0..nshards {
                let mut budget = quotas[s];
                while budget > 0 {
                    let q = &self.queues[s];
                    let Some(k) = (heads[s]..q.len()).find(|&k| q[k].state == State::Waiting)
                    else {
                        heads[s] = q.len();
                        break;
                    };
                    heads[s] = k + 1;
                    let p = q[k];
                    if p.key.is_none() || p.batch.max <= 1 {
                        self.queues[s][k].state = State::Running;
                        self.run_one(s, k, None);
                    } else if !self.try_batch(s, k, force, now) {
                        continue;
                    }
                    budget -= 1;
                    progressed = true;
                }
            }
            if !progressed {
                break;
            }
        }
        let mut held = 0;
        for q in &mut self.queues[..nshards] {
            debug_assert!(
                q.iter().all(|p| p.state != State::Running),
                "a run left a request unanswered"
            );
            q.retain(|p| p.state != State::Done);
            for p in q.iter_mut() {
                p.state = State::Waiting;
            }
            held += q.len();
        }
        self.held = held;
    }

    /// Forms the batch that starts at queue entry `k` of shard `s` and runs
    /// it if it is due; returns whether it ran (or was answered otherwise).
    fn try_batch(&mut self, s: usize, k: usize, force: bool, now: Instant) -> bool {
        let q = &self.queues[s];
        let head = q[k];
        let Some(hkey) = head.key else { return false };
        let max = head.batch.max.min(BATCH_MAX) as u64;
        let mut members = [0u16; BATCH_MAX as usize];
        let mut n = 0usize;
        let mut rows = 0u64;
        let mut overflow = false;
        let mut limit_us = u64::MAX;
        for (j, p) in q.iter().enumerate().skip(k) {
            let Some(key) = p.key else { continue };
            if p.state != State::Waiting || p.slot != head.slot || key.key != hkey.key {
                continue;
            }
            let r = u64::from(key.rows);
            if rows + r > max {
                // Waits for the next run.
                overflow = true;
                continue;
            }
            members[n] = j as u16;
            n += 1;
            rows += r;
            limit_us = limit_us.min(hold_limit_us(p.arrived_us, p.deadline_us));
            if rows == max || n == members.len() {
                break;
            }
        }
        if n == 0 {
            // The head alone is above batch_max: it runs on its own.
            self.queues[s][k].state = State::Running;
            self.run_one(s, k, None);
            return true;
        }
        let delay = Duration::from_micros(u64::from(head.batch.delay_us));
        let est_us = 2 * self.batch_run_ns[head.slot as usize] / 1000;
        let due = force
            || rows >= max
            || overflow
            || now.saturating_duration_since(head.arrived) >= delay
            || self.now_us.saturating_add(est_us) >= limit_us;
        if !due {
            // When to look again: the delay's end or the hold limit.
            let at = head
                .arrived_us
                .saturating_add(u64::from(head.batch.delay_us))
                .min(limit_us.saturating_sub(est_us));
            self.next_due_us = self.next_due_us.min(at);
        }
        let state = if due { State::Running } else { State::Deferred };
        for &j in &members[..n] {
            self.queues[s][j as usize].state = state;
        }
        if due {
            self.run_batch(s, &members[..n]);
        }
        due
    }

    /// Runs the queue entries `members` of shard `s` (same model version
    /// and batch key) as one batch and answers each of them.
    fn run_batch(&mut self, s: usize, members: &[u16]) {
        let started = Instant::now();
        let now_us = self.now_us;
        let mut ps = [None::<Pending>; BATCH_MAX as usize];
        // Queue entry of each of `ps`.
        let mut js = [0usize; BATCH_MAX as usize];
        let mut txs = [0u32; BATCH_MAX as usize];
        let mut n = 0usize;
        for &j in members {
            let j = j as usize;
            let p = self.queues[s][j];
            if p.deadline_us != 0 && now_us > p.deadline_us {
                self.reply_queued(
                    s,
                    j,
                    Immediate::Error(
                        ErrorCode::DeadlineExceeded,
                        "deadline passed before the request ran",
                    ),
                );
                continue;
            }
            // Every stacked request gets its reply buffer before the run;
            // one that finds none waits in the queue for the next pass.
            // An ingress request is answered in its own slot's reply region
            // (TCP: the reply slot reserved for it).
            let pkt = self.queues[s][j].pkt;
            let Some(tx) = self.transport.tx_alloc_for(&pkt) else {
                // Looked at again next pass (sends free buffers meanwhile).
                self.queues[s][j].state = State::Deferred;
                bump(&self.counters.batch_tx_waits, 1);
                continue;
            };
            self.hand.hold(tx, None);
            ps[n] = Some(p);
            js[n] = j;
            txs[n] = tx;
            n += 1;
        }
        if n <= 1 {
            if ps[0].is_some() {
                self.run_one(s, js[0], Some(txs[0]));
            }
            return;
        }
        let slot = ps[0].map_or(0, |p| p.slot as usize);
        let mut slots = [BatchSlot::Left; BATCH_MAX as usize];
        let mut acct = RunAccount::default();
        let result = {
            let mut reqs: [&[u8]; BATCH_MAX as usize] = [&[]; BATCH_MAX as usize];
            for (r, p) in reqs.iter_mut().zip(ps[..n].iter().flatten()) {
                *r = self.transport.rx_bytes(&p.pkt);
            }
            let frame = Frame::new_unchecked(reqs[0]);
            let adapter = Some(frame.adapter()).filter(|a| !a.is_empty());
            let (input, output) = (
                self.batch_bufs.input.bytes_mut(),
                self.batch_bufs.output.bytes_mut(),
            );
            match self.handlers.get_mut(slot).and_then(Option::as_mut) {
                Some(h) => h.run_batch(
                    &reqs[..n],
                    adapter,
                    input,
                    output,
                    &mut slots[..n],
                    &mut acct,
                ),
                None => Err(Reject::new(
                    ErrorCode::UnknownModel,
                    "model is not loaded on this worker",
                )),
            }
        };
        bump(
            &self.counters.payload_bytes_copied,
            acct.payload_bytes_copied,
        );
        let ran = Instant::now();
        let rows = match result {
            Ok(rows) => rows,
            Err(_) => {
                // Each request gets its own answer: run them one by one.
                if let Some(m) = self.counters.models.get(slot) {
                    bump(&m.batch_fallbacks, 1);
                }
                for (&j, &tx) in js[..n].iter().zip(&txs[..n]) {
                    self.run_one(s, j, Some(tx));
                }
                return;
            }
        };
        self.batch_run_ns[slot] = (ran - started).as_nanos() as u64;
        let mut answered = 0u64;
        for i in 0..n {
            let j = js[i];
            match slots[i] {
                BatchSlot::Left => self.run_one(s, j, Some(txs[i])),
                BatchSlot::Refused(r) => {
                    self.hand.let_go(txs[i]);
                    self.transport.tx_free(txs[i]);
                    self.reply_queued(s, j, Immediate::Error(r.code, r.message));
                }
                stacked @ BatchSlot::Stacked { .. } => {
                    self.trace_ran(s, j, started, ran);
                    if self.batch_answer(s, j, txs[i], stacked, started) {
                        answered += 1;
                    }
                }
            }
        }
        if answered > 0
            && let Some(m) = self.counters.models.get(slot)
        {
            m.execution(answered, rows as u64);
        }
    }

    /// Writes the reply of stacked request `k` of shard `s`'s queue;
    /// returns whether it was answered with a response (not an error frame).
    fn batch_answer(
        &mut self,
        s: usize,
        k: usize,
        tx: u32,
        slot: BatchSlot,
        started: Instant,
    ) -> bool {
        let p = self.queues[s][k];
        let mut acct = RunAccount::default();
        let tx_len;
        let result = {
            let (rxb, txb) = self.transport.frames(&p.pkt, tx);
            tx_len = txb.len();
            let req = Frame::new_unchecked(rxb);
            let adapter = Some(req.adapter()).filter(|a| !a.is_empty());
            match self
                .handlers
                .get_mut(p.slot as usize)
                .and_then(Option::as_mut)
            {
                Some(h) => h.batch_reply(
                    &req,
                    adapter,
                    slot,
                    self.batch_bufs.output.bytes(),
                    txb,
                    &mut acct,
                ),
                None => Err(Reject::new(
                    ErrorCode::UnknownModel,
                    "model is not loaded on this worker",
                )),
            }
        };
        bump(
            &self.counters.payload_bytes_copied,
            acct.payload_bytes_copied,
        );
        let done = Instant::now();
        record(&mut self.hist.queue[s], started - p.arrived);
        record(&mut self.hist.service[s], done - started);
        match result {
            Ok(len) => {
                assert!(
                    len <= tx_len,
                    "handler claims a frame longer than its buffer"
                );
                bump(&self.counters.ok, 1);
                if let Some(m) = self.counters.models.get(p.slot as usize) {
                    m.queued(started - p.arrived);
                }
                self.hand.let_go(tx);
                self.sends.push(TxPacket::answer(&p.pkt, tx, len as u32));
                self.release_queued(s, k);
                record(&mut self.hist.total, done - p.arrived);
                true
            }
            Err(r) => {
                self.hand.let_go(tx);
                self.transport.tx_free(tx);
                let answer = if r.code == ErrorCode::ResponseTooLarge && r.needed_len != 0 {
                    Immediate::TooLarge {
                        needed_len: r.needed_len,
                        buffer_len: tx_len,
                    }
                } else {
                    Immediate::Error(r.code, r.message)
                };
                self.reply_queued(s, k, answer);
                false
            }
        }
    }
}
