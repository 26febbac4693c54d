//! Benchmarks and load generation for Sluice.
//!
//! - [`driver`]: closed- and open-loop load with coordinated-omission-correct
//!   HDR latency.
//! - [`mix`]: weighted request mixes from `perf/mixes/*.toml`.
//! - [`transport`]: Sluice requests through `sluice-client`, or raw
//!   datagrams of the same size to an echo server (the floor).
//! - [`uring`]: the io_uring UDP echo server and a plain std echo for
//!   comparison; [`uring_tcp`]: the io_uring TCP echo (the floor of the
//!   engine's TCP transport). The only `unsafe` in the crate.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod driver;
pub mod mix;
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
