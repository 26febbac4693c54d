//! Control-plane costs, measured through the same C ABI the Go daemon uses:
//! a statistics snapshot (one JSON query), the fixed-layout totals, and a
//! route replace (validate, compile, publish, wait for every worker). Then a
//! closed-loop client runs against the engine and its latency is compared
//! before and during a stream of route replaces, in one run.
//!
//! cargo run --release -p sluice-control-bench
#![allow(unsafe_code)] // calls the C ABI as C would

use std::ffi::c_char;
use std::ptr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use sluice_client::{Client, ClientConfig, PollMode, Request};
use sluice_ffi::*;

const CONFIG: &str = r#"{
  "engine": {"workers": [1], "poll": "busy"},
  "io_uring": {"listen": "127.0.0.1:0"},
  "shards": [{"name": "a"}, {"name": "b"}],
  "routes": [{"name": "null", "model": "null", "shard": "a"}],
  "models": [{"name": "null", "version": "1", "kind": "null"}]
}"#;

fn check(rc: i32, err: &[c_char; 512]) {
    if rc != 0 {
        // SAFETY: the library NUL-terminates the error buffer.
        let m = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) };
        panic!("status {rc}: {}", m.to_string_lossy());
    }
}

fn pct(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

fn main() {
    let mut err = [0 as c_char; 512];
    let mut e = ptr::null_mut();
    // SAFETY (whole function): valid buffers; `e` lives until freed at the end.
    unsafe {
        check(
            sluice_engine_open(
                CONFIG.as_ptr(),
                CONFIG.len(),
                &mut e,
                err.as_mut_ptr(),
                err.len(),
            ),
            &err,
        );
        check(sluice_engine_start(e, err.as_mut_ptr(), err.len()), &err);
    }
    let routes = [
        br#"{"routes": [{"name": "null", "model": "null", "shard": "b"}]}"#.as_slice(),
        br#"{"routes": [{"name": "null", "model": "null", "shard": "a"}]}"#.as_slice(),
    ];
    let mut stats_h = Histogram::<u64>::new(3).unwrap();
    let mut totals_h = Histogram::<u64>::new(3).unwrap();
    let mut apply_h = Histogram::<u64>::new(3).unwrap();
    for i in 0..2000 {
        let (mut p, mut n) = (ptr::null_mut(), 0usize);
        let t0 = Instant::now();
        // SAFETY: as above.
        unsafe {
            check(
                sluice_engine_query(
                    e,
                    SluiceQuery::Stats as i32,
                    &mut p,
                    &mut n,
                    err.as_mut_ptr(),
                    err.len(),
                ),
                &err,
            );
            sluice_buf_free(p, n);
        }
        stats_h.record(t0.elapsed().as_nanos() as u64).unwrap();
        let mut t = SluiceTotals::default();
        let t0 = Instant::now();
        // SAFETY: as above.
        unsafe {
            check(
                sluice_engine_totals(e, &mut t, err.as_mut_ptr(), err.len()),
                &err,
            )
        };
        totals_h.record(t0.elapsed().as_nanos() as u64).unwrap();
        if i < 500 {
            let doc = routes[i % 2];
            let t0 = Instant::now();
            // SAFETY: as above.
            unsafe {
                check(
                    sluice_engine_apply(e, doc.as_ptr(), doc.len(), err.as_mut_ptr(), err.len()),
                    &err,
                )
            };
            apply_h.record(t0.elapsed().as_nanos() as u64).unwrap();
        }
    }
    println!("control call            p50 µs   p99 µs");
    println!(
        "stats snapshot (JSON) {:>9.1}{:>9.1}",
        pct(&stats_h, 0.5),
        pct(&stats_h, 0.99)
    );
    println!(
        "totals (fixed struct) {:>9.1}{:>9.1}",
        pct(&totals_h, 0.5),
        pct(&totals_h, 0.99)
    );
    println!(
        "route replace         {:>9.1}{:>9.1}",
        pct(&apply_h, 0.5),
        pct(&apply_h, 0.99)
    );

    // Latency of a closed-loop client before and during route replaces.
    let (mut p, mut n) = (ptr::null_mut(), 0usize);
    // SAFETY: as above.
    let status = unsafe {
        check(
            sluice_engine_query(
                e,
                SluiceQuery::Status as i32,
                &mut p,
                &mut n,
                err.as_mut_ptr(),
                err.len(),
            ),
            &err,
        );
        let s = String::from_utf8_lossy(std::slice::from_raw_parts(p, n)).into_owned();
        sluice_buf_free(p, n);
        s
    };
    let addr = status
        .split("\"listen\":\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("listen")
        .to_string();
    let phase = |changing: bool| -> Histogram<u64> {
        let stop = Arc::new(AtomicBool::new(false));
        let replacer = {
            let stop = stop.clone();
            let ep = e as usize;
            std::thread::spawn(move || {
                let mut k = 0;
                let mut err = [0 as c_char; 512];
                while changing && !stop.load(Ordering::Relaxed) {
                    let doc = routes[k % 2];
                    k += 1;
                    // SAFETY: the engine outlives this thread (joined below).
                    unsafe {
                        check(
                            sluice_engine_apply(
                                ep as *mut SluiceEngine,
                                doc.as_ptr(),
                                doc.len(),
                                err.as_mut_ptr(),
                                err.len(),
                            ),
                            &err,
                        )
                    };
                    std::thread::sleep(Duration::from_millis(10));
                }
                k
            })
        };
        let cfg = ClientConfig {
            poll: PollMode::Spin,
            timeout: Duration::from_secs(1),
            ..ClientConfig::default()
        };
        let mut c = Client::connect(addr.as_str(), cfg).expect("client");
        let x = [1.0f32; 4];
        let mut h = Histogram::<u64>::new(3).unwrap();
        let t_end = Instant::now() + Duration::from_secs(3);
        while Instant::now() < t_end {
            let req = Request::new("null", "1").tensor_f32("x", &[1, 4], &x);
            let t0 = Instant::now();
            c.call(&req).expect("answered");
            h.record(t0.elapsed().as_nanos() as u64).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        let k = replacer.join().unwrap();
        if changing {
            println!("({k} route replaces during the run)");
        }
        h
    };
    let before = phase(false);
    let during = phase(true);
    println!("null request round trip   p50 µs   p99 µs  p99.9 µs  requests");
    println!(
        "before route replaces {:>9.1}{:>9.1}{:>10.1}{:>10}",
        pct(&before, 0.5),
        pct(&before, 0.99),
        pct(&before, 0.999),
        before.len()
    );
    println!(
        "during route replaces {:>9.1}{:>9.1}{:>10.1}{:>10}",
        pct(&during, 0.5),
        pct(&during, 0.99),
        pct(&during, 0.999),
        during.len()
    );
    println!(
        "p99 ratio during/before: {:.2}",
        pct(&during, 0.99) / pct(&before, 0.99)
    );
    // SAFETY: as above.
    unsafe {
        check(sluice_engine_stop(e, 0, err.as_mut_ptr(), err.len()), &err);
        sluice_engine_free(e);
    }
}
