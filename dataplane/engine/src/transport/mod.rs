//! The narrow, batched interface every transport implements: io_uring UDP
//! and TCP, DPDK, RDMA, and an in-memory one for tests.

use std::net::SocketAddr;
use std::time::Duration;

use sluice_wire::ErrorCode;

pub mod conn;
#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod ingress;
pub mod mem;
#[cfg(feature = "rdma")]
pub mod rdma;
pub mod tcp;
pub mod uring;

pub use conn::ConnStatus;

/// A received frame: where it sits and who sent it.
#[derive(Debug, Clone, Copy)]
pub struct RxPacket {
    /// Receive buffer index.
    pub buf: u32,
    /// Offset of the frame in the buffer.
    pub off: u32,
    /// Frame length.
    pub len: u32,
    /// Sender.
    pub peer: SocketAddr,
    /// The datagram was larger than the buffer; only a prefix is here.
    pub truncated: bool,
    /// Which local port it arrived on: [`PORT_SERVICE`] or [`PORT_FORWARD`].
    pub port: u8,
    /// The stream connection it arrived on and its place in that
    /// connection's order ([`CONN_DATAGRAM`] for datagrams). Opaque to the
    /// worker, which copies it into the answer's [`TxPacket`].
    pub conn: u64,
}

/// [`RxPacket::conn`] of a frame that arrived as a datagram.
pub const CONN_DATAGRAM: u64 = 0;

/// The port clients send requests to.
pub const PORT_SERVICE: u8 = 0;
/// A worker's own port for requests it forwards to peers: their answers come
/// back here, to the worker that holds the pending entry.
pub const PORT_FORWARD: u8 = 1;

impl Default for RxPacket {
    fn default() -> Self {
        RxPacket {
            buf: 0,
            off: 0,
            len: 0,
            peer: SocketAddr::from(([0, 0, 0, 0], 0)),
            truncated: false,
            port: PORT_SERVICE,
            conn: CONN_DATAGRAM,
        }
    }
}

/// A frame to send from a transmit buffer.
#[derive(Debug, Clone, Copy)]
pub struct TxPacket {
    /// Transmit buffer index.
    pub buf: u32,
    /// Frame length.
    pub len: u32,
    /// Destination.
    pub peer: SocketAddr,
    /// The connection of the request it answers ([`RxPacket::conn`]);
    /// [`CONN_DATAGRAM`] sends a datagram to `peer`.
    pub conn: u64,
}

impl TxPacket {
    /// The answer to `rx` in transmit buffer `buf`.
    pub fn answer(rx: &RxPacket, buf: u32, len: u32) -> TxPacket {
        TxPacket {
            buf,
            len,
            peer: rx.peer,
            conn: rx.conn,
        }
    }
}

/// A peer appliance as forwarding sees it: its datagram service address
/// (which also keys its pending forwards) and, when configured, the TCP
/// address that carries frames a datagram cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr {
    /// Datagram (or RDMA) address.
    pub addr: SocketAddr,
    /// TCP address (`peers[].tcp_address`).
    pub tcp: Option<SocketAddr>,
}

/// Counters every transport keeps.
#[derive(Debug, Default, Clone, Copy)]
pub struct TransportCounters {
    /// Frames received.
    pub rx_frames: u64,
    /// Frames sent.
    pub tx_frames: u64,
    /// Receives lost because no receive buffer was free.
    pub rx_no_buffers: u64,
    /// Send errors.
    pub tx_errors: u64,
    /// Receive buffers in use.
    pub rx_in_use: u32,
    /// Transmit buffers in use.
    pub tx_in_use: u32,
    /// Receive buffers.
    pub rx_capacity: u32,
    /// Transmit buffers.
    pub tx_capacity: u32,
    /// Buffer allocations that reused a buffer.
    pub buffer_reuses: u64,
    /// Datagrams the kernel dropped in the socket's receive queue before the
    /// transport saw them (SO_RXQ_OVFL, cumulative; 0 where there is no
    /// kernel socket queue).
    pub rx_kernel_drops: u64,
    /// Whether the pools sit in hugepages.
    pub hugepages: bool,
    /// Per pool (`pool::kind`): use, reuse and the pages behind it.
    pub pools: [crate::pool::PoolCounters; crate::pool::kind::COUNT],
}

/// A transport owned by one worker.
pub trait Transport {
    /// Receives up to `out.len()` frames; returns how many.
    fn rx_burst(&mut self, out: &mut [RxPacket]) -> usize;
    /// Takes a transmit buffer.
    fn tx_alloc(&mut self) -> Option<u32>;
    /// Takes a transmit buffer for the answer to `rx`. Transports whose
    /// frames reserve their reply room at receive time (TCP: a reply slot
    /// as large as the request's; a front-door frame: its own slot's reply
    /// region, see `ingress`) hand that out here.
    fn tx_alloc_for(&mut self, _rx: &RxPacket) -> Option<u32> {
        self.tx_alloc()
    }
    /// A token stream was opened by `rx`: its frames follow, each in a
    /// buffer from [`Transport::stream_alloc`], until
    /// [`Transport::stream_end`]. Transports whose answer room belongs to
    /// the request (a front-door slot) keep it until then.
    fn stream_keep(&mut self, _rx: &RxPacket) {}
    /// A transmit buffer for the next frame of the token stream `route`
    /// opened; `None`: none free now (the stream waits a step).
    fn stream_alloc(&mut self, _route: &RxPacket) -> Option<u32> {
        self.tx_alloc()
    }
    /// The token stream `route` opened has ended: no frame follows.
    fn stream_end(&mut self, _route: &RxPacket) {}
    /// Takes `rx` back unanswered, to be received again in a later burst
    /// (its shard queue is full). Stream transports stop reading the
    /// frame's connection meanwhile, so TCP flow control pushes back on the
    /// client; datagram transports cannot and return false (the worker
    /// then answers `busy`).
    fn rx_defer(&mut self, _rx: &RxPacket) -> bool {
        false
    }
    /// The bytes of a received frame and a writable transmit buffer, disjoint.
    fn frames(&mut self, rx: &RxPacket, tx: u32) -> (&[u8], &mut [u8]);
    /// The bytes of a received frame.
    fn rx_bytes(&self, rx: &RxPacket) -> &[u8];
    /// Gives a receive buffer back.
    fn rx_release(&mut self, rx: &RxPacket);
    /// Sends frames; the buffers return to the pool once sent.
    fn tx_burst(&mut self, pkts: &[TxPacket]);
    /// Returns a transmit buffer that will not be sent.
    fn tx_free(&mut self, tx: u32);
    /// Sleeps until frames may be ready or `timeout` passes (adaptive mode).
    fn wait(&mut self, timeout: Duration);
    /// Makes `wait` return as well when `fd` (an eventfd the front door
    /// writes) becomes readable. `false`: this transport cannot, and the
    /// caller bounds its waits instead.
    fn wake_on(&mut self, _fd: std::os::fd::RawFd) -> bool {
        false
    }
    /// Counters.
    fn counters(&self) -> TransportCounters;
    /// The local address frames arrive on.
    fn local_addr(&self) -> SocketAddr;

    /// The bytes of a received frame, writable (to mark a frame FORWARDED
    /// before relaying it). Transports that cannot give one return an empty
    /// slice; forwarding then relies on peer addresses to stop a second hop.
    fn rx_bytes_mut(&mut self, _rx: &RxPacket) -> &mut [u8] {
        &mut []
    }

    /// A writable transmit buffer, for answers built without a request at
    /// hand (a peer that timed out). Transports that cannot give one return
    /// an empty slice and the client sees its own timeout instead.
    fn tx_bytes(&mut self, _tx: u32) -> &mut [u8] {
        &mut []
    }

    /// Sends a received frame unchanged to a peer appliance and releases
    /// its buffer. Transports with a forwarding port send from it, so the
    /// answer returns to this worker. Returns the payload bytes copied: the
    /// default copies into a transmit buffer and sends from the service port.
    fn forward(&mut self, rx: &RxPacket, to: PeerAddr) -> Option<u64> {
        copy_and_send(self, rx, to.addr, CONN_DATAGRAM)
    }

    /// Whether a received frame can be forwarded to `to` now; if not, the
    /// error the client gets at once (a peer connection that is down, a
    /// frame too large for it). Asked before the forward is recorded.
    fn forward_check(
        &self,
        _rx: &RxPacket,
        _to: PeerAddr,
    ) -> Result<(), (ErrorCode, &'static str)> {
        Ok(())
    }

    /// A peer whose connection was lost since the last call: the worker
    /// fails the forwards still waiting on it with `peer_down`.
    fn lost_peer(&mut self) -> Option<SocketAddr> {
        None
    }

    /// Whether frames the appliance sends on its own (a token stream's)
    /// can go back the way `rx` came: datagrams always; a stream
    /// connection where the transport can add frames to its answer order
    /// (io_uring TCP).
    fn can_push(&self, rx: &RxPacket) -> bool {
        rx.conn == CONN_DATAGRAM
    }

    /// A transmit buffer for a frame sent on its own to where `route` came
    /// from, and the `conn` its [`TxPacket`] carries (on a stream
    /// connection a new place in its answer order, taken now). `None`: no
    /// buffer, or no room on the connection now (back-pressure: the
    /// caller tries again later), or the connection is gone.
    fn tx_alloc_push(&mut self, route: &RxPacket) -> Option<(u32, u64)> {
        if route.conn != CONN_DATAGRAM {
            return None;
        }
        self.stream_alloc(route).map(|b| (b, CONN_DATAGRAM))
    }

    /// Gives back a buffer from [`Transport::tx_alloc_push`] that will not
    /// be sent (its place in a connection's order, if any, is skipped).
    fn tx_free_push(&mut self, tx: u32, _conn: u64) {
        self.tx_free(tx);
    }

    /// Whether the connection `route` came on is gone (closed); datagrams
    /// have none.
    fn route_gone(&self, _route: &RxPacket) -> bool {
        false
    }

    /// Sends a received frame unchanged (a peer's answer) to a client from
    /// the service port, or on the client's connection `conn` (its
    /// [`RxPacket::conn`]), and releases its buffer. Returns bytes copied.
    fn relay(&mut self, rx: &RxPacket, to: SocketAddr, conn: u64) -> Option<u64> {
        copy_and_send(self, rx, to, conn)
    }

    /// The worker's tables, at start and whenever they change (called
    /// before the worker reports the new epoch): a transport that checks
    /// tags before it reserves memory keeps a reference.
    fn tables(&mut self, _t: &std::sync::Arc<crate::tables::Tables>) {}
}

/// Forwarding for transports without a zero-copy path: one copy into a
/// transmit buffer. `None` when no transmit buffer was free (frame dropped).
fn copy_and_send<T: Transport + ?Sized>(
    t: &mut T,
    rx: &RxPacket,
    to: SocketAddr,
    conn: u64,
) -> Option<u64> {
    let Some(tx) = t.tx_alloc() else {
        t.rx_release(rx);
        return None;
    };
    let len = {
        let (r, w) = t.frames(rx, tx);
        let n = r.len().min(w.len());
        w[..n].copy_from_slice(&r[..n]);
        n
    };
    t.rx_release(rx);
    t.tx_burst(&[TxPacket {
        buf: tx,
        len: len as u32,
        peer: to,
        conn,
    }]);
    Some(len as u64)
}
