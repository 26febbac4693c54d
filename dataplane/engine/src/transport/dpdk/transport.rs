//! The DPDK transport of one worker: one RX/TX queue pair of the port.
//!
//! Mbuf ownership: an mbuf is in exactly one place at a time: a PMD ring,
//! an RX slot (handed to the worker), the fragment table (see `frag`), a
//! TX slot (being filled by the worker), the outgoing burst array, or back
//! in its pool. Every path (garbage, ARP, TX ring full, unknown neighbour,
//! fragments dropped or expired, transport drop) ends in `rte_pktmbuf_free`
//! (or the death row's free) or a successful `rte_eth_tx_burst`, once. The
//! runtime checks the pools are full again at stop ([`StopReport`]).
//! Frames and answers larger than one mbuf live in slots (see `large`).
#![allow(unsafe_code)]

use std::net::{SocketAddr, SocketAddrV4};
use std::ptr;
use std::time::Duration;

use dpdk_sys as sys;

use super::frag::{self, Fed};
use super::large::{Large, NO_SLOT};
use super::net::{self, Drop as Garbage, HDRS_LEN, Neighbours, Packet, TxChecksum};
use super::runtime::{DpdkError, FRAME_ALIGN, QueueParams, errno_text, rte_errno};
use super::slots::SLOT_FRAME_MAX;
use super::stats::{QUEUE_STATS, QueueStats};
use crate::config::limits::RX_BURST_MAX;
use crate::pool::FreeList;
use crate::transport::{RxPacket, Transport, TransportCounters, TxPacket};

/// TX slots per worker: one reply per received frame, with room to spare.
const TX_SLOTS: usize = 2 * RX_BURST_MAX;
/// The outgoing array: a burst of replies, ARP replies, and the fragments
/// of one large reply (flushed before it would overflow).
pub(super) const TX_ARRAY_LEN: usize = TX_SLOTS + RX_BURST_MAX;
/// Attempts to push a burst into a full TX ring before dropping the rest.
const TX_RETRY_MAX: u32 = 64;
/// An answer may be this much larger than its request (a response header
/// longer than the request's): requests within it of one mbuf's frame get
/// a transmit slot for their answer.
const TX_GROWTH_BYTES: usize = 256;

/// The DPDK transport of one worker: one RX/TX queue pair of the port.
pub struct DpdkTransport {
    pub(super) q: QueueParams,
    registered: bool,
    /// Scratch for `rte_eth_rx_burst`.
    rx_burst: Box<[*mut sys::rte_mbuf]>,
    /// RX slot -> mbuf handed to the worker (null when free or in a slot).
    rx_slots: Box<[*mut sys::rte_mbuf]>,
    /// RX slot -> start of its Sluice frame.
    rx_frame: Box<[*const u8]>,
    /// RX slot -> receive slot its frame was copied into, or [`NO_SLOT`].
    rx_large: Box<[u32]>,
    rx_free: FreeList,
    /// TX slot -> mbuf being filled (null when free).
    pub(super) tx_slots: Box<[*mut sys::rte_mbuf]>,
    /// TX slot -> start of its Sluice frame in the mbuf.
    pub(super) tx_frame: Box<[*mut u8]>,
    /// TX slot -> data offset of the packet in the mbuf.
    pub(super) tx_data_off: Box<[u16]>,
    /// TX slot -> transmit slot the answer is written in, or [`NO_SLOT`].
    tx_large: Box<[u32]>,
    tx_free: FreeList,
    /// Outgoing burst.
    pub(super) tx_out: Box<[*mut sys::rte_mbuf]>,
    pub(super) tx_out_len: usize,
    /// Garbage to free in bulk.
    garbage: Box<[*mut sys::rte_mbuf]>,
    pub(super) neigh: Neighbours,
    pub(super) ip_id: u16,
    /// Whether the first frame's placement was logged.
    placement_logged: bool,
    pub(super) large: Large,
    pub(super) stats: QueueStats,
    pub(super) counters: TransportCounters,
}

/// Where an accepted frame lies.
enum Source {
    /// In its own (single-segment) mbuf.
    Mbuf(*mut sys::rte_mbuf, *const u8),
    /// Copied into a receive slot.
    Slot(u32),
}

impl DpdkTransport {
    /// Takes over one queue pair; runs on the worker thread, which it
    /// registers with EAL (an lcore id gives it a mempool cache).
    pub fn new(q: QueueParams) -> Result<DpdkTransport, DpdkError> {
        // SAFETY: EAL is running (the runtime outlives every worker).
        let registered = unsafe { sys::rte_thread_register() } == 0;
        if !registered {
            log::warn!(
                "dpdk: worker thread not registered with EAL ({}): mempool cache off",
                errno_text(rte_errno())
            );
        }
        let null = ptr::null_mut::<sys::rte_mbuf>();
        Ok(DpdkTransport {
            q,
            registered,
            rx_burst: vec![null; RX_BURST_MAX].into_boxed_slice(),
            rx_slots: vec![null; RX_BURST_MAX].into_boxed_slice(),
            rx_frame: vec![ptr::null(); RX_BURST_MAX].into_boxed_slice(),
            rx_large: vec![NO_SLOT; RX_BURST_MAX].into_boxed_slice(),
            rx_free: FreeList::new(RX_BURST_MAX as u32),
            tx_slots: vec![null; TX_SLOTS].into_boxed_slice(),
            tx_frame: vec![ptr::null_mut(); TX_SLOTS].into_boxed_slice(),
            tx_data_off: vec![0; TX_SLOTS].into_boxed_slice(),
            tx_large: vec![NO_SLOT; TX_SLOTS].into_boxed_slice(),
            tx_free: FreeList::new(TX_SLOTS as u32),
            tx_out: vec![null; TX_ARRAY_LEN].into_boxed_slice(),
            tx_out_len: 0,
            garbage: vec![null; RX_BURST_MAX].into_boxed_slice(),
            neigh: Neighbours::new(q.neighbours_max),
            ip_id: 0,
            placement_logged: false,
            large: Large::new(&q),
            stats: QueueStats::default(),
            counters: TransportCounters {
                rx_capacity: RX_BURST_MAX as u32,
                tx_capacity: TX_SLOTS as u32,
                hugepages: q.hugepages,
                ..TransportCounters::default()
            },
        })
    }

    pub(super) fn view(m: *mut sys::rte_mbuf) -> sys::sl_mbuf_view {
        let mut v = sys::sl_mbuf_view::default();
        // SAFETY: m is a live mbuf owned by this worker.
        unsafe { sys::sl_mbuf_view(m, &mut v) };
        v
    }

    /// Pushes the outgoing array to the TX queue; what the ring will not
    /// take after a bounded number of tries is freed and counted.
    pub(super) fn flush_tx(&mut self) {
        let mut done = 0usize;
        let mut tries = 0;
        while done < self.tx_out_len && tries < TX_RETRY_MAX {
            // SAFETY: tx_out[done..len] are mbufs owned by us; the PMD takes
            // ownership of the first `sent` of them.
            let sent = unsafe {
                sys::sl_tx_burst(
                    self.q.port,
                    self.q.queue,
                    self.tx_out.as_mut_ptr().add(done),
                    (self.tx_out_len - done) as u16,
                )
            };
            done += sent as usize;
            tries += 1;
        }
        for &m in &self.tx_out[done..self.tx_out_len] {
            // SAFETY: not taken by the PMD, still ours, freed once here.
            unsafe { sys::sl_pktmbuf_free(m) };
        }
        let dropped = (self.tx_out_len - done) as u64;
        self.stats.tx_packets += done as u64;
        self.stats.tx_ring_full += dropped;
        self.counters.tx_errors += dropped;
        self.tx_out_len = 0;
    }

    /// Queues one packet for sending, flushing first when the array is full.
    pub(super) fn push_tx(&mut self, m: *mut sys::rte_mbuf) {
        if self.tx_out_len == TX_ARRAY_LEN {
            self.flush_tx();
        }
        self.tx_out[self.tx_out_len] = m;
        self.tx_out_len += 1;
    }

    fn publish(&self) {
        QUEUE_STATS[self.q.queue as usize].store(&self.stats);
    }

    /// Moves a frame to a 64-byte boundary inside its own mbuf; returns the
    /// new start, or None when there is no room either way.
    fn realign(v: &sys::sl_mbuf_view, frame: *mut u8, len: usize) -> Option<*mut u8> {
        let addr = frame as usize;
        let room_lo = v.buf_addr as usize;
        let room_hi = room_lo + v.buf_len as usize;
        let down = addr & !(FRAME_ALIGN - 1);
        let up = down + FRAME_ALIGN;
        let to = if down >= room_lo {
            down
        } else if up + len <= room_hi {
            up
        } else {
            return None;
        };
        // SAFETY: source and destination both lie in this mbuf's data room
        // (checked above); the headers in front were already parsed and may
        // be overwritten; `copy` handles the overlap.
        unsafe { ptr::copy(frame, to as *mut u8, len) };
        Some(to as *mut u8)
    }

    /// A frame in a single-segment mbuf, handed over in place (realigned).
    fn in_place(
        &mut self,
        m: *mut sys::rte_mbuf,
        v: &sys::sl_mbuf_view,
        off: usize,
        len: usize,
    ) -> Source {
        // SAFETY: off + len <= data_len (classify checked it).
        let mut frame = unsafe { v.data.add(off) };
        if !self.placement_logged {
            self.placement_logged = true;
            log::info!(
                "dpdk: queue {}: PMD put the first frame at data_off {} + {off}: {} mod 64 ({})",
                self.q.queue,
                v.data_off,
                frame as usize % FRAME_ALIGN,
                if self.q.rx_realign {
                    "realigned in its mbuf when not 0"
                } else {
                    "rx_realign off"
                }
            );
        }
        if self.q.rx_realign
            && !(frame as usize).is_multiple_of(FRAME_ALIGN)
            && let Some(f) = Self::realign(v, frame, len)
        {
            frame = f;
            self.stats.rx_realigned += 1;
        }
        Source::Mbuf(m, frame)
    }

    /// Hands an accepted frame to the worker as `out[*k]`. `want` never
    /// exceeds the free RX slots, so one is always there; without, the
    /// frame is freed and counted, not lost track of.
    fn hand_over(
        &mut self,
        src: Source,
        len: usize,
        peer: SocketAddrV4,
        truncated: bool,
        out: &mut [RxPacket],
        k: &mut usize,
    ) {
        let Some(slot) = self.rx_free.alloc() else {
            debug_assert!(false, "more frames than free RX slots");
            self.counters.rx_no_buffers += 1;
            match src {
                // SAFETY: ours, not handed on; freed once.
                Source::Mbuf(m, _) => unsafe { sys::sl_pktmbuf_free(m) },
                Source::Slot(i) => self.large.rx_release(i),
            }
            return;
        };
        let s = slot as usize;
        match src {
            Source::Mbuf(m, frame) => {
                self.rx_slots[s] = m;
                self.rx_frame[s] = frame;
                self.rx_large[s] = NO_SLOT;
            }
            Source::Slot(i) => {
                self.rx_slots[s] = ptr::null_mut();
                self.rx_frame[s] = self.large.rx_frame(i);
                self.rx_large[s] = i;
            }
        }
        out[*k] = RxPacket {
            buf: slot,
            off: 0,
            len: len as u32,
            peer: SocketAddr::V4(peer),
            truncated,
            port: crate::transport::PORT_SERVICE,
            conn: crate::transport::CONN_DATAGRAM,
        };
        *k += 1;
        self.stats.rx_sluice += 1;
        self.stats.rx_truncated += truncated as u64;
    }

    /// Whether RX slot `r` holds a frame.
    fn rx_held(&self, r: usize) -> bool {
        !self.rx_slots[r].is_null() || self.rx_large[r] != NO_SLOT
    }

    /// The bytes of RX slot `r`'s frame.
    fn rx_slice(&self, rx: &RxPacket) -> &[u8] {
        let r = rx.buf as usize;
        assert!(self.rx_held(r), "rx_bytes of a free slot");
        // SAFETY: the frame (len bytes, checked by classify or copied into
        // a slot) lies in an mbuf or slot we own until rx_release.
        unsafe { std::slice::from_raw_parts(self.rx_frame[r], rx.len as usize) }
    }

    /// Sends a reply that sits in its mbuf (the engine wrote it in place).
    fn send_small(&mut self, t: usize, m: *mut sys::rte_mbuf, p: &TxPacket) -> bool {
        let local = self.q.local;
        let mac = match p.peer {
            SocketAddr::V4(a) => self.neigh.lookup(*a.ip()).map(|mac| (a, mac)),
            SocketAddr::V6(_) => None,
        };
        match mac {
            None if p.peer.is_ipv4() => {
                self.stats.tx_no_neighbour += 1;
                false
            }
            None => {
                self.stats.tx_invalid += 1;
                false
            }
            Some(_) if p.len as usize > self.q.tx_frame_max => {
                self.stats.tx_invalid += 1;
                false
            }
            Some((dst, mac)) => {
                let len = HDRS_LEN + p.len as usize;
                // SAFETY: the packet area starts HDRS_LEN before the frame
                // in this mbuf's data room and spans len bytes (checked
                // against tx_frame_max above).
                let pkt =
                    unsafe { std::slice::from_raw_parts_mut(self.tx_frame[t].sub(HDRS_LEN), len) };
                self.ip_id = self.ip_id.wrapping_add(1);
                match net::build_udp(
                    pkt,
                    p.len as usize,
                    &local,
                    mac,
                    dst,
                    self.ip_id,
                    self.q.tx_mode,
                ) {
                    Ok(len) => {
                        // SAFETY: fresh single-segment mbuf; fits its room.
                        unsafe {
                            sys::sl_mbuf_set_data(m, self.tx_data_off[t], len as u16);
                            if self.q.tx_mode == TxChecksum::Offload {
                                sys::sl_mbuf_tx_offload_ipv4_udp(
                                    m,
                                    net::ETH_HDR_LEN as u8,
                                    net::IPV4_HDR_LEN as u8,
                                );
                            }
                        }
                        true
                    }
                    Err(_) => {
                        self.stats.tx_invalid += 1;
                        false
                    }
                }
            }
        }
    }
}

impl Transport for DpdkTransport {
    fn rx_burst(&mut self, out: &mut [RxPacket]) -> usize {
        // Datagrams whose fragments stopped coming give their mbufs back,
        // idle or not.
        let now = frag::now_tsc();
        if let Some(r) = self.large.frag.as_mut()
            && r.held() > 0
            && r.expire(now, &mut self.stats)
        {
            self.publish();
        }
        let free = (self.rx_free.capacity() - self.rx_free.in_use()) as usize;
        let want = out.len().min(free).min(RX_BURST_MAX);
        if want == 0 {
            return 0;
        }
        // SAFETY: rx_burst has RX_BURST_MAX >= want slots; the PMD hands us
        // ownership of `n` mbufs.
        let n = unsafe {
            sys::sl_rx_burst(
                self.q.port,
                self.q.queue,
                self.rx_burst.as_mut_ptr(),
                want as u16,
            )
        } as usize;
        if n == 0 {
            return 0;
        }
        self.stats.rx_packets += n as u64;
        let local = self.q.local;
        let mut k = 0;
        let mut ng = 0;
        for i in 0..n {
            let m = self.rx_burst[i];
            let v = Self::view(m);
            // SAFETY: data..data+data_len is the first segment's payload,
            // which we own until we free or hand on the mbuf.
            let bytes = unsafe { std::slice::from_raw_parts(v.data, v.data_len as usize) };
            let class = net::classify(bytes, &local);
            match class {
                Packet::Sluice {
                    src_mac,
                    src,
                    off,
                    len,
                    datagram_len,
                    truncated,
                } => {
                    self.neigh.learn(*src.ip(), src_mac);
                    if v.nb_segs > 1 && truncated && v.pkt_len as usize >= off + datagram_len {
                        // A jumbo frame scattered over several mbufs: made
                        // contiguous once, in a slot.
                        if let Some(s) = self.large.rx_copy(m, off, datagram_len, &mut self.stats) {
                            self.stats.rx_multi_seg += 1;
                            self.hand_over(Source::Slot(s), datagram_len, src, false, out, &mut k);
                        }
                        continue;
                    }
                    let src_at = self.in_place(m, &v, off, len);
                    self.hand_over(src_at, len, src, truncated || v.nb_segs > 1, out, &mut k);
                }
                Packet::Fragment { ihl, first } => {
                    let Some(r) = self.large.frag.as_mut() else {
                        // Reassembly off: the first fragment is answered
                        // frame_too_large, the others are garbage.
                        match first {
                            Some(f) => {
                                self.neigh.learn(*f.src.ip(), f.src_mac);
                                let src_at = self.in_place(m, &v, f.off, f.len);
                                self.hand_over(src_at, f.len, f.src, true, out, &mut k);
                            }
                            None => {
                                self.stats.drops[Garbage::Fragment as usize] += 1;
                                self.garbage[ng] = m;
                                ng += 1;
                            }
                        }
                        continue;
                    };
                    if let Some(f) = first {
                        self.neigh.learn(*f.src.ip(), f.src_mac);
                    }
                    match r.feed(m, ihl, now, &mut self.stats) {
                        Fed::Held | Fed::Dropped => {}
                        Fed::Complete(chain) => {
                            if let Some((s, len, src)) =
                                self.large.rx_reassembled(chain, &local, &mut self.stats)
                            {
                                self.hand_over(Source::Slot(s), len, src, false, out, &mut k);
                            }
                        }
                    }
                }
                Packet::ArpRequest {
                    sender_mac,
                    sender_ip,
                } if v.nb_segs == 1 => {
                    self.neigh.learn(sender_ip, sender_mac);
                    let room = (v.buf_len - v.data_off) as usize;
                    // SAFETY: the whole data room after data_off is this mbuf's.
                    let pkt = unsafe { std::slice::from_raw_parts_mut(v.data, room) };
                    match net::arp_reply_in_place(pkt, &local, sender_mac, sender_ip) {
                        Some(len) if self.tx_out_len < TX_ARRAY_LEN => {
                            // SAFETY: single-segment mbuf we own; len fits its room.
                            unsafe { sys::sl_mbuf_set_data(m, v.data_off, len as u16) };
                            self.tx_out[self.tx_out_len] = m;
                            self.tx_out_len += 1;
                            self.stats.arp_replies += 1;
                        }
                        _ => {
                            self.stats.drops[Garbage::Arp as usize] += 1;
                            self.garbage[ng] = m;
                            ng += 1;
                        }
                    }
                }
                Packet::ArpLearn {
                    sender_mac,
                    sender_ip,
                } => {
                    self.neigh.learn(sender_ip, sender_mac);
                    self.stats.arp_learned += 1;
                    self.garbage[ng] = m;
                    ng += 1;
                }
                Packet::ArpRequest { .. } => {
                    self.stats.drops[Garbage::MultiSegment as usize] += 1;
                    self.garbage[ng] = m;
                    ng += 1;
                }
                Packet::Drop(r) => {
                    self.stats.drops[r as usize] += 1;
                    self.garbage[ng] = m;
                    ng += 1;
                }
            }
        }
        if ng > 0 {
            // SAFETY: ng garbage mbufs we own, each listed once; frees chains.
            unsafe { sys::rte_pktmbuf_free_bulk(self.garbage.as_mut_ptr(), ng as u32) };
        }
        // Fragments librte_ip_frag let go of in this burst.
        if let Some(r) = self.large.frag.as_mut() {
            r.flush();
        }
        if self.tx_out_len > 0 {
            self.flush_tx();
        }
        self.counters.rx_frames += k as u64;
        self.publish();
        k
    }

    fn tx_alloc(&mut self) -> Option<u32> {
        let slot = self.tx_free.alloc()?;
        // SAFETY: live pool.
        let m = unsafe { sys::sl_pktmbuf_alloc(self.q.pool) };
        if m.is_null() {
            self.tx_free.free(slot);
            return None;
        }
        let v = Self::view(m);
        // Start the packet so that the frame after its 42 header bytes is
        // 64-byte aligned: ONNX Runtime writes outputs in place.
        let skip = net::tx_skip(v.buf_addr as usize, FRAME_ALIGN);
        self.tx_slots[slot as usize] = m;
        self.tx_data_off[slot as usize] = skip as u16;
        self.tx_large[slot as usize] = NO_SLOT;
        // SAFETY: skip + HDRS_LEN + tx_frame_max <= buf_len (tx_frame_max
        // leaves FRAME_ALIGN spare bytes of the data room).
        self.tx_frame[slot as usize] = unsafe { v.buf_addr.add(skip + HDRS_LEN) };
        Some(slot)
    }

    fn frames(&mut self, rx: &RxPacket, tx: u32) -> (&[u8], &mut [u8]) {
        let (r, t) = (rx.buf as usize, tx as usize);
        assert!(
            self.rx_held(r) && !self.tx_slots[t].is_null(),
            "frames of a free slot"
        );
        // A large request's answer goes into a transmit slot, when one is free.
        if self.tx_large[t] == NO_SLOT
            && rx.len as usize + TX_GROWTH_BYTES > self.q.tx_frame_max
            && let Some(i) = self.large.tx_take()
        {
            self.tx_large[t] = i;
        }
        let (txp, txn) = match self.tx_large[t] {
            NO_SLOT => (self.tx_frame[t], self.q.tx_frame_max),
            i => (self.large.tx_frame(i), SLOT_FRAME_MAX),
        };
        // SAFETY: the RX frame (len bytes) and the TX frame area (txn bytes)
        // lie in different mbufs or slots we own until rx_release /
        // tx_burst; borrows are tied to &mut self.
        unsafe {
            (
                std::slice::from_raw_parts(self.rx_frame[r], rx.len as usize),
                std::slice::from_raw_parts_mut(txp, txn),
            )
        }
    }

    fn rx_bytes(&self, rx: &RxPacket) -> &[u8] {
        self.rx_slice(rx)
    }

    fn rx_release(&mut self, rx: &RxPacket) {
        let r = rx.buf as usize;
        assert!(self.rx_held(r), "release of a free RX slot");
        let m = std::mem::replace(&mut self.rx_slots[r], ptr::null_mut());
        let s = std::mem::replace(&mut self.rx_large[r], NO_SLOT);
        if !m.is_null() {
            // SAFETY: the worker is done with this mbuf; freed once (slot nulled).
            unsafe { sys::sl_pktmbuf_free(m) };
        }
        if s != NO_SLOT {
            self.large.rx_release(s);
        }
        self.rx_free.free(rx.buf);
    }

    fn tx_burst(&mut self, pkts: &[TxPacket]) {
        for p in pkts {
            let t = p.buf as usize;
            let m = std::mem::replace(&mut self.tx_slots[t], ptr::null_mut());
            assert!(!m.is_null(), "send of a free TX slot");
            let large = std::mem::replace(&mut self.tx_large[t], NO_SLOT);
            self.tx_free.free(p.buf);
            if large != NO_SLOT {
                // Ends in sends or frees of m and of the slot, counted.
                self.send_large(t, m, large, p);
                continue;
            }
            if self.send_small(t, m, p) {
                self.push_tx(m);
            } else {
                self.counters.tx_errors += 1;
                // SAFETY: not sent; freed once here.
                unsafe { sys::sl_pktmbuf_free(m) };
            }
        }
        if self.tx_out_len > 0 {
            self.flush_tx();
        }
        self.counters.tx_frames = self.stats.tx_packets;
        self.publish();
    }

    fn tx_free(&mut self, tx: u32) {
        let m = std::mem::replace(&mut self.tx_slots[tx as usize], ptr::null_mut());
        assert!(!m.is_null(), "free of a free TX slot");
        // SAFETY: never sent; freed once (slot nulled).
        unsafe { sys::sl_pktmbuf_free(m) };
        let large = std::mem::replace(&mut self.tx_large[tx as usize], NO_SLOT);
        if large != NO_SLOT {
            self.large.tx_give_back(large);
        }
        self.tx_free.free(tx);
    }

    fn wait(&mut self, timeout: Duration) {
        // Virtual devices have no RX interrupts here: nap briefly instead.
        let nap = timeout.min(self.q.idle_sleep);
        if nap.is_zero() {
            std::thread::yield_now();
        } else {
            std::thread::sleep(nap);
        }
    }

    fn counters(&self) -> TransportCounters {
        TransportCounters {
            rx_in_use: self.rx_free.in_use(),
            tx_in_use: self.tx_free.in_use(),
            buffer_reuses: self.rx_free.reuses + self.tx_free.reuses,
            // Slots over mbufs of the EAL mempool: the mempool owns the
            // memory (its bytes are not this queue's), so 0 bytes here.
            pools: [
                self.rx_free.counters(0, self.counters.hugepages),
                self.tx_free.counters(0, self.counters.hugepages),
                crate::pool::PoolCounters::default(),
            ],
            ..self.counters
        }
    }

    fn local_addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(self.q.local.ip, self.q.local.udp_port))
    }
}

impl std::ops::Drop for DpdkTransport {
    fn drop(&mut self) {
        // Frames still held (a worker that stopped mid-burst) go back.
        for slot in self.rx_slots.iter_mut().chain(self.tx_slots.iter_mut()) {
            let m = std::mem::replace(slot, ptr::null_mut());
            if !m.is_null() {
                // SAFETY: held by this transport only; freed once.
                unsafe { sys::sl_pktmbuf_free(m) };
            }
        }
        if self.tx_out_len > 0 {
            self.flush_tx();
        }
        // Fragments of incomplete datagrams go back to the pool too.
        if let Some(r) = self.large.frag.as_mut() {
            r.clear(&mut self.stats);
        }
        self.publish();
        if self.registered {
            // SAFETY: this thread registered itself in `new`.
            unsafe { sys::rte_thread_unregister() };
        }
    }
}
