//! Dynamic batching through the whole engine over io_uring with the bundled
//! MLP and the real ONNX Runtime: batched answers equal unbatched ones bit
//! for bit, batches never pass `batch_max`, versions batch apart, refusals
//! stay per request, deadlines cut a batch's wait short, and nothing held
//! is lost when the engine stops or the tables change.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use sluice_engine::Engine;
use sluice_engine::stats::{BATCH_SIZE_BOUNDS, ModelStats};
use sluice_wire::{DType, ErrorCode, Frame, FrameRepr, Kind, TenantKey, TensorRepr};

/// Versions 1.0.0 and 2.0.0 of the MLP in shard "batched"
/// (`batch_max`, `batch_delay_us` as given), 3.0.0 in shard "plain".
fn engine(batch_max: u32, delay_us: u32) -> Engine {
    let root = repo_root();
    let text = format!(
        r#"
[engine]
workers = [0]
rx_burst_max = 32
[io_uring]
listen = "127.0.0.1:0"
rx_buffers = 256
tx_buffers = 256
[onnxruntime]
library = "{lib}"
[[shards]]
name = "batched"
queue_depth = 256
batch_max = {batch_max}
batch_delay_us = {delay_us}
[[shards]]
name = "plain"
[[routes]]
name = "reference"
version = "3.0.0"
shard = "plain"
[[routes]]
name = "all"
shard = "batched"
[[models]]
name = "mlp"
version = "1.0.0"
path = "{root}/models/mlp.onnx"
adapters = [{{ id = "formal", path = "{root}/models/mlp_formal.onnx_adapter" }}]
[[models]]
name = "mlp"
version = "2.0.0"
path = "{root}/models/mlp.onnx"
[[models]]
name = "mlp"
version = "3.0.0"
path = "{root}/models/mlp.onnx"
adapters = [{{ id = "formal", path = "{root}/models/mlp_formal.onnx_adapter" }}]
[[tenants]]
name = "t"
id = 7
key = "hex:{KEY_HEX}"
"#,
        lib = ort_lib().display(),
        root = root.display()
    );
    let cfg = sluice_engine::Config::parse(&text, root).unwrap();
    started(cfg)
}

/// Floats that are not small exact fractions.
fn noise(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 5.1
        })
        .collect()
}

struct Q<'a> {
    id: u64,
    version: &'a str,
    adapter: &'a str,
    rows: u64,
    cols: u64,
    dtype: DType,
    deadline_us: u64,
    /// Sampled trace context (trace id low byte = id).
    traced: bool,
}

impl Default for Q<'_> {
    fn default() -> Self {
        Q {
            id: 1,
            version: "1.0.0",
            adapter: "",
            rows: 1,
            cols: 4,
            dtype: DType::F32,
            // Signed frames need a deadline within the freshness window
            // (10 s by default); 5 s is longer than any batch delay here.
            deadline_us: fresh_deadline(),
            traced: false,
        }
    }
}

fn frame(q: &Q<'_>) -> Vec<u8> {
    let n = (q.rows * q.cols) as usize;
    let mut data: Vec<u8> = noise(n, q.id)
        .iter()
        .flat_map(|f| f.to_le_bytes())
        .collect();
    if q.dtype == DType::F64 {
        data.extend_from_slice(&data.clone());
    }
    let dims = [q.rows, q.cols];
    let t = [TensorRepr {
        name: "x",
        dtype: q.dtype,
        dims: &dims,
        data: Some(&data),
    }];
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id: q.id,
        tenant_id: 7,
        model: "mlp",
        model_version: q.version,
        adapter: q.adapter,
        deadline_us: q.deadline_us,
        tensors: &t,
        trace: if q.traced {
            let mut trace_id = [0x42; 16];
            trace_id[15] = q.id as u8;
            sluice_wire::TraceContext {
                trace_id,
                parent_id: [7; 8],
                flags: 1,
            }
        } else {
            Default::default()
        },
        ..FrameRepr::default()
    };
    let mut buf = vec![0u8; repr.layout().unwrap().frame_len];
    repr.emit(&mut buf).unwrap();
    TenantKey::new(&key_bytes()).sign(&mut Frame::new_unchecked(&mut buf[..]));
    buf
}

/// Sends every frame at once, then collects one answer per frame, by
/// request id.
fn burst(s: &UdpSocket, to: SocketAddr, frames: &[Vec<u8>]) -> Vec<(u64, Vec<u8>)> {
    for f in frames {
        s.send_to(f, to).unwrap();
    }
    let mut out = Vec::new();
    let mut buf = vec![0u8; 70_000];
    while out.len() < frames.len() {
        let (n, _) = s.recv_from(&mut buf).expect("every request is answered");
        let id = Frame::new_checked(&buf[..n]).unwrap().request_id();
        out.push((id, buf[..n].to_vec()));
    }
    out.sort_by_key(|(id, _)| *id);
    out
}

/// The output tensor's dims and bytes of a response.
fn y(answer: &[u8]) -> (Vec<u64>, Vec<u8>) {
    let f = Frame::new_checked(answer).unwrap();
    assert_eq!(f.kind(), Kind::Response, "{:?}", f.error_body());
    let t = f.tensor("y").expect("output y");
    (t.dims().to_vec(), f.tensor_data(&t).to_vec())
}

fn model(e: &Engine, version: &str) -> ModelStats {
    e.stats()
        .models
        .into_iter()
        .find(|m| m.name == "mlp" && m.version == version)
        .unwrap()
}

/// Stats are published by the worker every 50 ms.
fn settle() {
    std::thread::sleep(Duration::from_millis(120));
}

/// Waits until the worker has admitted `n` requests to shard "batched"
/// (counters are read live, not published).
fn admitted(e: &Engine, n: u64) {
    let t0 = Instant::now();
    while e.stats().shards[0].requests < n {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "requests not admitted"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

#[test]
fn batched_answers_equal_unbatched_bit_for_bit() {
    let mut e = engine(8, 20_000);
    let addr = e.local_addr().unwrap();
    let s = client();
    let rows = |i: u64| 1 + i % 3;
    for adapter in ["", "formal"] {
        let base = if adapter.is_empty() { 0 } else { 1000 };
        let reqs: Vec<Vec<u8>> = (0..24)
            .map(|i| {
                frame(&Q {
                    id: base + i,
                    adapter,
                    rows: rows(i),
                    ..Q::default()
                })
            })
            .collect();
        let got = burst(&s, addr, &reqs);
        for (i, (id, answer)) in got.iter().enumerate() {
            let i = i as u64;
            assert_eq!(*id, base + i);
            let reference = frame(&Q {
                id: base + i,
                version: "3.0.0",
                adapter,
                rows: rows(i),
                ..Q::default()
            });
            let want = y(&roundtrip(&s, addr, &reference));
            let (dims, bytes) = y(answer);
            assert_eq!(dims, [rows(i), 3]);
            assert_eq!((dims, bytes), want, "request {i}, adapter {adapter:?}");
            let f = Frame::new_checked(answer).unwrap();
            assert_eq!((f.model_version(), f.adapter()), ("1.0.0", adapter));
        }
    }
    settle();
    let m = model(&e, "1.0.0");
    assert_eq!(m.requests, 48);
    assert_eq!(m.inferences, 2 * (0..24).map(rows).sum::<u64>());
    assert!(
        m.executions < m.requests,
        "requests were stacked: {} runs for {} requests",
        m.executions,
        m.requests
    );
    // No run passed batch_max = 8 rows.
    for (b, c) in BATCH_SIZE_BOUNDS.iter().zip(&m.batch_size.counts) {
        assert!(*b <= 8 || *c == 0, "a run of up to {b} rows: {m:?}");
    }
    assert_eq!(*m.batch_size.counts.last().unwrap(), 0);
    assert_eq!(m.batch_size.count(), m.executions);
    assert_eq!(m.queue_delay_us.count(), m.requests);
    // The gather and the split are the copies batching costs: counted.
    let st = e.stats();
    assert!(st.total(|w| w.payload_bytes_copied) > 0);
    // The unbatched reference model ran one request per run.
    let r = model(&e, "3.0.0");
    assert_eq!((r.requests, r.executions), (48, 48));
    e.stop(Duration::ZERO);
}

#[test]
fn versions_batch_apart_and_refusals_stay_per_request() {
    let mut e = engine(64, 20_000);
    let addr = e.local_addr().unwrap();
    let s = client();
    let mut reqs = Vec::new();
    for i in 0..12u64 {
        let version = if i % 2 == 0 { "1.0.0" } else { "2.0.0" };
        reqs.push(frame(&Q {
            id: i,
            version,
            ..Q::default()
        }));
    }
    // Same key as the good ones (the dtype is checked in the run): refused
    // inside the batch. A different shape: a batch of its own, refused.
    reqs.push(frame(&Q {
        id: 100,
        dtype: DType::F64,
        ..Q::default()
    }));
    reqs.push(frame(&Q {
        id: 101,
        cols: 5,
        ..Q::default()
    }));
    let got = burst(&s, addr, &reqs);
    for (id, answer) in &got {
        let f = Frame::new_checked(&answer[..]).unwrap();
        match id {
            100 | 101 => {
                assert_eq!(f.kind(), Kind::Error);
                let body = f.error_body().unwrap();
                assert_eq!(body.code(), Some(ErrorCode::BadTensor), "{id}");
                let want = if *id == 100 { "dtype" } else { "dimension" };
                assert!(body.message.contains(want), "{id}: {}", body.message);
            }
            i => {
                let version = if i % 2 == 0 { "1.0.0" } else { "2.0.0" };
                assert_eq!(f.model_version(), version, "request {i}");
                let reference = frame(&Q {
                    id: *i,
                    version: "3.0.0",
                    ..Q::default()
                });
                assert_eq!(y(answer), y(&roundtrip(&s, addr, &reference)));
            }
        }
    }
    settle();
    let (v1, v2) = (model(&e, "1.0.0"), model(&e, "2.0.0"));
    assert_eq!((v1.requests, v2.requests), (6, 6));
    assert!(v1.executions < 6 && v2.executions < 6, "{v1:?} {v2:?}");
    assert_eq!(e.stats().errors(ErrorCode::BadTensor), 2);
    e.stop(Duration::ZERO);
}

#[test]
fn a_deadline_cuts_the_wait_short_and_a_far_deadline_waits_the_delay() {
    // A 1 s delay (the limit) and a batch that never fills.
    let mut e = engine(64, 1_000_000);
    let addr = e.local_addr().unwrap();
    let s = client();
    let t0 = Instant::now();
    let q = frame(&Q {
        id: 1,
        deadline_us: now_us() + 900_000,
        ..Q::default()
    });
    let answer = roundtrip(&s, addr, &q);
    let waited = t0.elapsed();
    // Held for the whole delay it would have missed its deadline and been
    // answered deadline_exceeded; it waits about half of its 900 ms.
    assert_eq!(
        answer_kind(&answer),
        (Kind::Response, None),
        "after {waited:?}"
    );
    assert!(waited >= Duration::from_millis(440), "held {waited:?}");
    // With a deadline beyond the delay (5 s; a signed frame must carry
    // one) the batch waits for its delay.
    let t0 = Instant::now();
    let answer = roundtrip(
        &s,
        addr,
        &frame(&Q {
            id: 2,
            ..Q::default()
        }),
    );
    assert_eq!(answer_kind(&answer), (Kind::Response, None));
    assert!(
        t0.elapsed() >= Duration::from_millis(995),
        "{:?}",
        t0.elapsed()
    );
    // A deadline already passed is refused at admission, not held.
    let answer = roundtrip(
        &s,
        addr,
        &frame(&Q {
            id: 3,
            deadline_us: now_us() - 1,
            ..Q::default()
        }),
    );
    assert_eq!(
        answer_kind(&answer),
        (Kind::Error, Some(ErrorCode::DeadlineExceeded))
    );
    e.stop(Duration::ZERO);
}

#[test]
fn held_requests_are_answered_at_a_control_change_and_at_stop() {
    let mut e = engine(64, 1_000_000);
    let addr = e.local_addr().unwrap();
    let s = client();
    // Held by the 1 s delay; a table change answers them at once.
    for i in 0..3 {
        s.send_to(
            &frame(&Q {
                id: i,
                ..Q::default()
            }),
            addr,
        )
        .unwrap();
    }
    admitted(&e, 3);
    let t0 = Instant::now();
    e.set_alias("mlp", "latest", "2.0.0").unwrap();
    let mut buf = vec![0u8; 70_000];
    for _ in 0..3 {
        let (n, _) = s.recv_from(&mut buf).unwrap();
        assert_eq!(answer_kind(&buf[..n]), (Kind::Response, None));
    }
    assert!(
        t0.elapsed() < Duration::from_millis(900),
        "{:?}",
        t0.elapsed()
    );
    // Held again; stopping answers them too.
    for i in 10..13 {
        s.send_to(
            &frame(&Q {
                id: i,
                ..Q::default()
            }),
            addr,
        )
        .unwrap();
    }
    admitted(&e, 6);
    let t0 = Instant::now();
    e.stop(Duration::ZERO);
    assert!(
        t0.elapsed() < Duration::from_millis(900),
        "{:?}",
        t0.elapsed()
    );
    for _ in 0..3 {
        let (n, _) = s
            .recv_from(&mut buf)
            .expect("answered before the worker exits");
        assert_eq!(answer_kind(&buf[..n]), (Kind::Response, None));
    }
}

/// Traced requests a batch holds past the burst they arrived in keep their
/// span records: each span has its run times, after the batch's delay,
/// and its send time after them (before, such spans had no run times).
#[test]
fn held_traced_requests_keep_their_run_times() {
    let mut e = engine(8, 30_000);
    let addr = e.local_addr().unwrap();
    let s = client();
    let frames: Vec<_> = (1..=3)
        .map(|id| {
            frame(&Q {
                id,
                traced: true,
                ..Q::default()
            })
        })
        .collect();
    let answers = burst(&s, addr, &frames);
    for (_, a) in &answers {
        y(a);
    }
    let mut recs = [sluice_engine::trace::SpanRecord::default(); 16];
    let n = e.drain_spans(&mut recs);
    assert_eq!(n, 3, "one span per traced request");
    for r in &recs[..n] {
        let t = r.times;
        assert_eq!(r.outcome, 0);
        assert!(
            t.run_start_ns != 0 && t.run_end_ns >= t.run_start_ns,
            "{t:?}"
        );
        assert!(t.send_ns >= t.run_end_ns, "{t:?}");
        // Held for the batch delay (30 ms) between receive and run.
        assert!(t.run_start_ns - t.recv_ns >= 25_000_000, "{t:?}");
    }
    e.stop(Duration::ZERO);
}
