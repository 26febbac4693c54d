//! Supervision: a worker whose loop panics answers what it held, resets
//! what the panic may have left half-done, and runs again on the same
//! thread (still pinned to its core) with the same transport. Restarts in
//! quick succession back off exponentially and are reported as a crash
//! loop; a worker that stops failing resumes at once. docs/design.md
//! "Worker supervision" says why the transport is kept.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sluice_wire::ErrorCode;

use super::*;

/// First back-off of a crash loop; doubled per quick failure.
pub const RESTART_BACKOFF_MIN_MS: u64 = 1;
/// Longest back-off of a crash loop.
pub const RESTART_BACKOFF_MAX_MS: u64 = 1000;
/// A panic this soon after a restart continues a crash loop; a worker that
/// runs this long without one has stopped failing.
pub const CRASH_WINDOW_MS: u64 = 1000;
/// Most receive polls a worker that is given up on makes to answer what
/// is queued for it (its socket closes with it).
const FAIL_DRAIN_POLLS_MAX: usize = 64;
/// Longest single sleep while backing off: control messages are applied
/// and queued frames answered between sleeps.
const BACKOFF_SLICE_MS: u64 = 1;
/// Receive bursts a failing worker answers `internal` per back-off slice.
const BACKOFF_BURSTS_MAX: usize = 4;

const WHY: &str = "the worker serving this request failed; retry";

/// Transmit buffers the worker holds outside the transport: taken from a
/// pool and not yet queued to send or given back. A panic while a handler
/// writes into one would leak it; the supervisor gives them back.
pub(super) struct TxHand {
    /// (buffer, connection for [`Transport::tx_free_push`]; `None`: a
    /// plain [`Transport::tx_free`]); `GONE` marks one let go.
    bufs: [(u32, Option<u64>); TX_HAND_MAX],
    /// Live entries lie in `head..n`: a batch lets its buffers go in the
    /// order it took them, so each is found at `head`.
    head: usize,
    n: usize,
}

/// A batch's buffers, an immediate answer built inside a batch pass, and
/// a token frame.
const TX_HAND_MAX: usize = crate::config::limits::BATCH_MAX as usize + 4;
/// An entry of [`TxHand`] let go (no buffer id is this high).
const GONE: u32 = u32::MAX;

impl TxHand {
    pub(super) fn new() -> TxHand {
        TxHand {
            bufs: [(GONE, None); TX_HAND_MAX],
            head: 0,
            n: 0,
        }
    }

    /// Notes `tx` as held (untracked when full: a leak at worst, never a
    /// double free).
    #[inline]
    pub(super) fn hold(&mut self, tx: u32, conn: Option<u64>) {
        if self.n < TX_HAND_MAX {
            self.bufs[self.n] = (tx, conn);
            self.n += 1;
        }
    }

    /// `tx` left the worker's hands (queued to send, or freed).
    #[inline]
    pub(super) fn let_go(&mut self, tx: u32) {
        let Some(i) = self.bufs[self.head..self.n].iter().position(|b| b.0 == tx) else {
            return;
        };
        self.bufs[self.head + i].0 = GONE;
        while self.head < self.n && self.bufs[self.head].0 == GONE {
            self.head += 1;
        }
        while self.n > self.head && self.bufs[self.n - 1].0 == GONE {
            self.n -= 1;
        }
        if self.head == self.n {
            (self.head, self.n) = (0, 0);
        }
    }

    fn take(&mut self) -> Option<(u32, Option<u64>)> {
        while self.n > self.head {
            self.n -= 1;
            let b = self.bufs[self.n];
            if b.0 != GONE {
                return Some(b);
            }
        }
        (self.head, self.n) = (0, 0);
        None
    }
}

/// The crash-loop state of one worker (its supervisor's, not shared).
struct Backoff {
    /// When the loop last restarted (`None`: never, or not within a
    /// crash window).
    restarted: Option<Instant>,
    /// The back-off of the next quick failure.
    next: Duration,
}

impl Backoff {
    /// How long to wait before restarting after a panic now: none when the
    /// loop ran a whole crash window, else the doubling back-off.
    fn after_panic(&mut self) -> Duration {
        let window = Duration::from_millis(CRASH_WINDOW_MS);
        if self.restarted.is_none_or(|at| at.elapsed() >= window) {
            self.next = Duration::from_millis(RESTART_BACKOFF_MIN_MS);
            return Duration::ZERO;
        }
        let d = self.next;
        self.next = (d * 2).min(Duration::from_millis(RESTART_BACKOFF_MAX_MS));
        d
    }
}

impl<T: Transport> Worker<T> {
    /// Runs the loop until the engine stops, restarting it after a panic.
    /// A panic is counted, logged and kept as the worker's last failure;
    /// what the worker held is answered `internal` ([`Worker::fail_held`]),
    /// its per-request state reset, and the loop runs again (after a
    /// back-off when it keeps failing). Only when recovering panics too is
    /// the worker given up: then it stops serving, its socket closes with
    /// it, and the kernel hashes its flows to the other workers.
    pub fn run_supervised(&mut self) {
        let mut backoff = Backoff {
            restarted: None,
            next: Duration::from_millis(RESTART_BACKOFF_MIN_MS),
        };
        let mut wait = None;
        loop {
            let ran = catch_unwind(AssertUnwindSafe(|| {
                if let Some(d) = wait {
                    self.back_off(d);
                    if self.shared.state.load(Ordering::Acquire) == state::STOPPED {
                        return;
                    }
                    self.resume();
                }
                self.run()
            }));
            let Err(p) = ran else {
                break;
            };
            let d = backoff.after_panic();
            if !self.recover(p.as_ref(), d) {
                self.counters.failed.store(true, Ordering::Release);
                break;
            }
            if self.shared.state.load(Ordering::Acquire) == state::STOPPED {
                break;
            }
            wait = Some(d);
            backoff.restarted = Some(Instant::now() + d);
        }
        self.counters.alive.store(false, Ordering::Release);
    }

    /// After a panic: reports it, answers what the worker held and resets
    /// its per-request state. Returns false when that panicked too.
    fn recover(&mut self, p: &(dyn std::any::Any + Send), wait: Duration) -> bool {
        // Not serving from here on: live changes stop waiting for it.
        self.counters.alive.store(false, Ordering::Release);
        let why = panic_text(p);
        bump(&self.counters.panics, 1);
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.counters.failure_at_ms.store(now_ms, Ordering::Relaxed);
        if let Ok(mut f) = self.counters.failure.lock() {
            *f = Some(why.clone());
        }
        let looping = !wait.is_zero();
        if looping {
            self.counters.crash_looping.store(true, Ordering::Relaxed);
            log::error!(
                "worker {} failed again within {CRASH_WINDOW_MS} ms of its restart (crash loop): {why}; restarting in {} ms",
                self.p.index,
                wait.as_millis()
            );
        } else {
            log::error!(
                "worker {} failed: {why}; answering what it held and restarting it",
                self.p.index
            );
        }
        let answered = catch_unwind(AssertUnwindSafe(|| self.fail_held())).is_ok();
        if !answered {
            log::error!("worker {}: could not answer what it held", self.p.index);
        }
        let reset = catch_unwind(AssertUnwindSafe(|| self.reset_after_panic())).is_ok();
        let _ = catch_unwind(AssertUnwindSafe(|| self.publish_stats()));
        if !reset {
            log::error!(
                "worker {}: resetting its state after a panic failed; it stops serving",
                self.p.index
            );
            // Frames already queued for it: its socket closes with it.
            let _ = catch_unwind(AssertUnwindSafe(|| {
                self.answer_queued(FAIL_DRAIN_POLLS_MAX)
            }));
        }
        reset
    }

    /// Serving again: counted, and logged when a crash loop may be over.
    fn resume(&mut self) {
        bump(&self.counters.restarts, 1);
        self.counters.alive.store(true, Ordering::Release);
        self.restarted_at = Some(Instant::now());
        log::info!("worker {} restarted", self.p.index);
    }

    /// Clears the crash-loop flag once the worker ran a whole crash window
    /// since its last restart (called at publish time).
    pub(super) fn note_uptime(&mut self) {
        if let Some(at) = self.restarted_at
            && at.elapsed() >= Duration::from_millis(CRASH_WINDOW_MS)
        {
            self.restarted_at = None;
            if self.counters.crash_looping.swap(false, Ordering::Relaxed) {
                log::warn!(
                    "worker {} ran {CRASH_WINDOW_MS} ms without failing: no longer crash-looping",
                    self.p.index
                );
            }
        }
    }

    /// Waits `d` before a restart. Control messages and new snapshots are
    /// applied meanwhile (the worker holds nothing, so nothing stops them)
    /// and frames that arrive are answered with a retryable `internal`
    /// rather than left waiting out the back-off.
    fn back_off(&mut self, d: Duration) {
        let until = Instant::now() + d;
        loop {
            self.boundary();
            let now = Instant::now();
            if now >= until || self.shared.state.load(Ordering::Acquire) == state::STOPPED {
                // What is queued now is served by the restarted loop.
                return;
            }
            self.answer_queued(BACKOFF_BURSTS_MAX);
            std::thread::sleep((until - now).min(Duration::from_millis(BACKOFF_SLICE_MS)));
        }
    }

    /// Answers frames queued for this worker with a retryable `internal`,
    /// up to `bursts` receive bursts, stopping at the first empty one.
    fn answer_queued(&mut self, bursts: usize) {
        for _ in 0..bursts {
            let n = self.transport.rx_burst(&mut self.rx);
            if n == 0 {
                break;
            }
            self.burst_start = Instant::now();
            self.burst_n = n;
            self.rx_open[..n].fill(true);
            for i in 0..n {
                if self.rx[i].port == PORT_FORWARD {
                    // A peer's answer: its request was failed already.
                    self.release(i);
                } else {
                    self.reply(i, Immediate::Error(ErrorCode::Internal, WHY), None);
                }
                if self.sends.len() == self.sends.capacity() {
                    self.flush_sends();
                }
            }
            self.burst_n = 0;
            self.flush_sends();
        }
    }

    /// After a panic in the loop: answers what the worker held, so its
    /// clients see an error frame rather than silence. Frames of the burst
    /// not answered yet, and requests in the shard queues not answered yet
    /// (this burst's, those a batch held from earlier ones, and those of a
    /// run the panic cut short) get a retryable `internal`; answers already
    /// built go out; requests waiting on peers are failed the same way.
    /// An entry is marked answered only once its answer is queued, so
    /// nothing is answered twice; one whose answer panics again has its
    /// receive buffer released unanswered. Best effort: the worker's state
    /// is whatever the panic left.
    pub fn fail_held(&mut self) {
        // Answers already built (sends hold their buffers).
        self.flush_sends();
        for i in 0..self.burst_n.min(self.rx.len()) {
            if !self.rx_open[i] {
                continue;
            }
            if self.rx[i].port == PORT_FORWARD {
                // A peer's answer: its request is failed with the forwards.
                self.release(i);
                continue;
            }
            let answered = catch_unwind(AssertUnwindSafe(|| {
                self.reply(i, Immediate::Error(ErrorCode::Internal, WHY), None);
            }));
            if answered.is_err() && self.rx_open[i] {
                self.release(i);
            }
            if self.sends.len() == self.sends.capacity() {
                self.flush_sends();
            }
        }
        self.burst_n = 0;
        for s in 0..self.queues.len() {
            for k in 0..self.queues[s].len() {
                if self.queues[s][k].state == batch::State::Done {
                    continue;
                }
                let answered = catch_unwind(AssertUnwindSafe(|| {
                    self.reply_queued(s, k, Immediate::Error(ErrorCode::Internal, WHY));
                }));
                if answered.is_err() && self.queues[s][k].state != batch::State::Done {
                    self.release_queued(s, k);
                }
                if self.sends.len() == self.sends.capacity() {
                    self.flush_sends();
                }
            }
            self.queues[s].clear();
        }
        self.held = 0;
        self.next_due_us = u64::MAX;
        self.flush_sends();
        let mut cursor = 0;
        let now = Instant::now();
        while let Some(f) = self
            .forwarded
            .next_expired(&mut cursor, now, Duration::ZERO)
        {
            self.answer_forward(f, ErrorCode::Internal, WHY);
            if self.sends.len() == self.sends.capacity() {
                self.flush_sends();
            }
        }
        self.flush_sends();
    }

    /// Resets what a panic may have left half-done, after [`Worker::fail_held`]
    /// answered it: transmit buffers taken and never sent go back to the
    /// pool, the burst and queue bookkeeping and the trace records start
    /// empty, and every stream the handlers hold ends (a panic mid-step may
    /// have left its state half-written): a token stream with a last frame
    /// saying `error`, its route given back to the transport; a stateful
    /// stream's next frame is answered `unknown_stream`. The transport, the
    /// handlers' models, the replay table and the snapshot are kept.
    fn reset_after_panic(&mut self) {
        self.flush_sends();
        while let Some((tx, conn)) = self.hand.take() {
            match conn {
                Some(c) => self.transport.tx_free_push(tx, c),
                None => self.transport.tx_free(tx),
            }
        }
        self.burst_n = 0;
        self.rx_open.fill(false);
        for q in &mut self.queues {
            q.clear();
        }
        self.held = 0;
        self.next_due_us = u64::MAX;
        self.span_open.fill(false);
        self.spans_open = false;
        self.held_spans = trace::HeldSpans::new();
        self.marks.reset();
        self.fail_token_streams();
        self.flush_sends();
        let t = &mut self.transport;
        for h in self.handlers.iter_mut().flatten() {
            h.end_streams(&mut |r| t.stream_end(r));
        }
        self.token_slots.clear();
        self.tokens_active = 0;
        self.counters.tokens.set_running(0, 0);
    }
}
