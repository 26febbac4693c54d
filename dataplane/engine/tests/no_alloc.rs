//! After start-up, the worker's per-request path makes no heap allocation:
//! a counting global allocator counts allocations made on worker threads
//! while real io_uring traffic of every kind flows.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::*;
use sluice_engine::{Engine, EngineOptions};
use sluice_wire::{FrameRepr, Kind};

struct Counting;

static WORKER_ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static IS_WORKER: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: forwards to the system allocator; the bookkeeping touches only a
// const-initialised thread-local and an atomic, neither of which allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if IS_WORKER.with(Cell::get) {
            WORKER_ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if IS_WORKER.with(Cell::get) {
            WORKER_ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn mark_worker(_: usize) {
    IS_WORKER.with(|w| w.set(true));
}

fn traffic(e: &Engine, rounds: u64) {
    let addr = e.local_addr().unwrap();
    let s = client();
    let mut buf = vec![0u8; 4096];
    let mut rbuf = vec![0u8; 70_000];
    let ping = FrameRepr {
        kind: Kind::Ping,
        ..FrameRepr::default()
    };
    for i in 0..rounds {
        let reqs = [
            Req {
                id: i,
                ..Req::default()
            },
            Req {
                id: i,
                model: "echo",
                version: "1",
                ..Req::default()
            },
            Req {
                id: i,
                sign: false,
                ..Req::default()
            },
            Req {
                id: i,
                model: "nope",
                ..Req::default()
            },
            Req {
                id: i,
                version: "",
                ..Req::default()
            },
            Req {
                id: i,
                intent: "training",
                ..Req::default()
            },
        ];
        for r in &reqs {
            let n = build(r, &mut buf);
            s.send_to(&buf[..n], addr).unwrap();
            s.recv_from(&mut rbuf).expect("answered");
        }
        let n = ping.emit(&mut buf).unwrap().frame_len;
        s.send_to(&buf[..n], addr).unwrap();
        s.recv_from(&mut rbuf).expect("pong");
        s.send_to(b"not a sluice frame", addr).unwrap();
    }
}

#[test]
fn worker_hot_path_does_not_allocate() {
    let opts = EngineOptions {
        worker_init: Some(mark_worker),
        no_pin: true,
    };
    let mut e = Engine::new(test_config(""), opts).unwrap();
    e.start().unwrap();
    // Warm up: first touches of thread-locals, histogram publication, epoch loads.
    traffic(&e, 50);
    std::thread::sleep(Duration::from_millis(120));
    let before = WORKER_ALLOCS.load(Ordering::Relaxed);
    // The counter works: start-up on the worker thread (pools, queues) allocated.
    assert!(
        before > 0,
        "the counting allocator saw the worker's start-up"
    );
    traffic(&e, 500);
    std::thread::sleep(Duration::from_millis(120));
    let after = WORKER_ALLOCS.load(Ordering::Relaxed);
    let st = e.stats();
    assert!(
        st.total(|w| w.ok) >= 1100,
        "traffic flowed: {}",
        st.total(|w| w.ok)
    );
    assert_eq!(
        after - before,
        0,
        "worker threads allocated {} times during 4400 requests",
        after - before
    );
    e.stop(Duration::ZERO);
}
