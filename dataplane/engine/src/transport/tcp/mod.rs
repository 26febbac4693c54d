//! TCP on io_uring, beside UDP in the same transport (`transport =
//! "io_uring"` with `io_uring.tcp_listen` set), for frames a datagram
//! cannot carry.
//!
//! - **Per worker**: its own `SO_REUSEPORT` listener on its own ring, a
//!   multishot accept, and a fixed table of `tcp_connections_max`
//!   connections (plus a few to peers). A connection stays on the worker
//!   that accepted it. No thread per connection, no lock; nothing allocates
//!   after start-up.
//! - **Framing is the frame**: the 96-byte fixed header is read into the
//!   connection's staging area; `header_len + payload_len` picks the
//!   smallest slot class that holds the frame; the header is copied to the
//!   slot (96 bytes, counted) and the rest of the frame is received by the
//!   kernel straight into the slot, 64-byte aligned, where the worker
//!   parses it and ONNX Runtime reads the tensors in place.
//! - **Each slot has a reply slot of the same size**, taken with it, so an
//!   answer always has room; the worker writes the answer there in place.
//! - **Answers go out in request order per connection**, several per
//!   submission (`sendmsg` with up to 16 iovecs), `SEND_ZC` for large ones
//!   where the kernel does zero copy (`tcp_send_zc`).
//! - **Back-pressure, not loss**: a connection is not read while its slot
//!   class has no free slot, while `tcp_pipeline_max` of its requests are
//!   unanswered, or while the worker holds one of its frames back (shard
//!   queue full); TCP flow control then pushes back on the client.
//! - **Limits**: a declared length above `tcp_frame_len_max` or a stream
//!   that is not frames gets an error frame, the write side is shut and
//!   the connection closed; a half-closed connection still gets every
//!   accepted request answered.
//! - **Slots cannot be pinned** (`admit`): a large slot only for a header
//!   whose tag verified (with tenants), shares of the large classes per
//!   source and per tenant, a reserve of the smallest class for verified
//!   frames, connections per source; a frame deadline, an idle timeout and
//!   a send timeout (`close`). Every refusal and close is counted by cause.
//! - **Peers**: frames too large for a datagram are forwarded on a
//!   per-worker connection to the peer's `tcp_address`; its answers come
//!   back on that connection and are relayed from their slot.
#![allow(unsafe_code)]

mod admit;
mod close;
mod conn;
mod recv;
mod send;
mod slots;
pub mod status;
mod tally;

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{IoUring, squeue};

pub(in crate::transport) use conn::Buf as ReleasedBuf;
pub use status::{TcpShared, TcpSlotStatus, TcpTotals};

use crate::config::{HugepageMode, UringCfg, ZcMode};
use crate::pool::Region;
use crate::tables::Tables;
use admit::Limits;
use conn::{Answer, Buf, Conn};
use slots::SlotPool;
use tally::Tally;

/// Buffer ids at or above this name TCP pairs (receive and reply slots);
/// below it, the datagram pools.
pub const TCP_BUF_BASE: u32 = 1 << 24;
/// Largest frame one UDP datagram carries over IPv4.
pub const DATAGRAM_LEN_MAX: u32 = 65_507;
/// Most peer appliances one worker keeps TCP connections to.
pub const TCP_PEERS_MAX: usize = 32;
/// Answers at least this long go by `SEND_ZC` when it is enabled; below
/// it the notification costs more than the copy.
pub const ZC_MIN_BYTES: u32 = 64 << 10;

/// `user_data` of TCP operations: this bit, an op code, a context and an
/// index (connection or pair).
pub(super) const TAG_TCP: u64 = 1 << 57;
const OP_SHIFT: u32 = 48;
const CTX_SHIFT: u32 = 40;
const OP_ACCEPT: u64 = 1;
const OP_RECV: u64 = 2;
const OP_SEND: u64 = 3;
const OP_CONNECT: u64 = 4;
const OP_UDP_SEND: u64 = 5;
const OP_CANCEL: u64 = 6;

fn ud(op: u64, ctx: usize, index: u32) -> u64 {
    TAG_TCP | (op << OP_SHIFT) | ((ctx as u64) << CTX_SHIFT) | u64::from(index)
}

fn ud_parts(u: u64) -> (u64, usize, u32) {
    (
        (u >> OP_SHIFT) & 0xff,
        ((u >> CTX_SHIFT) & 0xff) as usize,
        u as u32,
    )
}

/// The `RxPacket::conn` token of frame `seq` on connection `index`.
fn token(index: u32, generation: u16, seq: u32) -> u64 {
    ((u64::from(generation) << 16 | u64::from(index)) << 32) | u64::from(seq)
}

fn untoken(t: u64) -> (u32, u16, u32) {
    let h = t >> 32;
    ((h & 0xffff) as u32, (h >> 16) as u16, t as u32)
}

/// A connection's id in listings: generation, worker and slot.
fn conn_id(worker: usize, index: u32, generation: u16) -> u64 {
    (u64::from(generation) << 32) | ((worker as u64) << 16) | u64::from(index)
}

/// IORING_SEND_ZC_REPORT_USAGE and IORING_NOTIF_USAGE_ZC_COPIED, from the
/// kernel ABI.
const ZC_REPORT_USAGE: u16 = 8;
const NOTIF_ZC_COPIED: i32 = i32::MIN;

/// Where the datagram side's buffers live, for answers that travel
/// between the two sides (a UDP peer's answer relayed to a TCP client,
/// a TCP frame forwarded to a UDP peer).
#[derive(Debug, Clone, Copy)]
pub(super) struct UdpMem {
    pub base: *mut u8,
    pub rx_count: u32,
    pub buf_size: u32,
    pub fwd_fd: i32,
}

impl UdpMem {
    fn ptr(&self, b: Buf, tcp_base: *mut u8, pool: &SlotPool) -> *mut u8 {
        match b {
            Buf::Datagram(i) => self
                .base
                .wrapping_add((self.rx_count + i) as usize * self.buf_size as usize),
            Buf::UdpRx(bid) => self
                .base
                .wrapping_add(bid as usize * self.buf_size as usize),
            Buf::Reply(p) => tcp_base.wrapping_add(pool.reply_off(p)),
            Buf::TcpRx(p) => tcp_base.wrapping_add(pool.rx_off(p)),
            // Connection buffers are addressed by the caller.
            Buf::Err(_) => std::ptr::null_mut(),
        }
    }
}

/// A peer appliance this worker forwards large frames to.
#[derive(Debug, Clone, Copy)]
struct PeerSlot {
    /// Its datagram address (the worker's key for it).
    addr: SocketAddr,
    tcp: SocketAddr,
    /// Its connection, while one is open.
    conn: Option<u32>,
}

/// The TCP side of one worker's io_uring transport.
///
/// Drop order: `Tcp` is dropped after the ring has been drained (the
/// owning transport's `Drop` waits for every operation); within it the
/// listener and sockets close before `region` unmaps.
pub struct Tcp {
    listener: TcpListener,
    local: SocketAddr,
    accept_armed: bool,
    worker: usize,
    conns: Box<[Conn]>,
    clients_max: u32,
    free_clients: Vec<u32>,
    peers: [Option<PeerSlot>; TCP_PEERS_MAX],
    pipeline: u32,
    /// Answer order of every connection: `pipeline` places each.
    answers: Box<[Answer]>,
    pool: SlotPool,
    /// Send state for datagrams sent straight from a pair's receive slot.
    udp_meta: Box<[super::uring::TxMeta]>,
    /// Frames received whole, not yet delivered to the worker.
    ready: VecDeque<u32>,
    /// Frames the worker took back; delivered first.
    deferred: VecDeque<u32>,
    /// Connections with answers to send.
    dirty: Vec<u32>,
    /// Datagram-side buffers done with, for the transport to take back.
    released: Vec<Buf>,
    /// Peers whose connection was lost, for `lost_peer`.
    lost: VecDeque<SocketAddr>,
    discard: Box<[u8]>,
    shared: Arc<TcpShared>,
    idle: Duration,
    limits: Limits,
    /// Client connections per source address.
    sources: Tally,
    /// The worker's tables (tenants and their keys, the auth policy), for
    /// checking a header's tag before a large slot is taken.
    tables: Option<Arc<Tables>>,
    frame_len_max: u32,
    zc_mode: ZcMode,
    now: Instant,
    last_scan: Instant,
    scan_every: Duration,
    /// Frames delivered to the worker and not yet released.
    pub(super) rx_in_use: u32,
    /// Frames received whole.
    pub(super) rx_frames: u64,
    /// Frames sent (answers, forwards, datagrams from slots).
    pub(super) tx_frames: u64,
    /// Failed sends and answers that could not be sent.
    pub(super) tx_errors: u64,
    /// Kernel operations in flight that are not a connection's (accept,
    /// datagram sends from slots).
    other_ops: u32,
    /// Every connection's slots stop being read (engine stopping).
    region: Region,
}

impl Tcp {
    /// Binds `listen` with SO_REUSEPORT and lays out every connection, slot
    /// and queue. `udp_rx` and `udp_tx` size the list of datagram buffers
    /// that may be handed back at once.
    pub(super) fn new(
        listen: SocketAddr,
        cfg: &UringCfg,
        huge: HugepageMode,
        shared: Arc<TcpShared>,
        udp_rx: u32,
        udp_tx: u32,
    ) -> std::io::Result<Tcp> {
        let listener = bind_listener(listen)?;
        let local = listener.local_addr()?;
        let clients = cfg.tcp_connections_max;
        let total = clients as usize + TCP_PEERS_MAX;
        if shared.conns.len() < total {
            return Err(std::io::Error::other("tcp shared state too small"));
        }
        let pool = SlotPool::new(&cfg.tcp_slots, total);
        let region = Region::alloc(pool.bytes(), huge).map_err(std::io::Error::other)?;
        let now = Instant::now();
        let pipeline = cfg.tcp_pipeline_max;
        for (i, (size, count, _)) in pool.in_use().enumerate() {
            let st = std::sync::atomic::Ordering::Relaxed;
            shared.slots_size[i].store(size, st);
            shared.slots_count[i].store(count, st);
        }
        shared
            .hugepages
            .store(region.is_huge(), std::sync::atomic::Ordering::Relaxed);
        shared.set_listen(local);
        let idle = Duration::from_millis(cfg.tcp_idle_timeout_ms.into());
        let limits = Limits::of(cfg);
        let npairs = pool.len() as usize;
        let scan_every = (idle.min(limits.frame).min(limits.send) / 4)
            .clamp(Duration::from_millis(1), Duration::from_millis(50));
        Ok(Tcp {
            listener,
            local,
            accept_armed: false,
            worker: shared.worker,
            conns: (0..total).map(|_| Conn::new(now)).collect(),
            clients_max: clients,
            free_clients: (0..clients).rev().collect(),
            peers: [None; TCP_PEERS_MAX],
            pipeline,
            answers: vec![Answer::Empty; total * pipeline as usize].into_boxed_slice(),
            udp_meta: (0..npairs)
                // SAFETY: TxMeta is plain old data; all-zero is valid.
                .map(|_| unsafe { std::mem::zeroed::<super::uring::TxMeta>() })
                .collect(),
            pool,
            ready: VecDeque::with_capacity(npairs),
            deferred: VecDeque::with_capacity(npairs),
            dirty: Vec::with_capacity(total),
            released: Vec::with_capacity((udp_rx + udp_tx) as usize + npairs),
            lost: VecDeque::with_capacity(TCP_PEERS_MAX),
            discard: vec![0u8; 64 << 10].into_boxed_slice(),
            shared,
            idle,
            limits,
            sources: Tally::new(clients as usize),
            tables: None,
            frame_len_max: cfg.tcp_frame_len_limit(),
            zc_mode: cfg.tcp_send_zc,
            now,
            last_scan: now,
            scan_every,
            rx_in_use: 0,
            rx_frames: 0,
            tx_frames: 0,
            tx_errors: 0,
            other_ops: 0,
            region,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn base(&mut self) -> *mut u8 {
        self.region.as_mut_ptr()
    }

    fn answer_at(&mut self, c: u32, seq: u32) -> &mut Answer {
        let p = self.pipeline;
        &mut self.answers[(c * p + seq % p) as usize]
    }

    /// Whether frames wait for the worker (it must not sleep).
    pub(super) fn has_ready(&self) -> bool {
        !self.ready.is_empty() || !self.deferred.is_empty()
    }

    /// Datagram-side buffers to take back.
    pub(super) fn take_released(&mut self) -> Option<Buf> {
        self.released.pop()
    }

    /// A peer whose connection was lost.
    pub(super) fn lost_peer(&mut self) -> Option<SocketAddr> {
        self.lost.pop_front()
    }

    /// Publishes slot use (once per burst).
    fn publish_slots(&self) {
        for (i, (_, _, used)) in self.pool.in_use().enumerate() {
            self.shared.slots_in_use[i].store(used, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// An answer the worker built, for the connection and place `token`
    /// names.
    pub(super) fn place_answer(&mut self, ring: &mut IoUring, token: u64, buf: Buf, len: u32) {
        self.place(ring, token, Answer::Send { buf, off: 0, len });
    }

    /// Whether any kernel operation still references TCP memory.
    pub(super) fn busy(&self) -> bool {
        self.other_ops > 0 || self.conns.iter().any(|c| c.ops > 0)
    }
}

/// Pushes one submission, submitting the queue first when it is full.
///
/// # Safety
/// Whatever `sqe` points to stays valid until its completion is reaped.
unsafe fn push(ring: &mut IoUring, sqe: &squeue::Entry) -> bool {
    // SAFETY: forwarded to the caller.
    if unsafe { ring.submission().push(sqe) }.is_ok() {
        return true;
    }
    let _ = ring.submit();
    // SAFETY: as above.
    unsafe { ring.submission().push(sqe) }.is_ok()
}

fn bind_listener(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let domain = if addr.is_ipv4() {
        socket2::Domain::IPV4
    } else {
        socket2::Domain::IPV6
    };
    let s = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.bind(&addr.into())?;
    s.listen(1024)?;
    Ok(s.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_user_data_round_trip() {
        let t = token(4095, 65535, u32::MAX);
        assert_ne!(t, 0);
        assert_eq!(untoken(t), (4095, 65535, u32::MAX));
        assert_eq!(untoken(token(0, 1, 0)), (0, 1, 0));
        let u = ud(OP_SEND, 1, 77);
        assert_eq!(u & TAG_TCP, TAG_TCP);
        assert_eq!(ud_parts(u), (OP_SEND, 1, 77));
        // Clear of the datagram side's tags (bits 58 to 62).
        assert_eq!(u >> 58, 0);
        assert_eq!(conn_id(3, 5, 2), (2 << 32) | (3 << 16) | 5);
    }
}
