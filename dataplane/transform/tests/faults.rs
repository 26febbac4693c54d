//! Hand-written malicious modules (core WAT made components of the world):
//! an infinite loop, a memory bomb, a stack overflow, a lie about the
//! result, a protocol breach. Each ends its request with a clear fault,
//! the instance is recycled and serves the next request, and faults in a
//! row quarantine it, with backoff. Nothing crashes or stalls the caller.
// Tests may unwrap: a failed unwrap is a failed test (clippy.toml covers
// #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use sluice_transform::{Fault, Input, Target};
use sluice_wire::{Frame, SECTION_TENSOR_NAME};

/// Behaves by `from-version`: 1 spins forever, 2 grows memory without end,
/// 3 recurses without end, 4 returns ok without emitting, 5 returns a
/// result pointer outside its memory, 6 emits twice, 8 traps at once;
/// anything else echoes the section.
fn evil() -> Vec<u8> {
    core_component(&format!(
        r#"(module
  (import "sluice:transform/host@1.0.0" "emit-section" (func $emit (param i32 i32 i32)))
  {CORE_PRELUDE}
  (func $recurse (param i32) (result i32)
    (i32.add (call $recurse (i32.add (local.get 0) (i32.const 1))) (i32.const 1)))
  (func (export "{EXPORT}")
      (param $disc i32) (param $ptr i32) (param $len i32) (param $from i32) (param $to i32)
      (result i32)
    (if (i32.eq (local.get $from) (i32.const 1)) (then (loop $spin (br $spin))))
    (if (i32.eq (local.get $from) (i32.const 2))
      (then (loop $grow (br_if $grow (i32.ne (memory.grow (i32.const 16)) (i32.const -1))))
            unreachable))
    (if (i32.eq (local.get $from) (i32.const 3)) (then (drop (call $recurse (i32.const 0)))))
    (if (i32.eq (local.get $from) (i32.const 4)) (then (return (i32.const 256))))
    (if (i32.eq (local.get $from) (i32.const 5)) (then (return (i32.const -16))))
    (if (i32.eq (local.get $from) (i32.const 6))
      (then (call $emit (local.get $ptr) (local.get $len) (i32.const 512))
            (call $emit (local.get $ptr) (local.get $len) (i32.const 512))
            (return (i32.const 256))))
    (if (i32.eq (local.get $from) (i32.const 8)) (then unreachable))
    (call $emit (local.get $ptr) (local.get $len) (i32.const 512))
    (i32.const 256)))"#
    ))
}

const T: Target = Target {
    schema_id: 12,
    schema_version: 2,
};

fn req() -> Vec<u8> {
    section_request(br#"{"user":"x","prompt":"y"}"#, 11, 1, false)
}

fn echo_ok(inst: &mut sluice_transform::Instance, r: &Frame<&[u8]>) {
    let (out, _) = inst
        .run(r, Input::Section, 7, 2, T, Instant::now())
        .unwrap_or_else(|f| panic!("echo failed: {f:?}"));
    let f = Frame::new_checked(out).unwrap();
    let s = f.tensor(SECTION_TENSOR_NAME).unwrap();
    assert_eq!(f.tensor_data(&s), br#"{"user":"x","prompt":"y"}"#);
}

#[test]
fn each_fault_ends_its_request_and_the_instance_serves_on() {
    let rt = runtime(sluice_transform::Limits {
        faults_before_quarantine: 100,
        ..small_limits()
    });
    let m = load(&rt, &evil());
    let mut inst = m.instantiate().unwrap();
    let r = req();
    let r = Frame::new_checked(&r[..]).unwrap();
    echo_ok(&mut inst, &r);
    let cases = [
        (1, Fault::Timeout),
        (2, Fault::OutOfMemory),
        (3, Fault::Trap),
        (
            4,
            Fault::BadOutput("returned ok without emitting its output"),
        ),
        (5, Fault::Trap),
        (6, Fault::BadOutput("emitted twice")),
        (8, Fault::Trap),
    ];
    for (mode, want) in cases {
        let t0 = Instant::now();
        let got = inst
            .run(&r, Input::Section, mode, 2, T, Instant::now())
            .unwrap_err();
        assert_eq!(got, want, "mode {mode}");
        assert!(!got.message().is_empty());
        // Bounded by the deadline (20 ms) with room for a loaded machine:
        // the caller is never stalled for long.
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "mode {mode} took {:?}",
            t0.elapsed()
        );
        // Recycled: the next request is served.
        echo_ok(&mut inst, &r);
    }
    let s = inst.stats();
    assert_eq!(s.timeouts.load(Ordering::Relaxed), 1);
    assert_eq!(s.out_of_memory.load(Ordering::Relaxed), 1);
    assert_eq!(s.traps.load(Ordering::Relaxed), 3);
    assert_eq!(s.bad_outputs.load(Ordering::Relaxed), 2);
    assert_eq!(s.recycles.load(Ordering::Relaxed), 7);
    assert_eq!(s.ok.load(Ordering::Relaxed), 8);
    assert_eq!(s.quarantines.load(Ordering::Relaxed), 0);
}

#[test]
fn repeated_faults_quarantine_with_backoff() {
    let rt = runtime(small_limits()); // 3 in a row; 200 ms, doubling
    let m = load(&rt, &evil());
    let mut inst = m.instantiate().unwrap();
    let r = req();
    let r = Frame::new_checked(&r[..]).unwrap();
    for _ in 0..3 {
        assert_eq!(
            inst.run(&r, Input::Section, 8, 2, T, Instant::now())
                .unwrap_err(),
            Fault::Trap
        );
    }
    let s = inst.stats().clone();
    assert_eq!(s.quarantines.load(Ordering::Relaxed), 1);
    assert_eq!(s.quarantined.load(Ordering::Relaxed), 1);
    // Quarantined: even a good request is refused, without calling in.
    let calls = s.calls.load(Ordering::Relaxed);
    assert_eq!(
        inst.run(&r, Input::Section, 7, 2, T, Instant::now())
            .unwrap_err(),
        Fault::Quarantined
    );
    assert_eq!(s.calls.load(Ordering::Relaxed), calls);
    // After the quarantine: on probation, served.
    let later = Instant::now() + Duration::from_millis(250);
    let (out, _) = inst.run(&r, Input::Section, 7, 2, T, later).unwrap();
    assert!(Frame::new_checked(out).is_ok());
    assert_eq!(s.quarantined.load(Ordering::Relaxed), 0);
    // Three more faults: quarantined again, for twice as long.
    for _ in 0..3 {
        inst.run(&r, Input::Section, 8, 2, T, later).unwrap_err();
    }
    assert_eq!(s.quarantines.load(Ordering::Relaxed), 2);
    let at_300 = later + Duration::from_millis(300);
    assert_eq!(
        inst.run(&r, Input::Section, 7, 2, T, at_300).unwrap_err(),
        Fault::Quarantined
    );
    let at_450 = later + Duration::from_millis(450);
    assert!(inst.run(&r, Input::Section, 7, 2, T, at_450).is_ok());
}

#[test]
fn a_spinning_module_is_interrupted_at_its_deadline() {
    let rt = runtime(small_limits());
    let m = load(&rt, &evil());
    let mut inst = m.instantiate().unwrap();
    let r = req();
    let r = Frame::new_checked(&r[..]).unwrap();
    let t0 = Instant::now();
    assert_eq!(
        inst.run(&r, Input::Section, 1, 2, T, Instant::now())
            .unwrap_err(),
        Fault::Timeout
    );
    // Not before its deadline (20 ms).
    assert!(
        t0.elapsed() >= Duration::from_millis(20),
        "{:?}",
        t0.elapsed()
    );
}

#[test]
fn instances_of_one_module_fail_alone() {
    let rt = runtime(small_limits());
    let m = load(&rt, &evil());
    let mut a = m.instantiate().unwrap();
    let mut b = m.instantiate().unwrap();
    let r = req();
    let r = Frame::new_checked(&r[..]).unwrap();
    for _ in 0..3 {
        a.run(&r, Input::Section, 2, 2, T, Instant::now())
            .unwrap_err();
    }
    assert_eq!(
        a.run(&r, Input::Section, 7, 2, T, Instant::now())
            .unwrap_err(),
        Fault::Quarantined
    );
    echo_ok(&mut b, &r);
}
