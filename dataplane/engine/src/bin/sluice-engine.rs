//! Runs the Sluice data plane alone from a config file, without the Go
//! control plane: for benchmarks, tests and hosts that need no admin API.
//!
//! sluice-engine [--config cfg/sluice.toml] [--stats-every SECS]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sluice_engine::{Config, Engine, EngineOptions};

fn main() {
    let mut config = PathBuf::from("cfg/sluice.toml");
    let mut stats_every: Option<u64> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--config" | "-c" => {
                config = args
                    .next()
                    .map(PathBuf::from)
                    .unwrap_or_else(|| usage("--config needs a path"))
            }
            "--stats-every" => {
                stats_every = Some(
                    args.next()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or_else(|| usage("--stats-every needs seconds")),
                )
            }
            "--help" | "-h" => usage(""),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    log_init();
    let cfg = match Config::load(&config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sluice-engine: {e}");
            std::process::exit(2);
        }
    };
    let mut engine = match Engine::new(cfg, EngineOptions::default()) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("sluice-engine: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = engine.start() {
        eprintln!("sluice-engine: {e}");
        std::process::exit(1);
    }
    let st = engine.status();
    println!(
        "sluice-engine: serving on {} with {} worker(s) (hugepages: {})",
        st.listen.map_or("-".into(), |a| a.to_string()),
        st.workers.len(),
        st.hugepages
    );
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(sig, Arc::clone(&stop));
    }
    let mut last = Instant::now();
    // Span records of traced requests: drained and counted, not exported
    // (exporting is sluiced's job; docs/observability.md). Draining keeps
    // the rings from filling, as sluiced does.
    let mut spans = vec![sluice_engine::trace::SpanRecord::default(); 1024];
    let mut drained = 0u64;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
        loop {
            let n = engine.drain_spans(&mut spans);
            drained += n as u64;
            if n < spans.len() {
                break;
            }
        }
        if let Some(s) = stats_every
            && last.elapsed() >= Duration::from_secs(s)
        {
            last = Instant::now();
            let snap = engine.stats();
            println!(
                "ok={} errors={} p50={}us p99={}us",
                snap.total(|w| w.ok),
                snap.workers
                    .iter()
                    .flat_map(|w| w.errors.iter())
                    .map(|(_, v)| v)
                    .sum::<u64>(),
                snap.latency.p50_ns / 1000,
                snap.latency.p99_ns / 1000
            );
        }
    }
    // Per model version: requests, runs and the mean batch (read before the
    // workers go; perf/batching.sh parses these lines).
    let snap = engine.stats();
    for m in snap.models.iter().filter(|m| m.requests > 0) {
        println!(
            "sluice-engine: model {} {}: requests={} inferences={} executions={} batch_fallbacks={}",
            m.name, m.version, m.requests, m.inferences, m.executions, m.batch_fallbacks
        );
    }
    for s in snap.shards.iter().filter(|s| s.requests > 0) {
        println!(
            "sluice-engine: shard {}: queue_p99_us={} service_p50_us={} service_p99_us={}",
            s.name,
            s.queue.p99_ns / 1000,
            s.service.p50_ns / 1000,
            s.service.p99_ns / 1000
        );
    }
    engine.stop(Duration::from_millis(200));
    let snap = engine.stats();
    println!(
        "sluice-engine: stopped; {} responses, {} error frames, {} span records drained, {} dropped",
        snap.total(|w| w.ok),
        snap.workers
            .iter()
            .flat_map(|w| w.errors.iter())
            .map(|(_, v)| v)
            .sum::<u64>(),
        drained,
        snap.total(|w| w.spans_dropped)
    );
}

fn usage(msg: &str) -> ! {
    if !msg.is_empty() {
        eprintln!("sluice-engine: {msg}");
    }
    eprintln!("usage: sluice-engine [--config FILE] [--stats-every SECS]");
    std::process::exit(if msg.is_empty() { 0 } else { 2 });
}

struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::Level::Info
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            eprintln!(
                "sluice-engine: {}: {}",
                r.level().as_str().to_lowercase(),
                r.args()
            );
        }
    }
    fn flush(&self) {}
}

fn log_init() {
    static LOG: StderrLog = StderrLog;
    let _ = log::set_logger(&LOG).map(|()| log::set_max_level(log::LevelFilter::Info));
}
