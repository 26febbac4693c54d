//! DPDK counters: per-queue counters each worker publishes every burst,
//! and the port's own counters from the PMD.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use dpdk_sys as sys;

use super::net::Drop as Garbage;
use super::runtime::{EAL, EalState};
use crate::config::limits::WORKER_COUNT_MAX;

/// Per-queue counters of one worker, published every burst.
#[derive(Debug, Clone, Copy, Default)]
pub struct QueueStats {
    /// Packets taken from the RX queue.
    pub rx_packets: u64,
    /// Sluice frames handed to the worker.
    pub rx_sluice: u64,
    /// Of those, first parts of larger datagrams (answered frame_too_large).
    pub rx_truncated: u64,
    /// Frames moved in their mbuf to a 64-byte boundary.
    pub rx_realigned: u64,
    /// Garbage dropped, by [`net::Drop`] reason.
    pub drops: [u64; Garbage::COUNT],
    /// ARP requests answered.
    pub arp_replies: u64,
    /// ARP packets learned from.
    pub arp_learned: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Replies dropped: no MAC known for the peer.
    pub tx_no_neighbour: u64,
    /// Replies dropped: TX ring full after retries.
    pub tx_ring_full: u64,
    /// Replies dropped for other reasons (IPv6 peer, oversize).
    pub tx_invalid: u64,
}

impl QueueStats {
    /// All garbage dropped.
    pub fn dropped(&self) -> u64 {
        self.drops.iter().sum()
    }
}

pub(super) struct AtomicQueueStats {
    v: [AtomicU64; 10 + Garbage::COUNT],
}

impl AtomicQueueStats {
    const fn new() -> Self {
        AtomicQueueStats {
            v: [const { AtomicU64::new(0) }; 10 + Garbage::COUNT],
        }
    }

    pub(super) fn store(&self, s: &QueueStats) {
        let vals = [
            s.rx_packets,
            s.rx_sluice,
            s.rx_truncated,
            s.rx_realigned,
            s.arp_replies,
            s.arp_learned,
            s.tx_packets,
            s.tx_no_neighbour,
            s.tx_ring_full,
            s.tx_invalid,
        ];
        for (a, v) in self.v.iter().zip(vals.iter().chain(s.drops.iter())) {
            a.store(*v, Ordering::Relaxed);
        }
    }

    pub(super) fn load(&self) -> QueueStats {
        let l = |i: usize| self.v[i].load(Ordering::Relaxed);
        let mut drops = [0; Garbage::COUNT];
        for (i, d) in drops.iter_mut().enumerate() {
            *d = l(10 + i);
        }
        QueueStats {
            rx_packets: l(0),
            rx_sluice: l(1),
            rx_truncated: l(2),
            rx_realigned: l(3),
            arp_replies: l(4),
            arp_learned: l(5),
            tx_packets: l(6),
            tx_no_neighbour: l(7),
            tx_ring_full: l(8),
            tx_invalid: l(9),
            drops,
        }
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
            t.rx_packets += q.rx_packets;
            t.rx_sluice += q.rx_sluice;
            t.rx_truncated += q.rx_truncated;
            t.rx_realigned += q.rx_realigned;
            t.arp_replies += q.arp_replies;
            t.arp_learned += q.arp_learned;
            t.tx_packets += q.tx_packets;
            t.tx_no_neighbour += q.tx_no_neighbour;
            t.tx_ring_full += q.tx_ring_full;
            t.tx_invalid += q.tx_invalid;
            for (a, b) in t.drops.iter_mut().zip(q.drops) {
                *a += b;
            }
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
