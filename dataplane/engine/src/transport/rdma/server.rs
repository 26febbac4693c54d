//! The appliance side: one control thread per process runs rdma_cm (listen,
//! accept, disconnect, close) and one [`RdmaTransport`] per worker polls its
//! own completion queue.
//!
//! Hand-off: the control thread creates each QP on the chosen worker's CQ
//! and SRQ, queues `Up` for that worker, then accepts. The worker applies
//! queued changes at the start of each burst (and again when a completion
//! names a QP it does not know yet). On disconnect or close the control
//! thread queues `Down`; the worker stops using the QP and acknowledges;
//! only then is the QP destroyed.
//!
//! Peers: the control thread also opens, per worker, one RC connection to
//! each `[[peers]]` entry with `transport = "rdma"`, on that worker's CQ and
//! SRQ. Per worker rather than shared, so a forward is posted and its answer
//! polled by the worker that holds the pending entry, with no lock and no
//! hand-off between threads. A lost peer connection is reported to its
//! worker (which fails the forwards waiting on it) and reconnected with a
//! bounded backoff.

use std::io;
use std::net::{SocketAddr, SocketAddrV6};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use serde::Serialize;

use sluice_wire::ErrorCode;

use super::proto::{ClientHello, IMM_SLOT, ServerHello};
use super::verbs::{
    self, Access, CmChannel, CmEventKind, CmId, ConnParams, Context, Cq, Mr, Pd, Qp, QpCaps,
    SendOp, Srq, Wc, WcKind,
};
use super::{NO_DEVICE_HINT, RdmaCfg, device_check};
use crate::config::{Config, ConfigError, HugepageMode, PeerTransport};
use crate::pool::{FreeList, PoolError, Region};
use crate::transport::{RxPacket, Transport, TransportCounters, TxPacket};

/// Which connection a frame went out on, for its counters.
#[derive(Debug, Clone, Copy)]
enum Via {
    /// A client connection, by slot.
    Client(usize),
    /// A peer connection, by peer index.
    Peer(usize),
}

/// Why the RDMA transport could not start or act.
#[derive(Debug)]
pub enum RdmaError {
    /// The host has no RDMA device.
    NoDevice(String),
    /// Bad `[rdma]` table.
    Config(ConfigError),
    /// An rdma_cm call failed.
    Cm(&'static str, io::Error),
    /// A verbs call failed.
    Verbs(&'static str, io::Error),
    /// Buffer memory.
    Pool(PoolError),
    /// The listen address is on no RDMA device, or a worker is out of range.
    Setup(String),
    /// No connection has this id.
    UnknownConnection(u64),
}

impl std::fmt::Display for RdmaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RdmaError::NoDevice(m) => write!(f, "rdma: {m}; {NO_DEVICE_HINT}"),
            RdmaError::Config(e) => write!(f, "rdma config: {e}"),
            RdmaError::Cm(what, e) => write!(f, "rdma_cm {what}: {e}"),
            RdmaError::Verbs(what, e) => write!(f, "ibverbs {what}: {e}"),
            RdmaError::Pool(e) => write!(f, "rdma pool: {e}"),
            RdmaError::Setup(m) => write!(f, "rdma: {m}"),
            RdmaError::UnknownConnection(id) => write!(f, "rdma: no connection {id}"),
        }
    }
}

impl std::error::Error for RdmaError {}

const TAG_RECV: u64 = 1 << 62;
const TAG_SEND: u64 = 1 << 61;
/// A send straight from a receive buffer (a forward or a relay): its
/// completion gives the buffer back.
const TAG_HELD: u64 = 1 << 60;
/// Marks a peer connection in a worker's acknowledgements.
const PEER_SLOT: u32 = 1 << 31;
/// First wait before reconnecting to a peer; doubled per failure.
const PEER_RECONNECT_MIN: Duration = Duration::from_millis(100);
/// Longest wait between attempts to reach a peer.
const PEER_RECONNECT_MAX: Duration = Duration::from_secs(2);
/// An attempt still not up after this is abandoned (and retried).
const PEER_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// rdma_cm's address and route resolution timeout for peers.
const PEER_RESOLVE_TIMEOUT_MS: i32 = 2000;
const INDEX_MASK: u64 = 0xffff_ffff;
const NONE: u32 = u32::MAX;
/// How long a stopping worker waits for the control thread to tear its
/// connections down before it leaks its buffer memory rather than free
/// memory a NIC might still write.
const TEARDOWN_WAIT: Duration = Duration::from_secs(3);
const CONTROL_POLL_MS: i32 = 10;

/// Per-connection counters, written by the worker (relaxed atomics).
#[derive(Debug, Default)]
struct ConnCounters {
    rx_frames: AtomicU64,
    rx_bytes: AtomicU64,
    rx_large: AtomicU64,
    tx_frames: AtomicU64,
    tx_bytes: AtomicU64,
    tx_large: AtomicU64,
    errors: AtomicU64,
}

impl ConnCounters {
    fn fields(&self) -> [&AtomicU64; 7] {
        [
            &self.rx_frames,
            &self.rx_bytes,
            &self.rx_large,
            &self.tx_frames,
            &self.tx_bytes,
            &self.tx_large,
            &self.errors,
        ]
    }

    fn reset(&self) {
        for a in self.fields() {
            a.store(0, Ordering::Relaxed);
        }
    }

    /// Moves these counts into `into` (control thread, under the
    /// connection table lock, once the worker has let go of the slot).
    fn retire_into(&self, into: &ConnCounters) {
        for (from, to) in self.fields().into_iter().zip(into.fields()) {
            bump(to, from.swap(0, Ordering::Relaxed));
        }
    }
}

fn bump(a: &AtomicU64, v: u64) {
    a.store(a.load(Ordering::Relaxed) + v, Ordering::Relaxed);
}

/// One connection in `connections()`.
#[derive(Debug, Clone, Serialize)]
pub struct ConnStatus {
    /// Id for `close_connection`.
    pub id: u64,
    /// Always "rdma": lists from several transports stay self-describing.
    pub transport: &'static str,
    /// "client" (accepted here) or "peer" (opened by this appliance to a
    /// peer appliance it forwards to).
    pub role: &'static str,
    /// The listen address (this appliance's side) it was accepted on.
    pub listen: SocketAddr,
    /// Worker serving it.
    pub worker: usize,
    /// Remote address.
    pub peer: Option<SocketAddr>,
    /// RDMA device.
    pub device: String,
    /// "accepting", "up" or "closing".
    pub state: &'static str,
    /// Frames received (SEND and RDMA WRITE).
    pub rx_frames: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames received by RDMA WRITE into a slot.
    pub rx_large: u64,
    /// Frames sent.
    pub tx_frames: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Frames sent by RDMA WRITE into a reply slot.
    pub tx_large: u64,
    /// Failed or refused operations.
    pub errors: u64,
}

enum ConnMsg {
    Up {
        slot: u32,
        generation: u32,
        qp: Qp,
        peer: SocketAddr,
        hello: ClientHello,
    },
    Down {
        slot: u32,
        generation: u32,
    },
    PeerUp {
        peer: u32,
        generation: u32,
        qp: Qp,
        hello: ServerHello,
    },
    PeerDown {
        peer: u32,
        generation: u32,
    },
}

/// One worker's connection counters since start: the final counts of its
/// closed connections plus the counts of its open ones, so they only grow
/// (Prometheus counters). In `connection_totals()`.
#[derive(Debug, Clone, Serialize)]
pub struct ConnTotals {
    /// Always "rdma".
    pub transport: &'static str,
    /// The listen address of the runtime.
    pub listen: SocketAddr,
    /// Worker index.
    pub worker: usize,
    /// Connections open now (any state).
    pub open: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Connections closed and released.
    pub closed: u64,
    /// Frames received.
    pub rx_frames: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames received by RDMA WRITE into a slot.
    pub rx_large: u64,
    /// Frames sent.
    pub tx_frames: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Frames sent by RDMA WRITE into a reply slot.
    pub tx_large: u64,
    /// Failed or refused operations.
    pub errors: u64,
}

/// What a worker shares with the control thread.
struct Port {
    cq: Cq,
    srq: Srq,
    inbox: ArrayQueue<ConnMsg>,
    /// (slot, generation) of connections the worker stopped using.
    outbox: ArrayQueue<(u32, u32)>,
    /// Per connection slot: address and rkey of its request slots.
    grants: Box<[(u64, u32)]>,
    stats: Box<[ConnCounters]>,
    /// Per peer: counters of this worker's connection to it.
    peer_stats: Box<[ConnCounters]>,
    /// (peer, generation) of peer connections whose sends failed: the
    /// control thread closes them (and reconnects).
    peer_errors: ArrayQueue<(u32, u32)>,
    /// Counts of released connections (written by the control thread).
    retired: ConnCounters,
    accepted: AtomicU64,
    closed_conns: AtomicU64,
    closing: AtomicBool,
    closed: AtomicBool,
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum ConnState {
    Accepting,
    Up,
    Closing,
}

/// Where a worker's connection to a peer stands (control thread).
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
enum PeerState {
    /// Waiting for the next attempt.
    Idle,
    /// Address and route resolution.
    Resolving,
    /// Connect sent.
    Connecting,
    Up,
    /// The worker is letting go of it.
    Closing,
    /// The worker stopped: never again.
    Stopped,
}

struct PeerConn {
    worker: usize,
    peer: usize,
    addr: SocketAddr,
    /// Id of the current (or last) attempt: the token its events carry.
    conn_id: u64,
    generation: u32,
    state: PeerState,
    id: Option<CmId>,
    qp: Option<Qp>,
    next_attempt: Instant,
    backoff: Duration,
    since: Instant,
}

struct Conn {
    id: CmId,
    worker: usize,
    slot: u32,
    generation: u32,
    conn_id: u64,
    peer: Option<SocketAddr>,
    state: ConnState,
}

/// Process-wide state. Field order is drop order: connections (QPs) go
/// before the ports (CQs, SRQs), those before the PD, the PD before the
/// listen id that owns the device context, and that before its channel.
struct Inner {
    conns: Mutex<Vec<Option<Conn>>>,
    /// Worker w's connection to peer k at `w * peer_addrs.len() + k`.
    peers: Mutex<Vec<PeerConn>>,
    /// The `rdma.listen` addresses of the rdma peers, from the config.
    peer_addrs: Vec<SocketAddr>,
    listen: SocketAddr,
    ports: Vec<OnceLock<Arc<Port>>>,
    close_requests: Mutex<Vec<u64>>,
    stop: AtomicBool,
    cfg: RdmaCfg,
    device: String,
    ctx: Context,
    pd: Pd,
    /// The listening id; it owns the device context. Listens once every
    /// worker is ready.
    _listen_id: Mutex<CmId>,
    channel: CmChannel,
}

struct Runtime {
    listen: SocketAddr,
    inner: Arc<Inner>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.lock().ok().and_then(|mut t| t.take()) {
            let _ = t.join();
        }
    }
}

static RUNTIMES: Mutex<Vec<Weak<Runtime>>> = Mutex::new(Vec::new());

fn runtime_for(
    cfg: &RdmaCfg,
    workers: usize,
    peers: &[SocketAddr],
) -> Result<Arc<Runtime>, RdmaError> {
    let listen = cfg.listen_addr().map_err(RdmaError::Config)?;
    let mut reg = RUNTIMES
        .lock()
        .map_err(|_| RdmaError::Setup("runtime registry poisoned".into()))?;
    reg.retain(|w| w.strong_count() > 0);
    if let Some(rt) = reg
        .iter()
        .filter_map(Weak::upgrade)
        .find(|r| r.listen == listen)
    {
        return Ok(rt);
    }
    let rt = Arc::new(start_runtime(cfg, listen, workers, peers)?);
    reg.push(Arc::downgrade(&rt));
    Ok(rt)
}

fn start_runtime(
    cfg: &RdmaCfg,
    listen: SocketAddr,
    workers: usize,
    peers: &[SocketAddr],
) -> Result<Runtime, RdmaError> {
    device_check().map_err(RdmaError::NoDevice)?;
    let channel = CmChannel::new().map_err(|e| RdmaError::Cm("create_event_channel", e))?;
    let mut lid = CmId::new(&channel).map_err(|e| RdmaError::Cm("create_id", e))?;
    lid.bind(listen).map_err(|e| {
        RdmaError::Setup(format!(
            "cannot bind rdma.listen {listen}: {e} (it must be an IP of an RDMA device's netdev)"
        ))
    })?;
    let ctx = lid
        .context()
        .ok_or_else(|| RdmaError::Setup(format!("rdma.listen {listen} is on no RDMA device")))?;
    let pd = Pd::new(ctx).map_err(|e| RdmaError::Verbs("alloc_pd", e))?;
    // Listening starts once every worker has registered its pools (see
    // `with_runtime`): a connect request before that would find no worker.
    let device = ctx.device_name();
    let per = cfg.connections_max as usize;
    let now = Instant::now();
    let peer_conns = (0..workers)
        .flat_map(|w| {
            peers.iter().enumerate().map(move |(k, &addr)| PeerConn {
                worker: w,
                peer: k,
                addr,
                conn_id: 0,
                generation: 0,
                state: PeerState::Idle,
                id: None,
                qp: None,
                next_attempt: now,
                backoff: PEER_RECONNECT_MIN,
                since: now,
            })
        })
        .collect();
    let inner = Arc::new(Inner {
        conns: Mutex::new((0..workers * per).map(|_| None).collect()),
        peers: Mutex::new(peer_conns),
        peer_addrs: peers.to_vec(),
        listen,
        ports: (0..workers).map(|_| OnceLock::new()).collect(),
        close_requests: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
        cfg: cfg.clone(),
        device,
        ctx,
        pd,
        _listen_id: Mutex::new(lid),
        channel,
    });
    let i2 = Arc::clone(&inner);
    let thread = std::thread::Builder::new()
        .name("sluice-rdma-cm".into())
        .spawn(move || control_loop(&i2))
        .map_err(|e| RdmaError::Setup(format!("spawn control thread: {e}")))?;
    Ok(Runtime {
        listen,
        inner,
        thread: Mutex::new(Some(thread)),
    })
}

/// Connections of every RDMA listener in this process, with counters.
pub fn connections() -> Vec<ConnStatus> {
    let rts: Vec<Arc<Runtime>> = RUNTIMES
        .lock()
        .map(|r| r.iter().filter_map(Weak::upgrade).collect())
        .unwrap_or_default();
    let mut out = Vec::new();
    for rt in rts {
        let inner = &rt.inner;
        let Ok(conns) = inner.conns.lock() else {
            continue;
        };
        for c in conns.iter().flatten() {
            let Some(port) = inner.ports[c.worker].get() else {
                continue;
            };
            let k = &port.stats[c.slot as usize];
            let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
            out.push(ConnStatus {
                id: c.conn_id,
                transport: "rdma",
                role: "client",
                listen: rt.listen,
                worker: c.worker,
                peer: c.peer,
                device: inner.device.clone(),
                state: match c.state {
                    ConnState::Accepting => "accepting",
                    ConnState::Up => "up",
                    ConnState::Closing => "closing",
                },
                rx_frames: ld(&k.rx_frames),
                rx_bytes: ld(&k.rx_bytes),
                rx_large: ld(&k.rx_large),
                tx_frames: ld(&k.tx_frames),
                tx_bytes: ld(&k.tx_bytes),
                tx_large: ld(&k.tx_large),
                errors: ld(&k.errors),
            });
        }
        drop(conns);
        let Ok(peers) = inner.peers.lock() else {
            continue;
        };
        for pc in peers.iter() {
            let state = match pc.state {
                PeerState::Idle | PeerState::Stopped => continue,
                PeerState::Resolving | PeerState::Connecting => "connecting",
                PeerState::Up => "up",
                PeerState::Closing => "closing",
            };
            let Some(port) = inner.ports[pc.worker].get() else {
                continue;
            };
            let k = &port.peer_stats[pc.peer];
            let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
            out.push(ConnStatus {
                id: pc.conn_id,
                transport: "rdma",
                role: "peer",
                listen: rt.listen,
                worker: pc.worker,
                peer: Some(pc.addr),
                device: inner.device.clone(),
                state,
                rx_frames: ld(&k.rx_frames),
                rx_bytes: ld(&k.rx_bytes),
                rx_large: ld(&k.rx_large),
                tx_frames: ld(&k.tx_frames),
                tx_bytes: ld(&k.tx_bytes),
                tx_large: ld(&k.tx_large),
                errors: ld(&k.errors),
            });
        }
    }
    out
}

/// Per-worker connection counters of every RDMA listener in this process
/// (closed connections included: the values only grow while it runs).
pub fn connection_totals() -> Vec<ConnTotals> {
    let rts: Vec<Arc<Runtime>> = RUNTIMES
        .lock()
        .map(|r| r.iter().filter_map(Weak::upgrade).collect())
        .unwrap_or_default();
    let mut out = Vec::new();
    for rt in rts {
        let inner = &rt.inner;
        let per = inner.cfg.connections_max as usize;
        // Held while reading: a release moves counts under this lock, so
        // nothing is seen twice or missed.
        let Ok(conns) = inner.conns.lock() else {
            continue;
        };
        for (w, port) in inner.ports.iter().enumerate() {
            let Some(port) = port.get() else { continue };
            let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
            let mut sum = [0u64; 7];
            for k in port
                .stats
                .iter()
                .chain(port.peer_stats.iter())
                .chain(std::iter::once(&port.retired))
            {
                for (s, a) in sum.iter_mut().zip(k.fields()) {
                    *s += ld(a);
                }
            }
            let open = conns
                .get(w * per..(w + 1) * per)
                .map_or(0, |c| c.iter().flatten().count());
            out.push(ConnTotals {
                transport: "rdma",
                listen: rt.listen,
                worker: w,
                open: open as u64,
                accepted: ld(&port.accepted),
                closed: ld(&port.closed_conns),
                rx_frames: sum[0],
                rx_bytes: sum[1],
                rx_large: sum[2],
                tx_frames: sum[3],
                tx_bytes: sum[4],
                tx_large: sum[5],
                errors: sum[6],
            });
        }
    }
    out
}

/// Disconnects a connection; its in-flight requests are dropped and the
/// client sees a retryable connection loss.
pub fn close_connection(id: u64) -> Result<(), RdmaError> {
    if !connections().iter().any(|c| c.id == id) {
        return Err(RdmaError::UnknownConnection(id));
    }
    let rts: Vec<Arc<Runtime>> = RUNTIMES
        .lock()
        .map(|r| r.iter().filter_map(Weak::upgrade).collect())
        .unwrap_or_default();
    for rt in rts {
        if let Ok(mut q) = rt.inner.close_requests.lock() {
            q.push(id);
        }
    }
    Ok(())
}

fn control_loop(inner: &Inner) {
    let per = inner.cfg.connections_max as usize;
    let client_ids = inner.ports.len() * per;
    let mut next_worker = 0usize;
    let mut generation: u32 = 0;
    let mut peer_acks: Vec<(usize, u32, u32)> = Vec::new();
    while !inner.stop.load(Ordering::Acquire) {
        let mut doomed: Vec<CmId> = Vec::new();
        if let Some(ev) = inner.channel.next_timeout(CONTROL_POLL_MS) {
            let kind = ev.kind();
            // Ids of peer connections come after every client slot.
            let peer_ix = ((ev.id_token() & INDEX_MASK) as usize)
                .checked_sub(client_ids + 1)
                .filter(|_| kind != CmEventKind::ConnectRequest);
            if let Some(j) = peer_ix {
                peer_event(inner, j, &ev, &mut doomed);
                drop(ev);
            } else {
                match kind {
                    CmEventKind::ConnectRequest => {
                        let Some(mut id) = ev.take_new_id() else {
                            continue;
                        };
                        let hello = ClientHello::decode(ev.private_data());
                        generation = generation.wrapping_add(1).max(1);
                        match accept(inner, &mut id, hello, &mut next_worker, generation) {
                            Ok((worker, slot, conn_id)) => {
                                let peer = id.peer_addr();
                                log::info!(
                                    "rdma: connection {conn_id} from {peer:?} on worker {worker}"
                                );
                                if let Ok(mut conns) = inner.conns.lock() {
                                    if let Some(p) = inner.ports[worker].get() {
                                        bump(&p.accepted, 1);
                                    }
                                    conns[worker * per + slot as usize] = Some(Conn {
                                        id,
                                        worker,
                                        slot,
                                        generation,
                                        conn_id,
                                        peer,
                                        state: ConnState::Accepting,
                                    });
                                }
                            }
                            Err(why) => {
                                log::warn!(
                                    "rdma: refused a connection from {:?}: {why}",
                                    id.peer_addr()
                                );
                                id.reject(why.as_bytes());
                                // The event must be acked before its id is destroyed.
                                drop(ev);
                                drop(id);
                                continue;
                            }
                        }
                    }
                    CmEventKind::Established
                    | CmEventKind::Disconnected
                    | CmEventKind::Error(_) => {
                        let token = ev.id_token();
                        if let Ok(mut conns) = inner.conns.lock() {
                            if let Some(c) = conns.iter_mut().flatten().find(|c| c.conn_id == token)
                            {
                                if kind == CmEventKind::Established {
                                    if c.state == ConnState::Accepting {
                                        c.state = ConnState::Up;
                                    }
                                } else if c.state != ConnState::Closing {
                                    log::info!("rdma: connection {} lost ({kind:?})", c.conn_id);
                                    begin_close(inner, c);
                                }
                            }
                        }
                    }
                    _ => {}
                }
                drop(ev);
            }
        }
        let now = Instant::now();
        // Closes asked for by the control plane.
        let asked: Vec<u64> = inner
            .close_requests
            .lock()
            .map(|mut q| std::mem::take(&mut *q))
            .unwrap_or_default();
        if let Ok(mut conns) = inner.conns.lock() {
            for id in &asked {
                if let Some(c) = conns
                    .iter_mut()
                    .flatten()
                    .find(|c| c.conn_id == *id && c.state != ConnState::Closing)
                {
                    c.id.disconnect();
                    begin_close(inner, c);
                }
            }
            // Workers that stopped using a connection: its QP can go.
            for (w, port) in inner.ports.iter().enumerate() {
                let Some(port) = port.get() else { continue };
                while let Some((slot, g)) = port.outbox.pop() {
                    if slot & PEER_SLOT != 0 {
                        peer_acks.push((w, slot & !PEER_SLOT, g));
                        continue;
                    }
                    let k = w * per + slot as usize;
                    if conns[k]
                        .as_ref()
                        .is_some_and(|c| c.generation == g && c.state == ConnState::Closing)
                    {
                        if let Some(c) = conns[k].take() {
                            retire(port, slot);
                            doomed.push(c.id);
                        }
                    }
                }
                // A stopping worker polls no more: tear its connections
                // (clients and peers) down now, before it frees its pool.
                if port.closing.load(Ordering::Acquire) && !port.closed.load(Ordering::Acquire) {
                    for c in conns[w * per..(w + 1) * per].iter_mut() {
                        if let Some(mut c) = c.take() {
                            retire(port, c.slot);
                            c.id.disconnect();
                            c.id.destroy_qp();
                            doomed.push(c.id);
                        }
                    }
                    if let Ok(mut peers) = inner.peers.lock() {
                        for pc in peers.iter_mut().filter(|p| p.worker == w) {
                            if let Some(mut id) = pc.id.take() {
                                id.disconnect();
                                id.destroy_qp();
                                doomed.push(id);
                            }
                            if let Some(k) = port.peer_stats.get(pc.peer) {
                                k.retire_into(&port.retired);
                            }
                            pc.qp = None;
                            pc.state = PeerState::Stopped;
                        }
                    }
                    port.closed.store(true, Ordering::Release);
                }
            }
        }
        if let Ok(mut peers) = inner.peers.lock() {
            peer_upkeep(
                inner,
                &mut peers,
                &asked,
                &mut peer_acks,
                &mut generation,
                now,
                &mut doomed,
            );
        }
        drop(doomed);
    }
    // Stopping: every QP goes before the CQs, SRQs and PD.
    if let Ok(mut conns) = inner.conns.lock() {
        for c in conns.iter_mut() {
            if let Some(mut c) = c.take() {
                c.id.disconnect();
            }
        }
    }
    if let Ok(mut peers) = inner.peers.lock() {
        for pc in peers.iter_mut() {
            if let Some(mut id) = pc.id.take() {
                id.disconnect();
            }
            pc.state = PeerState::Stopped;
        }
    }
    for p in inner.ports.iter().filter_map(OnceLock::get) {
        p.closed.store(true, Ordering::Release);
    }
}

/// Peer connections, once per control poll: acknowledgements from workers,
/// failed sends, closes asked for, connect deadlines and new attempts.
fn peer_upkeep(
    inner: &Inner,
    peers: &mut [PeerConn],
    asked: &[u64],
    acks: &mut Vec<(usize, u32, u32)>,
    generation: &mut u32,
    now: Instant,
    doomed: &mut Vec<CmId>,
) {
    let np = inner.peer_addrs.len();
    if np == 0 {
        acks.clear();
        return;
    }
    // The worker let go of a closing connection: destroy it, retry later.
    for (w, k, g) in acks.drain(..) {
        let Some(pc) = peers.get_mut(w * np + k as usize) else {
            continue;
        };
        if pc.generation == g && pc.state == PeerState::Closing {
            if let Some(port) = inner.ports[w].get() {
                port.peer_stats[pc.peer].retire_into(&port.retired);
            }
            if let Some(id) = pc.id.take() {
                doomed.push(id);
            }
            pc.qp = None;
            pc.state = PeerState::Idle;
            pc.next_attempt = now + pc.backoff;
        }
    }
    for (w, port) in inner.ports.iter().enumerate() {
        let Some(port) = port.get() else { continue };
        while let Some((k, g)) = port.peer_errors.pop() {
            if let Some(pc) = peers.get_mut(w * np + k as usize) {
                if pc.generation == g && pc.state == PeerState::Up {
                    log::warn!(
                        "rdma: peer connection {} to {} failed a send; reconnecting",
                        pc.conn_id,
                        pc.addr
                    );
                    if let Some(id) = pc.id.as_mut() {
                        id.disconnect();
                    }
                    peer_begin_close(inner, pc);
                }
            }
        }
    }
    let all_ready = inner.ports.iter().all(|p| p.get().is_some());
    for (j, pc) in peers.iter_mut().enumerate() {
        if asked.contains(&pc.conn_id) {
            match pc.state {
                PeerState::Up => {
                    log::info!("rdma: peer connection {} closed by request", pc.conn_id);
                    if let Some(id) = pc.id.as_mut() {
                        id.disconnect();
                    }
                    // Reconnect after the shortest wait.
                    pc.backoff = PEER_RECONNECT_MIN;
                    peer_begin_close(inner, pc);
                }
                PeerState::Resolving | PeerState::Connecting => {
                    peer_failed(pc, "closed by request", now, doomed)
                }
                _ => {}
            }
        }
        let Some(port) = inner.ports[pc.worker].get() else {
            continue;
        };
        if port.closing.load(Ordering::Acquire) {
            continue;
        }
        match pc.state {
            PeerState::Idle if all_ready && now >= pc.next_attempt => {
                *generation = generation.wrapping_add(1).max(1);
                pc.generation = *generation;
                let index = inner.ports.len() * inner.cfg.connections_max as usize + j + 1;
                pc.conn_id = ((pc.generation as u64) << 32) | index as u64;
                pc.since = now;
                match CmId::new(&inner.channel) {
                    Ok(mut id) => {
                        id.set_token(pc.conn_id);
                        let src = SocketAddr::new(inner.listen.ip(), 0);
                        let r = id.resolve_addr_from(Some(src), pc.addr, PEER_RESOLVE_TIMEOUT_MS);
                        pc.id = Some(id);
                        pc.state = PeerState::Resolving;
                        if let Err(e) = r {
                            peer_failed(pc, &format!("resolve_addr: {e}"), now, doomed);
                        }
                    }
                    Err(e) => peer_failed(pc, &format!("create_id: {e}"), now, doomed),
                }
            }
            PeerState::Resolving | PeerState::Connecting
                if now.duration_since(pc.since) > PEER_CONNECT_TIMEOUT =>
            {
                peer_failed(pc, "connect timed out", now, doomed)
            }
            _ => {}
        }
    }
}

/// An rdma_cm event on peer connection `j`.
fn peer_event(inner: &Inner, j: usize, ev: &verbs::CmEvent, doomed: &mut Vec<CmId>) {
    let Ok(mut peers) = inner.peers.lock() else {
        return;
    };
    let Some(pc) = peers.get_mut(j) else { return };
    if pc.conn_id != ev.id_token() {
        return; // an attempt given up on already
    }
    let now = Instant::now();
    let kind = ev.kind();
    match (kind, pc.state) {
        (CmEventKind::AddrResolved, PeerState::Resolving) => {
            let r = pc
                .id
                .as_mut()
                .map(|id| id.resolve_route(PEER_RESOLVE_TIMEOUT_MS));
            if let Some(Err(e)) = r {
                peer_failed(pc, &format!("resolve_route: {e}"), now, doomed);
            }
        }
        (CmEventKind::RouteResolved, PeerState::Resolving) => match peer_connect(inner, pc) {
            Ok(()) => pc.state = PeerState::Connecting,
            Err(why) => peer_failed(pc, &why, now, doomed),
        },
        (CmEventKind::Established, PeerState::Connecting) => {
            let hello = ServerHello::decode(ev.private_data());
            let port = inner.ports[pc.worker].get();
            match (hello, port, pc.qp) {
                (Some(hello), Some(port), Some(qp)) => {
                    port.peer_stats[pc.peer].reset();
                    let up = ConnMsg::PeerUp {
                        peer: pc.peer as u32,
                        generation: pc.generation,
                        qp,
                        hello,
                    };
                    if port.inbox.push(up).is_err() {
                        if let Some(id) = pc.id.as_mut() {
                            id.disconnect();
                        }
                        peer_failed(pc, "worker inbox full", now, doomed);
                        return;
                    }
                    log::info!(
                        "rdma: peer connection {} to {} up on worker {}",
                        pc.conn_id,
                        pc.addr,
                        pc.worker
                    );
                    pc.state = PeerState::Up;
                    pc.backoff = PEER_RECONNECT_MIN;
                }
                _ => {
                    if let Some(id) = pc.id.as_mut() {
                        id.disconnect();
                    }
                    peer_failed(
                        pc,
                        "the peer is not a Sluice RDMA appliance (bad accept data)",
                        now,
                        doomed,
                    );
                }
            }
        }
        (
            CmEventKind::Disconnected | CmEventKind::Error(_) | CmEventKind::Rejected,
            PeerState::Up,
        ) => {
            log::warn!(
                "rdma: peer connection {} to {} lost ({kind:?})",
                pc.conn_id,
                pc.addr
            );
            peer_begin_close(inner, pc);
        }
        (
            CmEventKind::Disconnected | CmEventKind::Error(_) | CmEventKind::Rejected,
            PeerState::Resolving | PeerState::Connecting,
        ) => {
            let why = format!("{kind:?} (status {})", ev.status());
            peer_failed(pc, &why, now, doomed);
        }
        _ => {}
    }
}

/// Route resolved: create the QP on the worker's CQ and SRQ and connect.
fn peer_connect(inner: &Inner, pc: &mut PeerConn) -> Result<(), String> {
    let id = pc.id.as_mut().ok_or("no id")?;
    let ctx = id
        .context()
        .ok_or_else(|| format!("{} is reached through no RDMA device", pc.addr))?;
    if !ctx.same(&inner.ctx) {
        return Err(format!(
            "{} is reached through another RDMA device than {}",
            pc.addr, inner.device
        ));
    }
    let port = inner.ports[pc.worker].get().ok_or("worker not started")?;
    // Every forward holds a receive buffer until its send completes, so
    // the send queue never holds more than rx_buffers.
    let caps = QpCaps {
        send_wr: inner.cfg.rx_buffers.min(4096),
        recv_wr: 0,
    };
    let qp = id
        .create_qp(&inner.pd, &port.cq, Some(&port.srq), caps)
        .map_err(|e| format!("create_qp: {e}"))?;
    pc.qp = Some(qp);
    // No reply slots: answers come back by SEND into this worker's SRQ.
    let hello = ClientHello {
        buffer_size: inner.cfg.buffer_size,
        ..ClientHello::default()
    };
    id.connect(&ConnParams {
        private_data: &hello.encode(),
    })
    .map_err(|e| format!("connect: {e}"))
}

/// An attempt failed: drop it and wait (doubling, bounded) before the next.
fn peer_failed(pc: &mut PeerConn, why: &str, now: Instant, doomed: &mut Vec<CmId>) {
    if pc.backoff == PEER_RECONNECT_MIN {
        log::warn!(
            "rdma: cannot connect worker {} to peer {}: {why}; retrying with backoff",
            pc.worker,
            pc.addr
        );
    } else {
        log::debug!("rdma: peer {} still unreachable: {why}", pc.addr);
    }
    if let Some(id) = pc.id.take() {
        doomed.push(id);
    }
    pc.qp = None;
    pc.state = PeerState::Idle;
    pc.next_attempt = now + pc.backoff;
    pc.backoff = (pc.backoff * 2).min(PEER_RECONNECT_MAX);
}

/// Tells the worker to stop using an up peer connection; its acknowledgement
/// lets the QP go (`peer_upkeep`).
fn peer_begin_close(inner: &Inner, pc: &mut PeerConn) {
    pc.state = PeerState::Closing;
    if let Some(port) = inner.ports[pc.worker].get() {
        let down = ConnMsg::PeerDown {
            peer: pc.peer as u32,
            generation: pc.generation,
        };
        if port.inbox.push(down).is_err() {
            log::error!(
                "rdma: worker {} inbox full; peer connection {} closes late",
                pc.worker,
                pc.conn_id
            );
        }
    }
}

/// A connection slot is released: its counts join the worker's totals.
fn retire(port: &Port, slot: u32) {
    if let Some(k) = port.stats.get(slot as usize) {
        k.retire_into(&port.retired);
    }
    bump(&port.closed_conns, 1);
}

fn begin_close(inner: &Inner, c: &mut Conn) {
    c.state = ConnState::Closing;
    if let Some(port) = inner.ports[c.worker].get() {
        if port
            .inbox
            .push(ConnMsg::Down {
                slot: c.slot,
                generation: c.generation,
            })
            .is_err()
        {
            log::error!(
                "rdma: worker {} inbox full; connection {} closes late",
                c.worker,
                c.conn_id
            );
        }
    }
}

/// Picks a worker and slot, creates the QP, tells the worker, accepts.
fn accept(
    inner: &Inner,
    id: &mut CmId,
    hello: Option<ClientHello>,
    next_worker: &mut usize,
    generation: u32,
) -> Result<(usize, u32, u64), String> {
    let hello = hello.ok_or("not a Sluice RDMA client (bad or missing private data)")?;
    let per = inner.cfg.connections_max as usize;
    let nw = inner.ports.len();
    let (worker, slot) = {
        let conns = inner
            .conns
            .lock()
            .map_err(|_| "connection table poisoned")?;
        let mut found = None;
        for step in 0..nw {
            let w = (*next_worker + step) % nw;
            let Some(port) = inner.ports[w].get() else {
                continue;
            };
            if port.closing.load(Ordering::Acquire) {
                continue;
            }
            if let Some(s) = (0..per).find(|&s| conns[w * per + s].is_none()) {
                found = Some((w, s as u32));
                break;
            }
        }
        found.ok_or("every worker is at rdma.connections_max")?
    };
    *next_worker = (worker + 1) % nw;
    let port = inner.ports[worker].get().ok_or("worker not started")?;
    let cfg = &inner.cfg;
    // Replies from transmit buffers, and answers relayed from receive buffers.
    let caps = QpCaps {
        send_wr: (cfg.tx_buffers + cfg.large_tx_buffers + cfg.rx_buffers).min(4096),
        recv_wr: 0,
    };
    let qp = id
        .create_qp(&inner.pd, &port.cq, Some(&port.srq), caps)
        .map_err(|e| format!("create_qp: {e}"))?;
    let conn_id = ((generation as u64) << 32) | (worker * per + slot as usize + 1) as u64;
    id.set_token(conn_id);
    port.stats[slot as usize].reset();
    let peer = id
        .peer_addr()
        .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
    port.inbox
        .push(ConnMsg::Up {
            slot,
            generation,
            qp,
            peer,
            hello,
        })
        .map_err(|_| "worker inbox full".to_string())?;
    let (base, rkey) = port.grants[slot as usize];
    let sh = ServerHello {
        conn_id,
        slot_base: base,
        slot_rkey: rkey,
        slot_count: cfg.slots_per_connection,
        slot_size: cfg.slot_size,
        buffer_size: cfg.buffer_size,
        credits: (cfg.rx_buffers / cfg.connections_max).max(1),
    };
    let data = sh.encode();
    if let Err(e) = id.accept(&ConnParams {
        private_data: &data,
    }) {
        let _ = port.inbox.push(ConnMsg::Down { slot, generation });
        // The worker acknowledges; the connection entry is not stored, so
        // wait here (bounded) until it has, then the caller rejects.
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(1) {
            if let Some((s, g)) = port.outbox.pop() {
                if s == slot && g == generation {
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        return Err(format!("accept: {e}"));
    }
    Ok((worker, slot, conn_id))
}

/// A connection to a peer as one worker sees it.
#[derive(Clone, Copy, Default)]
struct WPeer {
    up: bool,
    generation: u32,
    qp: Option<Qp>,
    qpn: u32,
    hello: ServerHello,
    /// Lost since the worker last asked (`lost_peer`).
    lost: bool,
}

/// A connection as one worker sees it.
#[derive(Clone, Copy)]
struct WConn {
    up: bool,
    generation: u32,
    qp: Option<Qp>,
    qpn: u32,
    peer: SocketAddr,
    hello: ClientHello,
}

impl Default for WConn {
    fn default() -> Self {
        WConn {
            up: false,
            generation: 0,
            qp: None,
            qpn: 0,
            peer: SocketAddr::from(([0, 0, 0, 0], 0)),
            hello: ClientHello::default(),
        }
    }
}

/// The RDMA transport of one worker.
///
/// Drop order (field order after `Drop::drop`): the MRs go before the
/// region they cover; the runtime (and with the last worker, the control
/// thread, CQs, SRQs and PD) last.
pub struct RdmaTransport {
    index: usize,
    rx_count: u32,
    tx_count: u32,
    buf_size: u32,
    spc: u32,
    slot_size: u32,
    conns_max: u32,
    slots_off: usize,
    large_tx_off: usize,
    conns: Box<[WConn]>,
    peers: Box<[WPeer]>,
    /// The rdma peers' addresses, as the worker's tables name them.
    peer_addrs: Box<[SocketAddr]>,
    any_lost: bool,
    tx_free: FreeList,
    large_free: FreeList,
    /// Per transmit index: the large buffer it was upgraded to, or NONE.
    tx_large_of: Box<[u32]>,
    /// Per transmit index: the request slot whose reply it carries, or NONE.
    tx_reply_slot: Box<[u32]>,
    large_busy: Box<[bool]>,
    rx_in_use: u32,
    wcs: [Wc; verbs::POLL_BATCH_MAX],
    local: SocketAddr,
    counters: TransportCounters,
    /// Held for their drop: one registration per connection's slots.
    _slot_mrs: Vec<Mr>,
    local_mr: Mr,
    region: Option<Region>,
    port: Arc<Port>,
    /// Held so the listener lives while any worker does.
    _runtime: Arc<Runtime>,
}

impl RdmaTransport {
    /// Starts worker `index` of `workers`: joins (or starts) the process's
    /// RDMA listener, registers its pools once and posts its receives.
    /// Fails clearly when the host has no RDMA device.
    pub fn new(index: usize, workers: usize, cfg: &Config) -> Result<RdmaTransport, RdmaError> {
        let rc = RdmaCfg::from_config(cfg).map_err(RdmaError::Config)?;
        if index >= workers {
            return Err(RdmaError::Setup(format!("worker {index} of {workers}")));
        }
        let mut peers = Vec::new();
        for (i, p) in cfg.peers.iter().enumerate() {
            if p.transport != PeerTransport::Rdma {
                continue;
            }
            let a: SocketAddr = p.address.parse().map_err(|_| {
                RdmaError::Config(ConfigError::at(
                    format!("peers[{i}].address"),
                    "not an IP:port address",
                ))
            })?;
            peers.push(a);
        }
        let runtime = runtime_for(&rc, workers, &peers)?;
        if runtime.inner.ports.len() != workers
            || runtime.inner.cfg != rc
            || runtime.inner.peer_addrs != peers
        {
            return Err(RdmaError::Setup(
                "another engine in this process listens on the same rdma.listen".into(),
            ));
        }
        RdmaTransport::with_runtime(index, &rc, cfg.engine.hugepages, runtime)
    }

    fn with_runtime(
        index: usize,
        rc: &RdmaCfg,
        huge: HugepageMode,
        runtime: Arc<Runtime>,
    ) -> Result<RdmaTransport, RdmaError> {
        let inner = &runtime.inner;
        let mut region = Region::alloc(rc.pool_bytes() as usize, huge).map_err(RdmaError::Pool)?;
        let a = super::limits::SLOT_ALIGN_BYTES as usize;
        let small = (rc.rx_buffers as usize + rc.tx_buffers as usize) * rc.buffer_size as usize;
        let slots_off = small.div_ceil(a) * a;
        let nslots = rc.connections_max as usize * rc.slots_per_connection as usize;
        let large_tx_off = slots_off + nslots * rc.slot_size as usize;
        let base = region.as_mut_ptr();
        let local_mr = Mr::register(&inner.pd, base, region.len(), Access::Local)
            .map_err(|e| RdmaError::Verbs("reg_mr", e))?;
        let mut slot_mrs = Vec::new();
        let mut grants = Vec::with_capacity(rc.connections_max as usize);
        let per_conn = rc.slots_per_connection as usize * rc.slot_size as usize;
        for c in 0..rc.connections_max as usize {
            let off = slots_off + c * per_conn;
            let p = base.wrapping_add(off);
            if per_conn == 0 {
                grants.push((p as u64, 0));
                continue;
            }
            // One MR per connection: its rkey reaches that connection's slots only.
            let mr = Mr::register(&inner.pd, p, per_conn, Access::RemoteWrite)
                .map_err(|e| RdmaError::Verbs("reg_mr (slots)", e))?;
            grants.push((p as u64, mr.rkey()));
            slot_mrs.push(mr);
        }
        let entries = rc.rx_buffers + rc.tx_buffers + rc.large_tx_buffers + 64;
        let cq = Cq::new(inner.ctx, entries).map_err(|e| RdmaError::Verbs("create_cq", e))?;
        let srq =
            Srq::new(&inner.pd, rc.rx_buffers).map_err(|e| RdmaError::Verbs("create_srq", e))?;
        for b in 0..rc.rx_buffers {
            let p = base.wrapping_add(b as usize * rc.buffer_size as usize);
            srq.post_recv(TAG_RECV | b as u64, p, rc.buffer_size, local_mr.lkey())
                .map_err(|e| RdmaError::Verbs("post_srq_recv", e))?;
        }
        let cm = rc.connections_max as usize;
        let np = inner.peer_addrs.len();
        let port = Arc::new(Port {
            cq,
            srq,
            inbox: ArrayQueue::new((cm + np) * 2 + 8),
            outbox: ArrayQueue::new((cm + np) * 2 + 8),
            grants: grants.into_boxed_slice(),
            stats: (0..cm).map(|_| ConnCounters::default()).collect(),
            peer_stats: (0..np).map(|_| ConnCounters::default()).collect(),
            peer_errors: ArrayQueue::new(np * 2 + 8),
            retired: ConnCounters::default(),
            accepted: AtomicU64::new(0),
            closed_conns: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        });
        if inner.ports[index].set(Arc::clone(&port)).is_err() {
            return Err(RdmaError::Setup(format!("worker {index} started twice")));
        }
        if inner.ports.iter().all(|p| p.get().is_some()) {
            let mut lid = inner
                ._listen_id
                .lock()
                .map_err(|_| RdmaError::Setup("listen id poisoned".into()))?;
            lid.listen(rc.backlog as i32)
                .map_err(|e| RdmaError::Cm("listen", e))?;
            log::info!(
                "rdma: listening on {} (device {})",
                runtime.listen,
                inner.device
            );
        }
        let huge_pages = region.is_huge();
        let listen = runtime.listen;
        Ok(RdmaTransport {
            index,
            rx_count: rc.rx_buffers,
            tx_count: rc.tx_buffers,
            buf_size: rc.buffer_size,
            spc: rc.slots_per_connection,
            slot_size: rc.slot_size,
            conns_max: rc.connections_max,
            slots_off,
            large_tx_off,
            conns: vec![WConn::default(); cm].into_boxed_slice(),
            peers: vec![WPeer::default(); np].into_boxed_slice(),
            peer_addrs: inner.peer_addrs.clone().into_boxed_slice(),
            any_lost: false,
            tx_free: FreeList::new(rc.tx_buffers),
            large_free: FreeList::new(rc.large_tx_buffers),
            tx_large_of: vec![NONE; rc.tx_buffers as usize].into_boxed_slice(),
            tx_reply_slot: vec![NONE; rc.tx_buffers as usize].into_boxed_slice(),
            large_busy: vec![false; nslots].into_boxed_slice(),
            rx_in_use: 0,
            wcs: [Wc::default(); verbs::POLL_BATCH_MAX],
            local: listen,
            counters: TransportCounters {
                rx_capacity: rc.rx_buffers + nslots as u32,
                tx_capacity: rc.tx_buffers,
                hugepages: huge_pages,
                ..TransportCounters::default()
            },
            _slot_mrs: slot_mrs,
            local_mr,
            region: Some(region),
            port,
            _runtime: runtime,
        })
    }

    /// The worker this transport belongs to.
    pub fn worker(&self) -> usize {
        self.index
    }

    fn drain_inbox(&mut self) {
        while let Some(m) = self.port.inbox.pop() {
            match m {
                ConnMsg::Up {
                    slot,
                    generation,
                    qp,
                    peer,
                    hello,
                } => {
                    self.conns[slot as usize] = WConn {
                        up: true,
                        generation,
                        qp: Some(qp),
                        qpn: qp.num(),
                        peer,
                        hello,
                    };
                }
                ConnMsg::Down { slot, generation } => {
                    let c = &mut self.conns[slot as usize];
                    if c.generation == generation {
                        c.up = false;
                        c.qp = None;
                    }
                    // Capacity covers every connection twice; the control
                    // thread empties it every poll.
                    let _ = self.port.outbox.push((slot, generation));
                }
                ConnMsg::PeerUp {
                    peer,
                    generation,
                    qp,
                    hello,
                } => {
                    if let Some(p) = self.peers.get_mut(peer as usize) {
                        *p = WPeer {
                            up: true,
                            generation,
                            qp: Some(qp),
                            qpn: qp.num(),
                            hello,
                            lost: false,
                        };
                    }
                }
                ConnMsg::PeerDown { peer, generation } => {
                    if let Some(p) = self.peers.get_mut(peer as usize) {
                        if p.generation == generation {
                            p.up = false;
                            p.qp = None;
                            p.lost = true;
                            self.any_lost = true;
                        }
                    }
                    let _ = self.port.outbox.push((PEER_SLOT | peer, generation));
                }
            }
        }
    }

    fn conn_by_qpn(&self, qpn: u32) -> Option<usize> {
        self.conns.iter().position(|c| c.up && c.qpn == qpn)
    }

    fn peer_by_qpn(&self, qpn: u32) -> Option<usize> {
        self.peers.iter().position(|p| p.up && p.qpn == qpn)
    }

    fn peer_index(&self, addr: &SocketAddr) -> Option<usize> {
        self.peer_addrs.iter().position(|a| a == addr)
    }

    /// A send on `qpn` failed: count it; a peer connection stops being
    /// used at once (its forwards fail) and the control thread replaces it.
    fn send_failed(&mut self, qpn: u32) {
        if let Some(s) = self.conn_by_qpn(qpn) {
            bump(&self.port.stats[s].errors, 1);
        } else if let Some(k) = self.peer_by_qpn(qpn) {
            bump(&self.port.peer_stats[k].errors, 1);
            let p = &mut self.peers[k];
            p.up = false;
            p.qp = None;
            p.lost = true;
            self.any_lost = true;
            let _ = self.port.peer_errors.push((k as u32, p.generation));
        }
    }

    fn conn_stats(&self, c: Via) -> &ConnCounters {
        match c {
            Via::Client(s) => &self.port.stats[s],
            Via::Peer(k) => &self.port.peer_stats[k],
        }
    }

    /// Sends a received frame from its buffer (forward or relay) and counts
    /// it on its connection. Without a target, or when the post fails, the
    /// error is counted and the buffer released.
    fn send_counted(&mut self, rx: &RxPacket, target: Option<(Qp, Via)>) -> Option<u64> {
        let Some((qp, conn)) = target else {
            self.counters.tx_errors += 1;
            self.rx_release(rx);
            return None;
        };
        if !self.send_held(rx, qp) {
            self.counters.tx_errors += 1;
            bump(&self.conn_stats(conn).errors, 1);
            self.rx_release(rx);
            return None;
        }
        let stats = self.conn_stats(conn);
        bump(&stats.tx_frames, 1);
        bump(&stats.tx_bytes, rx.len as u64);
        Some(0)
    }

    /// A frame straight from its receive buffer on `qp` (forward or relay):
    /// the completion (`TAG_HELD`) gives the buffer back.
    fn send_held(&mut self, rx: &RxPacket, qp: Qp) -> bool {
        let (off, len) = self.rx_range(rx);
        let lkey = self.local_mr.lkey();
        let ptr = self.region_base().wrapping_add(off);
        qp.post_send(
            TAG_HELD | rx.buf as u64,
            ptr,
            len as u32,
            lkey,
            SendOp::Send,
        )
        .is_ok()
    }

    /// The address a connection's frames carry: the peer's IP and port, the
    /// connection slot in the scope id and its generation in the flow info,
    /// so a reply never reaches a later connection in the same slot.
    fn peer_of(&self, slot: usize) -> SocketAddr {
        let c = &self.conns[slot];
        let ip = match c.peer {
            SocketAddr::V4(a) => a.ip().to_ipv6_mapped(),
            SocketAddr::V6(a) => *a.ip(),
        };
        SocketAddr::V6(SocketAddrV6::new(
            ip,
            c.peer.port(),
            c.generation,
            slot as u32 + 1,
        ))
    }

    fn slot_of(&self, peer: &SocketAddr) -> Option<usize> {
        let SocketAddr::V6(a) = peer else { return None };
        let slot = (a.scope_id() as usize).checked_sub(1)?;
        let c = self.conns.get(slot)?;
        (c.up && c.generation == a.flowinfo()).then_some(slot)
    }

    fn repost(&mut self, b: u32) {
        let lkey = self.local_mr.lkey();
        let p = self
            .region_base()
            .wrapping_add(b as usize * self.buf_size as usize);
        if self
            .port
            .srq
            .post_recv(TAG_RECV | b as u64, p, self.buf_size, lkey)
            .is_err()
        {
            self.counters.rx_no_buffers += 1;
        }
    }

    fn region_base(&mut self) -> *mut u8 {
        self.region
            .as_mut()
            .map_or(std::ptr::null_mut(), Region::as_mut_ptr)
    }

    /// Byte range of a received frame in the region.
    fn rx_range(&self, rx: &RxPacket) -> (usize, usize) {
        if rx.buf < self.rx_count {
            assert!(
                rx.off as usize + rx.len as usize <= self.buf_size as usize,
                "frame outside its buffer"
            );
            (
                rx.buf as usize * self.buf_size as usize + rx.off as usize,
                rx.len as usize,
            )
        } else {
            let k = (rx.buf - self.rx_count) as usize;
            assert!(k < self.large_busy.len(), "receive index out of range");
            assert!(
                rx.off as usize + rx.len as usize <= self.slot_size as usize,
                "frame outside its slot"
            );
            (
                self.slots_off + k * self.slot_size as usize + rx.off as usize,
                rx.len as usize,
            )
        }
    }

    /// Byte range of a transmit buffer in the region.
    fn tx_range(&self, tx: u32) -> (usize, usize) {
        assert!(tx < self.tx_count, "transmit index out of range");
        match self.tx_large_of[tx as usize] {
            NONE => (
                (self.rx_count + tx) as usize * self.buf_size as usize,
                self.buf_size as usize,
            ),
            l => (
                self.large_tx_off + l as usize * self.slot_size as usize,
                self.slot_size as usize,
            ),
        }
    }

    fn release_tx(&mut self, tx: u32) {
        let l = std::mem::replace(&mut self.tx_large_of[tx as usize], NONE);
        if l != NONE {
            self.large_free.free(l);
        }
        self.tx_reply_slot[tx as usize] = NONE;
        self.tx_free.free(tx);
    }

    fn on_completion(&mut self, wc: Wc, out: &mut [RxPacket], n: &mut usize) {
        let idx = (wc.wr_id & INDEX_MASK) as u32;
        if wc.wr_id & TAG_HELD != 0 {
            if wc.ok {
                self.counters.tx_frames += 1;
            } else {
                self.counters.tx_errors += 1;
                self.send_failed(wc.qp_num);
            }
            if idx < self.rx_count {
                self.rx_in_use -= 1;
                self.repost(idx);
            }
            return;
        }
        if wc.wr_id & TAG_SEND != 0 {
            if wc.ok {
                self.counters.tx_frames += 1;
            } else {
                self.counters.tx_errors += 1;
                self.send_failed(wc.qp_num);
            }
            if idx < self.tx_count {
                self.release_tx(idx);
            }
            return;
        }
        if wc.wr_id & TAG_RECV == 0 || idx >= self.rx_count {
            return;
        }
        if !wc.ok {
            // Flushed by a QP that went to error: the buffer is ours again.
            self.repost(idx);
            return;
        }
        let mut slot = self.conn_by_qpn(wc.qp_num);
        if slot.is_none() && self.peer_by_qpn(wc.qp_num).is_none() {
            // The completion may have overtaken the hand-off: look again.
            self.drain_inbox();
            slot = self.conn_by_qpn(wc.qp_num);
        }
        if slot.is_none() {
            if let Some(k) = self.peer_by_qpn(wc.qp_num) {
                // A peer's answer to a forward: to the worker's relay path.
                let stats = &self.port.peer_stats[k];
                if wc.kind == WcKind::Recv {
                    bump(&stats.rx_frames, 1);
                    bump(&stats.rx_bytes, wc.byte_len as u64);
                    out[*n] = RxPacket {
                        buf: idx,
                        off: 0,
                        len: wc.byte_len.min(self.buf_size),
                        peer: self.peer_addrs[k],
                        truncated: false,
                        port: crate::transport::PORT_FORWARD,
                    };
                    *n += 1;
                    self.rx_in_use += 1;
                    self.counters.rx_frames += 1;
                } else {
                    // No slots were granted to peers: nothing else is valid.
                    bump(&stats.errors, 1);
                    self.repost(idx);
                }
                return;
            }
        }
        let Some(slot) = slot else {
            self.repost(idx);
            self.counters.rx_no_buffers += 1;
            return;
        };
        let peer = self.peer_of(slot);
        let stats = &self.port.stats[slot];
        match wc.kind {
            WcKind::Recv => {
                bump(&stats.rx_frames, 1);
                bump(&stats.rx_bytes, wc.byte_len as u64);
                out[*n] = RxPacket {
                    buf: idx,
                    off: 0,
                    len: wc.byte_len.min(self.buf_size),
                    peer,
                    truncated: false,
                    port: crate::transport::PORT_SERVICE,
                };
                *n += 1;
                self.rx_in_use += 1;
                self.counters.rx_frames += 1;
            }
            WcKind::RecvWriteImm => {
                // The write consumed a receive but put nothing in it.
                let k = wc.imm & 0xffff;
                let ok = wc.imm & IMM_SLOT != 0 && k < self.spc && wc.byte_len <= self.slot_size;
                let g = slot * self.spc as usize + k as usize;
                if !ok || self.large_busy[g] {
                    bump(&stats.errors, 1);
                    self.counters.rx_no_buffers += 1;
                } else {
                    bump(&stats.rx_frames, 1);
                    bump(&stats.rx_large, 1);
                    bump(&stats.rx_bytes, wc.byte_len as u64);
                    self.large_busy[g] = true;
                    out[*n] = RxPacket {
                        buf: self.rx_count + g as u32,
                        off: 0,
                        len: wc.byte_len,
                        peer,
                        truncated: false,
                        port: crate::transport::PORT_SERVICE,
                    };
                    *n += 1;
                    self.rx_in_use += 1;
                    self.counters.rx_frames += 1;
                }
                self.repost(idx);
            }
            _ => self.repost(idx),
        }
    }
}

impl Transport for RdmaTransport {
    fn rx_burst(&mut self, out: &mut [RxPacket]) -> usize {
        self.drain_inbox();
        let mut n = 0;
        while n < out.len() {
            let room = (out.len() - n).min(verbs::POLL_BATCH_MAX);
            let mut wcs = self.wcs;
            let k = self.port.cq.poll(&mut wcs[..room]);
            if k == 0 {
                break;
            }
            for &wc in &wcs[..k] {
                self.on_completion(wc, out, &mut n);
            }
        }
        n
    }

    fn tx_alloc(&mut self) -> Option<u32> {
        self.tx_free.alloc()
    }

    fn frames(&mut self, rx: &RxPacket, tx: u32) -> (&[u8], &mut [u8]) {
        if rx.buf >= self.rx_count && self.tx_large_of[tx as usize] == NONE {
            // A large request gets a large reply buffer while one is free;
            // the reply goes to the client's reply slot of the same index.
            if let Some(l) = self.large_free.alloc() {
                self.tx_large_of[tx as usize] = l;
                self.tx_reply_slot[tx as usize] = (rx.buf - self.rx_count) % self.spc.max(1);
            }
        }
        let (ro, rl) = self.rx_range(rx);
        let (to, tl) = self.tx_range(tx);
        let bytes = self.region.as_mut().map_or(&mut [][..], Region::bytes_mut);
        // Receive and transmit areas never overlap: split between them.
        if ro < to {
            let (a, b) = bytes.split_at_mut(to);
            (&a[ro..ro + rl], &mut b[..tl])
        } else {
            let (a, b) = bytes.split_at_mut(ro);
            (&b[..rl], &mut a[to..to + tl])
        }
    }

    fn rx_bytes(&self, rx: &RxPacket) -> &[u8] {
        let (o, l) = self.rx_range(rx);
        self.region
            .as_ref()
            .map_or(&[][..], |r| &verbs::region_bytes(r)[o..o + l])
    }

    fn rx_release(&mut self, rx: &RxPacket) {
        if rx.buf < self.rx_count {
            self.repost(rx.buf);
        } else if let Some(b) = self.large_busy.get_mut((rx.buf - self.rx_count) as usize) {
            *b = false;
        }
        self.rx_in_use -= 1;
    }

    fn tx_burst(&mut self, pkts: &[TxPacket]) {
        let lkey = self.local_mr.lkey();
        let base = self.region_base();
        let port = Arc::clone(&self.port);
        for p in pkts {
            let (off, cap) = self.tx_range(p.buf);
            assert!(
                p.len as usize <= cap,
                "transmit frame longer than its buffer"
            );
            let Some(slot) = self.slot_of(&p.peer) else {
                // The connection went away since the request arrived.
                self.counters.tx_errors += 1;
                self.release_tx(p.buf);
                continue;
            };
            let c = self.conns[slot];
            let stats = &port.stats[slot];
            let k = self.tx_reply_slot[p.buf as usize];
            let op = if p.len <= c.hello.buffer_size {
                SendOp::Send
            } else if k != NONE && k < c.hello.reply_count && p.len <= c.hello.reply_size {
                SendOp::WriteImm {
                    remote_addr: c.hello.reply_base + k as u64 * c.hello.reply_size as u64,
                    rkey: c.hello.reply_rkey,
                    imm: IMM_SLOT | k,
                }
            } else {
                // Larger than anything the client granted for it.
                bump(&stats.errors, 1);
                self.counters.tx_errors += 1;
                self.release_tx(p.buf);
                continue;
            };
            let Some(qp) = c.qp else {
                self.counters.tx_errors += 1;
                self.release_tx(p.buf);
                continue;
            };
            let ptr = base.wrapping_add(off);
            match qp.post_send(TAG_SEND | p.buf as u64, ptr, p.len, lkey, op) {
                Ok(()) => {
                    bump(&stats.tx_frames, 1);
                    bump(&stats.tx_bytes, p.len as u64);
                    if matches!(op, SendOp::WriteImm { .. }) {
                        bump(&stats.tx_large, 1);
                    }
                }
                Err(_) => {
                    bump(&stats.errors, 1);
                    self.counters.tx_errors += 1;
                    self.release_tx(p.buf);
                }
            }
        }
    }

    fn tx_free(&mut self, tx: u32) {
        self.release_tx(tx);
    }

    /// Lets the worker build an answer with no request at hand: the
    /// `peer_down` it sends when a forward gets no answer.
    fn tx_bytes(&mut self, tx: u32) -> &mut [u8] {
        if tx >= self.tx_count {
            return &mut [];
        }
        let (o, l) = self.tx_range(tx);
        self.region
            .as_mut()
            .map_or(&mut [][..], |r| &mut r.bytes_mut()[o..o + l])
    }

    fn rx_bytes_mut(&mut self, rx: &RxPacket) -> &mut [u8] {
        let (o, l) = self.rx_range(rx);
        self.region
            .as_mut()
            .map_or(&mut [][..], |r| &mut r.bytes_mut()[o..o + l])
    }

    fn forward_check(
        &self,
        rx: &RxPacket,
        to: SocketAddr,
    ) -> Result<(), (ErrorCode, &'static str)> {
        let Some(k) = self.peer_index(&to) else {
            return Err((
                ErrorCode::PeerDown,
                "the peer serving this shard is not an rdma peer (an rdma appliance forwards only to peers with transport = \"rdma\")",
            ));
        };
        let p = &self.peers[k];
        if !p.up {
            return Err((
                ErrorCode::PeerDown,
                "no connection to the peer serving this shard (reconnecting)",
            ));
        }
        if rx.buf >= self.rx_count || rx.len > p.hello.buffer_size {
            return Err((
                ErrorCode::FrameTooLarge,
                "only frames that fit one receive buffer (rdma.buffer_size, here and on the peer) are forwarded",
            ));
        }
        Ok(())
    }

    /// Zero copy: the frame goes by SEND from the receive buffer it landed
    /// in, which stays held until the send completes.
    fn forward(&mut self, rx: &RxPacket, to: SocketAddr) -> Option<u64> {
        let target = self
            .peer_index(&to)
            .and_then(|k| Some((k, self.peers[k].qp?)))
            .filter(|&(k, _)| self.forward_check(rx, to).is_ok() && self.peers[k].up);
        self.send_counted(rx, target.map(|(k, qp)| (qp, Via::Peer(k))))
    }

    /// Zero copy: the peer's answer goes by SEND from the receive buffer it
    /// landed in to the client's connection.
    fn relay(&mut self, rx: &RxPacket, to: SocketAddr) -> Option<u64> {
        let target = self.slot_of(&to).and_then(|s| {
            let c = self.conns[s];
            (rx.buf < self.rx_count && rx.len <= c.hello.buffer_size).then_some((s, c.qp?))
        });
        // None: the client left, or the answer is larger than its buffers.
        self.send_counted(rx, target.map(|(s, qp)| (qp, Via::Client(s))))
    }

    fn lost_peer(&mut self) -> Option<SocketAddr> {
        if !self.any_lost {
            return None;
        }
        match self.peers.iter().position(|p| p.lost) {
            Some(k) => {
                self.peers[k].lost = false;
                Some(self.peer_addrs[k])
            }
            None => {
                self.any_lost = false;
                None
            }
        }
    }

    fn wait(&mut self, timeout: Duration) {
        // No completion channel: a short nap bounds the added latency.
        std::thread::sleep(timeout.min(Duration::from_micros(100)));
    }

    fn counters(&self) -> TransportCounters {
        TransportCounters {
            rx_in_use: self.rx_in_use,
            tx_in_use: self.tx_free.in_use(),
            buffer_reuses: self.tx_free.reuses
                + self.counters.rx_frames.saturating_sub(self.rx_count as u64),
            ..self.counters
        }
    }

    fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

impl Drop for RdmaTransport {
    fn drop(&mut self) {
        // Ask the control thread to destroy this worker's QPs, and wait:
        // until then a peer's WRITE or a posted receive may still land in
        // the region.
        self.port.closing.store(true, Ordering::Release);
        let t = Instant::now();
        while !self.port.closed.load(Ordering::Acquire) && t.elapsed() < TEARDOWN_WAIT {
            std::thread::sleep(Duration::from_millis(2));
        }
        if !self.port.closed.load(Ordering::Acquire) {
            log::error!(
                "rdma: worker {} connections not torn down in time; leaking its buffer pool",
                self.index
            );
            std::mem::forget(self.region.take());
        }
        let _ = self.conns_max;
    }
}
