//! The io_uring transport behind the batched trait: each call on the
//! datagram side or, for TCP frames and connections, on the TCP side
//! (`super::super::tcp`), and the teardown that waits for the kernel.
#![allow(unsafe_code)]

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::Duration;

use io_uring::{cqueue, opcode};

use super::*;

impl Transport for UringTransport {
    fn rx_burst(&mut self, out: &mut [RxPacket]) -> usize {
        self.enter(0, None);
        let udp = self.udp_mem();
        let mut n = 0;
        if let Some(t) = self.tcp.as_deref_mut() {
            t.housekeeping(&mut self.ring, &udp);
            // Half the burst for TCP frames first, so neither side starves.
            n = t.fill(&mut self.ring, out, 0, out.len() / 2);
        }
        n = self.reap(out, n);
        // A completed header arms the body's receive and a completed frame
        // the next header; data already queued completes on submission,
        // so a pipelining connection yields several frames per burst.
        for _ in 0..TCP_ROUNDS_MAX {
            let Some(t) = self.tcp.as_deref_mut() else {
                break;
            };
            n = t.fill(&mut self.ring, out, n, out.len());
            if n == out.len() || self.ring.submission().is_empty() {
                break;
            }
            self.enter(0, None);
            n = self.reap(out, n);
        }
        self.take_back();
        n
    }

    fn tx_alloc(&mut self) -> Option<u32> {
        self.tx_free.alloc()
    }

    fn tx_alloc_for(&mut self, rx: &RxPacket) -> Option<u32> {
        if rx.buf >= TCP_BUF_BASE
            && let Some(tx) = self
                .tcp
                .as_deref_mut()
                .and_then(|t| t.lend_reply(rx.buf - TCP_BUF_BASE))
        {
            return Some(tx);
        }
        self.tx_free.alloc()
    }

    fn rx_defer(&mut self, rx: &RxPacket) -> bool {
        rx.buf >= TCP_BUF_BASE
            && self
                .tcp
                .as_deref_mut()
                .is_some_and(|t| t.defer(rx.buf - TCP_BUF_BASE))
    }

    fn frames(&mut self, rx: &RxPacket, tx: u32) -> (&[u8], &mut [u8]) {
        let (rp, rl) = self.rx_raw(rx);
        let (tp, tl) = self.tx_raw(tx);
        // SAFETY: the receive buffer or slot was handed to us and is in no
        // kernel ring or operation until rx_release; the transmit buffer or
        // reply slot was allocated and is not in flight. Receive and
        // transmit memory never overlap (distinct buffers of the datagram
        // region, or receive and reply halves of the TCP region), and both
        // borrows are tied to &mut self.
        unsafe {
            (
                std::slice::from_raw_parts(rp, rl),
                std::slice::from_raw_parts_mut(tp, tl),
            )
        }
    }

    fn rx_bytes(&self, rx: &RxPacket) -> &[u8] {
        let (p, l) = if rx.buf >= TCP_BUF_BASE {
            match self.tcp.as_deref() {
                Some(t) => t.rx_slice(rx.buf - TCP_BUF_BASE, rx.len),
                None => return &[],
            }
        } else {
            // SAFETY: rx_offset checks the range lies inside the region.
            (
                unsafe { self.region.as_ptr().add(self.rx_offset(rx)) },
                rx.len as usize,
            )
        };
        // SAFETY: as in `frames`: the buffer is ours until rx_release, and
        // the range lies inside it.
        unsafe { std::slice::from_raw_parts(p, l) }
    }

    fn rx_release(&mut self, rx: &RxPacket) {
        if rx.buf >= TCP_BUF_BASE {
            if let Some(t) = self.tcp.as_deref_mut() {
                t.rx_release(&mut self.ring, rx.buf - TCP_BUF_BASE);
            }
            self.take_back();
            return;
        }
        self.push_rx_buffer(rx.buf as u16);
        self.publish_tail();
        self.rx_in_use -= 1;
    }

    fn tx_burst(&mut self, pkts: &[TxPacket]) {
        for p in pkts {
            if p.conn != CONN_DATAGRAM {
                let buf = if p.buf >= TCP_BUF_BASE {
                    crate::transport::tcp::ReleasedBuf::Reply(p.buf - TCP_BUF_BASE)
                } else {
                    crate::transport::tcp::ReleasedBuf::Datagram(p.buf)
                };
                let cap = self.tx_raw(p.buf).1;
                assert!(
                    p.len as usize <= cap,
                    "transmit frame longer than its buffer"
                );
                match self.tcp.as_deref_mut() {
                    Some(t) => t.place_answer(&mut self.ring, p.conn, buf, p.len),
                    None => self.tx_free.free(p.buf),
                }
                continue;
            }
            if p.buf >= TCP_BUF_BASE {
                // A reply slot cannot leave as a datagram; never built so.
                debug_assert!(false, "a tcp reply slot addressed to a datagram");
                self.counters.tx_errors += 1;
                self.tx_free_any(p.buf);
                continue;
            }
            assert!(
                p.len <= self.buf_size,
                "transmit frame longer than its buffer"
            );
            if !self.tx_backlog.is_empty() || !self.submit_send(p) {
                self.tx_backlog.push_back(*p);
            }
        }
        let udp = self.udp_mem();
        if let Some(t) = self.tcp.as_deref_mut() {
            t.pump_dirty(&mut self.ring, &udp);
        }
        self.take_back();
        if !self.tx_backlog.is_empty() {
            self.enter(0, None);
            self.flush_backlog();
        }
    }

    fn tx_free(&mut self, tx: u32) {
        self.tx_free_any(tx);
    }

    fn can_push(&self, rx: &RxPacket) -> bool {
        rx.conn == CONN_DATAGRAM || self.tcp.as_deref().is_some_and(|t| t.conn_live(rx.conn))
    }

    fn tx_alloc_push(&mut self, route: &RxPacket) -> Option<(u32, u64)> {
        if route.conn == CONN_DATAGRAM {
            return self.tx_free.alloc().map(|b| (b, CONN_DATAGRAM));
        }
        let t = self.tcp.as_deref_mut()?;
        if !t.can_reserve(route.conn) {
            return None;
        }
        let tx = self.tx_free.alloc()?;
        match t.reserve_push(route.conn) {
            Some(conn) => Some((tx, conn)),
            None => {
                self.tx_free.free(tx);
                None
            }
        }
    }

    fn tx_free_push(&mut self, tx: u32, conn: u64) {
        self.tx_free_any(tx);
        if conn != CONN_DATAGRAM
            && let Some(t) = self.tcp.as_deref_mut()
        {
            t.skip_place(&mut self.ring, conn);
        }
    }

    fn route_gone(&self, route: &RxPacket) -> bool {
        route.conn != CONN_DATAGRAM && !self.tcp.as_deref().is_some_and(|t| t.conn_live(route.conn))
    }

    fn wait(&mut self, timeout: Duration) {
        if self.tcp.as_deref().is_some_and(Tcp::has_ready) {
            return;
        }
        self.enter(1, Some(timeout));
    }

    fn wake_on(&mut self, fd: std::os::fd::RawFd) -> bool {
        self.wake_fd = Some(fd);
        self.arm_wake();
        self.wake_armed
    }

    fn counters(&self) -> TransportCounters {
        let (rx_in, rx_frames, tx_frames, tx_errors) =
            self.tcp.as_deref().map_or((0, 0, 0, 0), |t| {
                (t.rx_in_use, t.rx_frames, t.tx_frames, t.tx_errors)
            });
        TransportCounters {
            rx_in_use: self.rx_in_use + rx_in,
            tx_in_use: self.tx_free.in_use(),
            rx_frames: self.counters.rx_frames + rx_frames,
            tx_frames: self.counters.tx_frames + tx_frames,
            tx_errors: self.counters.tx_errors + tx_errors,
            buffer_reuses: self.tx_free.reuses + self.rx_touch.reuses,
            pools: [
                self.rx_touch.counters(
                    self.rx_in_use,
                    pool_bytes(self.rx_count, self.buf_size),
                    self.counters.hugepages,
                ),
                self.tx_free.counters(
                    pool_bytes(self.tx_count, self.buf_size),
                    self.counters.hugepages,
                ),
                crate::pool::PoolCounters::default(),
            ],
            ..self.counters
        }
    }

    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn rx_bytes_mut(&mut self, rx: &RxPacket) -> &mut [u8] {
        let (p, l) = self.rx_raw(rx);
        // SAFETY: as in `rx_bytes`: the buffer is ours until released, the
        // range lies inside it, and the borrow is tied to &mut self.
        unsafe { std::slice::from_raw_parts_mut(p.cast_mut(), l) }
    }

    fn tx_bytes(&mut self, tx: u32) -> &mut [u8] {
        let (p, l) = self.tx_raw(tx);
        // SAFETY: a transmit buffer or reply slot that is allocated and not
        // in flight; the borrow is tied to &mut self.
        unsafe { std::slice::from_raw_parts_mut(p, l) }
    }

    fn forward_check(
        &self,
        rx: &RxPacket,
        to: PeerAddr,
    ) -> Result<(), (sluice_wire::ErrorCode, &'static str)> {
        match self.tcp.as_deref() {
            Some(t) => t.forward_check(rx.len, &to),
            None if rx.len > DATAGRAM_LEN_MAX => Err((
                sluice_wire::ErrorCode::FrameTooLarge,
                "frame too large for a datagram",
            )),
            None => Ok(()),
        }
    }

    fn forward(&mut self, rx: &RxPacket, to: PeerAddr) -> Option<u64> {
        if rx.buf >= TCP_BUF_BASE {
            let udp = self.udp_mem();
            let sent = self.tcp.as_deref_mut().is_some_and(|t| {
                t.forward(&mut self.ring, &udp, rx.buf - TCP_BUF_BASE, rx.len, to)
            });
            if !sent {
                self.rx_release(rx);
                return None;
            }
            return Some(0);
        }
        let fd = self.fwd_socket.as_raw_fd();
        if self.send_rx(rx, to.addr, fd) {
            Some(0)
        } else {
            self.rx_release(rx);
            None
        }
    }

    fn relay(&mut self, rx: &RxPacket, to: SocketAddr, conn: u64) -> Option<u64> {
        if conn != CONN_DATAGRAM {
            match self.tcp.as_deref_mut() {
                Some(t) => t.relay(&mut self.ring, rx, conn),
                None => {
                    self.rx_release(rx);
                    return None;
                }
            }
            self.take_back();
            return Some(0);
        }
        let fd = self.socket.as_raw_fd();
        if rx.buf >= TCP_BUF_BASE {
            // A peer's answer over TCP to a datagram client.
            let sent = rx.len <= DATAGRAM_LEN_MAX
                && self.tcp.as_deref_mut().is_some_and(|t| {
                    t.udp_send(&mut self.ring, rx.buf - TCP_BUF_BASE, rx.len, to, fd)
                });
            if !sent {
                self.rx_release(rx);
                return None;
            }
            return Some(0);
        }
        if self.send_rx(rx, to, fd) {
            Some(0)
        } else {
            self.rx_release(rx);
            None
        }
    }

    fn lost_peer(&mut self) -> Option<SocketAddr> {
        self.tcp.as_deref_mut().and_then(Tcp::lost_peer)
    }

    fn tables(&mut self, t: &std::sync::Arc<crate::tables::Tables>) {
        if let Some(tcp) = self.tcp.as_deref_mut() {
            tcp.set_tables(t);
        }
    }
}

impl UringTransport {
    /// Pointer and length of a received frame (datagram buffer or slot).
    fn rx_raw(&mut self, rx: &RxPacket) -> (*const u8, usize) {
        if rx.buf >= TCP_BUF_BASE {
            return match self.tcp.as_deref() {
                Some(t) => t.rx_slice(rx.buf - TCP_BUF_BASE, rx.len),
                None => (std::ptr::NonNull::<u8>::dangling().as_ptr(), 0),
            };
        }
        let off = self.rx_offset(rx);
        // SAFETY: rx_offset checked the range lies inside the region.
        (
            unsafe { self.region.as_mut_ptr().add(off) },
            rx.len as usize,
        )
    }

    /// Pointer and capacity of a transmit buffer or reply slot.
    fn tx_raw(&mut self, tx: u32) -> (*mut u8, usize) {
        if tx >= TCP_BUF_BASE {
            return match self.tcp.as_deref_mut() {
                Some(t) => t.reply_slice(tx - TCP_BUF_BASE),
                None => (std::ptr::NonNull::<u8>::dangling().as_ptr(), 0),
            };
        }
        assert!(tx < self.tx_count, "transmit buffer id out of range");
        (self.tx_ptr(tx), self.buf_size as usize)
    }

    /// Returns a transmit buffer or reply slot that will not be sent.
    fn tx_free_any(&mut self, tx: u32) {
        if tx >= TCP_BUF_BASE {
            if let Some(t) = self.tcp.as_deref_mut() {
                t.unlend_reply(tx - TCP_BUF_BASE);
            }
        } else {
            self.tx_free.free(tx);
        }
    }
}

impl Drop for UringTransport {
    fn drop(&mut self) {
        // Cancel the multishot receive and wait (bounded) for it and every
        // send to complete, so the kernel holds no pointer into our memory
        // when the fields below are freed. TCP connections are shut first.
        for (armed, tag) in [
            (self.recv_armed, TAG_RECV),
            (self.fwd_armed, TAG_RECV_FWD),
            (self.wake_armed, TAG_WAKE),
        ] {
            if armed {
                let sqe = opcode::AsyncCancel::new(tag).build().user_data(TAG_CANCEL);
                // SAFETY: cancel entries reference no memory.
                let _ = unsafe { self.ring.submission().push(&sqe) };
            }
        }
        let udp = self.udp_mem();
        if let Some(t) = self.tcp.as_deref_mut() {
            t.shutdown_all(&mut self.ring, &udp);
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        let mut recv_done = !self.recv_armed;
        let mut fwd_done = !self.fwd_armed;
        let tcp_busy = |t: &Option<Box<Tcp>>| t.as_deref().is_some_and(Tcp::busy);
        while (!recv_done || !fwd_done || self.tx_inflight > 0 || tcp_busy(&self.tcp))
            && std::time::Instant::now() < deadline
        {
            self.enter(1, Some(Duration::from_millis(50)));
            let mut batch = [(0u64, 0i32, 0u32); 64];
            let mut k = 0;
            {
                let mut cq = self.ring.completion();
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
                if ud & TAG_TCP != 0 && ud >> 58 == 0 {
                    if let Some(t) = self.tcp.as_deref_mut() {
                        t.complete(&mut self.ring, &udp, ud, res, flags);
                    }
                } else if ud == TAG_RECV && !cqueue::more(flags) {
                    recv_done = true;
                } else if ud == TAG_RECV_FWD && !cqueue::more(flags) {
                    fwd_done = true;
                } else if ud & (TAG_SEND | TAG_SEND_RX) != 0 {
                    self.tx_inflight = self.tx_inflight.saturating_sub(1);
                }
            }
        }
        if tcp_busy(&self.tcp) {
            // The kernel may still write into the slots: leak them rather
            // than free memory in use.
            if let Some(t) = self.tcp.take() {
                std::mem::forget(t);
            }
        }
        let _ = self.ring.submitter().unregister_buf_ring(BGID);
    }
}
