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
