//! Frames and answers larger than one mbuf.
//!
//! Receive: a multi-segment frame (scattered jumbo frame) or a datagram
//! librte_ip_frag reassembled is copied once into a 64-byte aligned
//! receive slot and its chain freed; the worker reads it there in place.
//! A single-segment frame never comes here (zero copy, as before).
//!
//! Transmit: the answer to a large request is written in place into a
//! transmit slot, with the Ethernet, IPv4 and UDP headers built in front of
//! it in the slot. Then, by size and by what the port can do:
//! * it fits one mbuf: copied into the reply's mbuf (small, counted);
//! * it fits the MTU and the port takes multi-segment mbufs: a chain of the
//!   reply's mbuf (headers) and an mbuf whose external buffer is the slot;
//! * larger than the MTU: IPv4 fragments with `rte_ipv4_fragment_packet`
//!   (zero copy: each fragment is a header mbuf and indirect mbufs on the
//!   slot) where the port takes chains, else with
//!   `rte_ipv4_fragment_copy_nonseg_packet` (copied into one mbuf each,
//!   counted), sized so each fragment fits one mbuf.
//!
//! A transmit slot attached to mbufs is in flight until the last of them is
//! freed (by the PMD once sent); the shim's free callback marks it and
//! [`Large::tx_take`] reclaims it.
#![allow(unsafe_code)]

use std::net::{SocketAddr, SocketAddrV4};

use dpdk_sys as sys;

use super::frag::Reassembler;
use super::net::{self, HDRS_LEN, IPV4_HDR_LEN, Local, Packet, TxChecksum, UDP_HDR_LEN};
use super::runtime::QueueParams;
use super::slots::{SLOT_FRAME_MAX, SLOT_FRAME_OFF, Slots};
use super::stats::QueueStats;
use super::transport::{DpdkTransport, TX_ARRAY_LEN};
use crate::pool::FreeList;
use crate::transport::TxPacket;

/// "No slot" in the per-index slot tables.
pub(super) const NO_SLOT: u32 = u32::MAX;
/// Most fragments of one answer: 65,535 bytes at the smallest MTU (576)
/// are 119.
const FRAGS_MAX: usize = 128;
/// IPv4 and UDP header bytes.
const IP_UDP_LEN: usize = IPV4_HDR_LEN + UDP_HDR_LEN;

const _: () = assert!(FRAGS_MAX < TX_ARRAY_LEN);

/// A worker's slots, reassembly, and the bookkeeping of transmit slots in flight.
pub(super) struct Large {
    rx: Option<Slots>,
    rx_free: FreeList,
    tx: Option<Slots>,
    tx_free: FreeList,
    /// Transmit slots attached to mbufs that may not have been freed yet.
    tx_in_flight: Box<[u32]>,
    tx_in_flight_len: usize,
    /// IPv4 reassembly; None when `rx_slots` is 0.
    pub(super) frag: Option<Reassembler>,
    /// Fragments of one answer.
    frags: Box<[*mut sys::rte_mbuf]>,
}

impl Large {
    pub(super) fn new(q: &QueueParams) -> Large {
        let count = |s: &Option<Slots>| s.as_ref().map_or(0, Slots::count);
        Large {
            rx: q.rx_slots,
            rx_free: FreeList::new(count(&q.rx_slots)),
            tx: q.tx_slots,
            tx_free: FreeList::new(count(&q.tx_slots)),
            tx_in_flight: vec![NO_SLOT; count(&q.tx_slots) as usize].into_boxed_slice(),
            tx_in_flight_len: 0,
            frag: q.frag.map(|h| Reassembler::new(h, q.frag_mbufs_max)),
            frags: vec![std::ptr::null_mut(); FRAGS_MAX].into_boxed_slice(),
        }
    }

    /// The frame of receive slot `i`.
    pub(super) fn rx_frame(&self, i: u32) -> *const u8 {
        self.rx.as_ref().map_or(std::ptr::null(), |s| s.frame(i))
    }

    pub(super) fn rx_release(&mut self, i: u32) {
        self.rx_free.free(i);
    }

    /// Copies `len` bytes at `off` of chain `m` into a free receive slot and
    /// frees the chain; None (chain freed, counted) when no slot is free.
    pub(super) fn rx_copy(
        &mut self,
        m: *mut sys::rte_mbuf,
        off: usize,
        len: usize,
        st: &mut QueueStats,
    ) -> Option<u32> {
        let slot = match (&self.rx, len <= SLOT_FRAME_MAX) {
            (Some(s), true) => self.rx_free.alloc().map(|i| (*s, i)),
            _ => None,
        };
        let copied = slot.map(|(s, i)| {
            // SAFETY: the slot's frame area holds SLOT_FRAME_MAX >= len
            // bytes; m is a live chain we own.
            unsafe { sys::sl_mbuf_copy_out(m, off as u32, len as u32, s.frame(i)) }
        });
        // SAFETY: our chain, done with; freed once (all segments).
        unsafe { sys::sl_pktmbuf_free(m) };
        match (slot, copied) {
            (Some((_, i)), Some(n)) if n as usize == len => {
                st.rx_copied_bytes += len as u64;
                Some(i)
            }
            (Some((_, i)), _) => {
                // The chain was shorter than its headers said.
                self.rx_free.free(i);
                st.drops[net::Drop::BadUdp as usize] += 1;
                None
            }
            (None, _) => {
                st.rx_no_slot += 1;
                None
            }
        }
    }

    /// A reassembled datagram: classified, copied into a slot, freed.
    /// Returns the slot, the frame's length and its sender.
    pub(super) fn rx_reassembled(
        &mut self,
        chain: *mut sys::rte_mbuf,
        local: &Local,
        st: &mut QueueStats,
    ) -> Option<(u32, usize, SocketAddrV4)> {
        let v = DpdkTransport::view(chain);
        // SAFETY: the first segment's data, ours until the chain is freed.
        let first = unsafe { std::slice::from_raw_parts(v.data, v.data_len as usize) };
        match net::classify_reassembled(first, v.pkt_len as usize, local) {
            Packet::Sluice {
                src,
                off,
                datagram_len,
                ..
            } => self
                .rx_copy(chain, off, datagram_len, st)
                .map(|i| (i, datagram_len, src)),
            Packet::Drop(r) => {
                st.drops[r as usize] += 1;
                // SAFETY: our chain; freed once.
                unsafe { sys::sl_pktmbuf_free(chain) };
                None
            }
            _ => {
                st.drops[net::Drop::BadIpv4 as usize] += 1;
                // SAFETY: as above.
                unsafe { sys::sl_pktmbuf_free(chain) };
                None
            }
        }
    }

    /// A free transmit slot, reclaiming those the PMD has let go of.
    pub(super) fn tx_take(&mut self) -> Option<u32> {
        self.tx.as_ref()?;
        if let Some(i) = self.tx_free.alloc() {
            return Some(i);
        }
        self.tx_reclaim();
        self.tx_free.alloc()
    }

    fn tx_reclaim(&mut self) {
        let Some(s) = self.tx else { return };
        let mut k = 0;
        while k < self.tx_in_flight_len {
            let i = self.tx_in_flight[k];
            if s.take_released(i) {
                self.tx_in_flight_len -= 1;
                self.tx_in_flight[k] = self.tx_in_flight[self.tx_in_flight_len];
                self.tx_free.free(i);
            } else {
                k += 1;
            }
        }
    }

    /// The frame of transmit slot `i`.
    pub(super) fn tx_frame(&self, i: u32) -> *mut u8 {
        self.tx
            .as_ref()
            .map_or(std::ptr::null_mut(), |s| s.frame(i))
    }

    /// A transmit slot that was never attached to an mbuf.
    pub(super) fn tx_give_back(&mut self, i: u32) {
        self.tx_free.free(i);
    }

    /// A transmit slot now attached to mbufs: back once they are all freed.
    fn tx_in_flight(&mut self, i: u32) {
        assert!(
            self.tx_in_flight_len < self.tx_in_flight.len(),
            "more transmit slots in flight than slots"
        );
        self.tx_in_flight[self.tx_in_flight_len] = i;
        self.tx_in_flight_len += 1;
    }
}

impl DpdkTransport {
    /// Sends the answer in transmit slot `i` (TX index `t`, mbuf `m`); every
    /// path ends in sends or frees of `m` and the slot, counted.
    pub(super) fn send_large(&mut self, t: usize, m: *mut sys::rte_mbuf, i: u32, p: &TxPacket) {
        let len = p.len as usize;
        let dst_mac = match p.peer {
            SocketAddr::V4(a) => self.neigh.lookup(*a.ip()).map(|mac| (a, mac)),
            SocketAddr::V6(_) => None,
        };
        let (Some(slots), Some((dst, mac))) = (self.large.tx, dst_mac) else {
            if p.peer.is_ipv4() {
                self.stats.tx_no_neighbour += 1;
            } else {
                self.stats.tx_invalid += 1;
            }
            self.drop_large(m, i);
            return;
        };
        if len > SLOT_FRAME_MAX {
            self.stats.tx_invalid += 1;
            self.drop_large(m, i);
            return;
        }
        // Headers in front of the frame, in the slot: software checksums
        // (fragments cannot have the UDP one offloaded).
        // SAFETY: the slot spans SLOT_FRAME_OFF >= HDRS_LEN bytes before the
        // frame and SLOT_FRAME_MAX >= len after it; ours until sent.
        let pkt =
            unsafe { std::slice::from_raw_parts_mut(slots.frame(i).sub(HDRS_LEN), HDRS_LEN + len) };
        self.ip_id = self.ip_id.wrapping_add(1);
        let local = self.q.local;
        if net::build_udp(pkt, len, &local, mac, dst, self.ip_id, TxChecksum::Software).is_err() {
            self.stats.tx_invalid += 1;
            self.drop_large(m, i);
            return;
        }
        if len <= self.q.tx_frame_max {
            // It fits one mbuf after all: one small copy.
            // SAFETY: the mbuf's packet area holds HDRS_LEN + tx_frame_max bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    pkt.as_ptr(),
                    self.tx_frame[t].sub(HDRS_LEN),
                    pkt.len(),
                );
                sys::sl_mbuf_set_data(m, self.tx_data_off[t], pkt.len() as u16);
            }
            self.stats.tx_copied_bytes += len as u64;
            self.large.tx_give_back(i);
            self.push_tx(m);
        } else if IP_UDP_LEN + len <= self.q.mtu as usize && self.q.chains {
            self.send_chain(t, m, i, slots, len);
        } else {
            net::allow_fragments(pkt);
            self.send_fragments(m, i, slots, len);
        }
    }

    fn drop_large(&mut self, m: *mut sys::rte_mbuf, i: u32) {
        self.counters.tx_errors += 1;
        // SAFETY: not sent, not attached to the slot; freed once.
        unsafe { sys::sl_pktmbuf_free(m) };
        self.large.tx_give_back(i);
    }

    /// Headers in the reply's mbuf, the frame in a second mbuf whose
    /// external buffer is the slot: no copy of the frame.
    fn send_chain(&mut self, t: usize, m: *mut sys::rte_mbuf, i: u32, slots: Slots, len: usize) {
        // SAFETY: live pool.
        let e = unsafe { sys::sl_pktmbuf_alloc(self.q.pool) };
        if e.is_null() {
            self.stats.tx_no_mbuf += 1;
            self.drop_large(m, i);
            return;
        }
        // SAFETY: the header bytes sit HDRS_LEN before the frame in the
        // slot; the mbuf's packet area holds HDRS_LEN bytes at the same
        // place as a small reply's; e is fresh and the slot not attached.
        let attached = unsafe {
            std::ptr::copy_nonoverlapping(
                slots.frame(i).sub(HDRS_LEN),
                self.tx_frame[t].sub(HDRS_LEN),
                HDRS_LEN,
            );
            sys::sl_mbuf_set_data(m, self.tx_data_off[t], HDRS_LEN as u16);
            slots.attach(i, e, SLOT_FRAME_OFF, len)
        };
        if !attached {
            self.stats.tx_invalid += 1;
            // SAFETY: a direct mbuf, never sent; freed once.
            unsafe { sys::sl_pktmbuf_free(e) };
            self.drop_large(m, i);
            return;
        }
        self.large.tx_in_flight(i);
        // SAFETY: m (one segment) and e are ours.
        if unsafe { sys::sl_mbuf_chain(m, e) } != 0 {
            self.stats.tx_invalid += 1;
            self.counters.tx_errors += 1;
            // SAFETY: not sent; each freed once (freeing e releases the slot).
            unsafe {
                sys::sl_pktmbuf_free(m);
                sys::sl_pktmbuf_free(e);
            }
            return;
        }
        self.stats.tx_chained += 1;
        self.push_tx(m);
    }

    /// The datagram in slot `i` (IPv4 header onward) as IPv4 fragments.
    fn send_fragments(&mut self, m: *mut sys::rte_mbuf, i: u32, slots: Slots, len: usize) {
        // m becomes the datagram itself: an mbuf over the slot.
        // SAFETY: m is the reply's fresh mbuf (never attached), the slot is
        // not attached; the range lies in the slot.
        if !unsafe { slots.attach(i, m, SLOT_FRAME_OFF - IP_UDP_LEN, IP_UDP_LEN + len) } {
            self.stats.tx_invalid += 1;
            self.drop_large(m, i);
            return;
        }
        self.large.tx_in_flight(i);
        if self.tx_out_len + FRAGS_MAX > TX_ARRAY_LEN {
            self.flush_tx();
        }
        let (zero_copy, mtu) = (self.q.chains, self.q.tx_frag_mtu);
        let out = self.large.frags.as_mut_ptr();
        // SAFETY: m holds a whole IPv4 datagram without DF; out has
        // FRAGS_MAX places; fragments come from our pool (zero copy:
        // indirect mbufs referring to m's external buffer, the slot).
        let n = unsafe {
            if zero_copy {
                sys::sl_ipv4_fragment(m, out, FRAGS_MAX as u16, mtu, self.q.pool, self.q.pool)
            } else {
                sys::sl_ipv4_fragment_copy(m, out, FRAGS_MAX as u16, mtu, self.q.pool)
            }
        };
        // The Ethernet header of every fragment, from the slot: read before
        // m lets go of the slot.
        let mut eth = [0u8; net::ETH_HDR_LEN];
        // SAFETY: the slot holds the headers built for this answer.
        unsafe {
            std::ptr::copy_nonoverlapping(slots.frame(i).sub(HDRS_LEN), eth.as_mut_ptr(), eth.len())
        };
        // SAFETY: our reference to the datagram; fragments keep their own.
        unsafe { sys::sl_pktmbuf_free(m) };
        if n <= 0 {
            if n == -libc::ENOMEM {
                self.stats.tx_no_mbuf += 1;
            } else {
                self.stats.tx_invalid += 1;
            }
            self.counters.tx_errors += 1;
            return;
        }
        for k in 0..n as usize {
            let f = self.large.frags[k];
            // SAFETY: a fragment the library made for us; prepend needs its
            // headroom (fresh mbuf: 128 bytes).
            if unsafe { sys::sl_frag_finish(f, eth.as_ptr()) } != 0 {
                self.stats.tx_invalid += 1;
                // SAFETY: ours, not sent; freed once.
                unsafe { sys::sl_pktmbuf_free(f) };
                continue;
            }
            self.push_tx(f);
        }
        self.stats.tx_fragmented += 1;
        self.stats.tx_fragments += n as u64;
        if !zero_copy {
            self.stats.tx_copied_bytes += len as u64;
        }
    }
}
