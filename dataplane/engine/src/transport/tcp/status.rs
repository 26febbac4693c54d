//! What a worker's TCP side shares with the control side: per-connection
//! counters and addresses (written by the worker alone, read by listings),
//! per-worker totals, and the queue of close requests. Atomics only: the
//! worker never locks.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};

use crossbeam_queue::ArrayQueue;
use serde::Serialize;

use crate::stats::bump;
use crate::transport::ConnStatus;

/// Counters of one connection.
#[derive(Debug, Default)]
pub struct ConnCounters {
    /// Frames received whole.
    pub rx_frames: AtomicU64,
    /// Bytes received.
    pub rx_bytes: AtomicU64,
    /// Frames received that a datagram could not carry.
    pub rx_large: AtomicU64,
    /// Frames sent.
    pub tx_frames: AtomicU64,
    /// Bytes sent.
    pub tx_bytes: AtomicU64,
    /// Frames sent that a datagram could not carry.
    pub tx_large: AtomicU64,
    /// Refused frames, failed sends, answers dropped on a closed connection.
    pub errors: AtomicU64,
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

    /// Adds `o` into `self` (the worker retiring a closed connection).
    pub(super) fn absorb(&self, o: &ConnCounters) {
        for (a, b) in self.fields().into_iter().zip(o.fields()) {
            bump(a, b.load(Ordering::Relaxed));
            b.store(0, Ordering::Relaxed);
        }
    }

    fn snapshot(&self) -> [u64; 7] {
        self.fields().map(|a| a.load(Ordering::Relaxed))
    }
}

/// States a connection is listed in.
pub(super) mod conn_state {
    /// Slot free.
    pub const FREE: u8 = 0;
    /// Connecting (peer connections).
    pub const CONNECTING: u8 = 1;
    /// Reading and answering.
    pub const UP: u8 = 2;
    /// The client closed its side; answers still go out.
    pub const HALF_CLOSED: u8 = 3;
    /// Being closed.
    pub const CLOSING: u8 = 4;
}

/// One connection slot as the control side sees it.
#[derive(Debug, Default)]
pub struct ConnShared {
    /// Seqlock over the fields below: odd while the worker writes.
    seq: AtomicU32,
    id: AtomicU64,
    role: AtomicU8,
    state: AtomicU8,
    ip_hi: AtomicU64,
    ip_lo: AtomicU64,
    port: AtomicU32,
    /// Counters; zeroed when the connection is retired.
    pub counters: ConnCounters,
}

impl ConnShared {
    /// Publishes a new connection (worker side).
    pub(super) fn open(&self, id: u64, role: u8, state: u8, peer: SocketAddr) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        let v6 = match peer.ip() {
            IpAddr::V4(a) => a.to_ipv6_mapped(),
            IpAddr::V6(a) => a,
        }
        .to_bits();
        self.ip_hi.store((v6 >> 64) as u64, Ordering::Relaxed);
        self.ip_lo.store(v6 as u64, Ordering::Relaxed);
        self.port.store(
            u32::from(peer.port()) | (u32::from(peer.is_ipv4()) << 16),
            Ordering::Relaxed,
        );
        self.role.store(role, Ordering::Relaxed);
        self.state.store(state, Ordering::Relaxed);
        self.id.store(id, Ordering::Relaxed);
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }

    /// Changes the listed state (worker side).
    pub(super) fn set_state(&self, state: u8) {
        self.state.store(state, Ordering::Release);
    }

    /// Frees the slot (worker side).
    pub(super) fn close(&self) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        self.id.store(0, Ordering::Relaxed);
        self.state.store(conn_state::FREE, Ordering::Relaxed);
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }

    /// (id, role, state, peer) when a connection is in the slot.
    fn read(&self) -> Option<(u64, u8, u8, SocketAddr)> {
        for _ in 0..64 {
            let s0 = self.seq.load(Ordering::Acquire);
            if s0 % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let id = self.id.load(Ordering::Relaxed);
            let role = self.role.load(Ordering::Relaxed);
            let state = self.state.load(Ordering::Relaxed);
            let hi = self.ip_hi.load(Ordering::Relaxed);
            let lo = self.ip_lo.load(Ordering::Relaxed);
            let port = self.port.load(Ordering::Relaxed);
            std::sync::atomic::fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) != s0 {
                continue;
            }
            if id == 0 {
                return None;
            }
            let v6 = Ipv6Addr::from_bits((u128::from(hi) << 64) | u128::from(lo));
            let ip = match (port >> 16 == 1, v6.to_ipv4_mapped()) {
                (true, Some(v4)) => IpAddr::V4(v4),
                _ => IpAddr::V6(v6),
            };
            return Some((id, role, state, SocketAddr::new(ip, port as u16)));
        }
        None
    }
}

/// Per-worker TCP counters since start.
#[derive(Debug, Default)]
pub struct TcpCounters {
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Connections refused: `tcp_connections_max` reached.
    pub refused: AtomicU64,
    /// Connections closed and released.
    pub closed: AtomicU64,
    /// Connections closed because a started frame stalled past
    /// `tcp_idle_timeout_ms` (or a peer connect hung that long).
    pub idle_timeouts: AtomicU64,
    /// Connections closed at accept: `tcp_connections_per_source_max` of
    /// their source address were open.
    pub source_refused: AtomicU64,
    /// Client connections closed after `tcp_idle_timeout_ms` between
    /// frames with nothing owed to them.
    pub conn_idle_timeouts: AtomicU64,
    /// Connections closed because a frame was not whole within
    /// `tcp_frame_timeout_ms` of its first byte.
    pub frame_timeouts: AtomicU64,
    /// Connections closed because their answers made no progress for
    /// `tcp_send_timeout_ms` (the client did not read).
    pub send_timeouts: AtomicU64,
    /// Frames refused before a large slot: unknown tenant, unsigned or a
    /// bad tag (answered `unauthenticated`, connection closed).
    pub unauthenticated: AtomicU64,
    /// Frames refused before a large slot: verified, but their deadline is
    /// 0, passed or beyond the freshness window.
    pub stale: AtomicU64,
    /// Frames refused for a declared length above `tcp_frame_len_max`.
    pub oversized: AtomicU64,
    /// Streams whose fixed header was not a frame (bad magic, version or
    /// header length): answered and closed.
    pub malformed: AtomicU64,
    /// Frames cut short by the peer closing or resetting (not accepted).
    pub partial_frames: AtomicU64,
    /// Frames taken back because their shard queue was full (the
    /// connection stopped being read meanwhile).
    pub deferred: AtomicU64,
    /// Times a connection stopped being read until a slot came free.
    pub slot_waits: AtomicU64,
    /// Of those, the times a slot was free but the frame's source or
    /// tenant held its share (or only the verified reserve was left).
    pub share_waits: AtomicU64,
    /// Times a connection stopped being read at `tcp_pipeline_max`.
    pub pipeline_waits: AtomicU64,
    /// Header bytes copied from the staging area into slots (96 per frame,
    /// the whole header when its tag was checked first; tensor bytes are
    /// only ever written by the kernel).
    pub header_bytes_copied: AtomicU64,
    /// Send submissions.
    pub sends: AtomicU64,
    /// Answers in those submissions.
    pub send_frames: AtomicU64,
    /// `SEND_ZC` submissions the kernel sent without copying.
    pub zc_sends: AtomicU64,
    /// `SEND_ZC` submissions the kernel copied anyway (always on loopback).
    pub zc_copied: AtomicU64,
    /// Answers for connections that had closed (dropped, the client is gone).
    pub answers_dropped: AtomicU64,
    /// Frames forwarded to peers over TCP.
    pub peer_forwards: AtomicU64,
    /// Peer connections opened.
    pub peer_connects: AtomicU64,
}

/// What a worker's TCP side shares with the control side.
#[derive(Debug)]
pub struct TcpShared {
    /// Worker index.
    pub worker: usize,
    listen: OnceLock<SocketAddr>,
    /// Connection slots: clients first, then peers.
    pub(super) conns: Box<[ConnShared]>,
    /// Connection ids the control side asked to close.
    pub(super) close_requests: ArrayQueue<u64>,
    /// Totals.
    pub counters: TcpCounters,
    /// Sums of closed connections' counters.
    pub(super) retired: ConnCounters,
    /// Pairs in use per slot class, published with `slots_size`.
    pub(super) slots_in_use: Box<[AtomicU32]>,
    pub(super) slots_size: Box<[AtomicU32]>,
    pub(super) slots_count: Box<[AtomicU32]>,
    /// Whether the slots sit in hugepages.
    pub(super) hugepages: std::sync::atomic::AtomicBool,
}

/// Roles in listings.
pub(super) const ROLE_CLIENT: u8 = 0;
pub(super) const ROLE_PEER: u8 = 1;

impl TcpShared {
    /// Room for `conns` connection slots (clients and peers).
    pub fn new(worker: usize, conns: usize, classes: usize) -> TcpShared {
        TcpShared {
            worker,
            listen: OnceLock::new(),
            conns: (0..conns).map(|_| ConnShared::default()).collect(),
            close_requests: ArrayQueue::new(conns.max(1)),
            counters: TcpCounters::default(),
            retired: ConnCounters::default(),
            slots_in_use: (0..classes).map(|_| AtomicU32::new(0)).collect(),
            slots_size: (0..classes).map(|_| AtomicU32::new(0)).collect(),
            slots_count: (0..classes).map(|_| AtomicU32::new(0)).collect(),
            hugepages: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Room for the connections and slot classes `cfg` asks for.
    pub fn for_config(worker: usize, cfg: &crate::config::UringCfg) -> TcpShared {
        TcpShared::new(
            worker,
            cfg.tcp_connections_max as usize + super::TCP_PEERS_MAX,
            cfg.tcp_slots.len(),
        )
    }

    /// The address this worker listens on, once bound.
    pub fn listen(&self) -> Option<SocketAddr> {
        self.listen.get().copied()
    }

    pub(super) fn set_listen(&self, a: SocketAddr) {
        let _ = self.listen.set(a);
    }

    /// Whether a connection id belongs to this worker and is open.
    pub fn has(&self, id: u64) -> bool {
        self.conns
            .iter()
            .any(|c| c.read().is_some_and(|r| r.0 == id))
    }

    /// Asks the worker to close connection `id`. False when it is not
    /// this worker's.
    pub fn request_close(&self, id: u64) -> bool {
        self.has(id) && self.close_requests.push(id).is_ok()
    }

    /// The open connections.
    pub fn connections(&self) -> Vec<ConnStatus> {
        let listen = self.listen().unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
        let mut out = Vec::new();
        for c in self.conns.iter() {
            let Some((id, role, state, peer)) = c.read() else {
                continue;
            };
            let [
                rx_frames,
                rx_bytes,
                rx_large,
                tx_frames,
                tx_bytes,
                tx_large,
                errors,
            ] = c.counters.snapshot();
            out.push(ConnStatus {
                id,
                transport: "tcp",
                role: if role == ROLE_PEER { "peer" } else { "client" },
                listen,
                worker: self.worker,
                peer: Some(peer),
                device: String::new(),
                state: match state {
                    conn_state::CONNECTING => "connecting",
                    conn_state::UP => "up",
                    conn_state::HALF_CLOSED => "half_closed",
                    _ => "closing",
                },
                rx_frames,
                rx_bytes,
                rx_large,
                tx_frames,
                tx_bytes,
                tx_large,
                errors,
            });
        }
        out
    }

    /// Totals since start (closed connections included).
    pub fn totals(&self) -> TcpTotals {
        let mut sum = self.retired.snapshot();
        let mut open = 0;
        for c in self.conns.iter() {
            if c.read().is_some() {
                open += 1;
            }
            for (s, v) in sum.iter_mut().zip(c.counters.snapshot()) {
                *s += v;
            }
        }
        let k = &self.counters;
        let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
        TcpTotals {
            transport: "tcp",
            listen: self.listen().unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0))),
            worker: self.worker,
            open,
            accepted: ld(&k.accepted),
            closed: ld(&k.closed),
            rx_frames: sum[0],
            rx_bytes: sum[1],
            rx_large: sum[2],
            tx_frames: sum[3],
            tx_bytes: sum[4],
            tx_large: sum[5],
            errors: sum[6],
            refused: ld(&k.refused),
            idle_timeouts: ld(&k.idle_timeouts),
            source_refused: ld(&k.source_refused),
            conn_idle_timeouts: ld(&k.conn_idle_timeouts),
            frame_timeouts: ld(&k.frame_timeouts),
            send_timeouts: ld(&k.send_timeouts),
            unauthenticated: ld(&k.unauthenticated),
            stale: ld(&k.stale),
            share_waits: ld(&k.share_waits),
            oversized: ld(&k.oversized),
            malformed: ld(&k.malformed),
            partial_frames: ld(&k.partial_frames),
            deferred: ld(&k.deferred),
            slot_waits: ld(&k.slot_waits),
            pipeline_waits: ld(&k.pipeline_waits),
            header_bytes_copied: ld(&k.header_bytes_copied),
            sends: ld(&k.sends),
            send_frames: ld(&k.send_frames),
            zc_sends: ld(&k.zc_sends),
            zc_copied: ld(&k.zc_copied),
            answers_dropped: ld(&k.answers_dropped),
            peer_forwards: ld(&k.peer_forwards),
            peer_connects: ld(&k.peer_connects),
            slots: (0..self.slots_size.len())
                .map(|i| TcpSlotStatus {
                    size: self.slots_size[i].load(Ordering::Relaxed),
                    count: self.slots_count[i].load(Ordering::Relaxed),
                    in_use: self.slots_in_use[i].load(Ordering::Relaxed),
                })
                .collect(),
            hugepages: self.hugepages.load(Ordering::Relaxed),
        }
    }
}

/// One slot class in totals.
#[derive(Debug, Clone, Serialize)]
pub struct TcpSlotStatus {
    /// Bytes per slot.
    pub size: u32,
    /// Pairs (receive + reply slot).
    pub count: u32,
    /// Pairs in use.
    pub in_use: u32,
}

/// One worker's TCP totals (the connection-totals shape plus TCP counters).
#[derive(Debug, Clone, Serialize)]
pub struct TcpTotals {
    /// Always "tcp".
    pub transport: &'static str,
    /// Listen address.
    pub listen: SocketAddr,
    /// Worker.
    pub worker: usize,
    /// Open now.
    pub open: u64,
    /// Accepted.
    pub accepted: u64,
    /// Closed and released.
    pub closed: u64,
    /// Frames received.
    pub rx_frames: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames received that a datagram could not carry.
    pub rx_large: u64,
    /// Frames sent.
    pub tx_frames: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Frames sent that a datagram could not carry.
    pub tx_large: u64,
    /// Errors.
    pub errors: u64,
    /// See [`TcpCounters::refused`].
    pub refused: u64,
    /// See [`TcpCounters::idle_timeouts`].
    pub idle_timeouts: u64,
    /// See [`TcpCounters::source_refused`].
    pub source_refused: u64,
    /// See [`TcpCounters::conn_idle_timeouts`].
    pub conn_idle_timeouts: u64,
    /// See [`TcpCounters::frame_timeouts`].
    pub frame_timeouts: u64,
    /// See [`TcpCounters::send_timeouts`].
    pub send_timeouts: u64,
    /// See [`TcpCounters::unauthenticated`].
    pub unauthenticated: u64,
    /// See [`TcpCounters::stale`].
    pub stale: u64,
    /// See [`TcpCounters::share_waits`].
    pub share_waits: u64,
    /// See [`TcpCounters::oversized`].
    pub oversized: u64,
    /// See [`TcpCounters::malformed`].
    pub malformed: u64,
    /// See [`TcpCounters::partial_frames`].
    pub partial_frames: u64,
    /// See [`TcpCounters::deferred`].
    pub deferred: u64,
    /// See [`TcpCounters::slot_waits`].
    pub slot_waits: u64,
    /// See [`TcpCounters::pipeline_waits`].
    pub pipeline_waits: u64,
    /// See [`TcpCounters::header_bytes_copied`].
    pub header_bytes_copied: u64,
    /// See [`TcpCounters::sends`].
    pub sends: u64,
    /// See [`TcpCounters::send_frames`].
    pub send_frames: u64,
    /// See [`TcpCounters::zc_sends`].
    pub zc_sends: u64,
    /// See [`TcpCounters::zc_copied`].
    pub zc_copied: u64,
    /// See [`TcpCounters::answers_dropped`].
    pub answers_dropped: u64,
    /// See [`TcpCounters::peer_forwards`].
    pub peer_forwards: u64,
    /// See [`TcpCounters::peer_connects`].
    pub peer_connects: u64,
    /// Slot classes and their use.
    pub slots: Vec<TcpSlotStatus>,
    /// Whether the slots sit in hugepages.
    pub hugepages: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_published_connection_reads_back() {
        let s = TcpShared::new(3, 2, 1);
        let peer: SocketAddr = "10.1.2.3:4567".parse().unwrap();
        s.conns[1].open(42, ROLE_CLIENT, conn_state::UP, peer);
        bump(&s.conns[1].counters.rx_frames, 5);
        let l = s.connections();
        assert_eq!(l.len(), 1);
        assert_eq!((l[0].id, l[0].peer, l[0].rx_frames), (42, Some(peer), 5));
        assert!(s.request_close(42));
        assert!(!s.request_close(43));
        let v6: SocketAddr = "[2001:db8::1]:9".parse().unwrap();
        s.conns[0].open(7, ROLE_PEER, conn_state::CONNECTING, v6);
        assert_eq!(s.connections()[0].peer, Some(v6));
        s.retired.absorb(&s.conns[1].counters);
        s.conns[1].close();
        let t = s.totals();
        assert_eq!((t.open, t.rx_frames), (1, 5));
    }
}
