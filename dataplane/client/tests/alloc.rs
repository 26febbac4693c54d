//! The send path allocates nothing: requests are encoded into the client's
//! own buffer and the bookkeeping is sized at connect time.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

use sluice_client::{Client, ClientConfig, PollMode, Request, TenantKey};

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

struct Counting;

// SAFETY: every call is forwarded unchanged to the system allocator; the
// counter is a const-initialised thread local without a destructor, so
// touching it never allocates or re-enters the allocator.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

#[test]
fn sending_allocates_nothing() {
    // A bound socket that never answers: only the send path runs.
    let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let key = b"k".to_vec();
    let cfg = ClientConfig {
        tenant_id: 1,
        key: Some(key.clone()),
        timeout: Duration::from_secs(30),
        poll: PollMode::Spin,
        ..ClientConfig::default()
    };
    let mut c = Client::connect(sink.local_addr().unwrap(), cfg).unwrap();
    let x = [0.5f32; 64];
    let ids = [1i64, 2, 3];
    let other = TenantKey::new(b"other");
    let plain = Request::new("mlp", "1.0.0")
        .adapter("formal")
        .intent("chat")
        .deadline_after(Duration::from_millis(5))
        .extension("k", b"v")
        .tensor_f32("x", &[16, 4], &x)
        .tensor_i64("ids", &[3], &ids);
    let as_other = plain.clone().tenant(2, Some(&other));

    // The counter works: building a request's tensor list allocates.
    let before = allocs();
    let built = Request::new("m", "1").tensor_f32("x", &[1], &x[..1]);
    assert!(allocs() > before);
    drop(built);

    let before = allocs();
    for _ in 0..500 {
        c.send(&plain).unwrap();
        c.send(&as_other).unwrap();
    }
    assert_eq!(allocs() - before, 0, "allocations while sending");
    assert_eq!(c.outstanding(), 1000);
}
