//! With dynamic batching on, the worker's per-request path still makes no
//! heap allocation: requests held across loop iterations, stacked into one
//! ONNX Runtime run (the gather into the batch pool made at start-up) and
//! split into their replies, counted by a global allocator on the worker
//! thread while real io_uring traffic flows. (A test binary of its own: the
//! watched counter is process-wide.)
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::time::Duration;

use common::*;
use sluice_engine::{Engine, EngineOptions};
use sluice_wire::{DType, Frame, FrameRepr, Kind, TenantKey, TensorRepr};

#[global_allocator]
static GLOBAL: sluice_testkit::CountingAlloc = sluice_testkit::CountingAlloc;

fn mark_worker(_: usize) {
    sluice_testkit::watch_this_thread();
}

fn config() -> sluice_engine::Config {
    let root = repo_root();
    let text = format!(
        r#"
[engine]
workers = [0]
[io_uring]
listen = "127.0.0.1:0"
rx_buffers = 128
tx_buffers = 128
[onnxruntime]
library = "{lib}"
[[shards]]
name = "s"
batch_max = 16
batch_delay_us = 300
[[routes]]
name = "all"
shard = "s"
[[models]]
name = "mlp"
version = "1.0.0"
path = "{root}/models/mlp.onnx"
[[tenants]]
name = "t"
id = 7
key = "hex:{KEY_HEX}"
"#,
        lib = ort_lib().display(),
        root = root.display()
    );
    sluice_engine::Config::parse(&text, root).unwrap()
}

/// Round `round`'s twelve signed requests: ids unique per round and a
/// fresh deadline, so that no frame is a replay of an earlier one.
fn frames(round: u64) -> Vec<Vec<u8>> {
    (0..12u64)
        .map(|i| {
            let rows = 1 + i % 3;
            let x: Vec<u8> = (0..rows * 4)
                .flat_map(|k| ((k + i) as f32 * 0.37 - 1.0).to_le_bytes())
                .collect();
            let dims = [rows, 4];
            let t = [TensorRepr {
                name: "x",
                dtype: DType::F32,
                dims: &dims,
                data: Some(&x),
            }];
            let repr = FrameRepr {
                kind: Kind::Request,
                request_id: round * 12 + i,
                tenant_id: 7,
                deadline_us: fresh_deadline(),
                model: "mlp",
                model_version: "1.0.0",
                tensors: &t,
                ..FrameRepr::default()
            };
            let mut buf = vec![0u8; repr.layout().unwrap().frame_len];
            repr.emit(&mut buf).unwrap();
            TenantKey::new(&key_bytes()).sign(&mut Frame::new_unchecked(&mut buf[..]));
            buf
        })
        .collect()
}

fn traffic(e: &Engine, first_round: u64, rounds: u64) {
    let addr = e.local_addr().unwrap();
    let s = client();
    let mut rbuf = vec![0u8; 70_000];
    for round in first_round..first_round + rounds {
        // Built on this thread: the allocations are not the worker's.
        let reqs = frames(round);
        for f in &reqs {
            s.send_to(f, addr).unwrap();
        }
        for _ in &reqs {
            let (n, _) = s.recv_from(&mut rbuf).expect("answered");
            assert_eq!(answer_kind(&rbuf[..n]), (Kind::Response, None));
        }
    }
}

#[test]
fn batching_worker_does_not_allocate() {
    let opts = EngineOptions {
        worker_init: Some(mark_worker),
        no_pin: true,
        ..EngineOptions::default()
    };
    let mut e = Engine::new(config(), opts).unwrap();
    e.start().unwrap();
    traffic(&e, 0, 30);
    std::thread::sleep(Duration::from_millis(120));
    let before = sluice_testkit::watched_allocs();
    assert!(
        before > 0,
        "the counting allocator saw the worker's start-up"
    );
    traffic(&e, 30, 300);
    std::thread::sleep(Duration::from_millis(120));
    let after = sluice_testkit::watched_allocs();
    let m = e
        .stats()
        .models
        .into_iter()
        .find(|m| m.name == "mlp")
        .unwrap();
    assert_eq!(m.requests, 330 * 12);
    assert!(
        m.executions < m.requests / 2,
        "batching was on: {} runs for {} requests",
        m.executions,
        m.requests
    );
    assert_eq!(
        after - before,
        0,
        "worker threads allocated {} times during 3600 batched requests",
        after - before
    );
    e.stop(Duration::ZERO);
}
