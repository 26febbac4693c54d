//! DPDK counters: per-queue counters each worker publishes every burst,
//! and the port's own counters from the PMD.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use dpdk_sys as sys;

use super::net::Drop as Garbage;
use super::runtime::{EAL, EalState};
use crate::config::limits::WORKER_COUNT_MAX;

/// Declares [`QueueStats`] (plain counters a worker keeps), its atomic
/// mirror and the per-field sum, from one list of fields.
macro_rules! queue_stats {
    ($($(#[doc = $doc:expr])* $name:ident,)*) => {
        /// Per-queue counters of one worker, published every burst.
        #[derive(Debug, Clone, Copy, Default)]
        pub struct QueueStats {
            $($(#[doc = $doc])* pub $name: u64,)*
            /// Garbage dropped, by [`net::Drop`](super::net::Drop) reason.
            pub drops: [u64; Garbage::COUNT],
        }

        const FIELDS: usize = [$(stringify!($name),)*].len();

        impl QueueStats {
            fn values(&self) -> [u64; FIELDS] {
                [$(self.$name,)*]
            }

            fn from_values(v: &[u64; FIELDS], drops: [u64; Garbage::COUNT]) -> QueueStats {
                let mut i = 0;
                $(let $name = v[i]; i += 1;)*
                debug_assert_eq!(i, FIELDS);
                QueueStats { $($name,)* drops }
            }

            /// Adds another queue's counters (gauges add up too).
            pub fn add(&mut self, o: &QueueStats) {
                $(self.$name += o.$name;)*
                for (a, b) in self.drops.iter_mut().zip(o.drops) {
                    *a += b;
                }
            }

            /// Every counter by name, for the stop log line.
            pub fn named(&self) -> [(&'static str, u64); FIELDS] {
                [$((stringify!($name), self.$name),)*]
            }
        }
    };
}

queue_stats! {
    /// Packets taken from the RX queue.
    rx_packets,
    /// Sluice frames handed to the worker.
    rx_sluice,
    /// Of those, only the first part of a larger datagram (answered
    /// frame_too_large): reassembly off, or no slot was free.
    rx_truncated,
    /// Frames moved in their mbuf to a 64-byte boundary.
    rx_realigned,
    /// Frames received in several mbufs (jumbo frames with scattered RX)
    /// and copied once into a slot.
    rx_multi_seg,
    /// IPv4 fragments handed to librte_ip_frag.
    rx_fragments,
    /// Datagrams librte_ip_frag reassembled (then copied once into a slot).
    rx_reassembled,
    /// Payload bytes copied into slots (multi-segment and reassembled frames).
    rx_copied_bytes,
    /// Large frames dropped because no slot was free.
    rx_no_slot,
    /// Fragments freed by librte_ip_frag because their datagram could not
    /// be reassembled: overlapping (teardrop), duplicate, holes, more than
    /// its fragment limit.
    frag_invalid,
    /// Fragments refused because the table had no room (entries or
    /// `frag_mbufs_max`).
    frag_table_full,
    /// Fragments freed because their datagram did not complete within
    /// `frag_timeout_ms`.
    frag_expired,
    /// Mbufs held in the reassembly table now (a gauge).
    frag_held,
    /// ARP requests answered.
    arp_replies,
    /// ARP packets learned from.
    arp_learned,
    /// Packets sent.
    tx_packets,
    /// Replies larger than one mbuf sent as one chain (headers + slot).
    tx_chained,
    /// Replies larger than the MTU sent as IPv4 fragments.
    tx_fragmented,
    /// Fragments sent for them.
    tx_fragments,
    /// Reply bytes copied on transmit: fragments made by copy (ports
    /// without multi-segment transmit) and small replies in a slot.
    tx_copied_bytes,
    /// Replies dropped: no MAC known for the peer.
    tx_no_neighbour,
    /// Replies dropped: TX ring full after retries.
    tx_ring_full,
    /// Replies dropped: no mbuf for fragments or chains.
    tx_no_mbuf,
    /// Replies dropped for other reasons (IPv6 peer, oversize).
    tx_invalid,
}

impl QueueStats {
    /// All garbage dropped.
    pub fn dropped(&self) -> u64 {
        self.drops.iter().sum()
    }
}

pub(super) struct AtomicQueueStats {
    v: [AtomicU64; FIELDS + Garbage::COUNT],
}

impl AtomicQueueStats {
    const fn new() -> Self {
        AtomicQueueStats {
            v: [const { AtomicU64::new(0) }; FIELDS + Garbage::COUNT],
        }
    }

    pub(super) fn store(&self, s: &QueueStats) {
        let vals = s.values();
        for (a, v) in self.v.iter().zip(vals.iter().chain(s.drops.iter())) {
            a.store(*v, Ordering::Relaxed);
        }
    }

    pub(super) fn load(&self) -> QueueStats {
        let l = |i: usize| self.v[i].load(Ordering::Relaxed);
        let mut vals = [0; FIELDS];
        for (i, v) in vals.iter_mut().enumerate() {
            *v = l(i);
        }
        let mut drops = [0; Garbage::COUNT];
        for (i, d) in drops.iter_mut().enumerate() {
            *d = l(FIELDS + i);
        }
        QueueStats::from_values(&vals, drops)
    }
}

pub(super) static QUEUE_STATS: [AtomicQueueStats; WORKER_COUNT_MAX] =
    [const { AtomicQueueStats::new() }; WORKER_COUNT_MAX];

/// Port counters from the PMD.
#[derive(Debug, Clone, Copy, Default)]
pub struct PortStats {
    /// Packets received.
    pub ipackets: u64,
    /// Packets sent.
    pub opackets: u64,
    /// Packets the NIC dropped: RX queue full.
    pub imissed: u64,
    /// Erroneous packets received.
    pub ierrors: u64,
    /// Failed sends.
    pub oerrors: u64,
    /// RX mbuf allocation failures.
    pub rx_nombuf: u64,
}

/// Everything the DPDK transport counts.
#[derive(Debug, Clone, Default)]
pub struct DpdkStats {
    /// Per worker queue.
    pub queues: Vec<QueueStats>,
    /// The port, while running.
    pub port: Option<PortStats>,
    /// Mbufs out of the pools right now (worker slots, PMD rings, caches
    /// excluded), while running.
    pub pool_in_use: Option<u64>,
}

impl DpdkStats {
    /// Sum over queues.
    pub fn total(&self) -> QueueStats {
        let mut t = QueueStats::default();
        for q in &self.queues {
            t.add(q);
        }
        t
    }
}

pub(super) static QUEUES_USED: AtomicU64 = AtomicU64::new(0);

/// Counters of the current (or last) DPDK run in this process.
pub fn stats() -> DpdkStats {
    let n = QUEUES_USED.load(Ordering::Relaxed) as usize;
    let queues = QUEUE_STATS[..n.min(WORKER_COUNT_MAX)]
        .iter()
        .map(AtomicQueueStats::load)
        .collect();
    let g = EAL.lock().unwrap_or_else(|p| p.into_inner());
    let port = match (g.state, g.port) {
        (EalState::Running, Some(p)) => {
            let mut s = sys::rte_eth_stats::default();
            // SAFETY: the port is started (EAL lock held, so it cannot be
            // closed meanwhile); `s` is a valid out-parameter.
            let r = unsafe { sys::rte_eth_stats_get(p, &mut s) };
            (r == 0).then_some(PortStats {
                ipackets: s.ipackets,
                opackets: s.opackets,
                imissed: s.imissed,
                ierrors: s.ierrors,
                oerrors: s.oerrors,
                rx_nombuf: s.rx_nombuf,
            })
        }
        _ => None,
    };
    let pool_in_use = port.map(|_| {
        g.pools
            .iter()
            // SAFETY: pools listed here are alive until the runtime's Drop
            // removes them under this lock.
            .map(|&p| unsafe { sys::rte_mempool_in_use_count(p as *const sys::rte_mempool) } as u64)
            .sum()
    });
    DpdkStats {
        queues,
        port,
        pool_in_use,
    }
}
