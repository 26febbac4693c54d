//! A minimal io_uring UDP echo server: the physical floor of the io_uring
//! transport. One multishot `RecvMsgMulti` fills buffers from a provided
//! buffer ring; each datagram goes back to its sender with `SendMsg` straight
//! from the receive buffer, which returns to the ring when the send completes.
//!
//! This is the crate's only module with `unsafe`: io_uring shares memory
//! with the kernel through raw pointers.
#![allow(unsafe_code)]

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::time::{Duration, Instant};

use io_uring::types::{BufRingEntry, Fd, RecvMsgOut, SubmitArgs, Timespec};
use io_uring::{IoUring, cqueue, opcode, squeue};

/// Settings of the io_uring echo server.
#[derive(Debug, Clone, Copy)]
pub struct UringEchoConfig {
    /// Submission queue entries (the completion queue is larger).
    pub ring_entries: u32,
    /// Receive buffers in the provided-buffer ring; a power of two, at most 32768.
    pub buffer_count: u16,
    /// Bytes per receive buffer, including the 16-byte recvmsg header and
    /// the sender address.
    pub buffer_size: u32,
    /// Spin on the completion queue (lowest latency, owns a core) instead of
    /// sleeping in `io_uring_enter`.
    pub busy_poll: bool,
    /// Without `busy_poll`: keep spinning this long after the last
    /// completion before sleeping (the engine's "adaptive" poll mode).
    pub spin_us: u64,
}

impl Default for UringEchoConfig {
    fn default() -> Self {
        UringEchoConfig {
            ring_entries: 512,
            buffer_count: 256,
            buffer_size: 65536 + 128,
            busy_poll: true,
            spin_us: 0,
        }
    }
}

/// Counters of one echo run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EchoStats {
    /// Datagrams sent back.
    pub echoed: u64,
    /// Datagrams dropped because they did not fit a buffer.
    pub truncated: u64,
    /// Times the multishot receive had to be re-armed (buffers ran out, or
    /// the kernel ended it).
    pub rearms: u64,
    /// Failed receives or sends.
    pub errors: u64,
    /// Whether shutdown found nothing in flight (otherwise the buffers were
    /// leaked rather than freed under the kernel).
    pub clean_shutdown: bool,
}

const RECV_TAG: u64 = u64::MAX;
const CANCEL_TAG: u64 = u64::MAX - 1;
const BGID: u16 = 0;
const BUFFER_COUNT_MAX: u16 = 32768;
const CQ_ENTRIES_MAX: u32 = 65536;
/// Room for the sender address: a sockaddr_in6 holds IPv4 and IPv6.
const NAME_LEN: u32 = std::mem::size_of::<libc::sockaddr_in6>() as u32;
/// recvmsg multishot header that precedes the name in each buffer.
const RECVMSG_OUT_LEN: u32 = 16;
/// How long shutdown waits for in-flight operations to finish.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// Page-aligned memory for the buffer ring, shared with the kernel.
struct RingMem {
    ptr: *mut BufRingEntry,
    len_bytes: usize,
}

impl RingMem {
    fn new(entries: u16) -> io::Result<RingMem> {
        let len_bytes =
            (usize::from(entries) * std::mem::size_of::<BufRingEntry>()).next_multiple_of(4096);
        // SAFETY: an anonymous private mapping with no address hint has no
        // preconditions; the result is checked against MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(RingMem {
            ptr: ptr.cast(),
            len_bytes,
        })
    }
}

impl Drop for RingMem {
    fn drop(&mut self) {
        // SAFETY: ptr and len_bytes come from the successful mmap in `new`.
        // `run` drops this only after the ring is gone with nothing in
        // flight; otherwise it leaks it.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len_bytes);
        }
    }
}

/// A send in flight: the message header and what it points to.
struct SendSlot {
    msg: libc::msghdr,
    iov: libc::iovec,
    addr: libc::sockaddr_storage,
}

/// The provided-buffer ring and the buffers it hands out.
struct Buffers {
    ring: RingMem,
    data: Vec<u8>,
    count: u16,
    size: usize,
    tail: u16,
    /// Buffers taken by receives and not yet returned.
    out: u16,
}

impl Buffers {
    fn give_back(&mut self, bid: u16) {
        let idx = usize::from(self.tail & (self.count - 1));
        let addr = self.data.as_ptr() as u64 + u64::from(bid) * self.size as u64;
        // SAFETY: idx < count, and the mapping holds count entries. Only
        // addr, len and bid are written: the tail shares entry 0 (its resv
        // field) and must not be overwritten here.
        let entry = unsafe { &mut *self.ring.ptr.add(idx) };
        entry.set_addr(addr);
        entry.set_len(self.size as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail is the resv field of entry 0 inside the mapping,
        // a naturally aligned u16 the kernel reads atomically; the release
        // store publishes the entry written above.
        unsafe {
            let tail = BufRingEntry::tail(self.ring.ptr).cast::<AtomicU16>();
            (*tail).store(self.tail, Ordering::Release);
        }
        self.out = self.out.saturating_sub(1);
    }

    fn slice(&self, bid: u16, len: usize) -> &[u8] {
        let start = usize::from(bid) * self.size;
        &self.data[start..start + len.min(self.size)]
    }
}

/// Binds a UDP socket with SO_REUSEADDR: io_uring teardown is asynchronous,
/// so a restarted server would otherwise find its port still bound.
pub fn bind_reuse(addr: SocketAddr) -> io::Result<UdpSocket> {
    let domain = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain socket(2) call; the result is checked.
    let fd = unsafe { libc::socket(domain, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh socket owned by nobody else.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let one: libc::c_int = 1;
    // SAFETY: the option value points to a live c_int of the given size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let (storage, len) = sockaddr(addr);
    // SAFETY: storage holds a valid sockaddr of `len` bytes for this family.
    let rc = unsafe { libc::bind(fd, (&storage as *const libc::sockaddr_storage).cast(), len) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(UdpSocket::from(owned))
}

/// Sets a socket's receive and send buffers to `bytes` each, so that a
/// burst arriving while the process is descheduled is queued, not dropped.
/// Tries the FORCE options first (root may exceed `net.core.rmem_max`),
/// then the plain ones. Returns the receive buffer size the kernel granted
/// (it doubles the request for its bookkeeping).
pub fn set_socket_buffers(sock: &UdpSocket, bytes: usize) -> io::Result<usize> {
    let v = libc::c_int::try_from(bytes).map_err(|_| invalid("socket buffer size too large"))?;
    let fd = sock.as_raw_fd();
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        if setsockopt_int(fd, force, v).is_err() {
            setsockopt_int(fd, plain, v)?;
        }
    }
    let mut got: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `got` and `len` are live locals of the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&mut got as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usize::try_from(got).unwrap_or(0))
}

/// Sets a TCP stream's receive and send buffers to `bytes` each (as
/// `set_socket_buffers`; 0 leaves the kernel's autotuning alone).
pub fn set_stream_buffers(sock: &std::net::TcpStream, bytes: usize) -> io::Result<()> {
    if bytes == 0 {
        return Ok(());
    }
    let v = libc::c_int::try_from(bytes).map_err(|_| invalid("socket buffer size too large"))?;
    let fd = sock.as_raw_fd();
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        if setsockopt_int(fd, force, v).is_err() {
            setsockopt_int(fd, plain, v)?;
        }
    }
    Ok(())
}

fn setsockopt_int(fd: libc::c_int, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: the option value points to a live c_int of the given size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all zeros is valid.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            (
                storage,
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            (
                storage,
                std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            )
        }
    }
}

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.to_string())
}

/// Echoes every datagram on `sock` until `stop` is set.
pub fn run(sock: &UdpSocket, cfg: &UringEchoConfig, stop: &AtomicBool) -> io::Result<EchoStats> {
    let count = cfg.buffer_count;
    if count == 0 || !count.is_power_of_two() || count > BUFFER_COUNT_MAX {
        return Err(invalid("buffer_count must be a power of two in 1..=32768"));
    }
    let overhead = RECVMSG_OUT_LEN + NAME_LEN;
    if cfg.buffer_size <= overhead || cfg.buffer_size > 1 << 20 {
        return Err(invalid("buffer_size must be in 45..=1048576 bytes"));
    }
    if !(2..=32768).contains(&cfg.ring_entries) {
        return Err(invalid("ring_entries must be in 2..=32768"));
    }

    // Declared before the ring so that an early error drops them after it.
    let mut bufs = Buffers {
        ring: RingMem::new(count)?,
        data: vec![0u8; usize::from(count) * cfg.buffer_size as usize],
        count,
        size: cfg.buffer_size as usize,
        tail: 0,
        out: count,
    };
    // SAFETY: plain C structs; all zeros is valid for each.
    let mut slots: Vec<SendSlot> = (0..count).map(|_| unsafe { std::mem::zeroed() }).collect();
    // SAFETY: as above. Only msg_namelen and msg_controllen matter to a
    // multishot recvmsg. Boxed: the kernel keeps its address while the
    // receive is armed, and an unclean exit leaks it.
    let mut recv_msg: Box<libc::msghdr> = Box::new(unsafe { std::mem::zeroed() });
    recv_msg.msg_namelen = NAME_LEN;

    let mut ring: IoUring<squeue::Entry, cqueue::Entry> = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_taskrun_flag()
        // Room for a receive and a send completion per buffer; the kernel
        // caps the completion queue at 65536 entries.
        .setup_cqsize(
            (u32::from(count) * 4)
                .max(cfg.ring_entries * 2)
                .min(CQ_ENTRIES_MAX),
        )
        .build(cfg.ring_entries)?;
    // SAFETY: the mapping holds `count` entries and lives (in `bufs`) until
    // after the ring is dropped: unregistered on a clean exit, leaked on any
    // other.
    unsafe {
        ring.submitter()
            .register_buf_ring_with_flags(bufs.ring.ptr as u64, count, BGID, 0)?
    };
    for bid in 0..count {
        bufs.give_back(bid);
    }
    bufs.out = 0;

    let fd = Fd(sock.as_raw_fd());
    let mut clean = true;
    let res = serve(
        &mut ring, &mut bufs, &mut slots, &recv_msg, fd, cfg, stop, &mut clean,
    )
    .map(|stats| EchoStats {
        clean_shutdown: clean,
        ..stats
    });
    if clean {
        let _ = ring.submitter().unregister_buf_ring(BGID);
    }
    drop(ring);
    if !clean {
        // Operations may still be in flight in the kernel, which tears the
        // ring down asynchronously: leak the memory they point into rather
        // than free it under them.
        std::mem::forget(bufs);
        std::mem::forget(slots);
        std::mem::forget(recv_msg);
    }
    res
}

/// The event loop. Sets `clean` when it returns with nothing in flight.
#[allow(clippy::too_many_arguments)]
fn serve(
    ring: &mut IoUring<squeue::Entry, cqueue::Entry>,
    bufs: &mut Buffers,
    slots: &mut [SendSlot],
    recv_msg: &libc::msghdr,
    fd: Fd,
    cfg: &UringEchoConfig,
    stop: &AtomicBool,
    clean: &mut bool,
) -> io::Result<EchoStats> {
    let count = bufs.count;
    let mut stats = EchoStats::default();
    let (submitter, mut sq, mut cq) = ring.split();
    let recv_entry = opcode::RecvMsgMulti::new(fd, recv_msg, BGID)
        .build()
        .user_data(RECV_TAG);
    let push = |sq: &mut io_uring::SubmissionQueue<'_>, e: &squeue::Entry| -> io::Result<()> {
        loop {
            // SAFETY: every entry pushed points into `recv_msg` or `slots`
            // and `bufs`, which outlive the ring; a send slot is not reused
            // before its completion returns the buffer.
            if unsafe { sq.push(e) }.is_ok() {
                return Ok(());
            }
            sq.sync();
            submitter.submit()?;
            sq.sync();
        }
    };
    *clean = false;
    push(&mut sq, &recv_entry)?;
    let mut armed = true;
    let mut stopping_since: Option<Instant> = None;
    let spin = Duration::from_micros(cfg.spin_us);
    let mut last_activity = Instant::now();
    let wait = Timespec::new().nsec(100_000_000);
    let args = SubmitArgs::new().timespec(&wait);

    loop {
        if stopping_since.is_none() && stop.load(Ordering::Relaxed) {
            stopping_since = Some(Instant::now());
            if armed {
                let cancel = opcode::AsyncCancel::new(RECV_TAG)
                    .build()
                    .user_data(CANCEL_TAG);
                push(&mut sq, &cancel)?;
            }
        }
        if let Some(t) = stopping_since
            && ((!armed && bufs.out == 0) || t.elapsed() > DRAIN_TIMEOUT)
        {
            break;
        }
        sq.sync();
        let spinning = cfg.busy_poll || last_activity.elapsed() < spin;
        if spinning && stopping_since.is_none() {
            // Enter the kernel only with work to submit or completions to reap.
            if !sq.is_empty() || sq.taskrun() {
                submitter.submit()?;
            }
        } else {
            match submitter.submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
                    ) => {}
                Err(e) => return Err(e),
            }
        }
        cq.sync();
        if !cq.is_empty() {
            last_activity = Instant::now();
        }
        for cqe in cq.by_ref() {
            let res = cqe.result();
            let flags = cqe.flags();
            match cqe.user_data() {
                CANCEL_TAG => {}
                RECV_TAG => {
                    if !cqueue::more(flags) {
                        armed = false;
                    }
                    if res < 0 {
                        if res != -libc::ENOBUFS && res != -libc::ECANCELED {
                            stats.errors += 1;
                        }
                        continue;
                    }
                    let Some(bid) = cqueue::buffer_select(flags).filter(|&b| b < count) else {
                        stats.errors += 1;
                        continue;
                    };
                    bufs.out += 1;
                    let Ok(out) = RecvMsgOut::parse(bufs.slice(bid, res as usize), recv_msg) else {
                        stats.errors += 1;
                        bufs.give_back(bid);
                        continue;
                    };
                    if out.is_payload_truncated() || out.is_name_data_truncated() {
                        stats.truncated += 1;
                        bufs.give_back(bid);
                        continue;
                    }
                    let name = out.name_data();
                    let payload = out.payload_data();
                    let slot = &mut slots[usize::from(bid)];
                    // SAFETY: name is at most NAME_LEN bytes (checked not
                    // truncated), which fits sockaddr_storage.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            name.as_ptr(),
                            (&mut slot.addr as *mut libc::sockaddr_storage).cast::<u8>(),
                            name.len(),
                        );
                    }
                    slot.iov.iov_base = payload.as_ptr() as *mut libc::c_void;
                    slot.iov.iov_len = payload.len();
                    slot.msg.msg_name = (&mut slot.addr as *mut libc::sockaddr_storage).cast();
                    slot.msg.msg_namelen = name.len() as libc::socklen_t;
                    slot.msg.msg_iov = &mut slot.iov;
                    slot.msg.msg_iovlen = 1;
                    let send = opcode::SendMsg::new(fd, &slot.msg)
                        .build()
                        .user_data(u64::from(bid));
                    push(&mut sq, &send)?;
                }
                bid => {
                    if res < 0 {
                        stats.errors += 1;
                    } else {
                        stats.echoed += 1;
                    }
                    bufs.give_back(bid as u16);
                }
            }
        }
        if !armed && stopping_since.is_none() && bufs.out < count {
            stats.rearms += 1;
            push(&mut sq, &recv_entry)?;
            armed = true;
        }
    }
    *clean = !armed && bufs.out == 0;
    Ok(stats)
}

/// Echoes with a plain blocking std socket until `stop` is set: the
/// comparison point for the io_uring server.
pub fn run_std(sock: &UdpSocket, stop: &AtomicBool) -> io::Result<EchoStats> {
    sock.set_read_timeout(Some(Duration::from_millis(100)))?;
    let mut buf = vec![0u8; 1 << 16];
    let mut stats = EchoStats {
        clean_shutdown: true,
        ..EchoStats::default()
    };
    while !stop.load(Ordering::Relaxed) {
        match sock.recv_from(&mut buf) {
            Ok((n, from)) => match sock.send_to(&buf[..n], from) {
                Ok(_) => stats.echoed += 1,
                Err(_) => stats.errors += 1,
            },
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(_) => stats.errors += 1,
        }
    }
    Ok(stats)
}
