//! Sluice requests over UDP with one `sendmmsg` per group of sends and one
//! `recvmmsg` per group of answers: what a client that batches its system
//! calls costs (`loadgen --mmsg`). Every request is still encoded and
//! signed on its own (a fresh request id, so a fresh tag), and every
//! answer is parsed and its tag verified, as `sluice-client` does; only the
//! system calls are shared. With `echo`, the same requests go to an echo
//! server and each echo is checked the same way (parsed, tag verified,
//! length compared): the generator's own ceiling with this client path.
#![allow(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use sluice_client::DATAGRAM_LEN_MAX;
use sluice_wire::{Frame, Kind, TenantKey, flags};

use crate::driver::{Outcome, Transport};
use crate::mix::Mix;

/// Datagrams per `sendmmsg` / `recvmmsg`, and sends queued at most.
pub const MMSG_BATCH_MAX: usize = 64;

struct Sent {
    entry: usize,
    len: usize,
}

/// The batched-syscall UDP client.
pub struct MmsgTransport<'m> {
    sock: UdpSocket,
    mix: &'m Mix,
    keys: Vec<Option<TenantKey>>,
    echo: bool,
    /// Send buffers (`MMSG_BATCH_MAX` of `slot_len`) and how many are queued.
    tx: Vec<u8>,
    tx_lens: [usize; MMSG_BATCH_MAX],
    queued: usize,
    /// Receive buffers.
    rx: Vec<u8>,
    slot_len: usize,
    next_id: u64,
    /// Names this generator in its signed frames; `next_id` is its counter.
    sender_id: u64,
    pending: HashMap<u64, Sent>,
    expiry: VecDeque<(u64, Instant)>,
    done: VecDeque<(u64, Outcome)>,
    timeout: Duration,
    /// System calls made: sendmmsg and recvmmsg (those that returned data).
    pub send_calls: u64,
    /// See `send_calls`.
    pub recv_calls: u64,
    /// Answers ignored: unknown id, bad tag, not a frame.
    pub ignored: u64,
}

impl<'m> MmsgTransport<'m> {
    /// Connects to `addr`; `echo` expects each request back unchanged.
    pub fn connect(
        addr: SocketAddr,
        mix: &'m Mix,
        timeout: Duration,
        echo: bool,
    ) -> std::io::Result<MmsgTransport<'m>> {
        let local: SocketAddr = if addr.is_ipv4() {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let sock = UdpSocket::bind(local)?;
        sock.connect(addr)?;
        sock.set_nonblocking(true)?;
        let sender_id = sluice_client::random_sender_id();
        let mut slot_len = 0;
        for e in &mix.entries {
            let len = e
                .request()
                .sender(sender_id)
                .encoded_len()
                .map_err(|err| std::io::Error::new(ErrorKind::InvalidInput, err.to_string()))?;
            if len > DATAGRAM_LEN_MAX {
                return Err(std::io::Error::new(
                    ErrorKind::InvalidInput,
                    format!("--mmsg sends datagrams: a {len}-byte frame does not fit one"),
                ));
            }
            slot_len = slot_len.max(len);
        }
        // Answers may be larger than requests (outputs): room for any datagram.
        let slot_len = slot_len.next_multiple_of(64);
        Ok(MmsgTransport {
            sock,
            mix,
            keys: mix.entries.iter().map(|e| e.key.clone()).collect(),
            echo,
            tx: vec![0u8; slot_len * MMSG_BATCH_MAX],
            tx_lens: [0; MMSG_BATCH_MAX],
            queued: 0,
            rx: vec![0u8; DATAGRAM_LEN_MAX * MMSG_BATCH_MAX],
            slot_len,
            next_id: 1,
            sender_id,
            pending: HashMap::new(),
            expiry: VecDeque::new(),
            done: VecDeque::new(),
            timeout,
            send_calls: 0,
            recv_calls: 0,
            ignored: 0,
        })
    }

    /// Sizes the socket buffers; see [`crate::uring::set_socket_buffers`].
    pub fn set_socket_buffers(&self, bytes: usize) -> std::io::Result<usize> {
        crate::uring::set_socket_buffers(&self.sock, bytes)
    }

    /// Sends every queued datagram, in as few `sendmmsg` calls as the
    /// socket takes them.
    fn flush(&mut self) -> std::io::Result<()> {
        let mut first = 0;
        while first < self.queued {
            let n = self.queued - first;
            let mut iov = [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; MMSG_BATCH_MAX];
            // SAFETY: mmsghdr is plain old data; zero is a valid value.
            let mut hdrs: [libc::mmsghdr; MMSG_BATCH_MAX] = unsafe { std::mem::zeroed() };
            for i in 0..n {
                let k = first + i;
                iov[i] = libc::iovec {
                    iov_base: self.tx[k * self.slot_len..].as_mut_ptr().cast(),
                    iov_len: self.tx_lens[k],
                };
                hdrs[i].msg_hdr.msg_iov = &mut iov[i];
                hdrs[i].msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: `hdrs[..n]` point at `iov[..n]`, which point into
            // `self.tx`; all outlive the call, which only reads them.
            let r =
                unsafe { libc::sendmmsg(self.sock.as_raw_fd(), hdrs.as_mut_ptr(), n as u32, 0) };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                match e.kind() {
                    // The socket buffer is full: the kernel drains it soon.
                    ErrorKind::WouldBlock | ErrorKind::Interrupted => {
                        std::hint::spin_loop();
                        continue;
                    }
                    _ => {
                        self.queued = 0;
                        return Err(e);
                    }
                }
            }
            self.send_calls += 1;
            first += r as usize;
        }
        self.queued = 0;
        Ok(())
    }

    /// Reads what is there (one `recvmmsg`), waiting up to `wait` first when
    /// given; false when nothing came.
    fn receive(&mut self, wait: Option<Duration>) -> std::io::Result<bool> {
        if let Some(w) = wait {
            let ts = libc::timespec {
                tv_sec: w.as_secs() as libc::time_t,
                tv_nsec: libc::c_long::from(w.subsec_nanos().max(1000) as i32),
            };
            let mut pfd = libc::pollfd {
                fd: self.sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd and a timespec on the stack, read by the call.
            let r = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
            if r <= 0 {
                return Ok(false);
            }
        }
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MMSG_BATCH_MAX];
        // SAFETY: mmsghdr is plain old data; zero is a valid value.
        let mut hdrs: [libc::mmsghdr; MMSG_BATCH_MAX] = unsafe { std::mem::zeroed() };
        for i in 0..MMSG_BATCH_MAX {
            iov[i] = libc::iovec {
                iov_base: self.rx[i * DATAGRAM_LEN_MAX..].as_mut_ptr().cast(),
                iov_len: DATAGRAM_LEN_MAX,
            };
            hdrs[i].msg_hdr.msg_iov = &mut iov[i];
            hdrs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: each header names one iovec into its own
        // DATAGRAM_LEN_MAX-byte part of `self.rx`; the kernel writes at
        // most that much into each; everything outlives the call.
        let r = unsafe {
            libc::recvmmsg(
                self.sock.as_raw_fd(),
                hdrs.as_mut_ptr(),
                MMSG_BATCH_MAX as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            return match e.kind() {
                ErrorKind::WouldBlock | ErrorKind::Interrupted => Ok(false),
                _ => Err(e),
            };
        }
        self.recv_calls += 1;
        for (i, h) in hdrs.iter().enumerate().take(r as usize) {
            let n = h.msg_len as usize;
            let got = self.classify(i * DATAGRAM_LEN_MAX, n);
            match got {
                Some(d) => self.done.push_back(d),
                None => self.ignored += 1,
            }
        }
        Ok(r > 0)
    }

    /// Matches one received datagram to its request, as the client does.
    fn classify(&mut self, at: usize, n: usize) -> Option<(u64, Outcome)> {
        let bytes = &self.rx[at..at + n];
        let frame = Frame::new_checked(bytes).ok()?;
        let id = frame.request_id();
        let sent = self.pending.get(&id)?;
        let kind = frame.kind();
        if frame.flags() & flags::AUTHENTICATED != 0
            && kind != Kind::Error
            && self.keys[sent.entry]
                .as_ref()
                .is_some_and(|k| !k.verify(&frame))
        {
            return None;
        }
        let outcome = match kind {
            Kind::Request if self.echo && n == sent.len => Outcome::Ok,
            Kind::Response if !self.echo => Outcome::Ok,
            Kind::Error if !self.echo => match frame.error_body() {
                Some(b) => Outcome::Server(b.code_raw),
                None => Outcome::Malformed,
            },
            _ => Outcome::Malformed,
        };
        self.pending.remove(&id);
        Some((id, outcome))
    }
}

impl Transport for MmsgTransport<'_> {
    fn send(&mut self, entry: usize) -> std::io::Result<u64> {
        if self.queued == MMSG_BATCH_MAX {
            self.flush()?;
        }
        let id = self.next_id;
        self.next_id += 1;
        let k = self.queued;
        let buf = &mut self.tx[k * self.slot_len..(k + 1) * self.slot_len];
        let len = self.mix.entries[entry]
            .request()
            .sender(self.sender_id)
            .encode(buf, id, 0, None)
            .map_err(|err| std::io::Error::new(ErrorKind::InvalidInput, err.to_string()))?;
        self.tx_lens[k] = len;
        self.queued += 1;
        self.pending.insert(id, Sent { entry, len });
        self.expiry.push_back((id, Instant::now() + self.timeout));
        Ok(id)
    }

    fn poll(&mut self, wait: Option<Duration>) -> std::io::Result<Option<(u64, Outcome)>> {
        if let Some(d) = self.done.pop_front() {
            return Ok(Some(d));
        }
        // Everything the driver sent since the last completions leaves in
        // one call.
        self.flush()?;
        let now = Instant::now();
        while let Some(&(id, at)) = self.expiry.front() {
            if !self.pending.contains_key(&id) {
                self.expiry.pop_front();
                continue;
            }
            if at <= now {
                self.expiry.pop_front();
                self.pending.remove(&id);
                return Ok(Some((id, Outcome::Timeout)));
            }
            break;
        }
        self.receive(wait)?;
        Ok(self.done.pop_front())
    }

    fn outstanding(&self) -> usize {
        self.pending.len() + self.done.len()
    }
}
