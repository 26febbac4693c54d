//! The C ABI exercised as C would: raw pointers, status codes, error text.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]
// Calls the C ABI as C would.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_char};
use std::mem::{offset_of, size_of};
use std::ptr;

use sluice_ffi::*;

fn err_buf() -> [c_char; 512] {
    [0; 512]
}

fn msg(e: &[c_char; 512]) -> String {
    // SAFETY: the library always NUL-terminates within the buffer.
    unsafe { CStr::from_ptr(e.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// The layout the Go side checks too (go-control/internal/rustengine).
#[test]
fn totals_layout() {
    assert_eq!(size_of::<SluiceTotals>(), 136);
    assert_eq!(offset_of!(SluiceTotals, abi_version), 0);
    assert_eq!(offset_of!(SluiceTotals, workers), 4);
    assert_eq!(offset_of!(SluiceTotals, ok), 8);
    assert_eq!(offset_of!(SluiceTotals, errors), 16);
    assert_eq!(offset_of!(SluiceTotals, epoch), 88);
    assert_eq!(offset_of!(SluiceTotals, latency_count), 96);
    assert_eq!(offset_of!(SluiceTotals, latency_max_ns), 128);
    assert_eq!(size_of::<SluiceStatus>(), 4);
}

const CONFIG: &str = r#"{
  "engine": {"workers": [0], "poll": "adaptive", "rx_burst_max": 16},
  "io_uring": {"listen": "127.0.0.1:0", "rx_buffers": 16, "tx_buffers": 16, "buffer_size": 4096},
  "shards": [{"name": "s"}],
  "routes": [{"name": "null", "model": "null", "shard": "s"}],
  "models": [{"name": "null", "version": "1", "kind": "null"}]
}"#;

fn open() -> *mut SluiceEngine {
    let mut e = ptr::null_mut();
    let mut err = err_buf();
    // SAFETY: valid buffers and out pointer.
    let rc = unsafe {
        sluice_engine_open(
            CONFIG.as_ptr(),
            CONFIG.len(),
            &mut e,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    assert_eq!(rc, SluiceStatus::Ok as i32, "{}", msg(&err));
    e
}

fn query(e: *mut SluiceEngine, what: SluiceQuery) -> serde_json::Value {
    let (mut p, mut n) = (ptr::null_mut(), 0usize);
    let mut err = err_buf();
    // SAFETY: live handle, valid out pointers.
    let rc =
        unsafe { sluice_engine_query(e, what as i32, &mut p, &mut n, err.as_mut_ptr(), err.len()) };
    assert_eq!(rc, 0, "{}", msg(&err));
    // SAFETY: p/n returned by the query.
    let v = serde_json::from_slice(unsafe { std::slice::from_raw_parts(p, n) }).unwrap();
    // SAFETY: exactly what the query returned.
    unsafe { sluice_buf_free(p, n) };
    v
}

#[test]
fn lifecycle_apply_query_and_errors() {
    let e = open();
    let mut err = err_buf();
    // SAFETY: `e` is live until freed at the end of the test; the
    // buffers passed are valid for the lengths given.
    unsafe {
        assert_eq!(
            sluice_engine_start(e, err.as_mut_ptr(), err.len()),
            0,
            "{}",
            msg(&err)
        );
        assert_eq!(
            sluice_engine_start(e, err.as_mut_ptr(), err.len()),
            SluiceStatus::AlreadyExists as i32
        );

        // A bad route set is refused whole, with the reason.
        let bad = br#"{"routes": [{"name": "r", "shard": "missing"}]}"#;
        let rc = sluice_engine_apply(e, bad.as_ptr(), bad.len(), err.as_mut_ptr(), err.len());
        assert_eq!(rc, SluiceStatus::InvalidConfig as i32);
        assert!(
            msg(&err).contains("no shard named \"missing\""),
            "{}",
            msg(&err)
        );
        let garbage = b"{not json";
        let rc = sluice_engine_apply(
            e,
            garbage.as_ptr(),
            garbage.len(),
            err.as_mut_ptr(),
            err.len(),
        );
        assert_eq!(rc, SluiceStatus::InvalidArgument as i32);

        // A good one is applied, and visible in the live tables.
        let good = br#"{"shards": [{"name": "s"}, {"name": "t"}], "routes": [{"name": "r2", "model": "null", "shard": "t"}]}"#;
        assert_eq!(
            sluice_engine_apply(e, good.as_ptr(), good.len(), err.as_mut_ptr(), err.len()),
            0,
            "{}",
            msg(&err)
        );
        let live = query(e, SluiceQuery::Live);
        assert_eq!(live["routes"][0]["name"], "r2");

        // Peers.
        let peer = br#"{"name": "b", "address": "127.0.0.1:7170", "labels": {"gpu": "gddr6"}}"#;
        assert_eq!(
            sluice_engine_add_peer(e, peer.as_ptr(), peer.len(), err.as_mut_ptr(), err.len()),
            0
        );
        assert_eq!(
            sluice_engine_add_peer(e, peer.as_ptr(), peer.len(), err.as_mut_ptr(), err.len()),
            SluiceStatus::AlreadyExists as i32
        );
        assert_eq!(query(e, SluiceQuery::Peers)[0]["name"], "b");
        let name = CString::new("b").unwrap();
        assert_eq!(
            sluice_engine_remove_peer(e, name.as_ptr(), err.as_mut_ptr(), err.len()),
            0
        );
        assert_eq!(
            sluice_engine_remove_peer(e, name.as_ptr(), err.as_mut_ptr(), err.len()),
            SluiceStatus::NotFound as i32
        );

        // Aliases.
        let (m, a, v) = (
            CString::new("null").unwrap(),
            CString::new("latest").unwrap(),
            CString::new("9").unwrap(),
        );
        assert_eq!(
            sluice_engine_set_alias(
                e,
                m.as_ptr(),
                a.as_ptr(),
                v.as_ptr(),
                err.as_mut_ptr(),
                err.len()
            ),
            SluiceStatus::NotFound as i32
        );

        // Status and totals.
        let st = query(e, SluiceQuery::Status);
        assert_eq!(st["running"], true);
        let mut t = SluiceTotals::default();
        assert_eq!(
            sluice_engine_totals(e, &mut t, err.as_mut_ptr(), err.len()),
            0
        );
        assert_eq!(t.abi_version, SLUICE_ABI_VERSION);
        assert_eq!(t.workers, 1);

        // Null arguments are refused, not dereferenced.
        assert_eq!(
            sluice_engine_totals(e, ptr::null_mut(), err.as_mut_ptr(), err.len()),
            SluiceStatus::InvalidArgument as i32
        );
        assert_eq!(
            sluice_engine_start(ptr::null_mut(), err.as_mut_ptr(), err.len()),
            SluiceStatus::InvalidArgument as i32
        );
        assert_eq!(
            sluice_engine_query(
                e,
                99,
                &mut ptr::null_mut(),
                &mut 0,
                err.as_mut_ptr(),
                err.len()
            ),
            SluiceStatus::InvalidArgument as i32
        );

        assert_eq!(sluice_engine_stop(e, 0, err.as_mut_ptr(), err.len()), 0);
        assert_eq!(
            sluice_engine_stop(e, 0, err.as_mut_ptr(), err.len()),
            SluiceStatus::NotRunning as i32
        );
        sluice_engine_free(e);
    }
}

#[test]
fn bad_config_names_the_key() {
    let mut e = ptr::null_mut();
    let mut err = err_buf();
    let cfg = br#"{"engine": {"workers": [0], "rx_burst_max": 0}}"#;
    // SAFETY: valid buffers and out pointer.
    let rc =
        unsafe { sluice_engine_open(cfg.as_ptr(), cfg.len(), &mut e, err.as_mut_ptr(), err.len()) };
    assert_eq!(rc, SluiceStatus::InvalidConfig as i32);
    assert!(msg(&err).contains("engine.rx_burst_max"), "{}", msg(&err));
    assert!(e.is_null());
    let path = CString::new("/nonexistent/sluice.toml").unwrap();
    // SAFETY: as above.
    let rc = unsafe { sluice_engine_open_file(path.as_ptr(), &mut e, err.as_mut_ptr(), err.len()) };
    assert_eq!(rc, SluiceStatus::InvalidConfig as i32);
    assert!(msg(&err).contains("cannot read"), "{}", msg(&err));
}

#[test]
fn error_text_is_truncated_and_terminated() {
    let mut e = ptr::null_mut();
    let mut small = [1 as c_char; 8];
    let cfg = b"{bad";
    // SAFETY: `small` has 8 writable bytes.
    let rc = unsafe {
        sluice_engine_open(
            cfg.as_ptr(),
            cfg.len(),
            &mut e,
            small.as_mut_ptr(),
            small.len(),
        )
    };
    assert_eq!(rc, SluiceStatus::InvalidConfig as i32);
    assert_eq!(small[7], 0);
}

/// The load read: its row layout, and every argument it refuses.
#[test]
fn load_layout_and_refusals() {
    assert_eq!(size_of::<SluiceLoadRow>(), 96);
    assert_eq!(offset_of!(SluiceLoadRow, queue_depth_max), 40);
    assert_eq!(offset_of!(SluiceLoadRow, name), 48);
    let e = open();
    let mut err = err_buf();
    let mut rows = [SluiceLoadRow {
        second: 0,
        key: 0,
        tokens: 0,
        requests: 0,
        errors: 0,
        queue_depth_max: 0,
        reserved: 0,
        name: [0; SLUICE_LOAD_NAME_BYTES],
    }; 4];
    let mut n = 99usize;
    let max = u64::from(SLUICE_LOAD_SECONDS_MAX);
    // SAFETY: valid handle, buffers and out pointers (null where refused).
    unsafe {
        assert_eq!(
            sluice_engine_start(e, err.as_mut_ptr(), err.len()),
            0,
            "{}",
            msg(&err)
        );
        let call = |from: u64, to: u64, by: u32, n: *mut usize, err: &mut [c_char; 512]| {
            let mut rows = rows;
            sluice_engine_load(
                e,
                from,
                to,
                by,
                rows.as_mut_ptr(),
                rows.len(),
                n,
                err.as_mut_ptr(),
                err.len(),
            )
        };
        let bad = SluiceStatus::InvalidArgument as i32;
        assert_eq!(call(100, 100 + max, 0, &mut n, &mut err), bad);
        assert!(msg(&err).contains("at most 900"), "{}", msg(&err));
        assert_eq!(call(101, 100, 0, &mut n, &mut err), bad);
        assert_eq!(call(100, 100, 3, &mut n, &mut err), bad);
        assert!(msg(&err).contains("tenant"), "{}", msg(&err));
        assert_eq!(call(100, 100, 0, ptr::null_mut(), &mut err), bad);
        // Nothing was sent: no rows, in any dimension.
        for by in 0..3 {
            assert_eq!(call(1, max, by, &mut n, &mut err), 0, "{}", msg(&err));
            assert_eq!(n, 0);
        }
        assert_eq!(
            sluice_engine_load(
                e,
                1,
                1,
                0,
                rows.as_mut_ptr(),
                0,
                &mut n,
                err.as_mut_ptr(),
                err.len()
            ),
            0
        );
        assert_eq!(sluice_engine_stop(e, 0, err.as_mut_ptr(), err.len()), 0);
        sluice_engine_free(e);
    }
}
