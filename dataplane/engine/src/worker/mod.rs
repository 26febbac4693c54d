//! One pinned worker: receive a burst, parse, authenticate, validate, route,
//! admit, run, send a burst. Run to completion: every frame received in a
//! burst is answered in that burst, except requests a batching shard holds
//! for up to `batch_delay_us` to stack with later ones (`batch.rs`); those
//! are answered by a later iteration of the same loop. After start-up
//! nothing here locks or allocates; control changes arrive at burst
//! boundaries.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender};
use sluice_wire::{ErrorCode, Frame};

use crate::auth::{ReplayGuard, ReplayKey};
use crate::config::PollMode;
use crate::config::limits::{MODEL_SLOT_COUNT_MAX, SHARD_COUNT_MAX};
use crate::handler::{BatchKey, Handler, Reject, RunAccount};
use crate::pending::PendingForwards;
use crate::rcu::Rcu;
use crate::stats::{HistExchange, HistSet, WorkerCounters, bump, record};
use crate::tables::{BatchPolicy, Tables};
use crate::transport::{PORT_FORWARD, RxPacket, Transport, TxPacket};

mod batch;
mod classify;
mod forward;
mod reply;
mod run;
mod supervise;
mod tokens;
mod trace;

pub use classify::{Immediate, Verdict, classify_frame, classify_traced};
use classify::{Marks, build_immediate};

mod transform;
pub use forward::FORWARD_PENDING_MAX;
use forward::{FORWARD_SCAN_EVERY, PeerDown};
pub use supervise::{CRASH_WINDOW_MS, RESTART_BACKOFF_MAX_MS, RESTART_BACKOFF_MIN_MS};

/// Engine run state, shared by all workers.
pub mod state {
    /// Serving.
    pub const RUNNING: u8 = 0;
    /// Answering new requests with `shutting_down`, still serving pings.
    pub const DRAINING: u8 = 1;
    /// Exit after the current burst.
    pub const STOPPED: u8 = 2;
}

/// What workers share with the control side.
#[derive(Debug)]
pub struct Shared {
    /// The tables.
    pub tables: Rcu<Tables>,
    /// Run state.
    pub state: AtomicU8,
}

/// Messages from the control side, applied at a burst boundary.
pub enum WorkerMsg {
    /// Puts a handler in a model slot.
    Install {
        /// Slot.
        slot: usize,
        /// Handler for this worker.
        handler: Box<dyn Handler>,
    },
    /// Empties a slot.
    Remove {
        /// Slot.
        slot: usize,
    },
    /// Puts a schema transform instance in a transform slot.
    InstallTransform {
        /// Slot.
        slot: usize,
        /// This worker's instance.
        instance: Box<sluice_transform::Instance>,
    },
    /// Empties a transform slot.
    RemoveTransform {
        /// Slot.
        slot: usize,
    },
}

/// What goes back to the control side to be dropped off the hot path.
pub enum Returned {
    /// A replaced or removed model handler.
    Handler(Box<dyn Handler>),
    /// A replaced or removed transform instance.
    Transform(Box<sluice_transform::Instance>),
}

/// A worker's channels to the control side and what it publishes there.
pub struct WorkerLinks {
    /// Control messages, applied at burst boundaries.
    pub ctrl: Receiver<WorkerMsg>,
    /// Replaced handlers, dropped by the control side.
    pub returned: Sender<Returned>,
    /// Counters the control side reads.
    pub counters: Arc<WorkerCounters>,
    /// Latency histograms, published every `PUBLISH_EVERY`.
    pub hist_out: Arc<HistExchange>,
    /// Span records of traced requests, drained by the control side.
    pub spans: Arc<crate::trace::SpanRing>,
    /// Token load per second, read by the control side (heatmap).
    pub load: Arc<crate::load::LoadRing>,
    /// The eventfd the transport's `wait` returns for, written by the
    /// control side after a publish; `None`: sleeps run to their bound.
    pub wake: Option<Arc<crate::transport::ingress::Wake>>,
}

/// Worker settings.
#[derive(Debug, Clone, Copy)]
pub struct WorkerParams {
    /// Index.
    pub index: usize,
    /// Frames per burst.
    pub rx_burst_max: usize,
    /// Poll mode.
    pub poll: PollMode,
    /// Spin before sleeping.
    pub spin: Duration,
    /// How long a forwarded request waits for its peer.
    pub forward_timeout: Duration,
    /// Slots of the replay tag table (`auth.replay_entries`).
    pub replay_entries: usize,
    /// Replay windows (`auth.replay_senders`).
    pub replay_senders: usize,
    /// Request ids per window (`auth.replay_window_ids`).
    pub replay_window_ids: usize,
    /// Which requests are traced (`[tracing]`).
    pub sampler: crate::trace::Sampler,
}

/// A request admitted to a shard queue. It keeps its receive buffer until
/// answered, which may be a later loop iteration when a batch holds it.
#[derive(Debug, Clone, Copy)]
struct Pending {
    pkt: RxPacket,
    /// Its index in the burst it arrived in (its span record's, when
    /// traced); meaningful only while `arrived` is the current burst's.
    rx_index: u16,
    slot: u16,
    /// Start of the burst it arrived in: queue delay runs from here.
    arrived: Instant,
    /// The same, µs since the epoch (compared with deadlines).
    arrived_us: u64,
    /// The frame's deadline (µs since the epoch; 0: none).
    deadline_us: u64,
    batch: BatchPolicy,
    /// Where it may stack; `None`: it runs on its own.
    key: Option<BatchKey>,
    state: batch::State,
    /// Its span record in `held_spans` once a batch held it past the
    /// burst it arrived in (traced requests only); `trace::NO_SPAN` else.
    span: u16,
    /// The schema transform it goes through first (never batched).
    transform: Option<crate::transform::TransformRef>,
}

/// A worker and everything it owns.
pub struct Worker<T: Transport> {
    p: WorkerParams,
    transport: T,
    shared: Arc<Shared>,
    tables: Arc<Tables>,
    epoch: u64,
    handlers: Vec<Option<Box<dyn Handler>>>,
    /// Schema transform instances by slot (`transform::TransformRef::slot`).
    transforms: Vec<Option<Box<sluice_transform::Instance>>>,
    ctrl: Receiver<WorkerMsg>,
    returned: Sender<Returned>,
    counters: Arc<WorkerCounters>,
    hist: Box<HistSet>,
    hist_out: Arc<HistExchange>,
    rx: Vec<RxPacket>,
    /// Frames of the current burst: `rx[..burst_n]`.
    burst_n: usize,
    /// Per frame of the burst: received and not yet answered, forwarded or
    /// released (what a failing worker still holds).
    rx_open: Box<[bool]>,
    /// Per shard: requests admitted and not yet answered, in arrival order
    /// (this burst's, and those a batch holds from earlier ones).
    queues: Vec<Vec<Pending>>,
    /// Requests left in the queues after the last pass (held by batches).
    held: usize,
    /// When the earliest held batch is due (µs since the epoch).
    next_due_us: u64,
    /// Batch gather and output buffers, made at start-up.
    batch_bufs: batch::BatchBufs,
    /// Per model slot: how long its last batched run took, ns (a held
    /// batch runs early enough for its members' deadlines).
    batch_run_ns: [u64; MODEL_SLOT_COUNT_MAX],
    sends: Vec<TxPacket>,
    burst_start: Instant,
    /// Wall clock of the burst in µs since the Unix epoch; never runs
    /// backwards on a worker, so a step back of the system clock cannot
    /// make a frame whose deadline passed fresh again.
    now_us: u64,
    /// Authenticated frames accepted, until their deadlines: senders'
    /// windows and the tag table. Fixed size.
    replay: ReplayGuard,
    last_publish: Instant,
    /// Forwarded requests awaiting their answer. Fixed size.
    forwarded: PendingForwards,
    peers_down: Vec<Option<PeerDown>>,
    last_forward_scan: Instant,
    /// Where the current frame's stages ended (traced frames only).
    marks: Marks,
    /// Wall clock of the burst, ns since the Unix epoch.
    burst_wall_ns: u64,
    /// Per frame of the burst: its span record, when traced.
    span_recs: Box<[crate::trace::SpanRecord]>,
    span_open: Box<[bool]>,
    /// Some frame of this burst is traced.
    spans_open: bool,
    span_ids: crate::trace::SpanIds,
    spans: Arc<crate::trace::SpanRing>,
    /// Span records of traced requests held past their burst by a batch.
    held_spans: trace::HeldSpans,
    /// This worker's side of its load ring (heatmap counters).
    load: crate::load::LoadWriter,
    /// See [`WorkerLinks::wake`].
    wake: Option<Arc<crate::transport::ingress::Wake>>,
    /// Token streams generating on this worker (the loop does not sleep
    /// while any does).
    tokens_active: usize,
    /// The model slots with token streams (each once; capacity for every
    /// slot, made here): an iteration visits these, not every slot (a
    /// scan of all `MODEL_SLOT_COUNT_MAX` slots per iteration was a tenth
    /// of the worker's time at one stream).
    token_slots: Vec<u32>,
    /// Transmit buffers taken and not yet sent or freed (given back after
    /// a panic).
    hand: supervise::TxHand,
    /// When the loop last restarted after a panic, until it has run a
    /// crash window since.
    restarted_at: Option<Instant>,
}

const PUBLISH_EVERY: Duration = Duration::from_millis(50);
/// Replay windows a publish looks at to count the live ones: the default
/// table (4 Ki) in one go, the largest in 32 publishes.
const REPLAY_SWEEP_WINDOWS: usize = 4_096;

const SLEEP_MAX: Duration = Duration::from_millis(10);

impl<T: Transport> Worker<T> {
    /// Builds a worker; every buffer it will use is allocated here.
    pub fn new(
        p: WorkerParams,
        mut transport: T,
        shared: Arc<Shared>,
        handlers: Vec<Option<Box<dyn Handler>>>,
        links: WorkerLinks,
    ) -> Worker<T> {
        let WorkerLinks {
            ctrl,
            returned,
            counters,
            hist_out,
            spans,
            load,
            wake,
        } = links;
        let (epoch, tables) = shared.tables.load();
        transport.tables(&tables);
        let mut handlers = handlers;
        handlers.resize_with(MODEL_SLOT_COUNT_MAX, || None);
        counters.epoch.store(epoch, Ordering::Release);
        Worker {
            rx: vec![RxPacket::default(); p.rx_burst_max],
            burst_n: 0,
            rx_open: vec![false; p.rx_burst_max].into_boxed_slice(),
            // Room for a burst and a full batch held from earlier bursts.
            queues: (0..SHARD_COUNT_MAX)
                .map(|_| Vec::with_capacity(p.rx_burst_max + batch::HOLD_MAX))
                .collect(),
            held: 0,
            next_due_us: u64::MAX,
            batch_bufs: batch::BatchBufs::new(),
            batch_run_ns: [0; MODEL_SLOT_COUNT_MAX],
            sends: Vec::with_capacity(p.rx_burst_max),
            p,
            transport,
            shared,
            tables,
            epoch,
            handlers,
            transforms: (0..crate::transform::limits::TRANSFORM_SLOT_COUNT_MAX)
                .map(|_| None)
                .collect(),
            ctrl,
            returned,
            counters,
            hist: Box::new(HistSet::new()),
            hist_out,
            burst_start: Instant::now(),
            now_us: 0,
            replay: ReplayGuard::new(p.replay_entries, p.replay_senders, p.replay_window_ids),
            last_publish: Instant::now(),
            forwarded: PendingForwards::new(FORWARD_PENDING_MAX),
            peers_down: vec![None; crate::config::limits::PEER_COUNT_MAX],
            last_forward_scan: Instant::now(),
            marks: Marks {
                sampler: p.sampler,
                ..Marks::default()
            },
            burst_wall_ns: 0,
            span_recs: vec![crate::trace::SpanRecord::default(); p.rx_burst_max].into_boxed_slice(),
            span_open: vec![false; p.rx_burst_max].into_boxed_slice(),
            spans_open: false,
            span_ids: crate::trace::SpanIds::new(p.index),
            spans,
            held_spans: trace::HeldSpans::new(),
            load: crate::load::LoadWriter::new(load),
            wake,
            tokens_active: 0,
            token_slots: Vec::with_capacity(MODEL_SLOT_COUNT_MAX),
            hand: supervise::TxHand::new(),
            restarted_at: None,
        }
    }

    /// The transport (benchmarks read what it counted).
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// The transport, writable (benchmarks feed it).
    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.transport
    }

    /// Runs until the engine stops.
    pub fn run(&mut self) {
        let mut idle_since: Option<Instant> = None;
        loop {
            let st = self.shared.state.load(Ordering::Acquire);
            if st == state::STOPPED {
                // Nothing accepted is dropped: held batches run now.
                self.flush_held();
                break;
            }
            self.boundary();
            let n = self.poll_once(st == state::DRAINING);
            while let Some(peer) = self.transport.lost_peer() {
                self.fail_forwards_to(peer);
            }
            if !self.forwarded.is_empty() && self.last_forward_scan.elapsed() >= FORWARD_SCAN_EVERY
            {
                self.expire_forwards();
            }
            if n > 0 || self.tokens_active > 0 {
                idle_since = None;
                continue;
            }
            if self.p.poll == PollMode::Adaptive {
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= self.p.spin {
                    // A held batch bounds the sleep: it wakes for the
                    // batch's delay or deadline, or for the next frame.
                    let sleep = if self.held > 0 {
                        Duration::from_micros(self.next_due_us.saturating_sub(self.now_us))
                            .min(SLEEP_MAX)
                    } else {
                        SLEEP_MAX
                    };
                    if !sleep.is_zero() {
                        self.sleep(sleep);
                    }
                    idle_since = None;
                }
            } else {
                std::hint::spin_loop();
            }
        }
        self.publish_stats();
    }

    /// Sleeps on the transport for up to `d`, unless a control change is
    /// already waiting: the `sleeping` flag is raised first, so a publish
    /// after the check finds it and writes the eventfd the transport polls.
    fn sleep(&mut self, d: Duration) {
        if let Some(k) = &self.wake {
            k.prepare_sleep();
            // Pairs with the fence in `Engine::poke`.
            std::sync::atomic::fence(Ordering::SeqCst);
            if !self.ctrl.is_empty() || self.shared.tables.epoch() != self.epoch {
                k.awake();
                return;
            }
        }
        bump(&self.counters.sleeps, 1);
        self.transport.wait(d);
        if let Some(k) = &self.wake {
            k.awake();
        }
    }

    /// Applies control messages and a newer snapshot; publishes statistics.
    fn boundary(&mut self) {
        if self.last_publish.elapsed() >= PUBLISH_EVERY {
            self.publish_stats();
        }
        let pending = !self.ctrl.is_empty() || self.shared.tables.epoch() != self.epoch;
        if !pending {
            return;
        }
        // Held requests run under the handlers and tables that admitted
        // them: shard and slot numbers may change with what follows. Holds
        // only start in poll_once, so once none is left anything that has
        // arrived by now can be applied.
        if self.held > 0 {
            self.flush_held();
            if self.held > 0 {
                // Some found no transmit buffer; apply at a later boundary.
                return;
            }
        }
        while let Ok(msg) = self.ctrl.try_recv() {
            match msg {
                WorkerMsg::Install { slot, handler } => {
                    if let Some(mut old) =
                        self.handlers.get_mut(slot).and_then(|s| s.replace(handler))
                    {
                        // Its token streams end with it (no last frame).
                        let t = &mut self.transport;
                        old.token_ended(true, &mut |r| t.stream_end(r));
                        let _ = self.returned.send(Returned::Handler(old));
                    }
                }
                WorkerMsg::Remove { slot } => {
                    if let Some(mut old) = self.handlers.get_mut(slot).and_then(Option::take) {
                        let t = &mut self.transport;
                        old.token_ended(true, &mut |r| t.stream_end(r));
                        let _ = self.returned.send(Returned::Handler(old));
                    }
                }
                WorkerMsg::InstallTransform { slot, instance } => {
                    if let Some(old) = self
                        .transforms
                        .get_mut(slot)
                        .and_then(|s| s.replace(instance))
                    {
                        let _ = self.returned.send(Returned::Transform(old));
                    }
                }
                WorkerMsg::RemoveTransform { slot } => {
                    if let Some(old) = self.transforms.get_mut(slot).and_then(Option::take) {
                        let _ = self.returned.send(Returned::Transform(old));
                    }
                }
            }
            bump(&self.counters.control_applied, 1);
        }
        if self.shared.tables.epoch() != self.epoch {
            // The replaced Arc is not the last reference: the control side
            // keeps retired snapshots until every worker reports past them.
            let (e, t) = self.shared.tables.load();
            // Before the epoch is reported: the transport's old reference
            // is then never the snapshot's last.
            self.transport.tables(&t);
            self.tables = t;
            self.epoch = e;
            self.counters.epoch.store(e, Ordering::Release);
        }
    }

    /// Reclaims idle streams (a bounded scan per model) and counts what
    /// the stream tables did since the last tick.
    fn stream_tick(&mut self) {
        // The burst clock stands still while no frame comes: idle streams
        // are judged by the wall clock (never behind the burst's).
        let wall_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let now_us = self.now_us.max(wall_us);
        let mut open = 0u64;
        let mut any = false;
        for h in self.handlers.iter_mut().flatten() {
            if let Some((c, n)) = h.stream_tick(now_us) {
                any = true;
                open += n as u64;
                self.counters.streams.add(&c);
            }
        }
        if any {
            self.counters.streams.open.store(open, Ordering::Relaxed);
        }
    }

    fn publish_stats(&mut self) {
        self.note_uptime();
        self.stream_tick();
        self.last_publish = Instant::now();
        self.hist_out.publish(&self.hist);
        let c = self.transport.counters();
        let k = &self.counters;
        let set = |a: &std::sync::atomic::AtomicU64, v: u64| a.store(v, Ordering::Relaxed);
        set(&k.rx_frames, c.rx_frames);
        set(&k.tx_frames, c.tx_frames);
        set(&k.rx_no_buffers, c.rx_no_buffers);
        set(&k.tx_errors, c.tx_errors);
        set(&k.rx_in_use, c.rx_in_use as u64);
        set(&k.tx_in_use, c.tx_in_use as u64);
        set(&k.buffer_reuses, c.buffer_reuses);
        set(&k.rx_kernel_drops, c.rx_kernel_drops);
        for (a, p) in k.pools.iter().zip(&c.pools) {
            a.store(p);
        }
        let live = self.replay.sweep_live(self.now_us, REPLAY_SWEEP_WINDOWS);
        k.replay.store(&self.replay.counts(), live);
    }

    /// One burst. Returns the number of frames received.
    pub fn poll_once(&mut self, draining: bool) -> usize {
        let n = self.transport.rx_burst(&mut self.rx);
        if n == 0 && self.held == 0 && self.tokens_active == 0 {
            return 0;
        }
        let wall_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        self.now_us = self.now_us.max(wall_ns / 1000);
        self.load.tick(self.now_us);
        if n > 0 {
            self.burst_start = Instant::now();
            self.burst_wall_ns = wall_ns;
            bump(&self.counters.bursts, 1);
        }
        self.burst_n = n;
        self.rx_open[..n].fill(true);
        for i in 0..n {
            self.classify(i, draining);
        }
        // Tests make a worker fail here, mid-burst: frames classified,
        // requests queued, none run.
        #[cfg(feature = "fault-hooks")]
        if n > 0 {
            crate::fault::hit(self.p.index);
        }
        self.run_queues(draining);
        debug_assert!(
            self.rx_open[..n].iter().all(|o| !o),
            "a frame left unanswered"
        );
        // Between bursts, one decode step per token stream: what was
        // admitted above ran first, so generation never holds it up.
        if self.tokens_active > 0 {
            self.token_iteration();
        }
        self.flush_sends();
        self.trace_flush();
        self.burst_n = 0;
        n
    }

    /// Runs every held request now, ignoring batch delays.
    fn flush_held(&mut self) {
        // The worker's clock never runs back (auth's freshness rule).
        let wall_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        self.now_us = self.now_us.max(wall_us);
        self.load.tick(self.now_us);
        self.run_queues(true);
        self.flush_sends();
    }

    /// Releases frame `i`'s receive buffer: its life in this burst ends.
    fn release(&mut self, i: usize) {
        self.rx_open[i] = false;
        let pkt = self.rx[i];
        self.transport.rx_release(&pkt);
    }

    /// Parses, authenticates, validates, routes and admits one frame;
    /// answers it at once when it cannot go further.
    fn classify(&mut self, i: usize, draining: bool) {
        let pkt = self.rx[i];
        if pkt.port == PORT_FORWARD {
            self.relay_answer(i);
            return;
        }
        self.marks.reset();
        let verdict = classify_traced(
            self.transport.rx_bytes(&pkt),
            pkt.truncated,
            &self.tables,
            draining,
            self.now_us,
            Some(&mut self.replay),
            &mut self.marks,
        );
        if self.marks.on {
            self.trace_begin(i, &verdict);
        }
        match verdict {
            Verdict::Drop => {
                bump(&self.counters.not_sluice, 1);
                self.release(i);
            }
            Verdict::Reply(r) => self.reply(i, r, None),
            Verdict::Forward { shard } => {
                bump(&self.counters.shard_requests[shard], 1);
                self.load_request(&pkt, Some(shard), None);
                self.forward(i, shard);
            }
            Verdict::Admit {
                shard,
                slot,
                batch,
                transform,
            } => {
                bump(&self.counters.shard_requests[shard], 1);
                let lk = self.load_request(&pkt, Some(shard), Some(slot));
                let depth = self.tables.shards[shard].queue_depth as usize;
                let q = &self.queues[shard];
                if q.len() >= depth.min(q.capacity()) {
                    // A stream transport takes the frame back and stops
                    // reading its connection (back-pressure, not loss).
                    // It is forgotten: the frame is checked again, and
                    // accepted once, when it comes back.
                    let key = ReplayKey::of(&Frame::new_unchecked(self.transport.rx_bytes(&pkt)));
                    if self.transport.rx_defer(&pkt) {
                        if self.tables.auth.required {
                            self.replay.forget(&key);
                        }
                        self.rx_open[i] = false;
                        return;
                    }
                    self.reply(
                        i,
                        Immediate::Error(ErrorCode::Busy, "shard queue full"),
                        Some(shard),
                    );
                    return;
                }
                let frame = Frame::new_unchecked(self.transport.rx_bytes(&pkt));
                // A transformed request is rebuilt in its instance's buffer
                // when it runs: it runs on its own.
                let key = if batch.max > 1 && transform.is_none() {
                    let adapter = Some(frame.adapter()).filter(|a| !a.is_empty());
                    self.handlers
                        .get(slot)
                        .and_then(Option::as_ref)
                        .and_then(|h| h.batch_key(&frame, adapter))
                } else {
                    None
                };
                let p = Pending {
                    pkt,
                    rx_index: i as u16,
                    slot: slot as u16,
                    arrived: self.burst_start,
                    arrived_us: self.now_us,
                    deadline_us: frame.deadline_us(),
                    batch,
                    key,
                    state: batch::State::Waiting,
                    span: trace::NO_SPAN,
                    transform,
                };
                self.queues[shard].push(p);
                let depth = self.queues[shard].len() as u32;
                self.load.depth(lk, depth);
                probes_sys::admit(|| {
                    let rid = Frame::new_unchecked(self.transport.rx_bytes(&pkt)).request_id();
                    (rid, shard as u32, depth)
                });
                // The queue holds it from here (answered by run_queues).
                self.rx_open[i] = false;
            }
        }
    }

    fn flush_sends(&mut self) {
        if !self.sends.is_empty() {
            probes_sys::send(|| {
                let bytes = self.sends.iter().map(|p| u64::from(p.len)).sum();
                (self.sends.len() as u32, bytes)
            });
            self.transport.tx_burst(&self.sends);
            self.sends.clear();
        }
    }
}

impl<T: Transport> Worker<T> {
    /// Counts a routed request in the load ring: its declared tokens, one
    /// request. Returns its cells for the queue depth and later tokens.
    #[inline]
    fn load_request(
        &mut self,
        pkt: &RxPacket,
        shard: Option<usize>,
        slot: Option<usize>,
    ) -> crate::load::LoadKey {
        let f = Frame::new_unchecked(self.transport.rx_bytes(pkt));
        let (tenant, tokens) = (f.tenant_id(), f.token_count());
        let k = self.load.key(shard, slot, tenant);
        self.load.request(k, tokens);
        k
    }

    /// Adds `n` generated tokens to the current second of the heatmap for
    /// a request of `tenant` on `shard` run by model slot `slot` (token
    /// streams add theirs through `worker/tokens.rs`'s sink, one per token).
    #[inline]
    pub fn load_tokens(&mut self, shard: usize, slot: Option<usize>, tenant: u32, n: u32) {
        let k = self.load.key(Some(shard), slot, tenant);
        self.load.add_tokens(k, n);
    }
}

/// The message of a caught panic.
pub fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}
