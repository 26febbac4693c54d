//! A transform call on the hot path makes no heap allocation in the host:
//! the section or tensors are lowered from the request in place, the
//! output is read from the module's memory in place and copied once into
//! the instance's buffer. (The module's own allocator works inside its
//! linear memory, which is reused from call to call.)
// Tests may unwrap: a failed unwrap is a failed test (clippy.toml covers
// #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::time::Instant;

use common::*;
use sluice_transform::{Input, Target};
use sluice_wire::Frame;

#[global_allocator]
static GLOBAL: sluice_testkit::CountingAlloc = sluice_testkit::CountingAlloc;

#[test]
fn a_call_allocates_nothing() {
    let rt = runtime(small_limits());
    let json = load(&rt, &guest("json-migrate"));
    let tensors = load(&rt, &guest("tensor-migrate"));
    let mut j = json.instantiate().unwrap();
    let mut t = tensors.instantiate().unwrap();
    let jr = section_request(
        br#"{"user":"ada","prompt":"hello","max_tokens":64}"#,
        11,
        1,
        true,
    );
    let jr = Frame::new_checked(&jr[..]).unwrap();
    let pixels = vec![7u8; 8 * 8 * 3];
    let tr = image_request(8, 8, &pixels, true);
    let tr = Frame::new_checked(&tr[..]).unwrap();
    let tt = Target {
        schema_id: 21,
        schema_version: 2,
    };
    let jt = Target {
        schema_id: 12,
        schema_version: 2,
    };
    // Warm up: the module's memory reaches its working size.
    for _ in 0..50 {
        j.run(&jr, Input::Section, 1, 2, jt, Instant::now())
            .unwrap();
        t.run(&tr, Input::Tensors, 1, 2, tt, Instant::now())
            .unwrap();
    }
    let now = Instant::now();
    let before = sluice_testkit::thread_allocs();
    for _ in 0..1000 {
        j.run(&jr, Input::Section, 1, 2, jt, now).unwrap();
        t.run(&tr, Input::Tensors, 1, 2, tt, now).unwrap();
        // A refusal allocates nothing either.
        j.run(&jr, Input::Section, 1, 9, jt, now).unwrap_err();
    }
    let during = sluice_testkit::thread_allocs() - before;
    // The counter is live: an allocation made on purpose is seen.
    let probe = std::hint::black_box(vec![1u8; 10]);
    assert_eq!(sluice_testkit::thread_allocs() - before, during + 1);
    drop(probe);
    assert_eq!(during, 0, "{during} allocations in 3000 calls");
}
