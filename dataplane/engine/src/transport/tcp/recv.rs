//! The receive side: accepting connections, reading the fixed header into
//! the staging area, placing each frame whole into a slot, handing frames
//! to the worker, and taking them back.
#![allow(unsafe_code)]

use std::os::fd::AsRawFd;

use io_uring::{IoUring, cqueue, opcode, types};
use sluice_wire::{ErrorCode, FIXED_HEADER_LEN, Frame};

use super::conn::{Answer, Buf, Role, RxPhase};
use super::slots::{Owner, Reply, Waiter};
use super::status::{ROLE_CLIENT, conn_state};
use super::*;
use crate::config::ZcMode;
use crate::stats::bump;
use crate::transport::{PORT_FORWARD, PORT_SERVICE, RxPacket};

const HDR: u32 = FIXED_HEADER_LEN as u32;

impl Tcp {
    /// Arms the multishot accept (again, after the kernel ended it).
    pub(in crate::transport) fn arm_accept(&mut self, ring: &mut IoUring) {
        if self.accept_armed {
            return;
        }
        let sqe = opcode::AcceptMulti::new(types::Fd(self.listener.as_raw_fd()))
            .build()
            .user_data(ud(OP_ACCEPT, 0, 0));
        // SAFETY: an accept references no memory of ours.
        if unsafe { push(ring, &sqe) } {
            self.accept_armed = true;
            self.other_ops += 1;
        }
    }

    /// One TCP completion.
    pub(in crate::transport) fn complete(
        &mut self,
        ring: &mut IoUring,
        udp: &UdpMem,
        user_data: u64,
        res: i32,
        flags: u32,
    ) {
        let (op, ctx, index) = ud_parts(user_data);
        match op {
            OP_ACCEPT => self.on_accept(ring, res, flags),
            OP_RECV => self.on_recv(ring, udp, index, res),
            OP_SEND if cqueue::notif(flags) => self.on_notif(ring, udp, index, ctx, res),
            OP_SEND => self.on_send(ring, udp, index, ctx, res, flags),
            OP_CONNECT => self.on_connect(ring, udp, index, res),
            OP_UDP_SEND => self.on_udp_send(ring, index, res),
            _ => {}
        }
    }

    fn on_accept(&mut self, ring: &mut IoUring, res: i32, flags: u32) {
        if !cqueue::more(flags) {
            self.accept_armed = false;
            self.other_ops -= 1;
        }
        if res < 0 {
            return;
        }
        let fd = res;
        let remote = peer_name(fd).unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
        let source = super::conn::source_key(remote);
        if !self.source_has_room(source) {
            // SAFETY: the socket this completion handed us, owned by no one else.
            unsafe { libc::close(fd) };
            bump(&self.shared.counters.source_refused, 1);
            return;
        }
        let Some(c) = self.free_clients.pop() else {
            // SAFETY: as above.
            unsafe { libc::close(fd) };
            bump(&self.shared.counters.refused, 1);
            return;
        };
        // Room for every client connection's source.
        self.sources.inc(source);
        set_nodelay(fd);
        super::admit::set_user_timeout(fd, 2 * self.limits.send);
        let now = self.now;
        let zc = self.zc_mode != ZcMode::Off;
        let conn = &mut self.conns[c as usize];
        conn.reset(fd, Role::Client, remote, remote, now);
        conn.zc = zc;
        conn.rx = RxPhase::Header { got: 0 };
        let id = conn_id(self.worker, c, conn.generation);
        self.shared.conns[c as usize].open(id, ROLE_CLIENT, conn_state::UP, remote);
        bump(&self.shared.counters.accepted, 1);
        self.arm_recv(ring, c);
    }

    /// Submits the receive the connection's phase calls for.
    pub(super) fn arm_recv(&mut self, ring: &mut IoUring, c: u32) {
        let base = self.base();
        let discard = self.discard.as_mut_ptr();
        let discard_len = self.discard.len() as u32;
        let conn = &mut self.conns[c as usize];
        if conn.recv_inflight || conn.dead || conn.fd < 0 {
            return;
        }
        let (ptr, len) = match conn.rx {
            RxPhase::Header { got } => {
                (conn.hdr.as_mut_ptr().wrapping_add(got as usize), HDR - got)
            }
            RxPhase::HeaderRest { got, len } => {
                (conn.hdr.as_mut_ptr().wrapping_add(got as usize), len - got)
            }
            RxPhase::Body { pair, got, len } => (
                base.wrapping_add(self.pool.rx_off(pair) + got as usize),
                len - got,
            ),
            RxPhase::Drain => (discard, discard_len),
            _ => return,
        };
        let sqe = opcode::Recv::new(types::Fd(conn.fd), ptr, len)
            .build()
            .user_data(ud(OP_RECV, 0, c));
        // SAFETY: the staging area lives in the boxed connection table and
        // the slot stays held (out of every queue) until this receive
        // completes; the discard buffer is never read.
        if unsafe { push(ring, &sqe) } {
            conn.recv_inflight = true;
            conn.ops += 1;
        } else {
            conn.rx = RxPhase::Idle;
        }
    }

    fn on_recv(&mut self, ring: &mut IoUring, udp: &UdpMem, c: u32, res: i32) {
        let now = self.now;
        let conn = &mut self.conns[c as usize];
        conn.recv_inflight = false;
        conn.ops -= 1;
        if conn.dead {
            self.drop_partial(ring, c);
            self.finish_if_done(c);
            return;
        }
        if res < 0 {
            // Reset, or another error: the connection is gone.
            self.drop_partial(ring, c);
            self.kill(ring, udp, c, true);
            return;
        }
        if res == 0 {
            self.on_eof(ring, udp, c);
            return;
        }
        let n = res as u32;
        conn.progress_at = now;
        if conn.rx == (RxPhase::Header { got: 0 }) {
            conn.frame_at = now;
        }
        bump(
            &self.shared.conns[c as usize].counters.rx_bytes,
            u64::from(n),
        );
        match conn.rx {
            RxPhase::Drain => self.arm_recv(ring, c),
            RxPhase::Header { got } if got + n < HDR => {
                conn.rx = RxPhase::Header { got: got + n };
                self.arm_recv(ring, c);
            }
            RxPhase::Header { .. } => self.on_header(ring, udp, c),
            RxPhase::HeaderRest { got, len } if got + n < len => {
                conn.rx = RxPhase::HeaderRest { got: got + n, len };
                self.arm_recv(ring, c);
            }
            RxPhase::HeaderRest { .. } => self.on_header_rest(ring, udp, c),
            RxPhase::Body { pair, got, len } if got + n < len => {
                conn.rx = RxPhase::Body {
                    pair,
                    got: got + n,
                    len,
                };
                self.arm_recv(ring, c);
            }
            RxPhase::Body { pair, len, .. } => self.on_frame(ring, c, pair, len),
            _ => debug_assert!(false, "a receive completed in phase {:?}", conn.rx),
        }
    }

    /// The fixed header is in: check what framing needs, pick the class.
    fn on_header(&mut self, ring: &mut IoUring, udp: &UdpMem, c: u32) {
        let counters = &self.shared.counters;
        let f = Frame::new_unchecked(&self.conns[c as usize].hdr[..]);
        let refusal = if !f.has_magic() {
            Some((
                ErrorCode::MalformedFrame,
                "the stream is not Sluice frames (bad magic); closing",
                &counters.malformed,
            ))
        } else if f.version() != sluice_wire::VERSION {
            Some((
                ErrorCode::UnsupportedVersion,
                "unsupported wire version; closing",
                &counters.malformed,
            ))
        } else if f.header_len() < FIXED_HEADER_LEN
            || f.header_len() > sluice_wire::limits::HEADER_LEN_MAX
        {
            Some((
                ErrorCode::MalformedFrame,
                "header_len out of range: the stream cannot be framed; closing",
                &counters.malformed,
            ))
        } else if frame_len(&f) > u64::from(self.frame_len_max) {
            Some((
                ErrorCode::FrameTooLarge,
                "frame longer than io_uring.tcp_frame_len_max; closing",
                &counters.oversized,
            ))
        } else {
            None
        };
        if let Some((code, message, counter)) = refusal {
            bump(counter, 1);
            self.reject(ring, udp, c, code, message);
            return;
        }
        let header_len = f.header_len() as u32;
        let Some(k) = self.pool.class_for(frame_len(&f)) else {
            self.reject(
                ring,
                udp,
                c,
                ErrorCode::FrameTooLarge,
                "frame larger than every tcp slot; closing",
            );
            return;
        };
        let conn = &mut self.conns[c as usize];
        conn.tenant = None;
        conn.staged = HDR;
        if !self.needs_verify(c, k) {
            self.start_frame(ring, c, k);
        } else if header_len > HDR {
            // The tag covers the whole header: stage the rest of it first.
            self.conns[c as usize].rx = RxPhase::HeaderRest {
                got: HDR,
                len: header_len,
            };
            self.arm_recv(ring, c);
        } else {
            self.on_header_rest(ring, udp, c);
        }
    }

    /// The whole header is staged: its tag decides whether the frame may
    /// take a large slot (or one of the smallest class's reserve).
    fn on_header_rest(&mut self, ring: &mut IoUring, udp: &UdpMem, c: u32) {
        use super::admit::HeaderRefusal as R;
        let f = Frame::new_unchecked(&self.conns[c as usize].hdr[..]);
        let (len, header_len) = (frame_len(&f), f.header_len() as u32);
        let Some(k) = self.pool.class_for(len) else {
            return;
        };
        self.conns[c as usize].staged = header_len;
        let verdict = self.verify_staged(c);
        let counters = &self.shared.counters;
        let refusal = match verdict {
            Ok(t) => {
                self.conns[c as usize].tenant = Some(t);
                None
            }
            // The smallest class: an unverified frame just cannot use the
            // reserve, and the worker answers it as usual.
            Err(_) if k == 0 => None,
            Err(R::Unauthenticated) => Some((
                ErrorCode::Unauthenticated,
                "authentication failed: a large frame needs a valid tag before it gets a slot; closing",
                &counters.unauthenticated,
            )),
            Err(R::Unverifiable) => Some((
                ErrorCode::FrameTooLarge,
                "a negotiate request never needs a large slot; closing",
                &counters.unauthenticated,
            )),
            Err(R::Stale(code)) => Some((
                code,
                "an authenticated large frame needs a deadline within the freshness window; closing",
                &counters.stale,
            )),
        };
        if let Some((code, message, counter)) = refusal {
            bump(counter, 1);
            self.reject(ring, udp, c, code, message);
            return;
        }
        self.start_frame(ring, c, k);
    }

    /// Takes a pair of class `k` for the frame whose header is staged, or
    /// waits for one (the connection is not read meanwhile): while none is
    /// free, or while the frame's source or tenant holds its share.
    fn start_frame(&mut self, ring: &mut IoUring, c: u32, k: usize) {
        let base = self.base();
        let now = self.now;
        let allowed = self.may_take(c, k);
        let conn = &mut self.conns[c as usize];
        let len = frame_len(&Frame::new_unchecked(&conn.hdr[..])) as u32;
        let owner = match conn.role {
            Role::Client => Owner {
                source: Some(conn.source),
                tenant: conn.tenant,
            },
            Role::Peer(_) => Owner::default(),
        };
        let pair = if allowed {
            self.pool.alloc(k, owner)
        } else {
            None
        };
        let Some(pair) = pair else {
            if conn.wait_since.is_none() {
                conn.wait_since = Some(now);
                bump(&self.shared.counters.slot_waits, 1);
                if !allowed && self.pool.free_len(k) > 0 {
                    bump(&self.shared.counters.share_waits, 1);
                }
            }
            conn.rx = RxPhase::WaitSlot { class: k as u8 };
            self.pool.wait(
                k,
                Waiter {
                    conn: c,
                    generation: conn.generation,
                },
            );
            return;
        };
        conn.wait_since = None;
        let staged = conn.staged;
        let dst = base.wrapping_add(self.pool.rx_off(pair));
        // SAFETY: the slot was just taken from the free list (no kernel
        // operation references it) and holds the whole staged header (a
        // slot is at least as large as the frame, which holds its header).
        unsafe { std::ptr::copy_nonoverlapping(conn.hdr.as_ptr(), dst, staged as usize) };
        bump(&self.shared.counters.header_bytes_copied, u64::from(staged));
        conn.rx = RxPhase::Body {
            pair,
            got: staged,
            len,
        };
        if len == staged {
            self.on_frame(ring, c, pair, len);
        } else {
            self.arm_recv(ring, c);
        }
    }

    /// A whole frame is in its slot: queue it for the worker, read on.
    fn on_frame(&mut self, ring: &mut IoUring, c: u32, pair: u32, len: u32) {
        let conn = &mut self.conns[c as usize];
        let (token, port) = match conn.role {
            Role::Client => {
                let seq = conn.next_seq;
                conn.next_seq = seq.wrapping_add(1);
                (token(c, conn.generation, seq), PORT_SERVICE)
            }
            // A peer's answer: nobody answers it, so its reply slot is free.
            Role::Peer(_) => {
                conn.awaiting = conn.awaiting.saturating_sub(1);
                (0, PORT_FORWARD)
            }
        };
        let key = conn.key;
        let e = self.pool.get_mut(pair);
        e.len = len;
        e.token = token;
        e.peer = key;
        e.port = port;
        if token == 0 {
            self.pool.release_reply(pair);
        }
        self.ready.push_back(pair);
        self.rx_frames += 1;
        let k = &self.shared.conns[c as usize].counters;
        bump(&k.rx_frames, 1);
        if len > DATAGRAM_LEN_MAX {
            bump(&k.rx_large, 1);
        }
        self.next_frame(ring, c);
    }

    /// Reads the next frame's header, unless the connection must wait.
    pub(super) fn next_frame(&mut self, ring: &mut IoUring, c: u32) {
        let pipeline = self.pipeline;
        let conn = &mut self.conns[c as usize];
        if conn.dead || conn.rd_eof || conn.reject {
            conn.rx = RxPhase::Idle;
            return;
        }
        if conn.deferred > 0 {
            conn.rx = RxPhase::Paused;
            return;
        }
        if conn.role == Role::Client && conn.in_flight() >= pipeline {
            if conn.rx != RxPhase::Paused {
                bump(&self.shared.counters.pipeline_waits, 1);
            }
            conn.rx = RxPhase::Paused;
            return;
        }
        conn.rx = RxPhase::Header { got: 0 };
        self.arm_recv(ring, c);
    }

    /// Reads again a connection that paused, once it may.
    pub(super) fn resume(&mut self, ring: &mut IoUring, c: u32) {
        if self.conns[c as usize].rx == RxPhase::Paused {
            self.next_frame(ring, c);
        }
    }

    fn on_eof(&mut self, ring: &mut IoUring, udp: &UdpMem, c: u32) {
        let conn = &mut self.conns[c as usize];
        match conn.rx {
            RxPhase::Drain => {
                self.kill(ring, udp, c, false);
                return;
            }
            RxPhase::Header { got } if got > 0 => {
                bump(&self.shared.counters.partial_frames, 1);
            }
            RxPhase::HeaderRest { .. } => {
                bump(&self.shared.counters.partial_frames, 1);
            }
            RxPhase::Body { .. } => {
                bump(&self.shared.counters.partial_frames, 1);
                self.drop_partial(ring, c);
            }
            _ => {}
        }
        let conn = &mut self.conns[c as usize];
        conn.rd_eof = true;
        conn.rx = RxPhase::Idle;
        if matches!(conn.role, Role::Peer(_)) {
            self.kill(ring, udp, c, false);
            return;
        }
        self.shared.conns[c as usize].set_state(conn_state::HALF_CLOSED);
        self.close_if_answered(ring, udp, c);
    }

    /// Gives back the slot of a frame that will never complete.
    pub(super) fn drop_partial(&mut self, ring: &mut IoUring, c: u32) {
        let conn = &mut self.conns[c as usize];
        if let RxPhase::Body { pair, .. } = conn.rx {
            conn.rx = RxPhase::Idle;
            self.pool.release_reply(pair);
            if let Some(k) = self.pool.release_rx(pair) {
                self.wake(ring, k);
            }
        }
    }

    /// Refuses what the stream declared and stops reading it: an error
    /// frame goes out after the answers before it, then the write side is
    /// shut and the rest of the input discarded until the client closes.
    fn reject(
        &mut self,
        ring: &mut IoUring,
        udp: &UdpMem,
        c: u32,
        code: ErrorCode,
        msg: &'static str,
    ) {
        let conn = &mut self.conns[c as usize];
        bump(&self.shared.conns[c as usize].counters.errors, 1);
        conn.reject = true;
        conn.rx = RxPhase::Idle;
        let raw = Frame::new_unchecked(&conn.hdr[..]);
        let (rid, tenant, trace) = if raw.has_magic() {
            (raw.request_id(), raw.tenant_id(), raw.trace())
        } else {
            (0, 0, sluice_wire::TraceContext::default())
        };
        let repr = sluice_wire::FrameRepr {
            body: sluice_wire::BodyRepr::Error { code, message: msg },
            ..sluice_wire::FrameRepr::answer(sluice_wire::Kind::Error, rid, tenant, trace)
        };
        let Ok(l) = repr.emit(&mut conn.err[..]) else {
            self.kill(ring, udp, c, true);
            return;
        };
        let seq = conn.next_seq;
        conn.next_seq = seq.wrapping_add(1);
        *self.answer_at(c, seq) = Answer::Send {
            buf: Buf::Err(c),
            off: 0,
            len: l.frame_len as u32,
        };
        self.mark_dirty(c);
    }

    /// Moves frames to the worker: those it took back first.
    pub(in crate::transport) fn fill(
        &mut self,
        ring: &mut IoUring,
        out: &mut [RxPacket],
        mut n: usize,
        max: usize,
    ) -> usize {
        while n < max {
            let (pair, was_deferred) = match self.deferred.pop_front() {
                Some(p) => (p, true),
                None => match self.ready.pop_front() {
                    Some(p) => (p, false),
                    None => break,
                },
            };
            let e = *self.pool.get(pair);
            let (c, _, _) = untoken(e.token);
            if e.token != 0 && !self.token_live(e.token) {
                // Its client is gone: nobody can take the answer.
                bump(&self.shared.counters.answers_dropped, 1);
                self.pool.release_reply(pair);
                if let Some(k) = self.pool.release_rx(pair) {
                    self.wake(ring, k);
                }
                continue;
            }
            if was_deferred {
                let conn = &mut self.conns[c as usize];
                conn.deferred -= 1;
                if conn.deferred == 0 {
                    self.resume(ring, c);
                }
            }
            out[n] = RxPacket {
                buf: TCP_BUF_BASE + pair,
                off: 0,
                len: e.len,
                peer: e.peer,
                truncated: false,
                port: e.port,
                conn: e.token,
            };
            n += 1;
            self.rx_in_use += 1;
        }
        n
    }

    /// Whether a token names a connection that can still be answered.
    pub(super) fn token_live(&self, token: u64) -> bool {
        let (c, generation, _) = untoken(token);
        self.conns.get(c as usize).is_some_and(|k| {
            k.generation == generation && k.fd >= 0 && !k.dead && k.role == Role::Client
        })
    }

    /// The worker takes `pair` back (its shard queue is full): it is
    /// delivered again first, and its connection is not read until then.
    pub(in crate::transport) fn defer(&mut self, pair: u32) -> bool {
        let e = *self.pool.get(pair);
        if e.token == 0 || !self.pool.rx_held(pair) {
            return false;
        }
        let (c, _, _) = untoken(e.token);
        self.deferred.push_back(pair);
        self.rx_in_use -= 1;
        if self.token_live(e.token) {
            self.conns[c as usize].deferred += 1;
        }
        bump(&self.shared.counters.deferred, 1);
        true
    }

    /// The worker is done with the frame in `pair`.
    pub(in crate::transport) fn rx_release(&mut self, ring: &mut IoUring, pair: u32) {
        assert!(self.pool.rx_held(pair), "tcp frame released twice");
        self.rx_in_use -= 1;
        let e = *self.pool.get(pair);
        if e.token != 0 && e.reply == Reply::None {
            // Released unanswered: its place in the order is skipped.
            self.place(ring, e.token, Answer::Skip);
            self.pool.release_reply(pair);
        }
        if let Some(k) = self.pool.release_rx(pair) {
            self.wake(ring, k);
        }
    }

    /// The reply slot of the frame in `pair`, for its answer.
    pub(in crate::transport) fn lend_reply(&mut self, pair: u32) -> Option<u32> {
        let e = self.pool.get_mut(pair);
        if e.token == 0 || e.reply != Reply::None {
            return None;
        }
        e.reply = Reply::Lent;
        Some(TCP_BUF_BASE + pair)
    }

    /// The worker gives a reply slot back unsent.
    pub(in crate::transport) fn unlend_reply(&mut self, pair: u32) {
        let e = self.pool.get_mut(pair);
        debug_assert_eq!(e.reply, Reply::Lent);
        e.reply = Reply::None;
    }

    /// Connections that waited for a pair of class `k` go on while pairs
    /// are free.
    pub(super) fn wake(&mut self, ring: &mut IoUring, k: usize) {
        // A waiter still held back by its share goes to the back of the
        // queue: one pass at most.
        let mut n = self.pool.waiting(k);
        while n > 0 {
            n -= 1;
            let Some(w) = self.pool.next_waiter(k) else {
                break;
            };
            let conn = &self.conns[w.conn as usize];
            if conn.generation == w.generation
                && conn.fd >= 0
                && !conn.dead
                && conn.rx == (RxPhase::WaitSlot { class: k as u8 })
            {
                self.start_frame(ring, w.conn, k);
            }
        }
    }

    /// Bytes of a received frame.
    pub(in crate::transport) fn rx_slice(&self, pair: u32, len: u32) -> (*const u8, usize) {
        assert!(self.pool.rx_held(pair), "tcp frame not held");
        assert!(len <= self.pool.size_of(pair), "tcp frame outside its slot");
        (
            self.region.as_ptr().wrapping_add(self.pool.rx_off(pair)),
            len as usize,
        )
    }

    /// A reply slot.
    pub(in crate::transport) fn reply_slice(&mut self, pair: u32) -> (*mut u8, usize) {
        assert!(pair < self.pool.len(), "reply slot out of range");
        let off = self.pool.reply_off(pair);
        (
            self.base().wrapping_add(off),
            self.pool.size_of(pair) as usize,
        )
    }
}

/// `header_len + payload_len` of a staged fixed header.
fn frame_len(f: &Frame<&[u8]>) -> u64 {
    f.header_len() as u64 + f.payload_len() as u64
}

fn peer_name(fd: i32) -> Option<SocketAddr> {
    // SAFETY: sockaddr_storage is plain old data; zero is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: getpeername writes at most `len` bytes into `ss`.
    let r = unsafe {
        libc::getpeername(
            fd,
            (&mut ss as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return None;
    }
    // SAFETY: sockaddr_storage is plain old data of exactly this size.
    let bytes: &[u8; std::mem::size_of::<libc::sockaddr_storage>()] =
        unsafe { &*(&ss as *const libc::sockaddr_storage).cast() };
    crate::transport::uring::read_sockaddr(bytes, len)
}

pub(super) fn set_nodelay(fd: i32) {
    let one: libc::c_int = 1;
    // SAFETY: setsockopt reads one c_int from `one`.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}
