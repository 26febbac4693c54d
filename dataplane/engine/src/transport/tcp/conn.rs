//! One TCP connection's state: where its receive stands, its answers in
//! order, and its send contexts. Memory for every connection is laid out
//! once at start; the kernel reads the header staging area, the connect
//! address and the send contexts in place, so a connection never moves.

use std::net::SocketAddr;
use std::time::Instant;

use sluice_wire::limits::HEADER_LEN_MAX;

/// Answers gathered into one send submission.
pub(super) const IOV_MAX: usize = 16;
/// Send contexts per connection: one may wait for its zero-copy
/// notification while the next is in flight.
pub(super) const SEND_CTX: usize = 2;

/// A buffer an answer (or a forwarded frame) is sent from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::transport) enum Buf {
    /// A datagram transmit buffer (the transport's `tx_free` list).
    Datagram(u32),
    /// The reply slot of a pair.
    Reply(u32),
    /// A datagram receive buffer (a peer's answer relayed from the
    /// forwarding port); back to the kernel's ring once sent.
    UdpRx(u16),
    /// The receive slot of a pair (a peer's answer over TCP, or a frame
    /// forwarded to a peer).
    TcpRx(u32),
    /// The error-frame buffer of connection `c`.
    Err(u32),
}

/// Room for an error frame the transport builds itself (96-byte header,
/// 4-byte body head, a short message).
pub(super) const ERR_FRAME_LEN_MAX: usize = 256;

/// One place in a connection's answer order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Answer {
    /// Not answered yet.
    Empty,
    /// Released without an answer: skipped.
    Skip,
    /// Ready to send.
    Send {
        /// Where the bytes are.
        buf: Buf,
        /// Offset in that buffer.
        off: u32,
        /// Length.
        len: u32,
    },
}

/// Where a connection's receive stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RxPhase {
    /// Not reading (closed for reading, closing, or connecting).
    Idle,
    /// Reading the fixed header into the staging area.
    Header { got: u32 },
    /// Reading the rest of the header (to `len`) into the staging area,
    /// so its tag can be checked before a slot is taken.
    HeaderRest { got: u32, len: u32 },
    /// Reading the rest of a frame into its slot.
    Body { pair: u32, got: u32, len: u32 },
    /// The header is read; no slot of its class is free.
    WaitSlot { class: u8 },
    /// Not reading: too many requests in flight, or a deferred frame.
    Paused,
    /// An error answer was sent and the write side shut: bytes that still
    /// arrive are read into a discard buffer until the peer closes.
    Drain,
}

/// Role of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// Accepted from a client (or a peer appliance forwarding to us).
    Client,
    /// Opened by this worker to peer appliance `k` (its forwarding table).
    Peer(u16),
}

/// One send submission's state. The kernel reads `hdr` and `iov` until the
/// send's result arrives, and the buffers until its notification when
/// zero-copy.
#[repr(C)]
pub(super) struct SendCtx {
    pub hdr: libc::msghdr,
    pub iov: [libc::iovec; IOV_MAX],
    pub refs: [Answer; IOV_MAX],
    pub n: usize,
    pub bytes: u32,
    /// Frames in it that a datagram could not carry.
    pub large: u32,
    /// Submitted, buffers not yet released.
    pub busy: bool,
}

impl SendCtx {
    fn new() -> SendCtx {
        SendCtx {
            // SAFETY: msghdr is plain old data; all-zero is a valid value.
            hdr: unsafe { std::mem::zeroed() },
            iov: [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; IOV_MAX],
            refs: [Answer::Empty; IOV_MAX],
            n: 0,
            bytes: 0,
            large: 0,
            busy: false,
        }
    }
}

/// A connection slot.
pub(super) struct Conn {
    /// Socket; -1 when the slot is free.
    pub fd: i32,
    /// Bumped when the slot is freed, so stale tokens are recognised.
    pub generation: u16,
    pub role: Role,
    /// Remote address.
    pub remote: SocketAddr,
    /// What received frames carry as `RxPacket::peer`: the remote address,
    /// or for a peer connection the peer's datagram address (which keys its
    /// pending forwards).
    pub key: SocketAddr,
    /// Header staging area: the fixed header, and the whole header when
    /// its tag is checked before a slot is taken.
    pub hdr: [u8; HEADER_LEN_MAX],
    /// Bytes of the current frame staged in `hdr`.
    pub staged: u32,
    /// The tenant whose tag verified on the staged header.
    pub tenant: Option<u32>,
    /// Remote address as a tally key (IPv4 mapped into IPv6).
    pub source: u128,
    /// An error frame about the stream itself (refused header), sent from
    /// here.
    pub err: [u8; ERR_FRAME_LEN_MAX],
    /// Connect address (peer connections), read by the kernel.
    pub addr: libc::sockaddr_storage,
    pub addr_len: libc::socklen_t,
    pub rx: RxPhase,
    pub recv_inflight: bool,
    /// The remote closed its side.
    pub rd_eof: bool,
    /// Being torn down: nothing new is read or sent.
    pub dead: bool,
    /// An error answer is queued: read nothing more, shut the write side
    /// once it is sent, then drain.
    pub reject: bool,
    pub connecting: bool,
    /// Frames of this connection taken back by the worker and not yet
    /// delivered again.
    pub deferred: u32,
    /// Next place in the answer order (client: next frame received; peer:
    /// next frame forwarded).
    pub next_seq: u32,
    /// First place not yet handed to a send.
    pub sent_seq: u32,
    /// Peer connections: frames forwarded whose answers have not come.
    pub awaiting: u32,
    /// Kernel operations in flight that reference this slot.
    pub ops: u32,
    pub send: [SendCtx; SEND_CTX],
    /// The context whose result is awaited (at most one, for order).
    pub active: Option<usize>,
    /// Zero-copy sends (until the kernel reports it copies).
    pub zc: bool,
    /// Last byte received or answer sent.
    pub progress_at: Instant,
    /// First byte of the frame being received.
    pub frame_at: Instant,
    /// Since when the staged frame waits for a slot (counted once).
    pub wait_since: Option<Instant>,
    /// Last progress of the sends in flight, when it was last sampled,
    /// and the socket's acknowledged bytes then.
    pub send_at: Instant,
    pub sampled_at: Instant,
    pub acked: u64,
    pub drain_since: Instant,
    /// On the transport's list of connections with answers to send.
    pub dirty: bool,
}

impl Conn {
    pub fn new(now: Instant) -> Conn {
        let any = SocketAddr::from(([0, 0, 0, 0], 0));
        Conn {
            fd: -1,
            generation: 1,
            role: Role::Client,
            remote: any,
            key: any,
            hdr: [0; HEADER_LEN_MAX],
            staged: 0,
            tenant: None,
            source: 0,
            err: [0; ERR_FRAME_LEN_MAX],
            // SAFETY: sockaddr_storage is plain old data; zero is valid.
            addr: unsafe { std::mem::zeroed() },
            addr_len: 0,
            rx: RxPhase::Idle,
            recv_inflight: false,
            rd_eof: false,
            dead: false,
            reject: false,
            connecting: false,
            deferred: 0,
            next_seq: 0,
            sent_seq: 0,
            awaiting: 0,
            ops: 0,
            send: [SendCtx::new(), SendCtx::new()],
            active: None,
            zc: false,
            progress_at: now,
            frame_at: now,
            wait_since: None,
            send_at: now,
            sampled_at: now,
            acked: 0,
            drain_since: now,
            dirty: false,
        }
    }

    /// Resets a free slot for a new connection (its generation stays).
    pub fn reset(
        &mut self,
        fd: i32,
        role: Role,
        remote: SocketAddr,
        key: SocketAddr,
        now: Instant,
    ) {
        debug_assert!(self.fd < 0 && self.ops == 0);
        let generation = self.generation;
        *self = Conn::new(now);
        self.generation = generation;
        self.fd = fd;
        self.role = role;
        self.remote = remote;
        self.key = key;
        self.source = source_key(remote);
    }

    /// Requests received and not yet handed to a send.
    pub fn in_flight(&self) -> u32 {
        self.next_seq.wrapping_sub(self.sent_seq)
    }

    /// Whether a send context is still busy.
    pub fn sending(&self) -> bool {
        self.send.iter().any(|s| s.busy)
    }

    /// Whether nothing is owed to the client: no request unanswered or
    /// unsent, no frame held back.
    pub fn owes_nothing(&self) -> bool {
        self.in_flight() == 0 && self.deferred == 0 && !self.sending() && self.active.is_none()
    }
}

/// A remote address's key in the per-source tallies: its IP, IPv4 mapped
/// into IPv6 (the port is not part of it).
pub(super) fn source_key(a: SocketAddr) -> u128 {
    match a.ip() {
        std::net::IpAddr::V4(v4) => v4.to_ipv6_mapped().to_bits(),
        std::net::IpAddr::V6(v6) => v6.to_bits(),
    }
}
