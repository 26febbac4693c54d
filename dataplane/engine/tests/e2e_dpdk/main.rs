//! End to end over DPDK on a real veth pair: the engine's DPDK port sits on
//! one end (AF_XDP or AF_PACKET vdev), clients are kernel UDP sockets in the
//! peer namespace. Needs root, hugepages and the topology of
//! `scripts/netns-setup.sh`; run through `scripts/dpdk-e2e.sh`, which sets
//! it up and tears it down. Without `SLUICE_DPDK_E2E=1` every test says it
//! was skipped.
//!
//! DPDK's EAL can be initialized once per process, so each scenario runs in
//! a child process of this test binary.
#![cfg(feature = "dpdk")]
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]
// setns and kill through libc for the scenarios in child processes.
#![allow(unsafe_code)]

#[path = "../common/mod.rs"]
mod common;

// The scenarios, by topic. Each passes `isolated` its full test path
// (`module::name`): the child process reruns this binary with `--exact`.
mod flood;
mod lifecycle;
mod pool;
mod queues;

use common::dpdk::*;

use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Req, answer_kind, build};
use sluice_engine::transport::dpdk::{self, net::Drop as Garbage};
use sluice_engine::{Config, Engine, EngineOptions};
use sluice_wire::{ErrorCode, Frame, Kind};

/// Counts heap allocations made on threads marked as workers.
#[global_allocator]
static GLOBAL: sluice_testkit::CountingAlloc = sluice_testkit::CountingAlloc;

fn mark_worker(_: usize) {
    sluice_testkit::watch_this_thread();
}
