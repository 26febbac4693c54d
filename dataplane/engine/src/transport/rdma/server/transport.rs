//! One worker's RDMA transport: its pools, registrations, shared receive
//! queue and completion queue, and the batched `Transport` interface.
// A verbs backend module: registering memory and posting work requests.
#![allow(unsafe_code)]

use std::net::{SocketAddr, SocketAddrV6};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

use sluice_wire::ErrorCode;

use super::super::RdmaCfg;
use super::super::proto::IMM_SLOT;
use super::super::verbs::{self, Access, Cq, Mr, SendOp, Srq, Wc};
use super::status::runtime_for;
use super::*;
use crate::config::{Config, ConfigError, HugepageMode, PeerTransport};
use crate::pool::{FreeList, Region, TouchMap};
use crate::transport::{PeerAddr, RxPacket, Transport, TransportCounters, TxPacket};

impl RdmaTransport {
    /// Starts worker `index` of `workers`: joins (or starts) the process's
    /// RDMA listener, registers its pools once and posts its receives.
    /// Fails clearly when the host has no RDMA device.
    pub fn new(index: usize, workers: usize, cfg: &Config) -> Result<RdmaTransport, RdmaError> {
        let rc = RdmaCfg::from_config(cfg).map_err(RdmaError::Config)?;
        if index >= workers {
            return Err(RdmaError::Setup(format!("worker {index} of {workers}")));
        }
        let mut peers = Vec::new();
        for (i, p) in cfg.peers.iter().enumerate() {
            if p.transport != PeerTransport::Rdma {
                continue;
            }
            let a: SocketAddr = p.address.parse().map_err(|_| {
                RdmaError::Config(ConfigError::at(
                    format!("peers[{i}].address"),
                    "not an IP:port address",
                ))
            })?;
            peers.push(a);
        }
        let runtime = runtime_for(&rc, workers, &peers)?;
        if runtime.inner.ports.len() != workers
            || runtime.inner.cfg != rc
            || runtime.inner.peer_addrs != peers
        {
            return Err(RdmaError::Setup(
                "another engine in this process listens on the same rdma.listen".into(),
            ));
        }
        RdmaTransport::with_runtime(index, &rc, cfg.engine.hugepages, runtime)
    }

    fn with_runtime(
        index: usize,
        rc: &RdmaCfg,
        huge: HugepageMode,
        runtime: Arc<Runtime>,
    ) -> Result<RdmaTransport, RdmaError> {
        let inner = &runtime.inner;
        let mut region = Region::alloc(rc.pool_bytes() as usize, huge).map_err(RdmaError::Pool)?;
        let a = super::super::limits::SLOT_ALIGN_BYTES as usize;
        let small = (rc.rx_buffers as usize + rc.tx_buffers as usize) * rc.buffer_size as usize;
        let slots_off = small.div_ceil(a) * a;
        let nslots = rc.connections_max as usize * rc.slots_per_connection as usize;
        let large_tx_off = slots_off + nslots * rc.slot_size as usize;
        let base = region.as_mut_ptr();
        // SAFETY: the region is this transport's and outlives the MR: field
        // order drops `local_mr` before `region` (and Drop leaks the region
        // rather than free it while the NIC may still use it).
        let local_mr = unsafe { Mr::register(&inner.pd, base, region.len(), Access::Local) }
            .map_err(|e| RdmaError::Verbs("reg_mr", e))?;
        let mut slot_mrs = Vec::new();
        let mut grants = Vec::with_capacity(rc.connections_max as usize);
        let per_conn = rc.slots_per_connection as usize * rc.slot_size as usize;
        for c in 0..rc.connections_max as usize {
            let off = slots_off + c * per_conn;
            let p = base.wrapping_add(off);
            if per_conn == 0 {
                grants.push((p as u64, 0));
                continue;
            }
            // One MR per connection: its rkey reaches that connection's slots only.
            // SAFETY: the slots lie inside the region (`pool_bytes` counts
            // them), which outlives `_slot_mrs` as for `local_mr` above.
            let mr = unsafe { Mr::register(&inner.pd, p, per_conn, Access::RemoteWrite) }
                .map_err(|e| RdmaError::Verbs("reg_mr (slots)", e))?;
            grants.push((p as u64, mr.rkey()));
            slot_mrs.push(mr);
        }
        let entries = rc.rx_buffers + rc.tx_buffers + rc.large_tx_buffers + 64;
        let cq = Cq::new(inner.ctx, entries).map_err(|e| RdmaError::Verbs("create_cq", e))?;
        let srq =
            Srq::new(&inner.pd, rc.rx_buffers).map_err(|e| RdmaError::Verbs("create_srq", e))?;
        for b in 0..rc.rx_buffers {
            let p = base.wrapping_add(b as usize * rc.buffer_size as usize);
            // SAFETY: receive buffer b lies in `local_mr`; nothing touches
            // it until its completion hands it to the worker.
            unsafe { srq.post_recv(TAG_RECV | b as u64, p, rc.buffer_size, local_mr.lkey()) }
                .map_err(|e| RdmaError::Verbs("post_srq_recv", e))?;
        }
        let cm = rc.connections_max as usize;
        let np = inner.peer_addrs.len();
        let port = Arc::new(Port {
            cq,
            srq,
            inbox: ArrayQueue::new((cm + np) * 2 + 8),
            outbox: ArrayQueue::new((cm + np) * 2 + 8),
            grants: grants.into_boxed_slice(),
            stats: (0..cm).map(|_| ConnCounters::default()).collect(),
            peer_stats: (0..np).map(|_| ConnCounters::default()).collect(),
            peer_errors: ArrayQueue::new(np * 2 + 8),
            retired: ConnCounters::default(),
            accepted: AtomicU64::new(0),
            closed_conns: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        });
        if inner.ports[index].set(Arc::clone(&port)).is_err() {
            return Err(RdmaError::Setup(format!("worker {index} started twice")));
        }
        if inner.ports.iter().all(|p| p.get().is_some()) {
            let mut lid = inner
                ._listen_id
                .lock()
                .map_err(|_| RdmaError::Setup("listen id poisoned".into()))?;
            lid.listen(rc.backlog as i32)
                .map_err(|e| RdmaError::Cm("listen", e))?;
            log::info!(
                "rdma: listening on {} (device {})",
                runtime.listen,
                inner.device
            );
        }
        let huge_pages = region.is_huge();
        let listen = runtime.listen;
        Ok(RdmaTransport {
            index,
            rx_count: rc.rx_buffers,
            tx_count: rc.tx_buffers,
            buf_size: rc.buffer_size,
            spc: rc.slots_per_connection,
            slot_size: rc.slot_size,
            conns_max: rc.connections_max,
            slots_off,
            large_tx_off,
            conns: (0..cm).map(|_| WConn::default()).collect(),
            peers: (0..np).map(|_| WPeer::default()).collect(),
            peer_addrs: inner.peer_addrs.clone().into_boxed_slice(),
            any_lost: false,
            tx_free: FreeList::new(rc.tx_buffers),
            large_free: FreeList::new(rc.large_tx_buffers),
            tx_large_of: vec![NONE; rc.tx_buffers as usize].into_boxed_slice(),
            tx_reply_slot: vec![NONE; rc.tx_buffers as usize].into_boxed_slice(),
            large_busy: vec![false; nslots].into_boxed_slice(),
            rx_in_use: 0,
            rx_touch: TouchMap::new(rc.rx_buffers + nslots as u32),
            wcs: [Wc::default(); verbs::POLL_BATCH_MAX],
            local: listen,
            counters: TransportCounters {
                rx_capacity: rc.rx_buffers + nslots as u32,
                tx_capacity: rc.tx_buffers,
                hugepages: huge_pages,
                ..TransportCounters::default()
            },
            _slot_mrs: slot_mrs,
            local_mr,
            region: Some(region),
            port,
            _runtime: runtime,
        })
    }

    /// The worker this transport belongs to.
    pub fn worker(&self) -> usize {
        self.index
    }

    pub(super) fn drain_inbox(&mut self) {
        while let Some(m) = self.port.inbox.pop() {
            match m {
                ConnMsg::Up {
                    slot,
                    generation,
                    qp,
                    peer,
                    hello,
                } => {
                    let qpn = qp.num();
                    self.conns[slot as usize] = WConn {
                        up: true,
                        generation,
                        qp: Some(qp),
                        qpn,
                        peer,
                        hello,
                    };
                }
                ConnMsg::Down { slot, generation } => {
                    let c = &mut self.conns[slot as usize];
                    if c.generation == generation {
                        c.up = false;
                        c.qp = None;
                    }
                    // Capacity covers every connection twice; the control
                    // thread empties it every poll.
                    let _ = self.port.outbox.push((slot, generation));
                }
                ConnMsg::PeerUp {
                    peer,
                    generation,
                    qp,
                    hello,
                } => {
                    if let Some(p) = self.peers.get_mut(peer as usize) {
                        let qpn = qp.num();
                        *p = WPeer {
                            up: true,
                            generation,
                            qp: Some(qp),
                            qpn,
                            hello,
                            lost: false,
                        };
                    }
                }
                ConnMsg::PeerDown { peer, generation } => {
                    if let Some(p) = self.peers.get_mut(peer as usize)
                        && p.generation == generation
                    {
                        p.up = false;
                        p.qp = None;
                        p.lost = true;
                        self.any_lost = true;
                    }
                    let _ = self.port.outbox.push((PEER_SLOT | peer, generation));
                }
            }
        }
    }

    pub(super) fn conn_by_qpn(&self, qpn: u32) -> Option<usize> {
        self.conns.iter().position(|c| c.up && c.qpn == qpn)
    }

    pub(super) fn peer_by_qpn(&self, qpn: u32) -> Option<usize> {
        self.peers.iter().position(|p| p.up && p.qpn == qpn)
    }

    fn peer_index(&self, addr: &SocketAddr) -> Option<usize> {
        self.peer_addrs.iter().position(|a| a == addr)
    }

    /// A send on `qpn` failed: count it; a peer connection stops being
    /// used at once (its forwards fail) and the control thread replaces it.
    pub(super) fn send_failed(&mut self, qpn: u32) {
        if let Some(s) = self.conn_by_qpn(qpn) {
            bump(&self.port.stats[s].errors, 1);
        } else if let Some(k) = self.peer_by_qpn(qpn) {
            bump(&self.port.peer_stats[k].errors, 1);
            let p = &mut self.peers[k];
            p.up = false;
            p.qp = None;
            p.lost = true;
            self.any_lost = true;
            let _ = self.port.peer_errors.push((k as u32, p.generation));
        }
    }

    fn conn_stats(&self, c: Via) -> &ConnCounters {
        match c {
            Via::Client(s) => &self.port.stats[s],
            Via::Peer(k) => &self.port.peer_stats[k],
        }
    }

    /// Sends a received frame from its buffer (forward or relay) and counts
    /// it on its connection. Without a target, or when the post fails, the
    /// error is counted and the buffer released.
    fn send_counted(&mut self, rx: &RxPacket, target: Option<Via>) -> Option<u64> {
        let Some(conn) = target else {
            self.counters.tx_errors += 1;
            self.rx_release(rx);
            return None;
        };
        if !self.send_held(rx, conn) {
            self.counters.tx_errors += 1;
            bump(&self.conn_stats(conn).errors, 1);
            self.rx_release(rx);
            return None;
        }
        let stats = self.conn_stats(conn);
        bump(&stats.tx_frames, 1);
        bump(&stats.tx_bytes, rx.len as u64);
        Some(0)
    }

    /// A frame straight from its receive buffer on connection `via`
    /// (forward or relay): the completion (`TAG_HELD`) gives the buffer back.
    fn send_held(&mut self, rx: &RxPacket, via: Via) -> bool {
        let (off, len) = self.rx_range(rx);
        let lkey = self.local_mr.lkey();
        let ptr = self.region_base().wrapping_add(off);
        let qp = match via {
            Via::Client(s) => self.conns[s].qp.as_ref(),
            Via::Peer(k) => self.peers[k].qp.as_ref(),
        };
        let Some(qp) = qp else { return false };
        // SAFETY: the frame lies in receive buffer rx.buf inside `local_mr`;
        // the worker holds that buffer (not reposted, not read for writing)
        // until the TAG_HELD completion reposts it.
        unsafe {
            qp.post_send(
                TAG_HELD | rx.buf as u64,
                ptr,
                len as u32,
                lkey,
                SendOp::Send,
            )
        }
        .is_ok()
    }

    /// The address a connection's frames carry: the peer's IP and port, the
    /// connection slot in the scope id and its generation in the flow info,
    /// so a reply never reaches a later connection in the same slot.
    pub(super) fn peer_of(&self, slot: usize) -> SocketAddr {
        let c = &self.conns[slot];
        let ip = match c.peer {
            SocketAddr::V4(a) => a.ip().to_ipv6_mapped(),
            SocketAddr::V6(a) => *a.ip(),
        };
        SocketAddr::V6(SocketAddrV6::new(
            ip,
            c.peer.port(),
            c.generation,
            slot as u32 + 1,
        ))
    }

    fn slot_of(&self, peer: &SocketAddr) -> Option<usize> {
        let SocketAddr::V6(a) = peer else { return None };
        let slot = (a.scope_id() as usize).checked_sub(1)?;
        let c = self.conns.get(slot)?;
        (c.up && c.generation == a.flowinfo()).then_some(slot)
    }

    pub(super) fn repost(&mut self, b: u32) {
        let lkey = self.local_mr.lkey();
        let p = self
            .region_base()
            .wrapping_add(b as usize * self.buf_size as usize);
        // SAFETY: buffer b lies in `local_mr`; the worker gave it up (its
        // frame was released) and takes it back only from its completion.
        if unsafe {
            self.port
                .srq
                .post_recv(TAG_RECV | b as u64, p, self.buf_size, lkey)
        }
        .is_err()
        {
            self.counters.rx_no_buffers += 1;
        }
    }

    fn region_base(&mut self) -> *mut u8 {
        self.region
            .as_mut()
            .map_or(std::ptr::null_mut(), Region::as_mut_ptr)
    }

    /// Byte range of a received frame in the region.
    fn rx_range(&self, rx: &RxPacket) -> (usize, usize) {
        if rx.buf < self.rx_count {
            assert!(
                rx.off as usize + rx.len as usize <= self.buf_size as usize,
                "frame outside its buffer"
            );
            (
                rx.buf as usize * self.buf_size as usize + rx.off as usize,
                rx.len as usize,
            )
        } else {
            let k = (rx.buf - self.rx_count) as usize;
            assert!(k < self.large_busy.len(), "receive index out of range");
            assert!(
                rx.off as usize + rx.len as usize <= self.slot_size as usize,
                "frame outside its slot"
            );
            (
                self.slots_off + k * self.slot_size as usize + rx.off as usize,
                rx.len as usize,
            )
        }
    }

    /// Byte range of a transmit buffer in the region.
    fn tx_range(&self, tx: u32) -> (usize, usize) {
        assert!(tx < self.tx_count, "transmit index out of range");
        match self.tx_large_of[tx as usize] {
            NONE => (
                (self.rx_count + tx) as usize * self.buf_size as usize,
                self.buf_size as usize,
            ),
            l => (
                self.large_tx_off + l as usize * self.slot_size as usize,
                self.slot_size as usize,
            ),
        }
    }

    pub(super) fn release_tx(&mut self, tx: u32) {
        let l = std::mem::replace(&mut self.tx_large_of[tx as usize], NONE);
        if l != NONE {
            self.large_free.free(l);
        }
        self.tx_reply_slot[tx as usize] = NONE;
        self.tx_free.free(tx);
    }
}

impl Transport for RdmaTransport {
    fn rx_burst(&mut self, out: &mut [RxPacket]) -> usize {
        self.drain_inbox();
        let mut n = 0;
        while n < out.len() {
            // Each completion yields at most one frame (service or peer
            // connection alike), so polling no more than the room left keeps
            // every frame inside `out` (issue 13.1's pattern).
            let room = (out.len() - n).min(verbs::POLL_BATCH_MAX);
            let mut wcs = self.wcs;
            let k = self.port.cq.poll(&mut wcs[..room]);
            if k == 0 {
                break;
            }
            for &wc in &wcs[..k] {
                self.on_completion(wc, out, &mut n);
            }
        }
        n
    }

    fn tx_alloc(&mut self) -> Option<u32> {
        self.tx_free.alloc()
    }

    fn frames(&mut self, rx: &RxPacket, tx: u32) -> (&[u8], &mut [u8]) {
        if rx.buf >= self.rx_count && self.tx_large_of[tx as usize] == NONE {
            // A large request gets a large reply buffer while one is free;
            // the reply goes to the client's reply slot of the same index.
            if let Some(l) = self.large_free.alloc() {
                self.tx_large_of[tx as usize] = l;
                self.tx_reply_slot[tx as usize] = (rx.buf - self.rx_count) % self.spc.max(1);
            }
        }
        let (ro, rl) = self.rx_range(rx);
        let (to, tl) = self.tx_range(tx);
        let bytes = self.region.as_mut().map_or(&mut [][..], Region::bytes_mut);
        // Receive and transmit areas never overlap: split between them.
        if ro < to {
            let (a, b) = bytes.split_at_mut(to);
            (&a[ro..ro + rl], &mut b[..tl])
        } else {
            let (a, b) = bytes.split_at_mut(ro);
            (&b[..rl], &mut a[to..to + tl])
        }
    }

    fn rx_bytes(&self, rx: &RxPacket) -> &[u8] {
        let (o, l) = self.rx_range(rx);
        self.region
            .as_ref()
            .map_or(&[][..], |r| &verbs::region_bytes(r)[o..o + l])
    }

    fn rx_release(&mut self, rx: &RxPacket) {
        if rx.buf < self.rx_count {
            self.repost(rx.buf);
        } else if let Some(b) = self.large_busy.get_mut((rx.buf - self.rx_count) as usize) {
            *b = false;
        }
        self.rx_in_use -= 1;
    }

    fn tx_burst(&mut self, pkts: &[TxPacket]) {
        let lkey = self.local_mr.lkey();
        let base = self.region_base();
        let port = Arc::clone(&self.port);
        for p in pkts {
            let (off, cap) = self.tx_range(p.buf);
            assert!(
                p.len as usize <= cap,
                "transmit frame longer than its buffer"
            );
            let Some(slot) = self.slot_of(&p.peer) else {
                // The connection went away since the request arrived.
                self.counters.tx_errors += 1;
                self.release_tx(p.buf);
                continue;
            };
            let hello = self.conns[slot].hello;
            let stats = &port.stats[slot];
            let k = self.tx_reply_slot[p.buf as usize];
            let op = if p.len <= hello.buffer_size {
                SendOp::Send
            } else if k != NONE && k < hello.reply_count && p.len <= hello.reply_size {
                SendOp::WriteImm {
                    remote_addr: hello.reply_base + k as u64 * hello.reply_size as u64,
                    rkey: hello.reply_rkey,
                    imm: IMM_SLOT | k,
                }
            } else {
                // Larger than anything the client granted for it.
                bump(&stats.errors, 1);
                self.counters.tx_errors += 1;
                self.release_tx(p.buf);
                continue;
            };
            let Some(qp) = self.conns[slot].qp.as_ref() else {
                self.counters.tx_errors += 1;
                self.release_tx(p.buf);
                continue;
            };
            let ptr = base.wrapping_add(off);
            // SAFETY: the reply lies in transmit buffer p.buf inside
            // `local_mr` (tx_range, length checked above); the buffer stays
            // allocated and unwritten until the TAG_SEND completion frees it.
            match unsafe { qp.post_send(TAG_SEND | p.buf as u64, ptr, p.len, lkey, op) } {
                Ok(()) => {
                    bump(&stats.tx_frames, 1);
                    bump(&stats.tx_bytes, p.len as u64);
                    if matches!(op, SendOp::WriteImm { .. }) {
                        bump(&stats.tx_large, 1);
                    }
                }
                Err(_) => {
                    bump(&stats.errors, 1);
                    self.counters.tx_errors += 1;
                    self.release_tx(p.buf);
                }
            }
        }
    }

    fn tx_free(&mut self, tx: u32) {
        self.release_tx(tx);
    }

    /// Lets the worker build an answer with no request at hand: the
    /// `peer_down` it sends when a forward gets no answer.
    fn tx_bytes(&mut self, tx: u32) -> &mut [u8] {
        if tx >= self.tx_count {
            return &mut [];
        }
        let (o, l) = self.tx_range(tx);
        self.region
            .as_mut()
            .map_or(&mut [][..], |r| &mut r.bytes_mut()[o..o + l])
    }

    fn rx_bytes_mut(&mut self, rx: &RxPacket) -> &mut [u8] {
        let (o, l) = self.rx_range(rx);
        self.region
            .as_mut()
            .map_or(&mut [][..], |r| &mut r.bytes_mut()[o..o + l])
    }

    fn forward_check(&self, rx: &RxPacket, to: PeerAddr) -> Result<(), (ErrorCode, &'static str)> {
        let Some(k) = self.peer_index(&to.addr) else {
            return Err((
                ErrorCode::PeerDown,
                "the peer serving this shard is not an rdma peer (an rdma appliance forwards only to peers with transport = \"rdma\")",
            ));
        };
        let p = &self.peers[k];
        if !p.up {
            return Err((
                ErrorCode::PeerDown,
                "no connection to the peer serving this shard (reconnecting)",
            ));
        }
        if rx.buf >= self.rx_count || rx.len > p.hello.buffer_size {
            return Err((
                ErrorCode::FrameTooLarge,
                "only frames that fit one receive buffer (rdma.buffer_size, here and on the peer) are forwarded",
            ));
        }
        Ok(())
    }

    /// Zero copy: the frame goes by SEND from the receive buffer it landed
    /// in, which stays held until the send completes.
    fn forward(&mut self, rx: &RxPacket, to: PeerAddr) -> Option<u64> {
        let target = self.peer_index(&to.addr).filter(|&k| {
            self.peers[k].qp.is_some() && self.forward_check(rx, to).is_ok() && self.peers[k].up
        });
        self.send_counted(rx, target.map(Via::Peer))
    }

    /// Zero copy: the peer's answer goes by SEND from the receive buffer it
    /// landed in to the client's connection.
    fn relay(&mut self, rx: &RxPacket, to: SocketAddr, _conn: u64) -> Option<u64> {
        let target = self.slot_of(&to).filter(|&s| {
            let c = &self.conns[s];
            rx.buf < self.rx_count && rx.len <= c.hello.buffer_size && c.qp.is_some()
        });
        // None: the client left, or the answer is larger than its buffers.
        self.send_counted(rx, target.map(Via::Client))
    }

    fn lost_peer(&mut self) -> Option<SocketAddr> {
        if !self.any_lost {
            return None;
        }
        match self.peers.iter().position(|p| p.lost) {
            Some(k) => {
                self.peers[k].lost = false;
                Some(self.peer_addrs[k])
            }
            None => {
                self.any_lost = false;
                None
            }
        }
    }

    fn wait(&mut self, timeout: Duration) {
        // No completion channel: a short nap bounds the added latency.
        std::thread::sleep(timeout.min(Duration::from_micros(100)));
    }

    fn counters(&self) -> TransportCounters {
        let huge = self.counters.hugepages;
        let bytes = |n: u32, size: u32| u64::from(n) * u64::from(size);
        TransportCounters {
            rx_in_use: self.rx_in_use,
            tx_in_use: self.tx_free.in_use(),
            buffer_reuses: self.tx_free.reuses + self.large_free.reuses + self.rx_touch.reuses,
            pools: [
                self.rx_touch.counters(
                    self.rx_in_use,
                    bytes(self.rx_count, self.buf_size)
                        + bytes(self.large_busy.len() as u32, self.slot_size),
                    huge,
                ),
                self.tx_free
                    .counters(bytes(self.tx_count, self.buf_size), huge),
                self.large_free
                    .counters(bytes(self.large_free.capacity(), self.slot_size), huge),
            ],
            ..self.counters
        }
    }

    fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

impl Drop for RdmaTransport {
    fn drop(&mut self) {
        // Ask the control thread to destroy this worker's QPs, and wait:
        // until then a peer's WRITE or a posted receive may still land in
        // the region.
        self.port.closing.store(true, Ordering::Release);
        let t = Instant::now();
        while !self.port.closed.load(Ordering::Acquire) && t.elapsed() < TEARDOWN_WAIT {
            std::thread::sleep(Duration::from_millis(2));
        }
        if !self.port.closed.load(Ordering::Acquire) {
            log::error!(
                "rdma: worker {} connections not torn down in time; leaking its buffer pool",
                self.index
            );
            std::mem::forget(self.region.take());
        }
        let _ = self.conns_max;
    }
}
