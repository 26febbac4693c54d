//! Test support. [`CountingAlloc`] is a global allocator that counts every
//! allocation per thread, and in one shared counter for threads that asked
//! to be watched (engine workers are spawned by the engine, so the test
//! cannot read their thread-locals; they mark themselves through a hook).
//!
//! ```ignore
//! #[global_allocator]
//! static GLOBAL: sluice_testkit::CountingAlloc = sluice_testkit::CountingAlloc;
//! ```
//! A test that asserts "no allocation" should also show the counter is live
//! (an allocation it makes on purpose is seen), or it proves nothing.

// A global allocator is unsafe by definition; this crate is test support.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counts allocations and reallocations; frees are not counted.
pub struct CountingAlloc;

static WATCHED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static MINE: Cell<u64> = const { Cell::new(0) };
    static IS_WATCHED: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    // try_with: the thread-locals may already be gone while a thread exits;
    // const-initialised Cells never allocate, so this cannot recurse.
    let _ = MINE.try_with(|c| c.set(c.get() + 1));
    if IS_WATCHED.try_with(Cell::get).unwrap_or(false) {
        WATCHED.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call forwards to the system allocator with the caller's
// arguments; the bookkeeping touches const-initialised thread-locals and an
// atomic, none of which allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}

/// Allocations made by the calling thread so far.
pub fn thread_allocs() -> u64 {
    MINE.with(Cell::get)
}

/// From now on, the calling thread's allocations also count in
/// [`watched_allocs`].
pub fn watch_this_thread() {
    IS_WATCHED.with(|w| w.set(true));
}

/// Allocations made by every watched thread so far.
pub fn watched_allocs() -> u64 {
    WATCHED.load(Ordering::Relaxed)
}
