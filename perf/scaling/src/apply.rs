//! Apply time (issue 22 items 5 and 8): `Engine::apply` (what `PUT
//! /v1/routes` calls through the C ABI: validate, compile, publish, wait)
//! until every worker runs on the new epoch, for 1, 1,000 and 10,000 routes,
//! on two real io_uring workers that are
//!
//! - busy: `poll = "busy"`, they see the epoch at their next burst boundary
//!   (the floor);
//! - idle, adaptive, poked: asleep on their ring, woken by the eventfd the
//!   publish writes;
//! - idle, adaptive, not poked (`EngineOptions::no_wake`, what issue 22
//!   measured): they see the epoch when their sleep (up to 10 ms) ends.
//!
//! Beside each, the control-side compile alone (`Tables::build`) of the same
//! table, so apply minus compile is the time to reach the workers.

use std::time::{Duration, Instant};

use sluice_engine::config::{Config, RouteCfg};
use sluice_engine::{Engine, EngineOptions, LiveConfig};

use crate::Result;

const ROUNDS: usize = 15;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Busy,
    Poked,
    NotPoked,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Busy => "busy poll",
            Mode::Poked => "idle adaptive, poked",
            Mode::NotPoked => "idle adaptive, not poked",
        }
    }
}

/// `n` exact-intent routes to shard `shard` (two tables that differ in
/// every route, so each apply replaces the whole set).
fn table(n: usize, shard: &str) -> Vec<RouteCfg> {
    (0..n)
        .map(|i| RouteCfg {
            name: format!("r{i}"),
            model: Some("null".into()),
            intent: Some(format!("i{i}")),
            shard: shard.into(),
            ..RouteCfg::default()
        })
        .collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median apply time (µs) of `ROUNDS` applies of `n` routes in `mode`.
fn run(base: &Config, mode: Mode, n: usize) -> Result<f64> {
    let mut cfg = base.clone();
    cfg.engine.workers = vec![0, 1];
    cfg.engine.poll = if mode == Mode::Busy {
        sluice_engine::config::PollMode::Busy
    } else {
        sluice_engine::config::PollMode::Adaptive
    };
    let mut e = Engine::new(
        cfg.clone(),
        EngineOptions {
            no_pin: true,
            no_wake: mode == Mode::NotPoked,
            ..EngineOptions::default()
        },
    )?;
    e.start()?;
    let mut lives = Vec::new();
    for shard in ["main", "other"] {
        let mut live = LiveConfig::of(&cfg);
        live.routes = table(n, shard);
        lives.push(live);
    }
    let mut v = Vec::with_capacity(ROUNDS);
    for r in 0..ROUNDS + 1 {
        // Idle workers spin 200 µs, then sleep: give them time to.
        std::thread::sleep(Duration::from_millis(if mode == Mode::Busy {
            2
        } else {
            25
        }));
        let t = Instant::now();
        e.apply(lives[r % 2].clone())?;
        // The first apply warms the allocator and the table's caches.
        if r > 0 {
            v.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    e.stop(Duration::ZERO);
    Ok(median(v))
}

/// Median `Tables::build` time (µs) of the same table.
fn compile_us(cfg: &Config, n: usize) -> Result<f64> {
    let mut live = LiveConfig::of(cfg);
    live.routes = table(n, "main");
    let mut v = Vec::new();
    for _ in 0..7 {
        let t = Instant::now();
        std::hint::black_box(crate::build(&live, cfg)?);
        v.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(median(v))
}

pub fn apply(cfg: &Config) -> Result<()> {
    println!(
        "## 7. Apply time to two io_uring workers: Engine::apply until every worker runs on the new epoch (median of {ROUNDS}, µs)\n"
    );
    println!(
        "| routes | compile alone µs | busy poll µs | idle adaptive, poked µs | idle adaptive, not poked µs | poked / busy | not poked / poked |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for n in [1usize, 1_000, 10_000] {
        let c = compile_us(cfg, n)?;
        let mut t = [0.0f64; 3];
        for (i, m) in [Mode::Busy, Mode::Poked, Mode::NotPoked]
            .into_iter()
            .enumerate()
        {
            t[i] = run(cfg, m, n).map_err(|e| format!("{} {n}: {e}", m.name()))?;
        }
        println!(
            "| {n} | {c:.0} | {:.0} | {:.0} | {:.0} | {:.2}× | {:.1}× |",
            t[0],
            t[1],
            t[2],
            t[1] / t[0],
            t[2] / t[1]
        );
    }
    println!();
    Ok(())
}
