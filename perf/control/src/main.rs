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
  "auth": {"mode": "none"},
  "io_uring": {"listen": "127.0.0.1:0"},
  "shards": [{"name": "a"}, {"name": "b"}],
  "routes": [{"name": "null", "model": "null", "shard": "a"}],
  "models": [{"name": "null", "version": "1", "kind": "null"}]
}"#;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const ROUTES: [&[u8]; 2] = [
    br#"{"routes": [{"name": "null", "model": "null", "shard": "b"}]}"#,
    br#"{"routes": [{"name": "null", "model": "null", "shard": "a"}]}"#,
];

fn check(rc: i32, err: &[c_char; 512]) -> Result<()> {
    if rc != 0 {
        // SAFETY: the library NUL-terminates the error buffer.
        let m = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) };
        return Err(format!("status {rc}: {}", m.to_string_lossy()).into());
    }
    Ok(())
}

fn pct(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

fn main() -> Result<()> {
    let mut err = [0 as c_char; 512];
    let mut e = ptr::null_mut();
    // SAFETY: valid buffers; `e` lives until freed at the end.
    let rc = unsafe {
        sluice_engine_open(
            CONFIG.as_ptr(),
            CONFIG.len(),
            &mut e,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    check(rc, &err)?;
    // SAFETY: `e` is the engine just opened.
    let rc = unsafe { sluice_engine_start(e, err.as_mut_ptr(), err.len()) };
    check(rc, &err)?;
    control_costs(e)?;
    let addr = listen_addr(e)?;
    let before = phase(e, &addr, false)?;
    let during = phase(e, &addr, true)?;
    println!("null request round trip   p50 µs   p99 µs  p99.9 µs  requests");
    for (name, h) in [("before", &before), ("during", &during)] {
        println!(
            "{name} route replaces {:>9.1}{:>9.1}{:>10.1}{:>10}",
            pct(h, 0.5),
            pct(h, 0.99),
            pct(h, 0.999),
            h.len()
        );
    }
    println!(
        "p99 ratio during/before: {:.2}",
        pct(&during, 0.99) / pct(&before, 0.99)
    );
    // SAFETY: the engine opened above; no thread uses it any more.
    let rc = unsafe { sluice_engine_stop(e, 0, err.as_mut_ptr(), err.len()) };
    check(rc, &err)?;
    // SAFETY: as above; `e` is not used after this.
    unsafe { sluice_engine_free(e) };
    Ok(())
}

/// The cost of a statistics snapshot, the fixed-layout totals and a route
/// replace, each through the C ABI.
fn control_costs(e: *mut SluiceEngine) -> Result<()> {
    let mut err = [0 as c_char; 512];
    let mut stats_h = Histogram::<u64>::new(3)?;
    let mut totals_h = Histogram::<u64>::new(3)?;
    let mut apply_h = Histogram::<u64>::new(3)?;
    for i in 0..2000 {
        let (mut p, mut n) = (ptr::null_mut(), 0usize);
        let t0 = Instant::now();
        // SAFETY: a live engine and valid out-parameters; the buffer it
        // returns is freed once, with its length.
        let rc = unsafe {
            sluice_engine_query(
                e,
                SluiceQuery::Stats as i32,
                &mut p,
                &mut n,
                err.as_mut_ptr(),
                err.len(),
            )
        };
        check(rc, &err)?;
        // SAFETY: as above.
        unsafe { sluice_buf_free(p, n) };
        stats_h.record(t0.elapsed().as_nanos() as u64)?;
        let mut t = SluiceTotals::default();
        let t0 = Instant::now();
        // SAFETY: a live engine and a valid out-parameter.
        let rc = unsafe { sluice_engine_totals(e, &mut t, err.as_mut_ptr(), err.len()) };
        check(rc, &err)?;
        totals_h.record(t0.elapsed().as_nanos() as u64)?;
        if i < 500 {
            let doc = ROUTES[i % 2];
            let t0 = Instant::now();
            // SAFETY: a live engine; `doc` is valid for its length.
            let rc = unsafe {
                sluice_engine_apply(e, doc.as_ptr(), doc.len(), err.as_mut_ptr(), err.len())
            };
            check(rc, &err)?;
            apply_h.record(t0.elapsed().as_nanos() as u64)?;
        }
    }
    println!("control call            p50 µs   p99 µs");
    for (name, h) in [
        ("stats snapshot (JSON)", &stats_h),
        ("totals (fixed struct)", &totals_h),
        ("route replace        ", &apply_h),
    ] {
        println!("{name} {:>9.1}{:>9.1}", pct(h, 0.5), pct(h, 0.99));
    }
    Ok(())
}

/// The engine's data-plane address, from its status.
fn listen_addr(e: *mut SluiceEngine) -> Result<String> {
    let mut err = [0 as c_char; 512];
    let (mut p, mut n) = (ptr::null_mut(), 0usize);
    // SAFETY: a live engine and valid out-parameters.
    let rc = unsafe {
        sluice_engine_query(
            e,
            SluiceQuery::Status as i32,
            &mut p,
            &mut n,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    check(rc, &err)?;
    // SAFETY: the library returned `n` bytes at `p`, freed once below.
    let status = String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(p, n) }).into_owned();
    // SAFETY: as above.
    unsafe { sluice_buf_free(p, n) };
    let addr = status
        .split("\"listen\":\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .ok_or("status names no listen address")?;
    Ok(addr.to_string())
}

/// A closed-loop client's latency for 3 s, with route replaces every 10 ms
/// on another thread when `changing`.
fn phase(e: *mut SluiceEngine, addr: &str, changing: bool) -> Result<Histogram<u64>> {
    let stop = Arc::new(AtomicBool::new(false));
    let replacer = {
        let stop = stop.clone();
        let ep = e as usize;
        std::thread::spawn(move || -> std::result::Result<usize, String> {
            let mut k = 0;
            let mut err = [0 as c_char; 512];
            while changing && !stop.load(Ordering::Relaxed) {
                let doc = ROUTES[k % 2];
                k += 1;
                // SAFETY: the engine outlives this thread (joined below).
                let rc = unsafe {
                    sluice_engine_apply(
                        ep as *mut SluiceEngine,
                        doc.as_ptr(),
                        doc.len(),
                        err.as_mut_ptr(),
                        err.len(),
                    )
                };
                check(rc, &err).map_err(|e| e.to_string())?;
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(k)
        })
    };
    let cfg = ClientConfig {
        poll: PollMode::Spin,
        timeout: Duration::from_secs(1),
        ..ClientConfig::default()
    };
    let mut c = Client::connect(addr, cfg)?;
    let x = [1.0f32; 4];
    let mut h = Histogram::<u64>::new(3)?;
    let t_end = Instant::now() + Duration::from_secs(3);
    let mut failed = None;
    while Instant::now() < t_end {
        let req = Request::new("null", "1").tensor_f32("x", &[1, 4], &x);
        let t0 = Instant::now();
        if let Err(e) = c.call(&req) {
            failed = Some(e);
            break;
        }
        h.record(t0.elapsed().as_nanos() as u64)?;
    }
    stop.store(true, Ordering::Relaxed);
    let k = replacer
        .join()
        .map_err(|_| "the route replacer panicked")??;
    if let Some(e) = failed {
        return Err(format!("a request failed: {e}").into());
    }
    if changing {
        println!("({k} route replaces during the run)");
    }
    Ok(h)
}
