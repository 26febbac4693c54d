//! io_uring UDP transport: one SO_REUSEPORT socket and one ring per worker,
//! multishot `RecvMsg` into a provided-buffer ring, `SendMsg` from transmit
//! buffers, everything in one hugepage region allocated at start-up. With
//! `tcp_listen` set, the same ring also serves TCP (`super::tcp`).
//!
//! Receive buffer layout (kernel-defined for multishot recvmsg):
//! `io_uring_recvmsg_out` (16 B), then the source address area, then the
//! control area (where SO_RXQ_OVFL reports the socket's drop count), then
//! the datagram. The areas are sized per address family ([`RxLayout`]) so
//! that the datagram starts 64-byte aligned in a 64-byte aligned buffer:
//! tensor data aligned in the frame is aligned in memory too, and ONNX
//! Runtime can read it in place. IPv4: 16 + 16 + 32, the datagram at 64;
//! IPv6: 16 + 32 + 80, the datagram at 128. The largest frame a buffer
//! takes is `buffer_size` minus that offset (65,472 bytes for 64 KiB
//! buffers on IPv4).
#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use io_uring::{IoUring, cqueue, opcode, types};
use memmap2::MmapMut;

mod sock;

use sock::{bind_reuseport, enable_rxq_ovfl, rxq_ovfl};
pub(super) use sock::{read_sockaddr, write_sockaddr};

use super::tcp::{DATAGRAM_LEN_MAX, TAG_TCP, TCP_BUF_BASE, Tcp, TcpShared, UdpMem};
use super::{CONN_DATAGRAM, PeerAddr, RxPacket, Transport, TransportCounters, TxPacket};
use crate::config::{HugepageMode, UringCfg};
use crate::pool::{FreeList, Region, TouchMap};

const RECVMSG_OUT_LEN: u32 = 16;
/// Where the datagram starts in a receive buffer of an IPv4 socket.
pub const RX_DATA_OFFSET_V4: u32 = 64;
/// Where the datagram starts in a receive buffer of an IPv6 socket.
pub const RX_DATA_OFFSET_V6: u32 = 128;

/// Sizes of the source address and control areas of a receive buffer, for
/// one address family (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxLayout {
    /// Source address area: a `sockaddr_in` or `sockaddr_in6` fits.
    pub name_len: u32,
    /// Control area: room for the SO_RXQ_OVFL message (CMSG_SPACE(4)).
    pub control_len: u32,
}

impl RxLayout {
    /// The layout for sockets bound to `addr`'s family.
    pub fn for_addr(addr: &SocketAddr) -> RxLayout {
        if addr.is_ipv4() {
            RxLayout {
                name_len: 16,
                control_len: 32,
            }
        } else {
            RxLayout {
                name_len: 32,
                control_len: 80,
            }
        }
    }

    /// Where the datagram starts.
    pub fn data_offset(&self) -> u32 {
        RECVMSG_OUT_LEN + self.name_len + self.control_len
    }
}

const _: () = assert!(RECVMSG_OUT_LEN + 16 + 32 == RX_DATA_OFFSET_V4);
const _: () = assert!(RECVMSG_OUT_LEN + 32 + 80 == RX_DATA_OFFSET_V6);
const _: () = assert!(RX_DATA_OFFSET_V4.is_multiple_of(64) && RX_DATA_OFFSET_V6.is_multiple_of(64));
const BGID: u16 = 0;
const TAG_RECV: u64 = 1 << 62;
const TAG_SEND: u64 = 1 << 61;
const TAG_CANCEL: u64 = 1 << 60;
const TAG_RECV_FWD: u64 = 1 << 59;
/// A send straight from a receive buffer (forward or relay); low bits = bid.
const TAG_SEND_RX: u64 = 1 << 58;
/// Submit-and-reap rounds per burst while TCP receives complete on
/// submission (a header, then its body, then the next header...).
const TCP_ROUNDS_MAX: usize = 8;
/// A multishot poll on the front door's wake eventfd (see `wake_on`); above
/// the TCP tags (`ud >> 58 == 0`) and the other UDP ones.
const TAG_WAKE: u64 = 1 << 63;
/// IORING_ENTER_GETEVENTS, from the kernel ABI.
const ENTER_GETEVENTS: u32 = 1;

/// Stable per-buffer send state: the kernel reads these until completion.
#[repr(C)]
pub(super) struct TxMeta {
    pub(super) hdr: libc::msghdr,
    pub(super) iov: libc::iovec,
    pub(super) addr: libc::sockaddr_storage,
}

/// Why the transport could not start.
#[derive(Debug)]
pub enum UringError {
    /// Socket creation, options or bind failed.
    Socket(io::Error),
    /// The TCP listener or its slots could not be set up.
    Tcp(io::Error),
    /// Ring setup or buffer registration failed.
    Ring(io::Error),
    /// Buffer memory.
    Pool(crate::pool::PoolError),
}

impl std::fmt::Display for UringError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UringError::Socket(e) => write!(f, "udp socket: {e}"),
            UringError::Tcp(e) => write!(f, "tcp (io_uring.tcp_listen): {e}"),
            UringError::Ring(e) => write!(f, "io_uring: {e}"),
            UringError::Pool(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for UringError {}

/// The io_uring UDP transport of one worker.
///
/// Drop order matters and is the field order: the ring goes first (after
/// `Drop::drop` has cancelled the receive and waited for every send), then
/// the socket, then the memory the kernel was told about, then the TCP side
/// (its sockets, then its slots).
pub struct UringTransport {
    ring: IoUring,
    socket: UdpSocket,
    /// This worker's own port for requests forwarded to peers.
    fwd_socket: UdpSocket,
    /// Provided-buffer ring entries (page aligned).
    buf_ring: MmapMut,
    /// Template header for multishot recvmsg; the kernel reads it per datagram.
    recv_hdr: Box<libc::msghdr>,
    /// Receive buffer layout of this socket's family.
    layout: RxLayout,
    /// Last SO_RXQ_OVFL value seen per socket (service, forwarding): the
    /// kernel reports the socket's cumulative drop count.
    last_ovfl: [u32; 2],
    tx_meta: Box<[TxMeta]>,
    /// Send state for frames sent straight from receive buffers.
    rx_meta: Box<[TxMeta]>,
    region: Region,
    rx_count: u32,
    tx_count: u32,
    buf_size: u32,
    rx_in_use: u32,
    /// First touch or reuse of each receive buffer the kernel filled.
    rx_touch: TouchMap,
    tx_free: FreeList,
    tx_inflight: u32,
    /// Sends waiting for submission queue space.
    tx_backlog: std::collections::VecDeque<TxPacket>,
    buf_ring_tail: u16,
    recv_armed: bool,
    fwd_armed: bool,
    /// The front door's eventfd for this worker, and whether its poll is armed.
    wake_fd: Option<i32>,
    wake_armed: bool,
    local: SocketAddr,
    counters: TransportCounters,
    /// TCP beside UDP, when `io_uring.tcp_listen` is set.
    tcp: Option<Box<Tcp>>,
}

// SAFETY: the raw pointers inside (msghdr, iovec) point into memory owned by
// this struct; the transport moves to its worker thread before first use and
// is used by that thread alone.
unsafe impl Send for UringTransport {}

impl UringTransport {
    /// Binds `listen` with SO_REUSEPORT and sets up the ring and pools.
    pub fn new(
        listen: SocketAddr,
        cfg: &UringCfg,
        huge: HugepageMode,
    ) -> Result<UringTransport, UringError> {
        let shared = cfg
            .tcp_enabled()
            .then(|| Arc::new(TcpShared::for_config(0, cfg)));
        UringTransport::with_tcp(listen, cfg, huge, shared)
    }

    /// Like `new`, with the TCP side publishing into `tcp` (the engine
    /// keeps it to list and close connections). TCP is served when
    /// `cfg.tcp_listen` is set; `tcp_listen` may name port 0 on the first
    /// worker and the bound port on the others.
    pub fn with_tcp(
        listen: SocketAddr,
        cfg: &UringCfg,
        huge: HugepageMode,
        tcp: Option<Arc<TcpShared>>,
    ) -> Result<UringTransport, UringError> {
        let socket = bind_reuseport(listen).map_err(UringError::Socket)?;
        let local = socket.local_addr().map_err(UringError::Socket)?;
        let fwd_socket =
            UdpSocket::bind(SocketAddr::new(local.ip(), 0)).map_err(UringError::Socket)?;
        for s in [&socket, &fwd_socket] {
            enable_rxq_ovfl(s).map_err(UringError::Socket)?;
        }
        let layout = RxLayout::for_addr(&local);
        // Completions of TCP connections (a receive, a send and its
        // notification each) come on top of the datagram ones.
        let cq = if cfg.tcp_enabled() {
            (2 * cfg.ring_entries)
                .max(4 * (cfg.tcp_connections_max + 64))
                .min(65_536)
        } else {
            2 * cfg.ring_entries
        };
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag()
            .setup_cqsize(cq)
            .build(cfg.ring_entries)
            .or_else(|_| IoUring::new(cfg.ring_entries))
            .map_err(UringError::Ring)?;
        let rx_count = cfg.rx_buffers;
        let tx_count = cfg.tx_buffers;
        let buf_size = cfg.buffer_size;
        let region = Region::alloc((rx_count + tx_count) as usize * buf_size as usize, huge)
            .map_err(UringError::Pool)?;
        let ring_bytes = (rx_count as usize * size_of::<types::BufRingEntry>()).max(4096);
        let buf_ring = MmapMut::map_anon(ring_bytes).map_err(UringError::Ring)?;

        // SAFETY: msghdr is plain old data; all-zero is a valid value.
        let mut recv_hdr: Box<libc::msghdr> = Box::new(unsafe { zeroed() });
        recv_hdr.msg_namelen = layout.name_len;
        // Multishot recvmsg reads only the lengths of the template: the
        // areas live in each provided buffer.
        recv_hdr.msg_controllen = layout.control_len as usize;
        let tx_meta: Box<[TxMeta]> = (0..tx_count)
            // SAFETY: TxMeta is plain old data; all-zero is a valid value.
            .map(|_| unsafe { zeroed::<TxMeta>() })
            .collect();
        let rx_meta: Box<[TxMeta]> = (0..rx_count)
            // SAFETY: as above.
            .map(|_| unsafe { zeroed::<TxMeta>() })
            .collect();

        let mut t = UringTransport {
            ring,
            socket,
            fwd_socket,
            buf_ring,
            recv_hdr,
            layout,
            last_ovfl: [0; 2],
            tx_meta,
            rx_meta,
            region,
            rx_count,
            tx_count,
            buf_size,
            rx_in_use: 0,
            rx_touch: TouchMap::new(rx_count),
            tx_free: FreeList::new(tx_count),
            tx_inflight: 0,
            tx_backlog: std::collections::VecDeque::with_capacity(tx_count as usize),
            buf_ring_tail: 0,
            recv_armed: false,
            fwd_armed: false,
            wake_fd: None,
            wake_armed: false,
            local,
            counters: TransportCounters {
                rx_capacity: rx_count,
                tx_capacity: tx_count,
                ..TransportCounters::default()
            },
            tcp: None,
        };
        t.counters.hugepages = t.region.is_huge();
        // SAFETY: the buffer ring memory lives in `t.buf_ring`, which outlives
        // the registration: the ring is dropped first (field order) and Drop
        // unregisters before that.
        unsafe {
            t.ring
                .submitter()
                .register_buf_ring_with_flags(t.buf_ring.as_ptr() as u64, rx_count as u16, BGID, 0)
                .map_err(UringError::Ring)?;
        }
        for bid in 0..rx_count {
            t.push_rx_buffer(bid as u16);
        }
        t.publish_tail();
        t.arm_recv();
        t.arm_fwd_recv();
        if let (Some(shared), Ok(Some(addr))) = (tcp, cfg.tcp_listen.parse().map(Some)) {
            let mut side =
                Tcp::new(addr, cfg, huge, shared, rx_count, tx_count).map_err(UringError::Tcp)?;
            side.arm_accept(&mut t.ring);
            t.tcp = Some(Box::new(side));
        }
        t.ring.submit().map_err(UringError::Ring)?;
        Ok(t)
    }

    /// The TCP address this worker accepts on.
    pub fn tcp_local_addr(&self) -> Option<SocketAddr> {
        self.tcp.as_ref().map(|t| t.local_addr())
    }

    fn udp_mem(&mut self) -> UdpMem {
        UdpMem {
            base: self.region.as_mut_ptr(),
            rx_count: self.rx_count,
            buf_size: self.buf_size,
            fwd_fd: self.fwd_socket.as_raw_fd(),
        }
    }

    /// Takes back the datagram buffers the TCP side is done with.
    fn take_back(&mut self) {
        let mut freed_tx = false;
        let mut pushed = false;
        while let Some(b) = self.tcp.as_mut().and_then(|t| t.take_released()) {
            match b {
                super::tcp::ReleasedBuf::Datagram(i) => {
                    self.tx_free.free(i);
                    freed_tx = true;
                }
                super::tcp::ReleasedBuf::UdpRx(bid) => {
                    self.push_rx_buffer(bid);
                    self.rx_in_use -= 1;
                    pushed = true;
                }
                _ => {}
            }
        }
        if pushed {
            self.publish_tail();
        }
        if freed_tx {
            self.flush_backlog();
        }
    }

    fn rx_ptr(&mut self, bid: u32) -> *mut u8 {
        debug_assert!(bid < self.rx_count);
        // SAFETY: bid < rx_count, so the offset lies inside the region.
        unsafe {
            self.region
                .as_mut_ptr()
                .add(bid as usize * self.buf_size as usize)
        }
    }

    /// Where a received frame starts in the region, after checking that
    /// it lies inside its buffer (every view of received bytes goes
    /// through here).
    fn rx_offset(&self, rx: &RxPacket) -> usize {
        assert!(rx.buf < self.rx_count, "receive buffer id out of range");
        assert!(
            rx.off as usize + rx.len as usize <= self.buf_size as usize,
            "received frame outside its buffer"
        );
        rx.buf as usize * self.buf_size as usize + rx.off as usize
    }

    fn tx_ptr(&mut self, i: u32) -> *mut u8 {
        debug_assert!(i < self.tx_count);
        let off = (self.rx_count + i) as usize * self.buf_size as usize;
        // SAFETY: rx_count + i < rx_count + tx_count buffers fit the region.
        unsafe { self.region.as_mut_ptr().add(off) }
    }

    /// Puts a receive buffer in the ring without publishing the tail.
    fn push_rx_buffer(&mut self, bid: u16) {
        let addr = self.rx_ptr(bid as u32) as u64;
        let mask = (self.rx_count - 1) as u16;
        let idx = (self.buf_ring_tail & mask) as usize;
        let entries = self.buf_ring.as_mut_ptr() as *mut types::BufRingEntry;
        // SAFETY: idx < rx_count entries fit in buf_ring (sized for rx_count).
        // Only addr, len and bid are written: the tail of the ring lives in
        // the `resv` field of entry 0 and must not be clobbered.
        unsafe {
            let e = &mut *entries.add(idx);
            e.set_addr(addr);
            e.set_len(self.buf_size);
            e.set_bid(bid);
        }
        self.buf_ring_tail = self.buf_ring_tail.wrapping_add(1);
    }

    /// Makes pushed buffers visible to the kernel.
    fn publish_tail(&mut self) {
        let base = self.buf_ring.as_ptr() as *const types::BufRingEntry;
        // SAFETY: base is the page-aligned first entry of the registered ring;
        // the tail is a u16 the kernel reads with acquire semantics.
        unsafe {
            let tail = types::BufRingEntry::tail(base) as *const AtomicU16;
            (*tail).store(self.buf_ring_tail, Ordering::Release);
        }
    }

    fn arm_recv(&mut self) {
        let sqe = opcode::RecvMsgMulti::new(
            types::Fd(self.socket.as_raw_fd()),
            &*self.recv_hdr as *const libc::msghdr,
            BGID,
        )
        .build()
        .user_data(TAG_RECV);
        // SAFETY: recv_hdr is boxed (stable address) and lives as long as the ring.
        if unsafe { self.ring.submission().push(&sqe) }.is_ok() {
            self.recv_armed = true;
        }
    }

    fn arm_fwd_recv(&mut self) {
        // The kernel only reads the template header, so both sockets share it.
        let sqe = opcode::RecvMsgMulti::new(
            types::Fd(self.fwd_socket.as_raw_fd()),
            &*self.recv_hdr as *const libc::msghdr,
            BGID,
        )
        .build()
        .user_data(TAG_RECV_FWD);
        // SAFETY: recv_hdr is boxed (stable address) and lives as long as the ring.
        if unsafe { self.ring.submission().push(&sqe) }.is_ok() {
            self.fwd_armed = true;
        }
    }

    fn arm_wake(&mut self) {
        let Some(fd) = self.wake_fd else { return };
        let sqe = opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
            .multi(true)
            .build()
            .user_data(TAG_WAKE);
        // SAFETY: a poll entry references no memory of ours.
        if unsafe { self.ring.submission().push(&sqe) }.is_ok() {
            self.wake_armed = true;
        }
    }

    /// Sends receive buffer `rx` as it is, from `fd`, to `to`; the buffer
    /// goes back to the kernel when the send completes.
    fn send_rx(&mut self, rx: &RxPacket, to: SocketAddr, fd: i32) -> bool {
        let base = self.rx_ptr(rx.buf);
        // SAFETY: off + len lie within the buffer (checked when received).
        let data = unsafe { base.add(rx.off as usize) };
        let meta = &mut self.rx_meta[rx.buf as usize];
        let namelen = write_sockaddr(&to, &mut meta.addr);
        meta.iov = libc::iovec {
            iov_base: data.cast(),
            iov_len: rx.len as usize,
        };
        meta.hdr.msg_name = (&mut meta.addr as *mut libc::sockaddr_storage).cast();
        meta.hdr.msg_namelen = namelen;
        meta.hdr.msg_iov = &mut meta.iov;
        meta.hdr.msg_iovlen = 1;
        let sqe = opcode::SendMsg::new(types::Fd(fd), &meta.hdr)
            .build()
            .user_data(TAG_SEND_RX | rx.buf as u64);
        // SAFETY: the receive buffer and its send state stay untouched until
        // the completion returns the buffer to the kernel's ring.
        if unsafe { self.ring.submission().push(&sqe) }.is_err() {
            self.enter(0, None);
            // SAFETY: as above.
            if unsafe { self.ring.submission().push(&sqe) }.is_err() {
                return false;
            }
        }
        self.tx_inflight += 1;
        true
    }

    fn submit_send(&mut self, p: &TxPacket) -> bool {
        let buf_ptr = self.tx_ptr(p.buf);
        let meta = &mut self.tx_meta[p.buf as usize];
        let namelen = write_sockaddr(&p.peer, &mut meta.addr);
        meta.iov = libc::iovec {
            iov_base: buf_ptr.cast(),
            iov_len: p.len as usize,
        };
        meta.hdr.msg_name = (&mut meta.addr as *mut libc::sockaddr_storage).cast();
        meta.hdr.msg_namelen = namelen;
        meta.hdr.msg_iov = &mut meta.iov;
        meta.hdr.msg_iovlen = 1;
        let sqe = opcode::SendMsg::new(types::Fd(self.socket.as_raw_fd()), &meta.hdr)
            .build()
            .user_data(TAG_SEND | p.buf as u64);
        // SAFETY: the header, iovec, address and buffer of this transmit slot
        // stay untouched until its completion returns the slot to the free list.
        if unsafe { self.ring.submission().push(&sqe) }.is_err() {
            return false;
        }
        self.tx_inflight += 1;
        true
    }

    /// Submits queued entries and runs deferred completions.
    fn enter(&mut self, wait_for: usize, timeout: Option<Duration>) {
        let r = match timeout {
            Some(t) if wait_for > 0 => {
                let ts = types::Timespec::from(t);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(wait_for, &args)
            }
            _ => {
                // GETEVENTS always: with DEFER_TASKRUN, completions are only
                // posted when the owner enters the kernel asking for them.
                let sq = self.ring.submission().len();
                // SAFETY: plain io_uring_enter on our own ring fd, no arg.
                unsafe {
                    self.ring.submitter().enter::<libc::sigset_t>(
                        sq as u32,
                        wait_for as u32,
                        ENTER_GETEVENTS,
                        None,
                    )
                }
            }
        };
        // ETIME, EINTR and EBUSY only mean "look again"; a broken ring shows
        // up as receives that stop, which the counters expose.
        let _ = r;
    }

    fn reap(&mut self, out: &mut [RxPacket], mut n: usize) -> usize {
        const BATCH: usize = 64;
        let mut rearm = false;
        let mut freed_tx = 0u32;
        loop {
            let mut batch = [(0u64, 0i32, 0u32); BATCH];
            let mut k = 0;
            let mut rx_room = out.len() - n;
            {
                let mut cq = self.ring.completion();
                cq.sync();
                while k < BATCH {
                    // Leave receives in the queue once `out` is full. Both
                    // receives (service port and forwarding port) take a
                    // place in `out`.
                    if rx_room == 0 {
                        break;
                    }
                    let Some(cqe) = cq.next() else { break };
                    if cqe.user_data() == TAG_RECV || cqe.user_data() == TAG_RECV_FWD {
                        rx_room -= 1;
                    }
                    batch[k] = (cqe.user_data(), cqe.result(), cqe.flags());
                    k += 1;
                }
            }
            for &(ud, res, flags) in &batch[..k] {
                if ud & TAG_TCP != 0 && ud >> 58 == 0 {
                    let udp = self.udp_mem();
                    if let Some(t) = self.tcp.as_deref_mut() {
                        t.complete(&mut self.ring, &udp, ud, res, flags);
                    }
                } else if ud == TAG_RECV || ud == TAG_RECV_FWD {
                    let port = if ud == TAG_RECV {
                        super::PORT_SERVICE
                    } else {
                        super::PORT_FORWARD
                    };
                    if !cqueue::more(flags) {
                        if ud == TAG_RECV {
                            rearm = true;
                        } else {
                            self.fwd_armed = false;
                        }
                    }
                    if res < 0 {
                        if -res == libc::ENOBUFS {
                            self.counters.rx_no_buffers += 1;
                        }
                        continue;
                    }
                    let Some(bid) = cqueue::buffer_select(flags) else {
                        continue;
                    };
                    match self.parse_recv(bid, res as u32, usize::from(port)) {
                        Some(mut pkt) if n < out.len() => {
                            pkt.port = port;
                            out[n] = pkt;
                            n += 1;
                            self.rx_in_use += 1;
                            self.rx_touch.take(u32::from(bid));
                            self.counters.rx_frames += 1;
                        }
                        parsed => {
                            // Unusable datagram (or, never by the count
                            // above, no room): straight back to the kernel.
                            debug_assert!(parsed.is_none(), "a receive past the burst");
                            self.push_rx_buffer(bid);
                            self.publish_tail();
                        }
                    }
                } else if ud == TAG_WAKE {
                    if !cqueue::more(flags) {
                        self.wake_armed = false;
                    }
                    if let Some(fd) = self.wake_fd {
                        let mut v: u64 = 0;
                        // SAFETY: reads 8 bytes into a local from the
                        // non-blocking eventfd the front door writes.
                        let _ = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
                    }
                } else if ud & TAG_SEND_RX != 0 {
                    if res < 0 {
                        self.counters.tx_errors += 1;
                    } else {
                        self.counters.tx_frames += 1;
                    }
                    self.push_rx_buffer((ud & 0xffff) as u16);
                    self.publish_tail();
                    self.rx_in_use -= 1;
                    self.tx_inflight -= 1;
                } else if ud & TAG_SEND != 0 {
                    if res < 0 {
                        self.counters.tx_errors += 1;
                    } else {
                        self.counters.tx_frames += 1;
                    }
                    self.tx_free.free((ud & 0xffff_ffff) as u32);
                    self.tx_inflight -= 1;
                    freed_tx += 1;
                }
            }
            if k < BATCH || n == out.len() {
                break;
            }
        }
        if rearm {
            self.recv_armed = false;
        }
        if !self.recv_armed && self.rx_in_use < self.rx_count {
            self.arm_recv();
        }
        if !self.fwd_armed && self.rx_in_use < self.rx_count {
            self.arm_fwd_recv();
        }
        if freed_tx > 0 {
            self.flush_backlog();
        }
        if !self.wake_armed {
            self.arm_wake();
        }
        self.take_back();
        n
    }

    /// Reads a receive completion's buffer: source address, the kernel's
    /// drop count when it reports one, and where the datagram lies. `sock`
    /// is 0 for the service socket, 1 for the forwarding one.
    fn parse_recv(&mut self, bid: u16, res: u32, sock: usize) -> Option<RxPacket> {
        let off = self.layout.data_offset();
        if res < off {
            return None;
        }
        let ptr = self.rx_ptr(bid as u32);
        // SAFETY: the kernel filled `res` bytes of buffer `bid` and handed it
        // to us with this completion; it is ours until pushed back.
        let head = unsafe { std::slice::from_raw_parts(ptr, off as usize) };
        let name_len = u32::from_ne_bytes([head[0], head[1], head[2], head[3]]);
        let control_len = u32::from_ne_bytes([head[4], head[5], head[6], head[7]]);
        let payload_len = u32::from_ne_bytes([head[8], head[9], head[10], head[11]]);
        let flags = u32::from_ne_bytes([head[12], head[13], head[14], head[15]]);
        let name_at = RECVMSG_OUT_LEN as usize;
        let control_at = name_at + self.layout.name_len as usize;
        let control =
            &head[control_at..control_at + control_len.min(self.layout.control_len) as usize];
        if let Some(v) = rxq_ovfl(control) {
            self.note_ovfl(sock.min(1), v);
        }
        let peer = read_sockaddr(&head[name_at..], name_len.min(self.layout.name_len))?;
        let len = (res - off).min(payload_len);
        Some(RxPacket {
            buf: bid as u32,
            off,
            len,
            peer,
            truncated: flags & libc::MSG_TRUNC as u32 != 0,
            port: super::PORT_SERVICE,
            conn: super::CONN_DATAGRAM,
        })
    }

    /// Counts the drops a socket's SO_RXQ_OVFL value adds to the last one
    /// seen (the kernel counter is cumulative and wraps at 2^32).
    fn note_ovfl(&mut self, sock: usize, v: u32) {
        let d = v.wrapping_sub(self.last_ovfl[sock]);
        if d != 0 && d < 1 << 31 {
            self.counters.rx_kernel_drops += u64::from(d);
            self.last_ovfl[sock] = v;
        }
    }

    fn flush_backlog(&mut self) {
        while let Some(p) = self.tx_backlog.front().copied() {
            if !self.submit_send(&p) {
                break;
            }
            self.tx_backlog.pop_front();
        }
    }
}

mod transport;

impl UringTransport {
    /// Makes the kernel hand every frame of a stream to the worker its
    /// stream id picks and, with `by_tag`, every signed frame to the worker
    /// its tag picks, whatever address they come from (`sock::steer`): a
    /// stream meets the worker that holds its state, all copies of a frame
    /// the same worker's replay table.
    pub fn steer(&self, group: u32, by_tag: bool) -> io::Result<()> {
        sock::steer(&self.socket, group, by_tag)
    }
}

/// Bytes of `n` buffers of `size` bytes.
pub(super) fn pool_bytes(n: u32, size: u32) -> u64 {
    u64::from(n) * u64::from(size)
}
