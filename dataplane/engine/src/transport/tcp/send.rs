//! The send side: answers take their place in their connection's order
//! and leave in that order, several per `sendmsg`, zero-copy where the
//! kernel does it; frames forwarded to peers and peers' answers relayed
//! to clients travel from the slot they landed in.
#![allow(unsafe_code)]

use std::os::fd::IntoRawFd;

use io_uring::{IoUring, cqueue, opcode, types};

use super::conn::{Answer, Buf, IOV_MAX, Role, RxPhase};
use super::slots::Reply;
use super::status::{ROLE_PEER, conn_state};
use super::*;
use crate::config::ZcMode;
use crate::stats::bump;
use crate::transport::{PeerAddr, RxPacket};

impl Tcp {
    /// Puts an answer (or a skip) at its place in its connection's order.
    /// An answer for a connection that is gone is released and counted.
    pub(super) fn place(&mut self, ring: &mut IoUring, token: u64, a: Answer) {
        let (c, _, seq) = untoken(token);
        let live = self.token_live(token) && {
            let conn = &self.conns[c as usize];
            seq.wrapping_sub(conn.sent_seq) < conn.in_flight()
        };
        if !live || *self.answer_at(c, seq) != Answer::Empty {
            if let Answer::Send { buf, .. } = a {
                bump(&self.shared.counters.answers_dropped, 1);
                self.tx_errors += 1;
                self.release_buf(ring, buf);
            }
            return;
        }
        *self.answer_at(c, seq) = a;
        self.mark_dirty(c);
    }

    pub(super) fn mark_dirty(&mut self, c: u32) {
        let conn = &mut self.conns[c as usize];
        if !conn.dirty {
            conn.dirty = true;
            self.dirty.push(c);
        }
    }

    /// Sends what is ready on every connection that got answers.
    pub(in crate::transport) fn pump_dirty(&mut self, ring: &mut IoUring, udp: &UdpMem) {
        while let Some(c) = self.dirty.pop() {
            self.conns[c as usize].dirty = false;
            self.pump(ring, udp, c);
        }
    }

    /// Submits the answers ready at the head of the connection's order, up
    /// to [`IOV_MAX`] in one `sendmsg`, unless a send is awaited.
    fn pump(&mut self, ring: &mut IoUring, udp: &UdpMem, c: u32) {
        let base = self.base();
        let pipeline = self.pipeline;
        let zc_mode = self.zc_mode;
        let conn = &mut self.conns[c as usize];
        if conn.dead || conn.fd < 0 || conn.connecting || conn.active.is_some() {
            return;
        }
        let Some(k) = conn.send.iter().position(|s| !s.busy) else {
            return;
        };
        let err_ptr = conn.err.as_mut_ptr();
        let ctx = &mut conn.send[k];
        let (mut n, mut bytes, mut large) = (0usize, 0u32, 0u32);
        while n < IOV_MAX && conn.sent_seq != conn.next_seq {
            let place = &mut self.answers[(c * pipeline + conn.sent_seq % pipeline) as usize];
            match *place {
                Answer::Empty => break,
                Answer::Skip => {}
                Answer::Send { buf, off, len } => {
                    let p = match buf {
                        Buf::Err(_) => err_ptr,
                        b => udp.ptr(b, base, &self.pool),
                    };
                    ctx.refs[n] = *place;
                    ctx.iov[n] = libc::iovec {
                        iov_base: p.wrapping_add(off as usize).cast(),
                        iov_len: len as usize,
                    };
                    n += 1;
                    bytes += len;
                    large += u32::from(len > DATAGRAM_LEN_MAX);
                }
            }
            *place = Answer::Empty;
            conn.sent_seq = conn.sent_seq.wrapping_add(1);
        }
        if n == 0 {
            self.after_send(ring, udp, c);
            return;
        }
        ctx.n = n;
        ctx.bytes = bytes;
        ctx.large = large;
        ctx.hdr.msg_iov = ctx.iov.as_mut_ptr();
        ctx.hdr.msg_iovlen = n;
        let flags = (libc::MSG_WAITALL | libc::MSG_NOSIGNAL) as u32;
        let fd = types::Fd(conn.fd);
        let sqe = if conn.zc && zc_mode != ZcMode::Off && bytes >= ZC_MIN_BYTES {
            opcode::SendMsgZc::new(fd, &ctx.hdr)
                .ioprio(ZC_REPORT_USAGE)
                .flags(flags)
                .build()
        } else {
            opcode::SendMsg::new(fd, &ctx.hdr).flags(flags).build()
        }
        .user_data(ud(OP_SEND, k, c));
        // SAFETY: the header, iovecs and every buffer they name stay
        // untouched until the send's result (and, zero-copy, its
        // notification) releases this context.
        if unsafe { push(ring, &sqe) } {
            ctx.busy = true;
            conn.active = Some(k);
            conn.ops += 1;
            bump(&self.shared.counters.sends, 1);
            bump(&self.shared.counters.send_frames, n as u64);
        } else {
            self.release_ctx(ring, c, k);
            self.kill(ring, udp, c, true);
            return;
        }
        // Places were freed: a connection paused at the pipeline limit reads on.
        self.resume(ring, c);
    }

    pub(super) fn on_send(
        &mut self,
        ring: &mut IoUring,
        udp: &UdpMem,
        c: u32,
        k: usize,
        res: i32,
        flags: u32,
    ) {
        let now = self.now;
        let conn = &mut self.conns[c as usize];
        conn.ops -= 1;
        conn.active = None;
        let ctx = &conn.send[k];
        let ok = res >= 0 && res as u32 == ctx.bytes;
        if ok {
            // An answer taken is progress: idle and send time start again.
            conn.progress_at = now;
            conn.send_at = now;
        }
        let st = &self.shared.conns[c as usize].counters;
        if ok {
            bump(&st.tx_frames, ctx.n as u64);
            bump(&st.tx_bytes, u64::from(ctx.bytes));
            bump(&st.tx_large, u64::from(ctx.large));
            self.tx_frames += ctx.n as u64;
        } else {
            bump(&st.errors, 1);
            self.tx_errors += ctx.n as u64;
        }
        if cqueue::more(flags) {
            // Zero copy: the buffers stay until the notification.
            conn.ops += 1;
        } else {
            self.release_ctx(ring, c, k);
        }
        if ok {
            self.pump(ring, udp, c);
            self.after_send(ring, udp, c);
        } else {
            self.kill(ring, udp, c, true);
        }
        self.finish_if_done(c);
    }

    pub(super) fn on_notif(
        &mut self,
        ring: &mut IoUring,
        udp: &UdpMem,
        c: u32,
        k: usize,
        res: i32,
    ) {
        let conn = &mut self.conns[c as usize];
        conn.ops -= 1;
        if res & NOTIF_ZC_COPIED != 0 {
            bump(&self.shared.counters.zc_copied, 1);
            if self.zc_mode == ZcMode::Auto {
                // This path copies (loopback does, always): plain sends
                // cost one completion less.
                conn.zc = false;
            }
        } else {
            bump(&self.shared.counters.zc_sends, 1);
        }
        self.release_ctx(ring, c, k);
        self.pump(ring, udp, c);
        self.after_send(ring, udp, c);
        self.finish_if_done(c);
    }

    fn release_ctx(&mut self, ring: &mut IoUring, c: u32, k: usize) {
        let n = self.conns[c as usize].send[k].n;
        for i in 0..n {
            let a = self.conns[c as usize].send[k].refs[i];
            if let Answer::Send { buf, .. } = a {
                self.release_buf(ring, buf);
            }
        }
        let ctx = &mut self.conns[c as usize].send[k];
        ctx.n = 0;
        ctx.busy = false;
    }

    /// A buffer that was sent (or will not be) goes back where it came from.
    pub(super) fn release_buf(&mut self, ring: &mut IoUring, b: Buf) {
        match b {
            Buf::Datagram(_) | Buf::UdpRx(_) => self.released.push(b),
            Buf::Reply(p) => {
                if let Some(k) = self.pool.release_reply(p) {
                    self.wake(ring, k);
                }
            }
            Buf::TcpRx(p) => {
                self.rx_in_use -= 1;
                if let Some(k) = self.pool.release_rx(p) {
                    self.wake(ring, k);
                }
            }
            Buf::Err(_) => {}
        }
    }

    /// After sends complete: read on if room was made; finish a refused
    /// stream (shut the write side, then drain); close a half-closed
    /// connection once everything is answered.
    fn after_send(&mut self, ring: &mut IoUring, udp: &UdpMem, c: u32) {
        let now = self.now;
        let conn = &mut self.conns[c as usize];
        if conn.dead || conn.fd < 0 {
            return;
        }
        let idle = conn.in_flight() == 0 && !conn.sending() && conn.active.is_none();
        if conn.reject && idle && conn.rx != RxPhase::Drain {
            // SAFETY: shutting the write side of our own socket.
            unsafe { libc::shutdown(conn.fd, libc::SHUT_WR) };
            conn.rx = RxPhase::Drain;
            conn.drain_since = now;
            self.arm_recv(ring, c);
        } else if conn.rd_eof {
            self.close_if_answered(ring, udp, c);
        } else {
            self.resume(ring, c);
        }
    }

    /// A half-closed connection whose every request is answered and sent
    /// is closed.
    pub(super) fn close_if_answered(&mut self, ring: &mut IoUring, udp: &UdpMem, c: u32) {
        let conn = &self.conns[c as usize];
        if conn.rd_eof
            && !conn.dead
            && conn.in_flight() == 0
            && conn.deferred == 0
            && !conn.sending()
            && conn.active.is_none()
        {
            self.kill(ring, udp, c, false);
        }
    }

    /// A peer's answer relayed to a client's connection, from the buffer it
    /// landed in.
    pub(in crate::transport) fn relay(&mut self, ring: &mut IoUring, rx: &RxPacket, token: u64) {
        let buf = if rx.buf >= TCP_BUF_BASE {
            Buf::TcpRx(rx.buf - TCP_BUF_BASE)
        } else {
            Buf::UdpRx(rx.buf as u16)
        };
        self.place(
            ring,
            token,
            Answer::Send {
                buf,
                off: rx.off,
                len: rx.len,
            },
        );
    }

    /// Sends the frame in `pair` as a datagram from `fd` to `to`; the slot
    /// is released once sent.
    pub(in crate::transport) fn udp_send(
        &mut self,
        ring: &mut IoUring,
        pair: u32,
        len: u32,
        to: SocketAddr,
        fd: i32,
    ) -> bool {
        let off = self.pool.rx_off(pair);
        let data = self.base().wrapping_add(off);
        if self.pool.get(pair).token != 0 {
            // A client's request forwarded: its answer comes in another buffer.
            self.pool.release_reply(pair);
            self.pool.get_mut(pair).reply = Reply::Elsewhere;
        }
        let meta = &mut self.udp_meta[pair as usize];
        let namelen = crate::transport::uring::write_sockaddr(&to, &mut meta.addr);
        meta.iov = libc::iovec {
            iov_base: data.cast(),
            iov_len: len as usize,
        };
        meta.hdr.msg_name = (&mut meta.addr as *mut libc::sockaddr_storage).cast();
        meta.hdr.msg_namelen = namelen;
        meta.hdr.msg_iov = &mut meta.iov;
        meta.hdr.msg_iovlen = 1;
        let sqe = opcode::SendMsg::new(types::Fd(fd), &meta.hdr)
            .build()
            .user_data(ud(OP_UDP_SEND, 0, pair));
        // SAFETY: the slot and its send state stay untouched until the
        // completion releases the slot.
        if unsafe { push(ring, &sqe) } {
            self.other_ops += 1;
            true
        } else {
            false
        }
    }

    pub(super) fn on_udp_send(&mut self, ring: &mut IoUring, pair: u32, res: i32) {
        self.other_ops -= 1;
        if res < 0 {
            self.tx_errors += 1;
        } else {
            self.tx_frames += 1;
        }
        self.release_buf(ring, Buf::TcpRx(pair));
    }

    /// Whether a frame can be forwarded to `to` now.
    pub(in crate::transport) fn forward_check(
        &self,
        len: u32,
        to: &PeerAddr,
    ) -> Result<(), (sluice_wire::ErrorCode, &'static str)> {
        use sluice_wire::ErrorCode;
        if len <= DATAGRAM_LEN_MAX {
            return Ok(());
        }
        let Some(_) = to.tcp else {
            return Err((
                ErrorCode::FrameTooLarge,
                "frame too large for a datagram and the peer has no tcp_address",
            ));
        };
        let slot = self.peers.iter().flatten().find(|p| p.addr == to.addr);
        let free = self.peers.iter().any(Option::is_none);
        match slot.and_then(|p| p.conn) {
            Some(c) if self.conns[c as usize].in_flight() >= self.pipeline => Err((
                ErrorCode::Busy,
                "too many frames queued to the peer's tcp connection",
            )),
            None if slot.is_none() && !free => {
                Err((ErrorCode::PeerDown, "too many tcp peers on this worker"))
            }
            _ => Ok(()),
        }
    }

    /// Forwards the frame in `pair` to a peer: as a datagram from the
    /// forwarding port when it fits one, else on this worker's TCP
    /// connection to the peer (opened on first use). False when it cannot
    /// go (the caller releases it).
    pub(in crate::transport) fn forward(
        &mut self,
        ring: &mut IoUring,
        udp: &UdpMem,
        pair: u32,
        len: u32,
        to: PeerAddr,
    ) -> bool {
        if len <= DATAGRAM_LEN_MAX {
            return self.udp_send(ring, pair, len, to.addr, udp.fwd_fd);
        }
        let Some(tcp) = to.tcp else {
            return false;
        };
        let Some(c) = self.peer_conn(ring, to.addr, tcp) else {
            return false;
        };
        let conn = &mut self.conns[c as usize];
        if conn.in_flight() >= self.pipeline {
            return false;
        }
        let seq = conn.next_seq;
        conn.next_seq = seq.wrapping_add(1);
        conn.awaiting += 1;
        *self.answer_at(c, seq) = Answer::Send {
            buf: Buf::TcpRx(pair),
            off: 0,
            len,
        };
        self.pool.release_reply(pair);
        self.pool.get_mut(pair).reply = Reply::Elsewhere;
        bump(&self.shared.counters.peer_forwards, 1);
        self.mark_dirty(c);
        true
    }

    /// Whether client connection `conn` (a frame's token) is open and its
    /// answer order has a free place.
    pub(in crate::transport) fn can_reserve(&self, conn: u64) -> bool {
        let (c, _, _) = untoken(conn);
        self.token_live(conn) && self.conns[c as usize].in_flight() < self.pipeline
    }

    /// Whether client connection `conn` (a frame's token) is still open.
    pub(in crate::transport) fn conn_live(&self, conn: u64) -> bool {
        self.token_live(conn)
    }

    /// A new place at the end of client connection `conn`'s answer order
    /// for a frame the appliance sends on its own (a token stream's): the
    /// token its answer carries. `None` when the connection is gone or its
    /// order is full (`tcp_pipeline_max` places, shared with requests).
    pub(in crate::transport) fn reserve_push(&mut self, conn: u64) -> Option<u64> {
        if !self.can_reserve(conn) {
            return None;
        }
        let (c, generation, _) = untoken(conn);
        let k = &mut self.conns[c as usize];
        let seq = k.next_seq;
        k.next_seq = seq.wrapping_add(1);
        Some(token(c, generation, seq))
    }

    /// A reserved place that gets no frame: skipped.
    pub(in crate::transport) fn skip_place(&mut self, ring: &mut IoUring, conn: u64) {
        self.place(ring, conn, Answer::Skip);
    }

    /// This worker's connection to a peer, opened when there is none.
    fn peer_conn(&mut self, ring: &mut IoUring, addr: SocketAddr, tcp: SocketAddr) -> Option<u32> {
        let k = match self
            .peers
            .iter()
            .position(|p| p.is_some_and(|p| p.addr == addr))
        {
            Some(k) => k,
            None => {
                let k = self.peers.iter().position(Option::is_none)?;
                self.peers[k] = Some(PeerSlot {
                    addr,
                    tcp,
                    conn: None,
                });
                k
            }
        };
        let slot = self.peers[k]?;
        if let Some(c) = slot.conn {
            let conn = &self.conns[c as usize];
            if !conn.dead && slot.tcp == tcp {
                return Some(c);
            }
            // Still closing: the forward waits for the next attempt.
            return None;
        }
        let c = self.clients_max + k as u32;
        let domain = if tcp.is_ipv4() {
            socket2::Domain::IPV4
        } else {
            socket2::Domain::IPV6
        };
        let sock =
            socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))
                .ok()?;
        let _ = sock.set_nodelay(true);
        let fd = sock.into_raw_fd();
        let now = self.now;
        let zc = self.zc_mode != ZcMode::Off;
        let conn = &mut self.conns[c as usize];
        conn.reset(fd, Role::Peer(k as u16), tcp, addr, now);
        conn.zc = zc;
        conn.connecting = true;
        conn.addr_len = crate::transport::uring::write_sockaddr(&tcp, &mut conn.addr);
        let sqe = opcode::Connect::new(
            types::Fd(fd),
            (&conn.addr as *const libc::sockaddr_storage).cast(),
            conn.addr_len,
        )
        .build()
        .user_data(ud(OP_CONNECT, 0, c));
        // SAFETY: the address lives in the boxed connection table until
        // the connect completes.
        if !unsafe { push(ring, &sqe) } {
            // SAFETY: the socket we just made; nobody else has it.
            unsafe { libc::close(fd) };
            conn.fd = -1;
            return None;
        }
        conn.ops += 1;
        let id = conn_id(self.worker, c, conn.generation);
        self.shared.conns[c as usize].open(id, ROLE_PEER, conn_state::CONNECTING, tcp);
        bump(&self.shared.counters.peer_connects, 1);
        if let Some(p) = self.peers[k].as_mut() {
            p.tcp = tcp;
            p.conn = Some(c);
        }
        Some(c)
    }

    pub(super) fn on_connect(&mut self, ring: &mut IoUring, udp: &UdpMem, c: u32, res: i32) {
        let conn = &mut self.conns[c as usize];
        conn.ops -= 1;
        conn.connecting = false;
        if conn.dead {
            self.finish_if_done(c);
            return;
        }
        if res < 0 {
            self.kill(ring, udp, c, true);
            return;
        }
        conn.progress_at = self.now;
        self.shared.conns[c as usize].set_state(conn_state::UP);
        conn.rx = RxPhase::Header { got: 0 };
        self.arm_recv(ring, c);
        self.pump(ring, udp, c);
    }
}
