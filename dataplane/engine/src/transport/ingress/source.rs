//! [`Sources`]: a worker's transport and, when the front door runs, its
//! ingress rings, behind the one `Transport` trait, so front-door frames go
//! through the same classify/admit/run path as every other frame.
//!
//! Ingress frames carry buffer ids with [`INGRESS_BIT`] set; their transmit
//! buffer is the slot's own reply region (`tx_alloc_for`). A slot goes back
//! to the front door once the worker has released the request and either
//! sent the answer or freed the reply without one (then with length 0, and
//! the front door answers 500: it never waits forever).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sluice_wire::ErrorCode;

use super::{INGRESS_BIT, IngressWorker, Queued, Wake, is_ingress, split_id};
use crate::config::limits::RX_BURST_MAX;
use crate::transport::{
    CONN_DATAGRAM, PORT_SERVICE, PeerAddr, RxPacket, Transport, TransportCounters, TxPacket,
};

/// The request is still being read.
const RX_LIVE: u8 = 1;
/// The reply region is allocated as a transmit buffer.
const TX_HELD: u8 = 2;
/// The reply was sent (its length is in `reply_len`).
const ANSWERED: u8 = 4;

/// Longest sleep when the transport cannot be woken by the front door.
const WAIT_SLICE: Duration = Duration::from_millis(1);

/// Where ingress frames "come from": never a real peer.
const INGRESS_PEER: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::UNSPECIFIED,
    0,
));

struct Side {
    w: IngressWorker,
    slots: usize,
    held: Vec<Option<Queued>>,
    flags: Vec<u8>,
    reply_len: Vec<u32>,
    scratch: Vec<TxPacket>,
    next: usize,
    woken_by_transport: bool,
    rx_frames: u64,
    tx_frames: u64,
    no_answer: u64,
}

impl Side {
    fn index(&self, buf: u32) -> (usize, usize) {
        let (t, slot) = split_id(buf);
        (t, t * self.slots + slot as usize)
    }

    fn settle(&mut self, buf: u32) {
        let (t, i) = self.index(buf);
        let f = self.flags[i];
        if f & (RX_LIVE | TX_HELD) != 0 {
            return;
        }
        let len = if f & ANSWERED != 0 {
            self.tx_frames += 1;
            self.reply_len[i]
        } else {
            self.no_answer += 1;
            0
        };
        self.flags[i] = 0;
        if let Some(q) = self.held[i].take() {
            self.w.complete(t, q, len);
        }
    }
}

/// A worker's frame sources.
pub struct Sources<T: Transport> {
    inner: T,
    side: Option<Side>,
    /// See [`Sources::control_wake`].
    control: Option<Arc<Wake>>,
}

impl<T: Transport> Sources<T> {
    /// The transport alone, or with the front door's rings. `wake` (the
    /// control side's poke, see [`Sources::control_wake`]) is polled by the
    /// transport when there is no front door; with one, the front door's
    /// eventfd serves both.
    pub fn new(
        mut inner: T,
        ingress: Option<IngressWorker>,
        wake: Option<Arc<Wake>>,
    ) -> Sources<T> {
        let control = match &ingress {
            Some(w) => Some(Arc::clone(w.wake())),
            None => wake.filter(|k| inner.wake_on(k.fd())),
        };
        let side = ingress.map(|w| {
            let slots = w.pools.first().map_or(0, |p| p.slots() as usize);
            let n = slots * w.threads();
            let woken_by_transport = inner.wake_on(w.wake.fd());
            Side {
                slots,
                held: (0..n).map(|_| None).collect(),
                flags: vec![0; n],
                reply_len: vec![0; n],
                scratch: Vec::with_capacity(RX_BURST_MAX),
                next: 0,
                woken_by_transport,
                rx_frames: 0,
                tx_frames: 0,
                no_answer: 0,
                w,
            }
        });
        let control = control.filter(|_| side.as_ref().is_none_or(|s| s.woken_by_transport));
        Sources {
            inner,
            side,
            control,
        }
    }

    /// The eventfd a sleeping worker's `wait` returns for, when the
    /// transport polls one: the control side writes it after a publish so
    /// an idle worker picks the change up at once. `None`: the transport
    /// cannot be woken, and the worker wakes within its sleep bound.
    pub fn control_wake(&self) -> Option<Arc<Wake>> {
        self.control.clone()
    }

    /// The transport.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// Ingress frames received, answered, and released without an answer.
    pub fn ingress_counts(&self) -> (u64, u64, u64) {
        self.side
            .as_ref()
            .map_or((0, 0, 0), |s| (s.rx_frames, s.tx_frames, s.no_answer))
    }

    fn rx_ingress(&mut self, out: &mut [RxPacket]) -> usize {
        let Some(s) = self.side.as_mut() else {
            return 0;
        };
        let threads = s.w.threads();
        let mut n = 0;
        let mut idle = 0;
        // Round robin over the threads, one frame each, until the burst is
        // full or every ring is empty.
        while n < out.len() && idle < threads {
            let t = s.next;
            s.next = (s.next + 1) % threads;
            let Some((id, q)) = s.w.pop(t) else {
                idle += 1;
                continue;
            };
            idle = 0;
            let (_, i) = s.index(id);
            let len = q.request(&s.w.pools[t]).len() as u32;
            s.held[i] = Some(q);
            s.flags[i] = RX_LIVE;
            out[n] = RxPacket {
                buf: id,
                off: 0,
                len,
                peer: INGRESS_PEER,
                truncated: false,
                port: PORT_SERVICE,
                conn: CONN_DATAGRAM,
            };
            n += 1;
        }
        s.rx_frames += n as u64;
        n
    }
}

impl<T: Transport> Transport for Sources<T> {
    fn rx_burst(&mut self, out: &mut [RxPacket]) -> usize {
        if self.side.is_none() {
            return self.inner.rx_burst(out);
        }
        // Alternate which source goes first so neither starves the other.
        let ingress_first = self.side.as_ref().is_some_and(|s| s.rx_frames % 2 == 0);
        if ingress_first {
            let n = self.rx_ingress(out);
            n + self.inner.rx_burst(&mut out[n..])
        } else {
            let n = self.inner.rx_burst(out);
            n + self.rx_ingress(&mut out[n..])
        }
    }

    fn tx_alloc(&mut self) -> Option<u32> {
        self.inner.tx_alloc()
    }

    fn rx_defer(&mut self, rx: &RxPacket) -> bool {
        // An ingress slot cannot be received again later: the worker
        // answers `busy` and the front door maps it to 503.
        !is_ingress(rx.buf) && self.inner.rx_defer(rx)
    }

    fn tx_alloc_for(&mut self, rx: &RxPacket) -> Option<u32> {
        if !is_ingress(rx.buf) {
            return self.inner.tx_alloc_for(rx);
        }
        let s = self.side.as_mut()?;
        let (_, i) = s.index(rx.buf);
        s.flags[i] |= TX_HELD;
        Some(rx.buf)
    }

    fn frames(&mut self, rx: &RxPacket, tx: u32) -> (&[u8], &mut [u8]) {
        if !is_ingress(rx.buf) {
            return self.inner.frames(rx, tx);
        }
        let Some(s) = self.side.as_mut() else {
            return (&[], &mut []);
        };
        let (t, i) = s.index(rx.buf);
        let pool = &s.w.pools[t];
        match s.held[i].as_mut() {
            Some(q) if tx == rx.buf => q.view(pool),
            Some(q) => (q.request(pool), self.inner.tx_bytes(tx)),
            None => (&[], &mut []),
        }
    }

    fn rx_bytes(&self, rx: &RxPacket) -> &[u8] {
        if !is_ingress(rx.buf) {
            return self.inner.rx_bytes(rx);
        }
        let Some(s) = self.side.as_ref() else {
            return &[];
        };
        let (t, i) = s.index(rx.buf);
        s.held[i]
            .as_ref()
            .map_or(&[][..], |q| q.request(&s.w.pools[t]))
    }

    fn rx_release(&mut self, rx: &RxPacket) {
        if !is_ingress(rx.buf) {
            return self.inner.rx_release(rx);
        }
        if let Some(s) = self.side.as_mut() {
            let (_, i) = s.index(rx.buf);
            s.flags[i] &= !RX_LIVE;
            s.settle(rx.buf);
        }
    }

    fn tx_burst(&mut self, pkts: &[TxPacket]) {
        let Some(s) = self.side.as_mut() else {
            return self.inner.tx_burst(pkts);
        };
        if !pkts.iter().any(|p| is_ingress(p.buf)) {
            return self.inner.tx_burst(pkts);
        }
        s.scratch.clear();
        for p in pkts {
            if is_ingress(p.buf) {
                let (_, i) = s.index(p.buf);
                s.reply_len[i] = p.len;
                s.flags[i] = (s.flags[i] | ANSWERED) & !TX_HELD;
                s.settle(p.buf);
                continue;
            }
            if s.scratch.len() == s.scratch.capacity() {
                self.inner.tx_burst(&s.scratch);
                s.scratch.clear();
            }
            s.scratch.push(*p);
        }
        if !s.scratch.is_empty() {
            self.inner.tx_burst(&s.scratch);
            s.scratch.clear();
        }
    }

    fn tx_free(&mut self, tx: u32) {
        if !is_ingress(tx) {
            return self.inner.tx_free(tx);
        }
        if let Some(s) = self.side.as_mut() {
            let (_, i) = s.index(tx);
            s.flags[i] &= !TX_HELD;
            s.settle(tx);
        }
    }

    // Frames sent on their own (token streams) go through the inner
    // transport; a front-door frame's slot carries one answer, so none
    // goes to it (its OPEN is refused `stream_unsupported`).
    fn can_push(&self, rx: &RxPacket) -> bool {
        !is_ingress(rx.buf) && self.inner.can_push(rx)
    }

    fn tx_alloc_push(&mut self, route: &RxPacket) -> Option<(u32, u64)> {
        if is_ingress(route.buf) {
            return None;
        }
        self.inner.tx_alloc_push(route)
    }

    fn tx_free_push(&mut self, tx: u32, conn: u64) {
        self.inner.tx_free_push(tx, conn);
    }

    fn route_gone(&self, route: &RxPacket) -> bool {
        is_ingress(route.buf) || self.inner.route_gone(route)
    }

    fn wait(&mut self, timeout: Duration) {
        let Some(s) = self.side.as_ref() else {
            return self.inner.wait(timeout);
        };
        s.w.wake.prepare_sleep();
        if s.w.pending() {
            s.w.wake.awake();
            return;
        }
        let t = if s.woken_by_transport {
            timeout
        } else {
            timeout.min(WAIT_SLICE)
        };
        let wake = std::sync::Arc::clone(&s.w.wake);
        self.inner.wait(t);
        wake.awake();
    }

    fn counters(&self) -> TransportCounters {
        let mut c = self.inner.counters();
        if let Some(s) = &self.side {
            c.rx_frames += s.rx_frames;
            c.tx_frames += s.tx_frames;
        }
        c
    }

    fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr()
    }

    fn rx_bytes_mut(&mut self, rx: &RxPacket) -> &mut [u8] {
        if is_ingress(rx.buf) {
            return &mut [];
        }
        self.inner.rx_bytes_mut(rx)
    }

    fn tx_bytes(&mut self, tx: u32) -> &mut [u8] {
        if tx & INGRESS_BIT != 0 {
            return &mut [];
        }
        self.inner.tx_bytes(tx)
    }

    fn forward(&mut self, rx: &RxPacket, to: PeerAddr) -> Option<u64> {
        if is_ingress(rx.buf) {
            self.rx_release(rx);
            return None;
        }
        self.inner.forward(rx, to)
    }

    fn forward_check(&self, rx: &RxPacket, to: PeerAddr) -> Result<(), (ErrorCode, &'static str)> {
        if is_ingress(rx.buf) {
            return Err((
                ErrorCode::NoRouteToShard,
                "front-door requests are not forwarded to peer appliances",
            ));
        }
        self.inner.forward_check(rx, to)
    }

    fn lost_peer(&mut self) -> Option<SocketAddr> {
        self.inner.lost_peer()
    }

    fn relay(&mut self, rx: &RxPacket, to: SocketAddr, conn: u64) -> Option<u64> {
        self.inner.relay(rx, to, conn)
    }

    fn wake_on(&mut self, fd: std::os::fd::RawFd) -> bool {
        self.inner.wake_on(fd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FrontdoorCfg;
    use crate::transport::mem::MemTransport;

    fn setup() -> (Sources<MemTransport>, super::super::IngressPort) {
        let cfg = FrontdoorCfg {
            http_listen: "127.0.0.1:0".into(),
            slots: 4,
            body_bytes_max: 4096,
            reply_bytes_max: 4096,
            ..FrontdoorCfg::default()
        };
        let (mut ws, mut ports) = super::super::build(&cfg, 1).unwrap();
        let (mem, _port) = MemTransport::new(8, 8, 2048);
        (Sources::new(mem, ws.pop(), None), ports.pop().unwrap())
    }

    #[test]
    fn a_frame_goes_round_and_its_slot_comes_back() {
        let (mut s, mut port) = setup();
        let mut f = port.alloc().unwrap();
        f.request_mut()[..5].copy_from_slice(b"hello");
        port.submit(f, 5, 0).unwrap();
        let mut out = [RxPacket::default(); 4];
        assert_eq!(s.rx_burst(&mut out), 1);
        let pkt = out[0];
        assert!(is_ingress(pkt.buf));
        assert_eq!(s.rx_bytes(&pkt), b"hello");
        let tx = s.tx_alloc_for(&pkt).unwrap();
        {
            let (rx, reply) = s.frames(&pkt, tx);
            assert_eq!(rx, b"hello");
            assert_eq!(reply.as_ptr() as usize % 64, 0);
            reply[..3].copy_from_slice(b"ack");
        }
        s.tx_burst(&[TxPacket::answer(&pkt, tx, 3)]);
        // Not back until the request is released too.
        assert_eq!(port.drain(|_| panic!("early")), 0);
        s.rx_release(&pkt);
        let mut got = Vec::new();
        assert_eq!(port.drain(|d| got.push(d.reply().to_vec())), 1);
        assert_eq!(got, [b"ack".to_vec()]);
        assert_eq!(port.pool().free_count(), 4);
        assert_eq!(s.ingress_counts(), (1, 1, 0));
    }

    #[test]
    fn a_dropped_frame_comes_back_empty() {
        let (mut s, mut port) = setup();
        let f = port.alloc().unwrap();
        port.submit(f, 0, 0).unwrap();
        let mut out = [RxPacket::default(); 4];
        assert_eq!(s.rx_burst(&mut out), 1);
        // Allocated, freed, released: the worker gave no answer.
        let tx = s.tx_alloc_for(&out[0]).unwrap();
        s.tx_free(tx);
        s.rx_release(&out[0]);
        let mut lens = Vec::new();
        port.drain(|d| lens.push(d.reply().len()));
        assert_eq!(lens, [0]);
        assert_eq!(s.ingress_counts(), (1, 0, 1));
    }

    #[test]
    fn forwards_of_front_door_frames_are_refused() {
        let (mut s, mut port) = setup();
        let f = port.alloc().unwrap();
        port.submit(f, 0, 0).unwrap();
        let mut out = [RxPacket::default(); 4];
        s.rx_burst(&mut out);
        let to = PeerAddr {
            addr: SocketAddr::from(([127, 0, 0, 1], 9)),
            tcp: None,
        };
        assert_eq!(
            s.forward_check(&out[0], to).unwrap_err().0,
            ErrorCode::NoRouteToShard
        );
    }
}
