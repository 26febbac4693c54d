//! `run_into` makes no Rust heap allocation per request. A counting global
//! allocator sees every Rust allocation of this thread while armed; ONNX
//! Runtime's own allocations go through its C++ allocator and are not
//! counted (they are documented on `OrtModel`).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::*;
use sluice_infer::{AlignedBuf, OrtModel, RunStats};
use sluice_wire::{DType, Frame};

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

struct Counting;

// SAFETY: forwards every call to the system allocator unchanged; the only
// addition is a thread-local counter (const-initialized, so touching it never
// allocates; `try_with` tolerates thread teardown).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn count() {
    let _ = ARMED.try_with(|a| {
        if a.get() {
            let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        }
    });
}

#[global_allocator]
static GLOBAL: Counting = Counting;

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

    // The counter works: an allocation while armed is seen.
    ARMED.with(|a| a.set(true));
    drop(std::hint::black_box(vec![0u8; 16]));
    ARMED.with(|a| a.set(false));
    assert_eq!(ALLOCS.with(|c| c.replace(0)), 1);

    ARMED.with(|a| a.set(true));
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
    ARMED.with(|a| a.set(false));

    assert_eq!(stats.runs, 100);
    assert_eq!(stats.rejects, 100);
    assert_eq!(
        ALLOCS.with(|c| c.get()),
        0,
        "Rust heap allocations during 200 requests"
    );
}
