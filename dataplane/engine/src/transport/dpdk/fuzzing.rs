//! The fragment path of the DPDK transport, driven from bytes, for the
//! cargo-fuzz target `frag_reassembly` (fuzz/): the real classifier
//! (`net::classify`), the real librte_ip_frag table and death row (the
//! worker's `Reassembler`), the real slot copy of a reassembled datagram
//! (`Large::rx_reassembled`), on mbufs of a real mempool, in an EAL started
//! with `--no-huge --no-shconf` (no hugepages, nothing left on disk).
//!
//! After every input it checks: every mbuf is back in the pool (none
//! leaked, none freed twice: the pool would count more than it has), the
//! table holds nothing, and every datagram that was reassembled carries
//! exactly the bytes its fragments carried. Not covered: the PMDs (no port
//! is started), transmit fragmentation, and wall-clock timing (the fuzzer
//! drives a virtual TSC).
#![allow(unsafe_code)]

use std::ffi::CString;
use std::net::Ipv4Addr;
use std::sync::Mutex;

use dpdk_sys as sys;

use super::DpdkCfg;
use super::frag::{self, Fed, FragTable};
use super::large::Large;
use super::net::{self, ETH_HDR_LEN, IPV4_HDR_LEN, Local, Packet, UDP_HDR_LEN};
use super::runtime::{self, QueueParams};
use super::slots::SlotRegion;
use super::stats::QueueStats;

const POOL_MBUFS: u32 = 4095;
const MBUF_DATA_BYTES: u16 = 2048;
const UDP_PORT: u16 = 7070;
const APP_MAC: net::Mac = [0x02, 0, 0, 0, 0, 1];
const PEER_MAC: net::Mac = [0x02, 0, 0, 0, 0, 2];
const TIMEOUT_MS: u32 = 100;

/// The EAL, pool, slots and reassembly the fuzz target drives.
pub struct FragHarness {
    // Drop order: the reassembly's table before the pool; never dropped in
    // practice (the harness lives for the fuzzing process).
    large: Large,
    _table: FragTable,
    _slots: SlotRegion,
    pool: *mut sys::rte_mempool,
    local: Local,
    hz: u64,
    now: u64,
    stats: QueueStats,
}

// SAFETY: used behind a mutex, one thread at a time; DPDK objects are
// usable from any thread.
unsafe impl Send for FragHarness {}

static HARNESS: Mutex<Option<FragHarness>> = Mutex::new(None);

/// Runs one fuzz input; panics when an invariant breaks. Returns the
/// counters of this input alone.
pub fn run(input: &[u8]) -> QueueStats {
    let mut g = HARNESS.lock().unwrap_or_else(|p| p.into_inner());
    let h = g.get_or_insert_with(FragHarness::new);
    h.stats = QueueStats::default();
    h.run(input);
    h.stats
}

/// What the fuzzer's fragment ops put at byte `p` of datagram `key`.
fn pattern(key: u8, p: usize) -> u8 {
    (p as u8).wrapping_mul(31) ^ key.wrapping_mul(0x5b)
}

impl FragHarness {
    #[allow(clippy::expect_used)]
    fn new() -> FragHarness {
        let d = DpdkCfg {
            hugepages: false,
            memory_mb: 128,
            file_prefix: format!("sl-fuzz-{}", std::process::id()),
            log_level: "error".into(),
            ..DpdkCfg::default()
        };
        runtime::eal_init_argv(d.eal_argv()).expect("EAL starts (--no-huge)");
        // --no-shconf: EAL's runtime directory stays empty; leave nothing.
        let _ = std::fs::remove_dir(format!("/var/run/dpdk/{}", d.file_prefix));
        let name = CString::new("sl_fuzz_pool").expect("name");
        // SAFETY: EAL is up; the name is copied.
        let pool = unsafe {
            sys::rte_pktmbuf_pool_create(
                name.as_ptr(),
                POOL_MBUFS,
                0,
                0,
                (sys::RTE_PKTMBUF_HEADROOM as u16) + MBUF_DATA_BYTES,
                sys::SOCKET_ID_ANY,
            )
        };
        assert!(!pool.is_null(), "mbuf pool");
        let slots = SlotRegion::create("sl_fuzz_slots", 4, sys::SOCKET_ID_ANY)
            .expect("slots")
            .expect("4 slots");
        let table = FragTable::create(64, TIMEOUT_MS, sys::SOCKET_ID_ANY).expect("fragment table");
        let local = Local {
            mac: APP_MAC,
            ip: Ipv4Addr::new(10, 99, 0, 1),
            udp_port: UDP_PORT,
        };
        let q = QueueParams {
            port: 0,
            queue: 0,
            pool,
            local,
            tx_mode: net::TxChecksum::Software,
            tx_frame_max: 1400,
            neighbours_max: 8,
            rx_realign: true,
            idle_sleep: std::time::Duration::ZERO,
            hugepages: false,
            mtu: 1500,
            chains: false,
            tx_frag_mtu: 1500,
            rx_slots: Some(slots.handle()),
            tx_slots: None,
            frag: Some(table.handle()),
            frag_mbufs_max: 1024,
        };
        // SAFETY: EAL is up.
        let hz = unsafe { sys::sl_tsc_hz() };
        FragHarness {
            large: Large::new(&q),
            _table: table,
            _slots: slots,
            pool,
            local,
            hz,
            now: frag::now_tsc(),
            stats: QueueStats::default(),
        }
    }

    fn in_use(&self) -> u32 {
        // SAFETY: live pool.
        unsafe { sys::rte_mempool_in_use_count(self.pool) as u32 }
    }

    fn run(&mut self, input: &[u8]) {
        // Bursts of 1 to 32 ops, as the worker's receive bursts: the death
        // row is freed at the end of each.
        let burst = input.first().map_or(1, |b| (b % 32) as usize + 1);
        let mut ops = input.get(1..).unwrap_or_default();
        let mut in_burst = 0;
        while ops.len() >= 8 {
            in_burst += 1;
            if in_burst == burst {
                in_burst = 0;
                if let Some(r) = self.large.frag.as_mut() {
                    r.flush();
                }
            }
            let (op, rest) = ops.split_at(8);
            ops = rest;
            match op[0] {
                0..=199 => {
                    let pkt = fragment(op);
                    self.receive(&pkt, op[7]);
                }
                200..=239 => {
                    // Time passes: op[1] ms.
                    self.now += self.hz / 1000 * op[1] as u64;
                    if let Some(r) = self.large.frag.as_mut() {
                        r.expire(self.now, &mut self.stats);
                    }
                }
                _ => {
                    // A packet of the fuzzer's own bytes, with a valid IPv4
                    // header checksum so it gets past the first check.
                    let n = (op[1] as usize).min(ops.len());
                    let (raw, rest) = ops.split_at(n);
                    ops = rest;
                    let mut pkt = raw.to_vec();
                    if op[3] & 1 != 0 && pkt.len() >= ETH_HDR_LEN {
                        // Addressed to us: the fuzzer works on the IPv4 part.
                        pkt[0..6].copy_from_slice(&APP_MAC);
                        pkt[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
                    }
                    fix_ipv4_checksum(&mut pkt);
                    self.receive(&pkt, op[2]);
                }
            }
        }
        if let Some(r) = self.large.frag.as_mut() {
            r.clear(&mut self.stats);
            assert_eq!(r.held(), 0, "the table still holds mbufs");
        }
        assert_eq!(
            self.in_use(),
            0,
            "mbufs not back in the pool: {:?}",
            self.stats
        );
    }

    /// `pkt` in an mbuf (chained after `split * 8` bytes when non-zero), as
    /// the transport's receive path handles it.
    fn receive(&mut self, pkt: &[u8], split: u8) {
        let Some(m) = self.mbuf(pkt, split as usize * 8) else {
            return;
        };
        let v = super::transport::DpdkTransport::view(m);
        // SAFETY: the first segment's bytes, ours until freed.
        let first = unsafe { std::slice::from_raw_parts(v.data, v.data_len as usize) };
        let Packet::Fragment { ihl, .. } = net::classify(first, &self.local) else {
            // SAFETY: ours; freed once.
            unsafe { sys::sl_pktmbuf_free(m) };
            return;
        };
        let Some(r) = self.large.frag.as_mut() else {
            // SAFETY: as above.
            unsafe { sys::sl_pktmbuf_free(m) };
            return;
        };
        let Fed::Complete(chain) = r.feed(m, ihl, self.now, &mut self.stats) else {
            return;
        };
        // Which datagram: the sender and IPv4 id of its first fragment.
        let v = super::transport::DpdkTransport::view(chain);
        // SAFETY: the chain's first segment holds the Ethernet and IPv4
        // headers of the first fragment (classified on arrival).
        let hdr = unsafe { std::slice::from_raw_parts(v.data, ETH_HDR_LEN + IPV4_HDR_LEN) };
        let ip = &hdr[ETH_HDR_LEN..];
        let key = datagram_key(ip[15], u16::from_be_bytes([ip[4], ip[5]]));
        if let Some((slot, len, _)) = self
            .large
            .rx_reassembled(chain, &self.local, &mut self.stats)
        {
            // SAFETY: the slot holds `len` copied bytes until released.
            let got = unsafe { std::slice::from_raw_parts(self.large.rx_frame(slot), len) };
            check_datagram(got, key);
            self.large.rx_release(slot);
        }
    }

    /// An mbuf (two segments when `split` falls inside) holding `pkt`.
    fn mbuf(&self, pkt: &[u8], split: usize) -> Option<*mut sys::rte_mbuf> {
        let room = MBUF_DATA_BYTES as usize;
        let cut = if split == 0 || split >= pkt.len() {
            pkt.len()
        } else {
            split
        };
        if pkt.is_empty() || cut > room || pkt.len() - cut > room {
            return None;
        }
        let mut head: *mut sys::rte_mbuf = std::ptr::null_mut();
        for part in [&pkt[..cut], &pkt[cut..]] {
            if part.is_empty() {
                continue;
            }
            // SAFETY: live pool.
            let m = unsafe { sys::sl_pktmbuf_alloc(self.pool) };
            assert!(!m.is_null(), "pool exhausted: mbufs leaked");
            let v = super::transport::DpdkTransport::view(m);
            // SAFETY: a fresh mbuf: its data room after the headroom holds
            // `room` >= part.len() bytes.
            unsafe {
                let at = sys::sl_mbuf_set_data(m, v.data_off, part.len() as u16);
                std::ptr::copy_nonoverlapping(part.as_ptr(), at, part.len());
            }
            if head.is_null() {
                head = m;
            } else {
                // SAFETY: both ours.
                let r = unsafe { sys::sl_mbuf_chain(head, m) };
                assert_eq!(r, 0, "chain of two");
            }
        }
        Some(head)
    }
}

/// The key of the fuzzer's datagrams: sender (its last address byte) and id.
fn datagram_key(src_last: u8, id: u16) -> u8 {
    src_last.wrapping_mul(4).wrapping_add(id as u8)
}

/// A reassembled datagram carries the UDP header and magic of its first
/// fragment, then the pattern: anything else means bytes were lost, moved
/// or taken from another datagram.
fn check_datagram(got: &[u8], key: u8) {
    // `got` is the UDP payload: the Sluice magic, then the pattern.
    assert!(
        got.starts_with(&sluice_wire::MAGIC),
        "reassembled datagram lost its start"
    );
    for (i, &b) in got.iter().enumerate().skip(sluice_wire::MAGIC.len()) {
        let p = i + UDP_HDR_LEN;
        assert_eq!(b, pattern(key, p), "byte {p} of a reassembled datagram");
    }
}

/// An IPv4 fragment from one of four senders, described by an 8-byte op:
/// [_, sender and id, offset or UDP length (2), payload length (2), flags, split].
fn fragment(op: &[u8]) -> Vec<u8> {
    let src_last = 2 + (op[1] & 3);
    let id = (op[1] >> 2) as u16 & 3;
    let word = u16::from_be_bytes([op[2], op[3]]);
    let payload_len = u16::from_be_bytes([op[4], op[5]]) as usize % 1481;
    let more = op[6] & 1 != 0;
    let first = op[6] & 2 != 0;
    let offset = if first {
        0
    } else {
        (word & 0x1fff) as usize * 8
    };
    let key = datagram_key(src_last, id);
    let mut payload: Vec<u8> = (0..payload_len).map(|i| pattern(key, offset + i)).collect();
    if first && payload_len >= UDP_HDR_LEN + 4 {
        payload[0..2].copy_from_slice(&40000u16.to_be_bytes());
        payload[2..4].copy_from_slice(&UDP_PORT.to_be_bytes());
        // The UDP length the first fragment claims.
        payload[4..6].copy_from_slice(&word.to_be_bytes());
        payload[6..8].fill(0);
        payload[8..12].copy_from_slice(&sluice_wire::MAGIC);
    }
    let mut pkt = vec![0u8; ETH_HDR_LEN + IPV4_HDR_LEN];
    pkt[0..6].copy_from_slice(&APP_MAC);
    pkt[6..12].copy_from_slice(&PEER_MAC);
    pkt[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut pkt[ETH_HDR_LEN..];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((IPV4_HDR_LEN + payload_len) as u16).to_be_bytes());
    ip[4..6].copy_from_slice(&id.to_be_bytes());
    let flags = (offset / 8) as u16 | if more { 0x2000 } else { 0 };
    ip[6..8].copy_from_slice(&flags.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[10, 99, 0, src_last]);
    ip[16..20].copy_from_slice(&[10, 99, 0, 1]);
    pkt.extend_from_slice(&payload);
    fix_ipv4_checksum(&mut pkt);
    pkt
}

fn fix_ipv4_checksum(pkt: &mut [u8]) {
    if pkt.len() < ETH_HDR_LEN + IPV4_HDR_LEN {
        return;
    }
    let ihl = ((pkt[ETH_HDR_LEN] & 0x0f) as usize * 4).max(IPV4_HDR_LEN);
    if pkt.len() < ETH_HDR_LEN + ihl {
        return;
    }
    pkt[ETH_HDR_LEN + 10..ETH_HDR_LEN + 12].fill(0);
    let c = net::checksum(0, &pkt[ETH_HDR_LEN..ETH_HDR_LEN + ihl]);
    pkt[ETH_HDR_LEN + 10..ETH_HDR_LEN + 12].copy_from_slice(&c.to_be_bytes());
}

#[cfg(test)]
mod tests {
    /// The checked-in seeds do what their names say, through the real
    /// library, and every mbuf comes back (asserted inside `run`).
    #[test]
    fn seeds_reassemble_reject_and_expire() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/corpus/frag_reassembly");
        let seed = |name: &str| super::run(&std::fs::read(dir.join(name)).unwrap());
        for name in ["seed-in-order", "seed-reordered", "seed-split-segments"] {
            let s = seed(name);
            assert_eq!((s.rx_fragments, s.rx_reassembled), (3, 1), "{name}: {s:?}");
            assert_eq!(s.rx_copied_bytes, 3052, "{name}: {s:?}");
        }
        let s = seed("seed-overlap");
        assert_eq!((s.rx_reassembled, s.frag_invalid), (0, 3), "{s:?}");
        let s = seed("seed-timeout");
        assert_eq!(s.rx_reassembled, 0, "{s:?}");
        assert_eq!(
            s.frag_expired, 3,
            "first at the timeout, the rest at the end: {s:?}"
        );
    }
}
