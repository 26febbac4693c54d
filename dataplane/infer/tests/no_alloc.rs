//! `run_into` makes no Rust heap allocation per request. A counting global
//! allocator sees every Rust allocation of this thread; ONNX
//! Runtime's own allocations go through its C++ allocator and are not
//! counted (they are documented on `OrtModel`).
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use common::*;
use sluice_infer::{AlignedBuf, BatchSlot, OrtModel, RunStats};
use sluice_wire::{DType, Frame};

#[global_allocator]
static GLOBAL: sluice_testkit::CountingAlloc = sluice_testkit::CountingAlloc;

#[test]
fn run_into_does_not_allocate_on_the_rust_side() {
    init();
    let mut model = OrtModel::load(&mlp_spec()).unwrap();
    let data = f32_bytes(&sixteenths(32 * 4, 1));
    let rx = request(
        "mlp",
        "formal",
        &[Input {
            name: "x",
            dtype: DType::F32,
            dims: &[32, 4],
            data: &data,
        }],
    );
    let mut tx = AlignedBuf::new(64 << 10);
    let mut stats = RunStats::default();
    let x4 = f32_bytes(&sixteenths(4, 2));
    let bad = request(
        "mlp",
        "",
        &[Input {
            name: "x",
            dtype: DType::F32,
            dims: &[2, 2],
            data: &x4,
        }],
    );

    // The counter works: an allocation on this thread is seen.
    let before = sluice_testkit::thread_allocs();
    drop(std::hint::black_box(vec![0u8; 16]));
    assert_eq!(sluice_testkit::thread_allocs() - before, 1);

    let before = sluice_testkit::thread_allocs();
    for i in 0..100 {
        let req = Frame::new_checked(rx.as_slice()).unwrap();
        let adapter = if i % 2 == 0 { Some("formal") } else { None };
        model
            .run_into(&req, adapter, tx.as_mut_slice(), &mut stats)
            .unwrap();
        let req = Frame::new_checked(bad.as_slice()).unwrap();
        model
            .run_into(&req, None, tx.as_mut_slice(), &mut stats)
            .unwrap_err();
    }
    let allocs = sluice_testkit::thread_allocs() - before;

    assert_eq!(stats.runs, 100);
    assert_eq!(stats.rejects, 100);
    assert_eq!(allocs, 0, "Rust heap allocations during 200 requests");
}

#[test]
fn batched_runs_do_not_allocate_on_the_rust_side() {
    init();
    let mut model = OrtModel::load(&mlp_spec()).unwrap();
    let reqs: Vec<AlignedBuf> = (0..8)
        .map(|i| {
            let data = f32_bytes(&sixteenths(4 * (1 + i % 3), i as i64));
            request(
                "mlp",
                "",
                &[Input {
                    name: "x",
                    dtype: DType::F32,
                    dims: &[1 + (i % 3) as u64, 4],
                    data: &data,
                }],
            )
        })
        .collect();
    let bytes: Vec<&[u8]> = reqs.iter().map(|r| r.as_slice()).collect();
    let mut input = AlignedBuf::new(1 << 20);
    let mut output = AlignedBuf::new(1 << 20);
    let mut tx = AlignedBuf::new(64 << 10);
    let mut slots = [BatchSlot::Left; 8];
    let mut stats = RunStats::default();
    let mut round = |stats: &mut RunStats, slots: &mut [BatchSlot]| {
        let rows = model
            .run_batch(
                &bytes,
                None,
                input.as_mut_slice(),
                output.as_mut_slice(),
                slots,
                stats,
            )
            .unwrap();
        assert_eq!(rows, 15);
        for (b, &slot) in bytes.iter().zip(slots.iter()) {
            let req = Frame::new_checked(*b).unwrap();
            model
                .batch_reply(
                    &req,
                    None,
                    slot,
                    output.as_slice(),
                    tx.as_mut_slice(),
                    stats,
                )
                .unwrap();
        }
    };
    round(&mut stats, &mut slots); // first touches
    let before = sluice_testkit::thread_allocs();
    drop(std::hint::black_box(vec![0u8; 16]));
    assert_eq!(sluice_testkit::thread_allocs() - before, 1);
    let before = sluice_testkit::thread_allocs();
    for _ in 0..100 {
        round(&mut stats, &mut slots);
    }
    let allocs = sluice_testkit::thread_allocs() - before;
    assert_eq!(stats.batch_runs, 101);
    assert_eq!(stats.runs, 808);
    assert_eq!(allocs, 0, "Rust heap allocations during 100 batched runs");
}

/// A stream step (`run_step`, docs/wire.md "Streams") reads the state from
/// one half of a slot and writes the next state into the other, in place:
/// no Rust heap allocation, and the state is never copied (ORT's output
/// pointer is the slot's). The bundled `accum` model answers half the
/// running sum of its inputs, exactly.
#[test]
fn stream_steps_do_not_allocate_and_keep_state_in_place() {
    use sluice_infer::StatePair;
    use sluice_wire::{ExtRepr, StreamHeader, stream_flags};
    init();
    let mut model = OrtModel::load(&spec("accum.onnx", "accum")).unwrap();
    let spec = model
        .state_spec(&[StatePair {
            input: "s".into(),
            output: "sN".into(),
            dims: vec![1, 8],
        }])
        .unwrap();
    assert_eq!(spec.half_len, 64, "8 f32, one 64-byte line");
    let mut halves = [
        AlignedBuf::new(spec.half_len),
        AlignedBuf::new(spec.half_len),
    ];
    let mut tx = AlignedBuf::new(64 << 10);
    let mut stats = RunStats::default();
    let frames: Vec<AlignedBuf> = (0..4)
        .map(|i| {
            let x = f32_bytes(&sixteenths(8, i));
            request(
                "accum",
                "",
                &[Input {
                    name: "x",
                    dtype: DType::F32,
                    dims: &[1, 8],
                    data: &x,
                }],
            )
        })
        .collect();
    let header = StreamHeader {
        stream_id: 9,
        seq: 0,
        flags: stream_flags::CONTINUE,
        ..StreamHeader::default()
    }
    .to_bytes();
    let ext = [ExtRepr::stream(&header)];
    let mut want = [0f32; 8];
    let mut step =
        |k: usize, halves: &mut [AlignedBuf; 2], tx: &mut AlignedBuf, stats: &mut RunStats| {
            let [a, b] = halves;
            let (cur, next) = if k.is_multiple_of(2) { (a, b) } else { (b, a) };
            let req = Frame::new_checked(frames[k % 4].as_slice()).unwrap();
            model
                .run_step(
                    &req,
                    None,
                    &spec,
                    cur.as_slice(),
                    next.as_mut_slice(),
                    &ext,
                    tx.as_mut_slice(),
                    stats,
                )
                .unwrap()
        };
    // Warm-up outside the count (first-run setup in ORT's Rust wrapper).
    for k in 0..2 {
        step(k, &mut halves, &mut tx, &mut stats);
    }
    let before = sluice_testkit::thread_allocs();
    for k in 2..102 {
        step(k, &mut halves, &mut tx, &mut stats);
    }
    let allocs = sluice_testkit::thread_allocs() - before;
    assert_eq!(allocs, 0, "Rust heap allocations during 100 stream steps");
    // 102 steps: the state is the sum of every input so far.
    for k in 0..102 {
        for (w, x) in want.iter_mut().zip(sixteenths(8, (k % 4) as i64)) {
            *w += x;
        }
    }
    let len = step(102, &mut halves, &mut tx, &mut stats);
    for (w, x) in want.iter_mut().zip(sixteenths(8, 2)) {
        *w += x;
    }
    let f = Frame::new_checked(&tx.as_slice()[..len]).unwrap();
    assert!(f.tensor("sN").is_none(), "the state is not in the reply");
    assert_eq!(f.stream().map(|h| h.stream_id), Some(9));
    let y: Vec<f32> = f
        .tensor_data(&f.tensor("y").unwrap())
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let half: Vec<f32> = want.iter().map(|v| v * 0.5).collect();
    assert_eq!(y, half);
    // Step 102 wrote into halves[1]: the state, in place.
    let state: Vec<f32> = halves[1]
        .as_slice()
        .chunks(4)
        .take(8)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(state, want.to_vec());
    assert_eq!(stats.payload_bytes_copied, 0);
}
