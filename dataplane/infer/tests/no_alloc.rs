//! `run_into` makes no Rust heap allocation per request. A counting global
//! allocator sees every Rust allocation of this thread; ONNX
//! Runtime's own allocations go through its C++ allocator and are not
//! counted (they are documented on `OrtModel`).
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use common::*;
use sluice_infer::{AlignedBuf, OrtModel, RunStats};
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
