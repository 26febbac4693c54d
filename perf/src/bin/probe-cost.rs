//! The cost of a USDT probe nobody is attached to, against an empty loop of
//! the same run: each iteration calls the engine's data-path probes the
//! way the worker does (one semaphore test each; the argument closure is
//! never run). Median of 11 rounds. With a tracer attached (`bpftrace -p`),
//! the same loop measures an enabled probe.
//!
//!   probe-cost [ITERATIONS]   (default 20,000,000)

use std::hint::black_box;
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000_000);
    let mut base = Vec::new();
    let mut probed = Vec::new();
    for _ in 0..11 {
        let t = Instant::now();
        let mut acc = 0u64;
        for i in 0..n {
            acc = acc.wrapping_add(black_box(i));
        }
        black_box(acc);
        base.push(t.elapsed().as_nanos() as f64 / n as f64);

        let t = Instant::now();
        let mut acc = 0u64;
        for i in 0..n {
            acc = acc.wrapping_add(black_box(i));
            probes_sys::parse(|| (i, 1, 64));
            probes_sys::auth(|| (i, 1, 1));
            probes_sys::validate(|| (i, 0));
            probes_sys::route(|| (i, 0));
            probes_sys::admit(|| (i, 0, 1));
            probes_sys::infer_start(|| (i, 0));
            probes_sys::infer_end(|| (i, 0, 0));
            probes_sys::send(|| (1, 64));
            probes_sys::pool_alloc(|| (0,));
        }
        black_box(acc);
        probed.push(t.elapsed().as_nanos() as f64 / n as f64);
    }
    let (b, p) = (median(base), median(probed));
    println!(
        "probes compiled in: {}; attached: {}",
        probes_sys::compiled_in(),
        probes_sys::any_attached()
    );
    println!(
        "empty loop {b:.2} ns/iter; with the 9 probes of one request {p:.2} ns/iter: {:.2} ns per request ({:.3} ns a probe), ratio {:.2}",
        p - b,
        (p - b) / 9.0,
        p / b
    );
}
