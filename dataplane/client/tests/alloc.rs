//! The send path allocates nothing: requests are encoded into the client's
//! own buffer and the bookkeeping is sized at connect time.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::time::Duration;

use sluice_client::{Client, ClientConfig, PollMode, Request, TenantKey};

#[global_allocator]
static GLOBAL: sluice_testkit::CountingAlloc = sluice_testkit::CountingAlloc;

fn allocs() -> u64 {
    sluice_testkit::thread_allocs()
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
