//! The DPDK fragment path on arbitrary sequences of IPv4 fragments and raw
//! packets: the transport's classifier, DPDK's librte_ip_frag (fragment
//! table, death row, timeouts on a virtual clock) and the copy of a
//! reassembled datagram into a slot, on real mbufs in an EAL without
//! hugepages. After each input every mbuf must be back in its pool, the
//! table empty, and every reassembled datagram byte-exact
//! (`sluice_engine::transport::dpdk::fuzzing`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sluice_engine::transport::dpdk::fuzzing::run(data);
});
