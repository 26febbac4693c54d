//! Benchmarks and load generation for Sluice.
//!
//! - [`driver`]: closed- and open-loop load with coordinated-omission-correct
//!   HDR latency.
//! - [`mix`]: weighted request mixes from `perf/mixes/*.toml`.
//! - [`streammix`]: token streams on an open-loop schedule mixed with
//!   plain requests (TTFT, ITL, tokens/s; coordinated-omission corrected).
//! - [`transport`]: Sluice requests through `sluice-client`, or raw
//!   datagrams of the same size to an echo server (the floor).
//! - [`uring`]: the io_uring UDP echo server and a plain std echo for
//!   comparison; [`uring_tcp`]: the io_uring TCP echo (the floor of the
//!   engine's TCP transport); [`mmsg`]: Sluice requests over UDP with
//!   batched system calls (`sendmmsg`/`recvmmsg`). The only `unsafe` in
//!   the crate.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod driver;
pub mod mix;
pub mod mmsg;
pub mod streammix;
pub mod transport;
pub mod uring;
pub mod uring_tcp;

use std::net::{IpAddr, SocketAddr};

/// Whether the load generator may send to `addr` without an explicit
/// `--allow-remote`: loopback only.
pub fn is_loopback(addr: &SocketAddr) -> bool {
    match addr.ip() {
        IpAddr::V4(ip) => ip.is_loopback(),
        IpAddr::V6(ip) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Nanoseconds this process's threads have run on a CPU so far (the sum of
/// `/proc/self/task/*/schedstat`); `None` where the kernel does not say.
/// The load generator reports its own CPU time per request with it: a cost
/// that a loaded host's scheduling hardly moves.
pub fn self_cpu_ns() -> Option<u64> {
    let mut total = 0u64;
    for t in std::fs::read_dir("/proc/self/task").ok()? {
        let p = t.ok()?.path().join("schedstat");
        let s = std::fs::read_to_string(p).ok()?;
        total += s.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}
