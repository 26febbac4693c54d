//! One pinned worker: receive a burst, parse, authenticate, validate, route,
//! admit, run, send a burst. Run to completion: every frame received in a
//! burst is answered in that burst. After start-up nothing here locks or
//! allocates; control changes arrive at burst boundaries.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender};
use sluice_wire::{BodyRepr, ErrorCode, Frame, FrameRepr, Kind, flags};

use crate::config::PollMode;
use crate::config::limits::{MODEL_SLOT_COUNT_MAX, SHARD_COUNT_MAX};
use crate::handler::{Handler, Reject, RunAccount};
use crate::pending::{Forwarded, PendingForwards};
use crate::rcu::Rcu;
use crate::route::RouteKey;
use crate::stats::{HistExchange, HistSet, WorkerCounters, bump, record};
use crate::tables::Tables;
use crate::transport::{PORT_FORWARD, RxPacket, Transport, TxPacket};

/// Requests a worker may have forwarded to peers and not yet seen answered.
pub const FORWARD_PENDING_MAX: usize = 1024;
/// How long a peer that missed an answer is avoided.
const PEER_DOWN_BACKOFF: Duration = Duration::from_secs(1);
/// How often pending forwards are checked for timeouts.
const FORWARD_SCAN_EVERY: Duration = Duration::from_millis(1);

/// A peer this worker found unresponsive, and until when it is avoided.
#[derive(Debug, Clone, Copy)]
struct PeerDown {
    peer: std::net::SocketAddr,
    until: Instant,
}

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
}

/// Handlers going back to the control side to be dropped off the hot path.
pub type Returned = Box<dyn Handler>;

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
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    pkt: u16,
    slot: u16,
}

/// A worker and everything it owns.
pub struct Worker<T: Transport> {
    p: WorkerParams,
    transport: T,
    shared: Arc<Shared>,
    tables: Arc<Tables>,
    epoch: u64,
    handlers: Vec<Option<Box<dyn Handler>>>,
    ctrl: Receiver<WorkerMsg>,
    returned: Sender<Returned>,
    counters: Arc<WorkerCounters>,
    hist: Box<HistSet>,
    hist_out: Arc<HistExchange>,
    rx: Vec<RxPacket>,
    /// Per shard: requests admitted this burst, in arrival order.
    queues: Vec<Vec<Pending>>,
    sends: Vec<TxPacket>,
    burst_start: Instant,
    now_us: u64,
    last_publish: Instant,
    /// Forwarded requests awaiting their answer. Fixed size.
    forwarded: PendingForwards,
    peers_down: Vec<Option<PeerDown>>,
    last_forward_scan: Instant,
}

const PUBLISH_EVERY: Duration = Duration::from_millis(50);
const SLEEP_MAX: Duration = Duration::from_millis(10);

impl<T: Transport> Worker<T> {
    /// Builds a worker; every buffer it will use is allocated here.
    pub fn new(
        p: WorkerParams,
        transport: T,
        shared: Arc<Shared>,
        handlers: Vec<Option<Box<dyn Handler>>>,
        ctrl: Receiver<WorkerMsg>,
        returned: Sender<Returned>,
        counters: Arc<WorkerCounters>,
        hist_out: Arc<HistExchange>,
    ) -> Worker<T> {
        let (epoch, tables) = shared.tables.load();
        let mut handlers = handlers;
        handlers.resize_with(MODEL_SLOT_COUNT_MAX, || None);
        counters.epoch.store(epoch, Ordering::Release);
        Worker {
            rx: vec![RxPacket::default(); p.rx_burst_max],
            queues: (0..SHARD_COUNT_MAX)
                .map(|_| Vec::with_capacity(p.rx_burst_max))
                .collect(),
            sends: Vec::with_capacity(p.rx_burst_max),
            p,
            transport,
            shared,
            tables,
            epoch,
            handlers,
            ctrl,
            returned,
            counters,
            hist: Box::new(HistSet::new()),
            hist_out,
            burst_start: Instant::now(),
            now_us: 0,
            last_publish: Instant::now(),
            forwarded: PendingForwards::new(FORWARD_PENDING_MAX),
            peers_down: vec![None; crate::config::limits::PEER_COUNT_MAX],
            last_forward_scan: Instant::now(),
        }
    }

    /// Runs until the engine stops.
    pub fn run(&mut self) {
        let mut idle_since: Option<Instant> = None;
        loop {
            let st = self.shared.state.load(Ordering::Acquire);
            if st == state::STOPPED {
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
            if n > 0 {
                idle_since = None;
                continue;
            }
            if self.p.poll == PollMode::Adaptive {
                let since = *idle_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= self.p.spin {
                    bump(&self.counters.sleeps, 1);
                    self.transport.wait(SLEEP_MAX);
                    idle_since = None;
                }
            } else {
                std::hint::spin_loop();
            }
        }
        self.publish_stats();
    }

    /// Applies control messages and a newer snapshot; publishes statistics.
    fn boundary(&mut self) {
        while let Ok(msg) = self.ctrl.try_recv() {
            match msg {
                WorkerMsg::Install { slot, handler } => {
                    if let Some(old) = self.handlers.get_mut(slot).and_then(|s| s.replace(handler))
                    {
                        let _ = self.returned.send(old);
                    }
                }
                WorkerMsg::Remove { slot } => {
                    if let Some(old) = self.handlers.get_mut(slot).and_then(Option::take) {
                        let _ = self.returned.send(old);
                    }
                }
            }
            bump(&self.counters.control_applied, 1);
        }
        if self.shared.tables.epoch() != self.epoch {
            // The replaced Arc is not the last reference: the control side
            // keeps retired snapshots until every worker reports past them.
            let (e, t) = self.shared.tables.load();
            self.tables = t;
            self.epoch = e;
            self.counters.epoch.store(e, Ordering::Release);
        }
        if self.last_publish.elapsed() >= PUBLISH_EVERY {
            self.publish_stats();
        }
    }

    fn publish_stats(&mut self) {
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
    }

    /// One burst. Returns the number of frames received.
    pub fn poll_once(&mut self, draining: bool) -> usize {
        let n = self.transport.rx_burst(&mut self.rx);
        if n == 0 {
            return 0;
        }
        self.burst_start = Instant::now();
        self.now_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        bump(&self.counters.bursts, 1);
        for i in 0..n {
            self.classify(i, draining);
        }
        self.run_queues();
        debug_assert!(self.queues.iter().all(Vec::is_empty));
        self.flush_sends();
        n
    }

    /// Parses, authenticates, validates, routes and admits one frame;
    /// answers it at once when it cannot go further.
    fn classify(&mut self, i: usize, draining: bool) {
        let pkt = self.rx[i];
        if pkt.port == PORT_FORWARD {
            self.relay_answer(i);
            return;
        }
        let verdict = classify_frame(
            self.transport.rx_bytes(&pkt),
            pkt.truncated,
            &self.tables,
            draining,
            self.now_us,
        );
        match verdict {
            Verdict::Drop => {
                bump(&self.counters.not_sluice, 1);
                self.transport.rx_release(&pkt);
            }
            Verdict::Reply(r) => self.reply(i, r, None),
            Verdict::Forward { shard } => {
                bump(&self.counters.shard_requests[shard], 1);
                self.forward(i, shard);
            }
            Verdict::Admit { shard, slot } => {
                bump(&self.counters.shard_requests[shard], 1);
                let depth = self.tables.shards[shard].queue_depth as usize;
                let q = &mut self.queues[shard];
                if q.len() >= depth.min(q.capacity()) {
                    self.reply(
                        i,
                        Immediate::Error(ErrorCode::Busy, "shard queue full"),
                        Some(shard),
                    );
                } else {
                    q.push(Pending {
                        pkt: i as u16,
                        slot: slot as u16,
                    });
                }
            }
        }
    }

    /// Sends a request for a shard this host does not serve to a peer that
    /// carries its labels, remembering where the answer must go.
    fn forward(&mut self, i: usize, shard: usize) {
        let pkt = self.rx[i];
        // One hop only: a request that came from a peer is not sent on.
        let from_peer = self.tables.peers.iter().any(|p| p.addr == pkt.peer);
        let target = if from_peer {
            None
        } else {
            self.tables
                .peer_for(&self.tables.shards[shard])
                .map(|(_, p)| p.addr)
        };
        let Some(peer) = target else {
            self.reply(
                i,
                Immediate::Error(ErrorCode::NoRouteToShard, "no route to shard"),
                Some(shard),
            );
            return;
        };
        if let Err((code, why)) = self.transport.forward_check(&pkt, peer) {
            self.reply(i, Immediate::Error(code, why), Some(shard));
            return;
        }
        let now = Instant::now();
        if self
            .peers_down
            .iter()
            .flatten()
            .any(|d| d.peer == peer && d.until > now)
        {
            self.reply(
                i,
                Immediate::Error(ErrorCode::PeerDown, "the peer serving this shard is down"),
                Some(shard),
            );
            return;
        }
        let (rid, tenant) = {
            let b = self.transport.rx_bytes(&pkt);
            let f = Frame::new_unchecked(b);
            (f.request_id(), f.tenant_id())
        };
        let entry = Forwarded {
            peer,
            request_id: rid,
            tenant_id: tenant,
            client: pkt.peer,
            sent: now,
        };
        // Recorded before sending. Refused when full, or when the same id
        // already waits on this peer (the two answers could not be told
        // apart).
        if self.forwarded.insert(entry).is_err() {
            self.reply(
                i,
                Immediate::Error(ErrorCode::Busy, "too many requests in flight to the peer"),
                Some(shard),
            );
            return;
        }
        // Mark the frame relayed (outside the tag) so the peer never sends
        // it on: one hop only.
        if let Some(f) = self.transport.rx_bytes_mut(&pkt).get_mut(6) {
            *f |= flags::FORWARDED as u8;
        }
        match self.transport.forward(&pkt, peer) {
            Some(copied) => {
                bump(&self.counters.forwarded, 1);
                bump(&self.counters.forward_bytes_copied, copied);
            }
            None => {
                bump(&self.counters.tx_no_buffers, 1);
                if let Some(f) = self.forwarded.take(&peer, rid) {
                    // Sent with the burst's other answers.
                    self.answer_forward(f, "the request could not be sent to the peer");
                }
            }
        }
    }

    /// The connection to `peer` was lost: its forwards fail at once.
    fn fail_forwards_to(&mut self, peer: std::net::SocketAddr) {
        let mut cursor = 0;
        while let Some(f) = self.forwarded.next_to_peer(&mut cursor, &peer) {
            self.answer_forward(f, "the connection to the peer serving this shard was lost");
            if self.sends.len() == self.sends.capacity() {
                self.flush_sends();
            }
        }
        self.flush_sends();
    }

    fn flush_sends(&mut self) {
        if !self.sends.is_empty() {
            self.transport.tx_burst(&self.sends);
            self.sends.clear();
        }
    }

    /// Queues a retryable `peer_down` for a forward that will get no answer.
    fn answer_forward(&mut self, f: Forwarded, message: &'static str) {
        let Some(tx) = self.transport.tx_alloc() else {
            bump(&self.counters.tx_no_buffers, 1);
            return;
        };
        let repr = FrameRepr {
            kind: Kind::Error,
            request_id: f.request_id,
            tenant_id: f.tenant_id,
            body: BodyRepr::Error {
                code: ErrorCode::PeerDown,
                message,
            },
            ..FrameRepr::default()
        };
        match repr.emit(self.transport.tx_bytes(tx)) {
            Ok(l) => {
                self.counters.error(ErrorCode::PeerDown);
                self.sends.push(TxPacket {
                    buf: tx,
                    len: l.frame_len as u32,
                    peer: f.client,
                });
            }
            Err(_) => self.transport.tx_free(tx),
        }
    }

    /// A peer's answer on the forwarding port: relay it to the client.
    fn relay_answer(&mut self, i: usize) {
        let pkt = self.rx[i];
        let rid = {
            let b = self.transport.rx_bytes(&pkt);
            (b.len() >= 24 && b[..4] == sluice_wire::MAGIC)
                .then(|| u64::from_le_bytes(b[16..24].try_into().unwrap_or([0; 8])))
        };
        let Some(f) = rid.and_then(|rid| self.forwarded.take(&pkt.peer, rid)) else {
            bump(&self.counters.forward_stale, 1);
            self.transport.rx_release(&pkt);
            return;
        };
        for d in self.peers_down.iter_mut() {
            if d.is_some_and(|d| d.peer == f.peer) {
                *d = None;
            }
        }
        match self.transport.relay(&pkt, f.client) {
            Some(copied) => {
                bump(&self.counters.relayed, 1);
                bump(&self.counters.forward_bytes_copied, copied);
            }
            None => bump(&self.counters.tx_no_buffers, 1),
        }
    }

    /// Answers forwards whose peer did not answer in time with a retryable
    /// `peer_down`, and avoids that peer for a while.
    fn expire_forwards(&mut self) {
        let now = Instant::now();
        self.last_forward_scan = now;
        let timeout = self.p.forward_timeout;
        let mut cursor = 0;
        while let Some(f) = self.forwarded.next_expired(&mut cursor, now, timeout) {
            bump(&self.counters.forward_timeouts, 1);
            let until = now + PEER_DOWN_BACKOFF;
            match self
                .peers_down
                .iter()
                .position(|d| d.is_some_and(|d| d.peer == f.peer))
            {
                Some(k) => {
                    self.peers_down[k] = Some(PeerDown {
                        peer: f.peer,
                        until,
                    })
                }
                None => {
                    if let Some(k) = self.peers_down.iter().position(Option::is_none) {
                        self.peers_down[k] = Some(PeerDown {
                            peer: f.peer,
                            until,
                        });
                    }
                }
            }
            self.answer_forward(f, "the peer serving this shard did not answer");
            if self.sends.len() == self.sends.capacity() {
                self.flush_sends();
            }
        }
        self.flush_sends();
    }

    /// Runs admitted requests, shard by shard, `max_concurrency` at a time.
    fn run_queues(&mut self) {
        let nshards = self.tables.shards.len().min(SHARD_COUNT_MAX);
        let mut quotas = [0usize; SHARD_COUNT_MAX];
        for (q, s) in quotas.iter_mut().zip(&self.tables.shards) {
            *q = s.max_concurrency as usize;
        }
        let mut heads = [0usize; SHARD_COUNT_MAX];
        loop {
            let mut progressed = false;
            for s in 0..nshards {
                let quota = quotas[s];
                let end = (heads[s] + quota).min(self.queues[s].len());
                for k in heads[s]..end {
                    let p = self.queues[s][k];
                    self.run_one(s, p);
                    progressed = true;
                }
                heads[s] = end;
            }
            if !progressed {
                break;
            }
        }
        for q in &mut self.queues[..nshards] {
            q.clear();
        }
    }

    fn run_one(&mut self, shard: usize, p: Pending) {
        let pkt = self.rx[p.pkt as usize];
        let started = Instant::now();
        let Some(tx) = self.transport.tx_alloc() else {
            bump(&self.counters.tx_no_buffers, 1);
            self.transport.rx_release(&pkt);
            return;
        };
        let now_us = self.now_us;
        let tx_len;
        let result = {
            let (rxb, txb) = self.transport.frames(&pkt, tx);
            tx_len = txb.len();
            let req = Frame::new_unchecked(rxb);
            if req.deadline_us() != 0 && now_us > req.deadline_us() {
                Err(Reject::new(
                    ErrorCode::DeadlineExceeded,
                    "deadline passed before the request ran",
                ))
            } else {
                match self
                    .handlers
                    .get_mut(p.slot as usize)
                    .and_then(Option::as_mut)
                {
                    Some(h) => {
                        let adapter = Some(req.adapter()).filter(|a| !a.is_empty());
                        let mut acct = RunAccount::default();
                        let r = h.handle(&req, adapter, txb, &mut acct);
                        bump(
                            &self.counters.payload_bytes_copied,
                            acct.payload_bytes_copied,
                        );
                        r
                    }
                    None => Err(Reject::new(
                        ErrorCode::UnknownModel,
                        "model is not loaded on this worker",
                    )),
                }
            }
        };
        let done = Instant::now();
        record(&mut self.hist.queue[shard], started - self.burst_start);
        record(&mut self.hist.service[shard], done - started);
        match result {
            Ok(len) => {
                assert!(
                    len <= tx_len,
                    "handler claims a frame longer than its buffer"
                );
                bump(&self.counters.ok, 1);
                self.sends.push(TxPacket {
                    buf: tx,
                    len: len as u32,
                    peer: pkt.peer,
                });
                self.transport.rx_release(&pkt);
                record(&mut self.hist.total, done - self.burst_start);
            }
            Err(r) => {
                self.transport.tx_free(tx);
                let answer = if r.code == ErrorCode::ResponseTooLarge && r.needed_len != 0 {
                    Immediate::TooLarge {
                        needed_len: r.needed_len,
                        buffer_len: tx_len,
                    }
                } else {
                    Immediate::Error(r.code, r.message)
                };
                self.reply(p.pkt as usize, answer, Some(shard));
            }
        }
    }

    /// Answers frame `i` at once and releases its receive buffer.
    fn reply(&mut self, i: usize, r: Immediate, shard: Option<usize>) {
        let pkt = self.rx[i];
        let Some(tx) = self.transport.tx_alloc() else {
            bump(&self.counters.tx_no_buffers, 1);
            self.transport.rx_release(&pkt);
            return;
        };
        let len = {
            let (rxb, txb) = self.transport.frames(&pkt, tx);
            build_immediate(rxb, txb, &r, &self.tables)
        };
        match &r {
            Immediate::Error(code, _) => {
                self.counters.error(*code);
                if let Some(s) = shard {
                    bump(&self.counters.shard_errors[s], 1);
                }
            }
            Immediate::TooLarge { .. } => {
                self.counters.error(ErrorCode::ResponseTooLarge);
                if let Some(s) = shard {
                    bump(&self.counters.shard_errors[s], 1);
                }
            }
            Immediate::Pong => bump(&self.counters.pings, 1),
            Immediate::Negotiate => bump(&self.counters.negotiations, 1),
        }
        self.transport.rx_release(&pkt);
        match len {
            Some(len) => {
                self.sends.push(TxPacket {
                    buf: tx,
                    len: len as u32,
                    peer: pkt.peer,
                });
                record(&mut self.hist.total, self.burst_start.elapsed());
            }
            None => self.transport.tx_free(tx),
        }
    }
}

/// What to answer without running a model.
#[derive(Debug, Clone, Copy)]
pub enum Immediate {
    /// An error frame.
    Error(ErrorCode, &'static str),
    /// `response_too_large`, saying the length needed and the buffer's.
    TooLarge {
        /// Response length needed.
        needed_len: usize,
        /// Reply buffer length.
        buffer_len: usize,
    },
    /// A pong.
    Pong,
    /// A negotiation answer (or unknown_subject) for the request's subject,
    /// looked up once, when the answer is built.
    Negotiate,
}

/// The outcome of classifying a frame.
#[derive(Debug, Clone, Copy)]
pub enum Verdict {
    /// Not a Sluice frame: count and drop.
    Drop,
    /// Answer now.
    Reply(Immediate),
    /// The shard lives on a peer: forward.
    Forward {
        /// Shard index.
        shard: usize,
    },
    /// Queue for the shard; run on the model slot.
    Admit {
        /// Shard index.
        shard: usize,
        /// Handler slot.
        slot: usize,
    },
}

/// Steps 2 to 6 of the data path for one frame: parse, authenticate,
/// validate, route, admit. Pure: no I/O, no allocation.
pub fn classify_frame(
    bytes: &[u8],
    truncated: bool,
    t: &Tables,
    draining: bool,
    now_us: u64,
) -> Verdict {
    use Immediate::Error as E;
    if bytes.len() < 4 || bytes[..4] != sluice_wire::MAGIC {
        return Verdict::Drop;
    }
    if truncated {
        return Verdict::Reply(E(
            ErrorCode::FrameTooLarge,
            "frame larger than the receive buffer",
        ));
    }
    let frame = match Frame::new_checked(bytes) {
        Ok(f) => f,
        Err(e) => return Verdict::Reply(E(e.code(), e.as_str())),
    };
    match frame.kind() {
        Kind::Request => {}
        Kind::Ping => return Verdict::Reply(Immediate::Pong),
        Kind::NegotiateRequest => return Verdict::Reply(Immediate::Negotiate),
        _ => {
            return Verdict::Reply(E(
                ErrorCode::UnsupportedKind,
                "this endpoint accepts requests, pings and negotiations",
            ));
        }
    }
    if draining {
        return Verdict::Reply(E(ErrorCode::ShuttingDown, "appliance is shutting down"));
    }
    let mut tenant_name = "";
    let tenant = if t.auth_required() {
        let auth = Verdict::Reply(E(ErrorCode::Unauthenticated, "authentication failed"));
        let Some(tenant) = t.tenant(frame.tenant_id()) else {
            return auth;
        };
        if frame.flags() & flags::AUTHENTICATED == 0 || !tenant.key.verify(&frame) {
            return auth;
        }
        tenant_name = &tenant.name;
        Some(tenant)
    } else {
        None
    };
    if frame.model_version().is_empty() {
        return Verdict::Reply(E(ErrorCode::ModelVersionRequired, "model version required"));
    }
    if frame.deadline_us() != 0 && now_us > frame.deadline_us() {
        return Verdict::Reply(E(
            ErrorCode::DeadlineExceeded,
            "deadline passed before the request ran",
        ));
    }
    // Validation comes before routing: routes may look into the section.
    let mut json = None;
    if frame.schema_id() != 0 {
        match t.schemas.validate(&frame) {
            Ok(j) => json = j,
            Err(r) => return Verdict::Reply(E(r.code, r.message)),
        }
    }
    let model = t.models.resolve(frame.model(), frame.model_version());
    let key = RouteKey {
        model: frame.model(),
        version: model.map_or(frame.model_version(), |m| m.version.as_str()),
        adapter: frame.adapter(),
        intent: frame.intent(),
        tenant: tenant_name,
        json,
    };
    let Some((_, route)) = t.routes.find(&key) else {
        return Verdict::Reply(E(ErrorCode::NoRoute, "no route matches the request"));
    };
    let forbidden = Verdict::Reply(E(ErrorCode::Forbidden, "not permitted for this tenant"));
    if let Some(tn) = tenant {
        if !tn.allows_route(&route.name) || !tn.allows_model(frame.model()) {
            return forbidden;
        }
        if !frame.adapter().is_empty() && !tn.allows_adapter(frame.adapter()) {
            return forbidden;
        }
    }
    let shard = route.shard;
    if !t.shards[shard].local {
        if frame.flags() & flags::FORWARDED != 0 {
            return Verdict::Reply(E(
                ErrorCode::NoRouteToShard,
                "no route to shard (already forwarded once)",
            ));
        }
        return Verdict::Forward { shard };
    }
    let Some(model) = model else {
        return Verdict::Reply(E(ErrorCode::UnknownModel, "unknown model or version"));
    };
    if !frame.adapter().is_empty() && !model.adapters.iter().any(|a| a == frame.adapter()) {
        return Verdict::Reply(E(
            ErrorCode::UnknownAdapter,
            "unknown adapter for this model",
        ));
    }
    Verdict::Admit {
        shard,
        slot: model.slot,
    }
}

/// Writes an immediate answer to `req` into `tx`. `None` when even the error
/// frame cannot be built (cannot happen with buffers of at least 2 KiB).
fn build_immediate(req: &[u8], tx: &mut [u8], r: &Immediate, t: &Tables) -> Option<usize> {
    // The request may be malformed: echo only the fields that are readable.
    let rid = req
        .get(16..24)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    let tenant = req
        .get(12..16)
        .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])));
    let checked = Frame::new_checked(req).ok();
    let trace = checked.as_ref().map(|f| f.trace()).unwrap_or_default();
    let base = FrameRepr {
        request_id: rid,
        tenant_id: tenant,
        trace,
        ..FrameRepr::default()
    };
    let mut text = MessageBuf::default();
    let repr = match *r {
        Immediate::Error(code, message) => FrameRepr {
            kind: Kind::Error,
            body: BodyRepr::Error { code, message },
            ..base
        },
        Immediate::TooLarge {
            needed_len,
            buffer_len,
        } => {
            use core::fmt::Write;
            let _ = write!(
                text,
                "response needs {needed_len} bytes; the reply buffer holds {buffer_len}"
            );
            FrameRepr {
                kind: Kind::Error,
                body: BodyRepr::Error {
                    code: ErrorCode::ResponseTooLarge,
                    message: text.as_str(),
                },
                ..base
            }
        }
        Immediate::Pong => FrameRepr {
            kind: Kind::Pong,
            ..base
        },
        Immediate::Negotiate => {
            let found = checked
                .as_ref()
                .and_then(|f| f.negotiate_request())
                .and_then(|n| t.schemas.negotiate(n.subject, n.version_hint));
            match found {
                Some(e) => FrameRepr {
                    kind: Kind::NegotiateResponse,
                    schema_id: e.id,
                    schema_version: e.version,
                    body: BodyRepr::NegotiateResponse {
                        schema_id: e.id,
                        version: e.version,
                        ttl_ms: t.schemas.ttl_ms,
                        schema_type: e.schema_type,
                        schema: &e.text,
                    },
                    ..base
                },
                None => FrameRepr {
                    kind: Kind::Error,
                    body: BodyRepr::Error {
                        code: ErrorCode::UnknownSubject,
                        message: "unknown subject or version",
                    },
                    ..base
                },
            }
        }
    };
    repr.emit(tx).ok().map(|l| l.frame_len)
}

/// A message formatted on the stack (error frames carry at most 256 bytes).
struct MessageBuf {
    buf: [u8; sluice_wire::limits::ERROR_MESSAGE_LEN_MAX],
    len: usize,
}

impl Default for MessageBuf {
    fn default() -> Self {
        MessageBuf {
            buf: [0; sluice_wire::limits::ERROR_MESSAGE_LEN_MAX],
            len: 0,
        }
    }
}

impl MessageBuf {
    fn as_str(&self) -> &str {
        // Only whole `&str`s are written (see write_str), so this holds.
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl core::fmt::Write for MessageBuf {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let end = self.len + s.len();
        if end > self.buf.len() {
            return Err(core::fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}
