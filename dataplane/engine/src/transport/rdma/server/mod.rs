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
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

use super::proto::{ClientHello, ServerHello};
use super::verbs::{self, CmChannel, CmId, Context, Cq, Mr, Pd, Qp, Srq, Wc};
use super::{NO_DEVICE_HINT, RdmaCfg};
use crate::config::ConfigError;
use crate::pool::{FreeList, PoolError, Region, TouchMap};
use crate::transport::TransportCounters;

mod completion;
mod control;
mod peers;
mod status;
mod transport;

pub use status::{ConnStatus, ConnTotals, close_connection, connection_totals, connections};

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

/// A connection to a peer as one worker sees it.
#[derive(Default)]
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
    /// First touch or reuse of each receive buffer and granted slot.
    rx_touch: TouchMap,
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
