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

use super::{INGRESS_BIT, IngressWorker, Popped, Queued, Wake, is_ingress, split_id};
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
/// A token stream opened from this slot is live: its frames follow.
const STREAM: u8 = 8;
/// A stream frame sits in the reply region, lent to the front door until
/// its credit comes back.
const LENT: u8 = 16;
/// The slot carried a token stream (its frames went as parts; the slot
/// returns with length 0 once the stream ended and the last part is back).
const STREAMED: u8 = 32;

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
        if f & (RX_LIVE | TX_HELD | STREAM | LENT) != 0 {
            return;
        }
        let len = if f & STREAMED != 0 {
            0
        } else if f & ANSWERED != 0 {
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
            let (id, q) = match s.w.pop(t) {
                None => {
                    idle += 1;
                    continue;
                }
                // The front door has read a stream frame: the reply
                // region is the worker's again.
                Some(Popped::Credit(id)) => {
                    idle = 0;
                    let (_, i) = s.index(id);
                    s.flags[i] &= !LENT;
                    s.settle(id);
                    continue;
                }
                Some(Popped::Request(id, q)) => (id, q),
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
                let (t, i) = s.index(p.buf);
                if s.flags[i] & STREAMED != 0 {
                    // A token frame: lent to the front door, which reads
                    // it and sends a credit back.
                    s.flags[i] = (s.flags[i] | LENT) & !TX_HELD;
                    s.w.part(t, split_id(p.buf).1, p.len);
                    s.tx_frames += 1;
                    continue;
                }
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

    // Frames sent on their own (token streams): a front-door stream's go
    // through its slot (`stream_alloc`), the rest through the inner
    // transport (datagrams, TCP places).
    fn can_push(&self, rx: &RxPacket) -> bool {
        is_ingress(rx.buf) || self.inner.can_push(rx)
    }

    fn tx_alloc_push(&mut self, route: &RxPacket) -> Option<(u32, u64)> {
        if is_ingress(route.buf) {
            return self.stream_alloc(route).map(|b| (b, CONN_DATAGRAM));
        }
        self.inner.tx_alloc_push(route)
    }

    fn tx_free_push(&mut self, tx: u32, conn: u64) {
        if is_ingress(tx) {
            return self.tx_free(tx);
        }
        self.inner.tx_free_push(tx, conn);
    }

    fn route_gone(&self, route: &RxPacket) -> bool {
        // A front-door stream ends through its own path (the call went).
        !is_ingress(route.buf) && self.inner.route_gone(route)
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
        if tx & INGRESS_BIT == 0 {
            return self.inner.tx_bytes(tx);
        }
        // Only a token stream's slot hands its reply region out this way
        // (its frames are built without the request at hand).
        let Some(s) = self.side.as_mut() else {
            return &mut [];
        };
        let (t, i) = s.index(tx);
        let pool = &s.w.pools[t];
        match s.held[i].as_mut() {
            Some(q) if s.flags[i] & (STREAMED | TX_HELD) == STREAMED | TX_HELD => q.view(pool).1,
            _ => &mut [],
        }
    }

    fn stream_keep(&mut self, rx: &RxPacket) {
        if !is_ingress(rx.buf) {
            return self.inner.stream_keep(rx);
        }
        if let Some(s) = self.side.as_mut() {
            let (_, i) = s.index(rx.buf);
            s.flags[i] |= STREAM | STREAMED;
        }
    }

    fn stream_alloc(&mut self, route: &RxPacket) -> Option<u32> {
        if !is_ingress(route.buf) {
            return self.inner.stream_alloc(route);
        }
        // One frame at a time per slot: the next waits for the credit
        // of the last (back-pressure from the front door, nothing lost).
        let s = self.side.as_mut()?;
        let (_, i) = s.index(route.buf);
        if s.held[i].is_none() || s.flags[i] & (STREAM | LENT | TX_HELD) != STREAM {
            return None;
        }
        s.flags[i] |= TX_HELD;
        Some(route.buf)
    }

    fn stream_end(&mut self, route: &RxPacket) {
        if !is_ingress(route.buf) {
            return self.inner.stream_end(route);
        }
        if let Some(s) = self.side.as_mut() {
            let (_, i) = s.index(route.buf);
            s.flags[i] &= !STREAM;
            s.settle(route.buf);
        }
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

    fn tables(&mut self, t: &std::sync::Arc<crate::tables::Tables>) {
        self.inner.tables(t);
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
    use crate::transport::ingress::{Answer, Done};
    use crate::transport::mem::MemTransport;

    fn done(a: Answer<'_>) -> Done {
        match a {
            Answer::Done(d) => d,
            Answer::Part(_) => panic!("a part where a slot was due"),
        }
    }

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
        assert_eq!(port.drain(|a| got.push(done(a).reply().to_vec())), 1);
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
        port.drain(|a| lens.push(done(a).reply().len()));
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

    /// Submits one frame and takes it as a token stream's OPEN: no answer,
    /// the stream keeps the slot. Returns the OPEN's packet.
    fn open_stream(
        s: &mut Sources<MemTransport>,
        port: &mut super::super::IngressPort,
    ) -> RxPacket {
        let f = port.alloc().unwrap();
        port.submit(f, 0, 0).unwrap();
        let mut out = [RxPacket::default(); 4];
        assert_eq!(s.rx_burst(&mut out), 1);
        let open = out[0];
        let tx = s.tx_alloc_for(&open).unwrap();
        s.stream_keep(&open);
        s.tx_free(tx);
        s.rx_release(&open);
        open
    }

    /// A token stream's slot: frames lent one at a time (the next waits
    /// for the credit of the last), the slot back empty once the stream
    /// ended and its last frame was read.
    #[test]
    fn a_stream_slot_carries_frames_until_it_ends() {
        let (mut s, mut port) = setup();
        let mut out = [RxPacket::default(); 4];
        let open = open_stream(&mut s, &mut port);
        assert_eq!(port.drain(|_| panic!("the slot came back early")), 0);
        let mut frames: Vec<Vec<u8>> = Vec::new();
        for (k, word) in [b"one", b"two"].iter().enumerate() {
            let tx = s.stream_alloc(&open).unwrap();
            assert_eq!(tx, open.buf);
            s.tx_bytes(tx)[..3].copy_from_slice(*word);
            s.tx_burst(&[TxPacket::answer(&open, tx, 3)]);
            // Lent: no second frame until the front door has read it.
            assert!(s.stream_alloc(&open).is_none());
            assert_eq!(
                port.drain(|a| match a {
                    Answer::Part(p) => frames.push(p.reply().to_vec()),
                    Answer::Done(_) => panic!("done while streaming"),
                }),
                1
            );
            assert_eq!(frames.len(), k + 1);
            // The credit comes back with the next burst.
            assert_eq!(s.rx_burst(&mut out), 0);
        }
        assert_eq!(frames, [b"one".to_vec(), b"two".to_vec()]);
        // The last frame, then the stream ends while it is still lent: the
        // slot waits for the credit.
        let tx = s.stream_alloc(&open).unwrap();
        s.tx_burst(&[TxPacket::answer(&open, tx, 0)]);
        s.stream_end(&open);
        let mut seen = Vec::new();
        port.drain(|a| {
            seen.push(match a {
                Answer::Part(_) => "part",
                Answer::Done(_) => "done",
            })
        });
        assert_eq!(seen, ["part"]);
        assert_eq!(s.rx_burst(&mut out), 0);
        let mut lens = Vec::new();
        port.drain(|a| lens.push(done(a).reply().len()));
        assert_eq!(lens, [0]);
        assert_eq!(port.pool().free_count(), 4);
        assert!(s.stream_alloc(&open).is_none());
    }

    /// A credit held by the front door (its reader is behind) holds the
    /// worker's next frame back until it is given.
    #[test]
    fn a_held_credit_holds_the_next_frame_back() {
        use crate::transport::ingress::Credit;
        let (mut s, mut port) = setup();
        let mut out = [RxPacket::default(); 4];
        let open = open_stream(&mut s, &mut port);
        let tx = s.stream_alloc(&open).unwrap();
        s.tx_burst(&[TxPacket::answer(&open, tx, 0)]);
        let mut slot = None;
        let n = port.drain_credited(|a| match a {
            Answer::Part(p) => {
                slot = Some(p.slot());
                Credit::Later
            }
            Answer::Done(_) => panic!("done while streaming"),
        });
        assert_eq!(n, 1);
        assert_eq!(s.rx_burst(&mut out), 0);
        assert!(s.stream_alloc(&open).is_none(), "lent until credited");
        port.credit(0, slot.unwrap());
        assert_eq!(s.rx_burst(&mut out), 0);
        assert!(s.stream_alloc(&open).is_some());
    }
}
