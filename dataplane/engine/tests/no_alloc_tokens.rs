//! Token streams make no heap allocation on the worker after start-up:
//! opens (the prompt copied into its preallocated slot buffer), prompt and
//! decode steps through the real ONNX Runtime with the state in the
//! stream's ping-pong slot, token frames, cancels, refusals and small
//! requests interleaved, counted by a global allocator on the worker thread
//! (Rust-side allocations; ONNX Runtime's own C++ heap is not seen). A test
//! binary of its own: the watched counter is process-wide.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use common::tokens::*;
use common::*;
use sluice_engine::{Engine, EngineOptions};
use sluice_wire::{Frame, Kind};

#[global_allocator]
static GLOBAL: sluice_testkit::CountingAlloc = sluice_testkit::CountingAlloc;

fn mark_worker(_: usize) {
    sluice_testkit::watch_this_thread();
}

/// `n` rounds: 16 streams of 24 tokens each (4 per frame) to their end, a
/// stream cancelled after its first frame, a bad prompt, small requests.
fn traffic(addr: SocketAddr, s: &UdpSocket, small: &UdpSocket, base: u64, n: u64) {
    for round in 0..n {
        let first = base + round * 100;
        for k in 0..16 {
            let (_, f) = open("endless", first + k, "warm", 4, 24);
            s.send_to(&f, addr).unwrap();
        }
        for k in 0..4 {
            let a = roundtrip(small, addr, &mlp_request(first + 50 + k));
            assert_eq!(answer_kind(&a).0, Kind::Response);
        }
        let (_, f) = stream_frame(
            "endless",
            first + 60,
            0,
            sluice_wire::stream_flags::OPEN,
            Some(&[]),
            1,
            0,
            0,
        );
        assert_eq!(answer_kind(&roundtrip(small, addr, &f)).0, Kind::Error);
        let mut ended = 0;
        while ended < 16 {
            let (_, _, end, _) = token_frame(&recv(s));
            ended += usize::from(end.is_some());
        }
        let (rid, f) = open("endless", first + 70, "stop", 1, 0);
        small.send_to(&f, addr).unwrap();
        let a = recv(small);
        assert_eq!(Frame::new_checked(a.as_slice()).unwrap().request_id(), rid);
        let (_, f) = cancel("endless", first + 70);
        small.send_to(&f, addr).unwrap();
        // Token frames still on the way, then the cancel's answer.
        loop {
            let a = recv(small);
            if Frame::new_checked(a.as_slice()).unwrap().request_id() != rid {
                break;
            }
        }
    }
}

#[test]
fn token_streams_do_not_allocate() {
    let opts = EngineOptions {
        worker_init: Some(mark_worker),
        no_pin: true,
        ..EngineOptions::default()
    };
    let mut e = Engine::new(config(10_000), opts).unwrap();
    e.start().unwrap();
    let addr = e.local_addr().unwrap();
    let (s, small) = (client(), client());
    traffic(addr, &s, &small, 1, 5);
    std::thread::sleep(Duration::from_millis(120));
    let before = sluice_testkit::watched_allocs();
    assert!(
        before > 0,
        "the counting allocator saw the worker's start-up"
    );
    traffic(addr, &s, &small, 10_000, 30);
    std::thread::sleep(Duration::from_millis(120));
    let after = sluice_testkit::watched_allocs();
    let st = e.stats();
    let w = &st.workers[0];
    assert!(
        w.tokens.tokens >= 35 * 16 * 24,
        "tokens flowed: {:?}",
        w.tokens
    );
    assert_eq!(w.tokens.running, 0);
    assert_eq!(
        after - before,
        0,
        "worker threads allocated {} times during 30 rounds of token streams",
        after - before
    );
    e.stop(Duration::ZERO);
}
