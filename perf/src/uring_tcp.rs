//! A minimal io_uring TCP echo server: the physical floor of the engine's
//! TCP transport. A multishot accept takes connections; each connection
//! receives into its own buffer and sends exactly the bytes it got back
//! (`MSG_WAITALL`), then receives again. Nothing is parsed: the stream is
//! echoed as it comes, so a frame's answer starts leaving before the frame
//! has fully arrived (the engine has to wait for the whole frame).
#![allow(unsafe_code)]

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use io_uring::types::{Fd, SubmitArgs, Timespec};
use io_uring::{IoUring, cqueue, opcode};

/// Settings of the TCP echo server.
#[derive(Debug, Clone, Copy)]
pub struct TcpEchoConfig {
    /// Submission queue entries.
    pub ring_entries: u32,
    /// Connections served at once; more are closed at accept.
    pub connections_max: usize,
    /// Bytes each connection receives into at once.
    pub buffer_size: usize,
    /// Spin on the completion queue instead of sleeping in the kernel.
    pub busy_poll: bool,
}

impl Default for TcpEchoConfig {
    fn default() -> Self {
        TcpEchoConfig {
            ring_entries: 256,
            connections_max: 64,
            buffer_size: 4 << 20,
            busy_poll: true,
        }
    }
}

/// Counters of one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpEchoStats {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections refused (all slots taken).
    pub refused: u64,
    /// Bytes echoed.
    pub bytes: u64,
    /// Receive and send completions.
    pub completions: u64,
    /// Failed operations (a connection closed with an error).
    pub errors: u64,
}

const TAG_ACCEPT: u64 = 1 << 62;
const TAG_RECV: u64 = 1 << 61;
const TAG_SEND: u64 = 1 << 60;
const TAG_CANCEL: u64 = 1 << 59;

/// One connection: its socket, its buffer, and whether an operation is in
/// flight (the buffer is the kernel's until it completes).
struct Conn {
    fd: i32,
    buf: Box<[u8]>,
    busy: bool,
}

/// Echoes every connection accepted on `listener` until `stop` is set.
pub fn run(
    listener: &TcpListener,
    cfg: &TcpEchoConfig,
    stop: &AtomicBool,
) -> io::Result<TcpEchoStats> {
    if cfg.connections_max == 0 || cfg.buffer_size == 0 || cfg.buffer_size > 1 << 30 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "connections_max and buffer_size (at most 1 GiB) must be positive",
        ));
    }
    let mut ring: IoUring = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        // Deferred completions are flagged, so a busy loop enters the
        // kernel (with GETEVENTS) exactly when there is something to reap.
        .setup_taskrun_flag()
        .setup_cqsize(4 * cfg.ring_entries.max(cfg.connections_max as u32))
        .build(cfg.ring_entries)?;
    // Drop order: `conns` (the buffers) outlives every operation: the loop
    // below only returns once nothing is in flight.
    let mut conns: Vec<Conn> = (0..cfg.connections_max)
        .map(|_| Conn {
            fd: -1,
            buf: vec![0u8; cfg.buffer_size].into_boxed_slice(),
            busy: false,
        })
        .collect();
    let mut st = TcpEchoStats::default();
    let accept = opcode::AcceptMulti::new(Fd(listener.as_raw_fd()))
        .build()
        .user_data(TAG_ACCEPT);
    // SAFETY: an accept references no memory of ours.
    unsafe { ring.submission().push(&accept) }.map_err(|_| io::Error::other("sq full"))?;
    let mut accepting = true;
    let mut stopping_since: Option<Instant> = None;
    loop {
        if stop.load(Ordering::Relaxed) && stopping_since.is_none() {
            stopping_since = Some(Instant::now());
            for c in conns.iter().filter(|c| c.fd >= 0) {
                // SAFETY: our socket; its operations complete with errors.
                unsafe { libc::shutdown(c.fd, libc::SHUT_RDWR) };
            }
            let cancel = opcode::AsyncCancel::new(TAG_ACCEPT)
                .build()
                .user_data(TAG_CANCEL);
            // SAFETY: a cancel references no memory.
            let _ = unsafe { ring.submission().push(&cancel) };
        }
        let inflight = accepting || conns.iter().any(|c| c.busy);
        if let Some(t) = stopping_since
            && (!inflight || t.elapsed() > Duration::from_secs(2))
        {
            if inflight {
                // The kernel may still write into the buffers: leak them.
                std::mem::forget(conns);
                return Ok(st);
            }
            break;
        }
        if cfg.busy_poll && stopping_since.is_none() {
            ring.submit()?;
            let _ = ring.submitter().submit_with_args(0, &SubmitArgs::new());
        } else {
            let ts = Timespec::from(Duration::from_millis(10));
            let _ = ring
                .submitter()
                .submit_with_args(1, &SubmitArgs::new().timespec(&ts));
        }
        let mut batch = [(0u64, 0i32, 0u32); 64];
        let mut k = 0;
        {
            let mut cq = ring.completion();
            cq.sync();
            for cqe in &mut cq {
                batch[k] = (cqe.user_data(), cqe.result(), cqe.flags());
                k += 1;
                if k == batch.len() {
                    break;
                }
            }
        }
        for &(ud, res, flags) in &batch[..k] {
            if ud == TAG_ACCEPT {
                if !cqueue::more(flags) {
                    accepting = false;
                }
                if res < 0 {
                    continue;
                }
                let Some(i) = conns.iter().position(|c| c.fd < 0) else {
                    // SAFETY: the socket this completion handed us.
                    unsafe { libc::close(res) };
                    st.refused += 1;
                    continue;
                };
                st.accepted += 1;
                let one: libc::c_int = 1;
                // SAFETY: setsockopt reads one c_int.
                unsafe {
                    libc::setsockopt(
                        res,
                        libc::IPPROTO_TCP,
                        libc::TCP_NODELAY,
                        (&one as *const libc::c_int).cast(),
                        std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                    )
                };
                conns[i].fd = res;
                recv(&mut ring, &mut conns[i], i)?;
            } else if ud & (TAG_RECV | TAG_SEND) != 0 {
                let i = (ud & 0xffff_ffff) as usize;
                let c = &mut conns[i];
                c.busy = false;
                st.completions += 1;
                let stopping = stopping_since.is_some();
                if res <= 0 || stopping {
                    if res < 0 {
                        st.errors += 1;
                    }
                    // SAFETY: our socket, no operation in flight on it.
                    unsafe { libc::close(c.fd) };
                    c.fd = -1;
                } else if ud & TAG_RECV != 0 {
                    let n = res as usize;
                    let sqe = opcode::Send::new(Fd(c.fd), c.buf.as_ptr(), n as u32)
                        .flags(libc::MSG_WAITALL | libc::MSG_NOSIGNAL)
                        .build()
                        .user_data(TAG_SEND | i as u64);
                    // SAFETY: the buffer is this connection's and stays
                    // untouched until the send completes.
                    unsafe { push(&mut ring, &sqe) }?;
                    c.busy = true;
                    st.bytes += n as u64;
                } else {
                    recv(&mut ring, c, i)?;
                }
            }
        }
    }
    for c in conns.iter().filter(|c| c.fd >= 0) {
        // SAFETY: our socket, nothing in flight.
        unsafe { libc::close(c.fd) };
    }
    Ok(st)
}

fn recv(ring: &mut IoUring, c: &mut Conn, i: usize) -> io::Result<()> {
    let sqe = opcode::Recv::new(Fd(c.fd), c.buf.as_mut_ptr(), c.buf.len() as u32)
        .build()
        .user_data(TAG_RECV | i as u64);
    // SAFETY: the buffer is this connection's and is not touched until the
    // receive completes.
    unsafe { push(ring, &sqe) }?;
    c.busy = true;
    Ok(())
}

/// Pushes a submission, submitting first when the queue is full.
///
/// # Safety
/// Whatever the entry points to stays valid until it completes.
unsafe fn push(ring: &mut IoUring, sqe: &io_uring::squeue::Entry) -> io::Result<()> {
    // SAFETY: forwarded to the caller.
    if unsafe { ring.submission().push(sqe) }.is_ok() {
        return Ok(());
    }
    ring.submit()?;
    // SAFETY: as above.
    unsafe { ring.submission().push(sqe) }.map_err(|_| io::Error::other("submission queue full"))
}

/// Binds a TCP listener (SO_REUSEADDR, as std does on Unix).
pub fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    TcpListener::bind(addr)
}
