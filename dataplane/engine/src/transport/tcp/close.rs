//! Closing: connections that fail, stall, finish or are closed from the
//! control side; the periodic timeout scan; teardown.
#![allow(unsafe_code)]

use io_uring::{IoUring, opcode};

use super::conn::{Answer, Role, RxPhase};

/// The time limits a connection can pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timeout {
    /// Refused stream: the client did not close in time.
    Drain,
    /// Between frames, nothing owed (`tcp_idle_timeout_ms`).
    Idle,
    /// Our connection to a peer, unused for half that.
    PeerIdle,
    /// A started frame got no byte (`tcp_idle_timeout_ms`).
    Stalled,
    /// A frame not whole in time (`tcp_frame_timeout_ms`).
    Frame,
    /// Answers without progress (`tcp_send_timeout_ms`).
    Send,
    /// A peer connect hangs.
    Connect,
}
use super::*;
use crate::stats::bump;

impl Tcp {
    /// Tears a connection down: shuts the socket (its receive and send
    /// complete at once), drops what it had queued, and closes it once the
    /// kernel holds nothing of it. A peer connection's loss is reported.
    pub(super) fn kill(&mut self, ring: &mut IoUring, _udp: &UdpMem, c: u32, error: bool) {
        let conn = &mut self.conns[c as usize];
        if conn.dead || conn.fd < 0 {
            return;
        }
        conn.dead = true;
        if error {
            bump(&self.shared.conns[c as usize].counters.errors, 1);
        }
        self.shared.conns[c as usize].set_state(super::status::conn_state::CLOSING);
        // SAFETY: shutting down our own socket; pending operations on it
        // complete (with 0 or an error) and nothing else uses the fd.
        unsafe { libc::shutdown(conn.fd, libc::SHUT_RDWR) };
        // A send blocked on a zero window is cancelled too.
        let send = conn.active.map(|k| ud(OP_SEND, k, c));
        let pending = [
            conn.recv_inflight.then(|| ud(OP_RECV, 0, c)),
            conn.connecting.then(|| ud(OP_CONNECT, 0, c)),
            send,
        ];
        for target in pending.into_iter().flatten() {
            let sqe = opcode::AsyncCancel::new(target)
                .build()
                .user_data(ud(OP_CANCEL, 0, c));
            // SAFETY: a cancel references no memory.
            let _ = unsafe { push(ring, &sqe) };
        }
        if !conn.recv_inflight {
            match conn.rx {
                RxPhase::Body { .. } => self.drop_partial(ring, c),
                RxPhase::WaitSlot { class } => self.pool.unwait(class as usize, c),
                _ => {}
            }
            self.conns[c as usize].rx = RxPhase::Idle;
        }
        // Answers not yet handed to a send: their client is gone.
        let conn = &mut self.conns[c as usize];
        let (from, to) = (conn.sent_seq, conn.next_seq);
        conn.sent_seq = to;
        let mut seq = from;
        while seq != to {
            let a = std::mem::replace(self.answer_at(c, seq), Answer::Empty);
            if let Answer::Send { buf, .. } = a {
                bump(&self.shared.counters.answers_dropped, 1);
                self.tx_errors += 1;
                self.release_buf(ring, buf);
            }
            seq = seq.wrapping_add(1);
        }
        if let Role::Peer(_) = self.conns[c as usize].role {
            let key = self.conns[c as usize].key;
            if self.lost.len() < self.lost.capacity() {
                self.lost.push_back(key);
            }
        }
        self.finish_if_done(c);
    }

    /// Closes the socket of a dead connection once no operation of it is in
    /// flight, and frees its slot for the next connection.
    pub(super) fn finish_if_done(&mut self, c: u32) {
        let conn = &mut self.conns[c as usize];
        if !conn.dead || conn.ops > 0 || conn.fd < 0 {
            return;
        }
        // SAFETY: our socket; no operation references it any more.
        unsafe { libc::close(conn.fd) };
        conn.fd = -1;
        conn.rx = RxPhase::Idle;
        conn.generation = conn.generation.wrapping_add(1).max(1);
        let sh = &self.shared.conns[c as usize];
        self.shared.retired.absorb(&sh.counters);
        sh.close();
        bump(&self.shared.counters.closed, 1);
        match conn.role {
            Role::Client => {
                self.sources.dec(conn.source);
                self.free_clients.push(c);
            }
            Role::Peer(k) => {
                if let Some(p) = self.peers[k as usize].as_mut() {
                    p.conn = None;
                }
            }
        }
    }

    /// Once per burst: close requests from the control side, the timeout
    /// scan, the accept, and answers waiting to be sent.
    pub(in crate::transport) fn housekeeping(&mut self, ring: &mut IoUring, udp: &UdpMem) {
        self.now = Instant::now();
        while let Some(id) = self.shared.close_requests.pop() {
            let (generation, index) = ((id >> 32) as u16, (id & 0xffff) as u32);
            let ok = self
                .conns
                .get(index as usize)
                .is_some_and(|k| k.generation == generation && k.fd >= 0);
            if ok {
                self.kill(ring, udp, index, false);
            }
        }
        if self.now.duration_since(self.last_scan) >= self.scan_every {
            self.last_scan = self.now;
            self.scan(ring, udp);
            self.publish_slots();
        }
        if !self.accept_armed {
            self.arm_accept(ring);
        }
        self.pump_dirty(ring, udp);
    }

    /// Closes connections whose frame ran out of time or stalled, that
    /// sat idle, whose answers made no progress, whose drain ran out, or
    /// whose connect hangs.
    fn scan(&mut self, ring: &mut IoUring, udp: &UdpMem) {
        for c in 0..self.conns.len() as u32 {
            let conn = &self.conns[c as usize];
            if conn.fd < 0 || conn.dead {
                continue;
            }
            let Some(t) = self.timed_out(c) else {
                continue;
            };
            let k = &self.shared.counters;
            let error = match t {
                Timeout::Drain | Timeout::PeerIdle => false,
                Timeout::Idle => {
                    bump(&k.conn_idle_timeouts, 1);
                    false
                }
                Timeout::Stalled => {
                    bump(&k.idle_timeouts, 1);
                    bump(&k.partial_frames, 1);
                    true
                }
                Timeout::Connect => {
                    bump(&k.idle_timeouts, 1);
                    true
                }
                Timeout::Frame => {
                    bump(&k.frame_timeouts, 1);
                    bump(&k.partial_frames, 1);
                    true
                }
                Timeout::Send => {
                    bump(&k.send_timeouts, 1);
                    true
                }
            };
            self.kill(ring, udp, c, error);
        }
    }

    /// Which time limit, if any, connection `c` has passed.
    fn timed_out(&mut self, c: u32) -> Option<Timeout> {
        let (now, idle, lim) = (self.now, self.idle, self.limits);
        let conn = &mut self.conns[c as usize];
        let since = |t: Instant| now.saturating_duration_since(t);
        if conn.active.is_some() || conn.sending() {
            // Sampled at half the limit: a send is closed after between
            // one and one and a half limits without progress.
            if since(conn.sampled_at) >= lim.send / 2 {
                conn.sampled_at = now;
                match super::admit::bytes_acked(conn.fd) {
                    Some(a) if a != conn.acked => {
                        conn.acked = a;
                        conn.send_at = now;
                    }
                    _ if since(conn.send_at) >= lim.send => return Some(Timeout::Send),
                    _ => {}
                }
            }
        } else {
            conn.send_at = now;
        }
        match conn.rx {
            RxPhase::Drain => (since(conn.drain_since) > idle).then_some(Timeout::Drain),
            RxPhase::Header { got: 0 } if conn.owes_nothing() && conn.awaiting == 0 => match conn
                .role
            {
                Role::Client => (since(conn.progress_at) > idle).then_some(Timeout::Idle),
                // Ours: closed before the peer's own idle limit would, so
                // a forward never races the peer closing.
                Role::Peer(_) => (since(conn.progress_at) > idle / 2).then_some(Timeout::PeerIdle),
            },
            RxPhase::Header { got: 0 } => None,
            // Waiting for a slot counts: a frame queued behind slots that
            // others pin is closed rather than left waiting for ever.
            RxPhase::WaitSlot { .. } => {
                (since(conn.frame_at) > lim.frame).then_some(Timeout::Frame)
            }
            RxPhase::Header { .. } | RxPhase::HeaderRest { .. } | RxPhase::Body { .. } => {
                if since(conn.frame_at) > lim.frame {
                    Some(Timeout::Frame)
                } else {
                    (since(conn.progress_at) > idle).then_some(Timeout::Stalled)
                }
            }
            _ if conn.connecting => (since(conn.progress_at) > idle).then_some(Timeout::Connect),
            _ => None,
        }
    }

    /// Engine stopping: every connection is shut and the accept cancelled;
    /// the owner then reaps until [`Tcp::busy`] is false.
    pub(in crate::transport) fn shutdown_all(&mut self, ring: &mut IoUring, udp: &UdpMem) {
        if self.accept_armed {
            let sqe = opcode::AsyncCancel::new(ud(OP_ACCEPT, 0, 0))
                .build()
                .user_data(ud(OP_CANCEL, 0, 0));
            // SAFETY: a cancel references no memory.
            let _ = unsafe { push(ring, &sqe) };
        }
        for c in 0..self.conns.len() as u32 {
            self.kill(ring, udp, c, false);
        }
    }
}
