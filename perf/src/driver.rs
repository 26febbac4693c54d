//! The load loop: closed (N outstanding) or open (fixed send schedule), with
//! latency measured from the intended send time in open loop, so a stalled
//! server or a stalled generator cannot hide its delay (coordinated omission).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// The result of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A valid answer.
    Ok,
    /// An error frame with this raw code.
    Server(u16),
    /// No answer in time.
    Timeout,
    /// An answer that matched the id but was not valid.
    Malformed,
}

/// Something that sends requests and yields their outcomes.
pub trait Transport {
    /// Sends one request built from mix entry `entry` and returns its id.
    fn send(&mut self, entry: usize) -> std::io::Result<u64>;
    /// One completion. `wait` `None` returns at once; `Some(d)` waits up to `d`.
    fn poll(&mut self, wait: Option<Duration>) -> std::io::Result<Option<(u64, Outcome)>>;
    /// Requests sent and not yet completed.
    fn outstanding(&self) -> usize;
}

/// How requests are offered.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Load {
    /// Keep this many requests outstanding, sending as soon as one completes.
    Closed {
        /// Requests in flight.
        outstanding: usize,
    },
    /// Send at a fixed rate regardless of answers.
    Open {
        /// Requests per second.
        rate_per_sec: f64,
        /// Most requests in flight; beyond it sends wait, and their wait
        /// counts in their latency.
        outstanding_max: usize,
    },
}

/// When to stop sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// After this many requests (warm-up excluded).
    Requests(u64),
    /// After this long (warm-up excluded).
    Duration(Duration),
}

/// One run's settings.
#[derive(Debug, Clone, Copy)]
pub struct RunConfig {
    /// Offered load.
    pub load: Load,
    /// Stop condition.
    pub stop: Stop,
    /// Spin on the socket (default) rather than sleep in the kernel.
    pub spin: bool,
    /// Traffic sent before measuring starts; not recorded.
    pub warmup: Duration,
    /// Seed of the mix picker.
    pub seed: u64,
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// Round-trip latency of successful requests, in nanoseconds.
    pub latency_ns: Histogram<u64>,
    /// Requests sent in the measured window.
    pub sent: u64,
    /// Successful answers.
    pub ok: u64,
    /// Error answers by code name.
    pub errors: BTreeMap<String, u64>,
    /// Requests without an answer in time.
    pub timeouts: u64,
    /// Answers that were not valid.
    pub malformed: u64,
    /// Socket errors on send or receive (e.g. connection refused).
    pub io_errors: u64,
    /// From the first measured send to the last measured completion.
    pub elapsed: Duration,
}

/// Quantiles listed in the JSON report for plotting.
pub const PLOT_QUANTILES: &[f64] = &[
    0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999, 1.0,
];

/// Latency histogram range: 1 ns to 60 s, 3 significant digits.
pub const LATENCY_NS_MAX: u64 = 60_000_000_000;

impl Report {
    fn new() -> Report {
        Report {
            #[allow(
                clippy::expect_used,
                reason = "constant bounds, valid by hdrhistogram's rules; every loadgen test builds one"
            )]
            latency_ns: Histogram::new_with_bounds(1, LATENCY_NS_MAX, 3)
                .expect("constant bounds are valid"),
            sent: 0,
            ok: 0,
            errors: BTreeMap::new(),
            timeouts: 0,
            malformed: 0,
            io_errors: 0,
            elapsed: Duration::ZERO,
        }
    }

    /// Completed requests per second (answers of any kind).
    pub fn throughput_per_sec(&self) -> f64 {
        let done = self.ok + self.errors.values().sum::<u64>();
        if self.elapsed.is_zero() {
            0.0
        } else {
            done as f64 / self.elapsed.as_secs_f64()
        }
    }

    /// Latency at quantile `q` (0..=1) in µs.
    pub fn quantile_us(&self, q: f64) -> f64 {
        self.latency_ns.value_at_quantile(q) as f64 / 1000.0
    }

    /// Human-readable summary.
    pub fn human(&self) -> String {
        let mut s = format!(
            "sent {} ok {} timeouts {} malformed {} io_errors {} in {:.3} s: {:.0} req/s\n\
             latency µs: p50 {:.1} p90 {:.1} p99 {:.1} p99.9 {:.1} max {:.1}\n",
            self.sent,
            self.ok,
            self.timeouts,
            self.malformed,
            self.io_errors,
            self.elapsed.as_secs_f64(),
            self.throughput_per_sec(),
            self.quantile_us(0.5),
            self.quantile_us(0.9),
            self.quantile_us(0.99),
            self.quantile_us(0.999),
            self.latency_ns.max() as f64 / 1000.0,
        );
        for (code, n) in &self.errors {
            s.push_str(&format!("error {code}: {n}\n"));
        }
        s
    }

    /// Machine-readable summary.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "sent": self.sent,
            "ok": self.ok,
            "timeouts": self.timeouts,
            "malformed": self.malformed,
            "io_errors": self.io_errors,
            "errors": self.errors,
            "elapsed_s": self.elapsed.as_secs_f64(),
            "throughput_per_sec": self.throughput_per_sec(),
            "latency_us": {
                "p50": self.quantile_us(0.5),
                "p90": self.quantile_us(0.9),
                "p99": self.quantile_us(0.99),
                "p99_9": self.quantile_us(0.999),
                "max": self.latency_ns.max() as f64 / 1000.0,
                "mean": self.latency_ns.mean() / 1000.0,
                "count": self.latency_ns.len(),
            },
            // For plotting: [quantile, µs] pairs.
            "percentiles_us": PLOT_QUANTILES
                .iter()
                .map(|&q| [q, self.quantile_us(q)])
                .collect::<Vec<_>>(),
        })
    }
}

/// A small, fast, seeded generator (SplitMix64) for picking mix entries.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// Seeds the generator.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }
    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

struct InFlight {
    start: Instant,
    measured: bool,
}

/// Runs the load. `pick` maps a random number to a mix entry.
pub fn run(t: &mut dyn Transport, pick: &dyn Fn(u64) -> usize, cfg: &RunConfig) -> Report {
    let mut report = Report::new();
    let mut rng = SplitMix64::new(cfg.seed);
    let mut inflight: HashMap<u64, InFlight> = HashMap::new();
    let begin = Instant::now();
    let measure_from = begin + cfg.warmup;
    let send_until = match cfg.stop {
        Stop::Duration(d) => Some(measure_from + d),
        Stop::Requests(_) => None,
    };
    let requests_max = match cfg.stop {
        Stop::Requests(n) => Some(n),
        Stop::Duration(_) => None,
    };
    let mut last_done = measure_from;
    let mut scheduled: u64 = 0;
    let (window, rate) = match cfg.load {
        Load::Closed { outstanding } => (outstanding.max(1), None),
        Load::Open {
            rate_per_sec,
            outstanding_max,
        } => (outstanding_max.max(1), Some(rate_per_sec)),
    };

    loop {
        let now = Instant::now();
        let sending =
            send_until.is_none_or(|u| now < u) && requests_max.is_none_or(|m| report.sent < m);
        // Sends due now.
        while sending && t.outstanding() < window {
            let intended = match rate {
                None => now,
                Some(r) => begin + Duration::from_secs_f64(scheduled as f64 / r),
            };
            if intended > now {
                break;
            }
            if send_until.is_some_and(|u| intended >= u) {
                break;
            }
            let measured = intended >= measure_from;
            if measured && requests_max.is_some_and(|m| report.sent >= m) {
                break;
            }
            scheduled += 1;
            let entry = pick(rng.next_u64());
            match t.send(entry) {
                Ok(id) => {
                    // Open loop: measured from when it should have gone.
                    inflight.insert(
                        id,
                        InFlight {
                            start: intended,
                            measured,
                        },
                    );
                    if measured {
                        report.sent += 1;
                    }
                }
                Err(_) => {
                    // Counted as sent so that a refusing server cannot make
                    // a request-bounded run loop forever.
                    report.io_errors += 1;
                    if measured {
                        report.sent += 1;
                    }
                    break;
                }
            }
        }
        if !sending && t.outstanding() == 0 {
            break;
        }
        let wait = if cfg.spin {
            None
        } else {
            match rate {
                // Window full: nothing can go out before an answer comes.
                Some(r) if sending && t.outstanding() < window => {
                    let next = begin + Duration::from_secs_f64(scheduled as f64 / r);
                    Some(
                        next.saturating_duration_since(Instant::now())
                            .max(Duration::from_micros(1)),
                    )
                }
                _ => Some(Duration::from_millis(100)),
            }
        };
        match t.poll(wait) {
            Ok(Some((id, outcome))) => {
                let done = Instant::now();
                let Some(f) = inflight.remove(&id) else {
                    continue;
                };
                if !f.measured {
                    continue;
                }
                last_done = done;
                match outcome {
                    Outcome::Ok => {
                        report.ok += 1;
                        let ns = done.saturating_duration_since(f.start).as_nanos() as u64;
                        let _ = report.latency_ns.record(ns.clamp(1, LATENCY_NS_MAX));
                    }
                    Outcome::Server(code) => {
                        *report.errors.entry(code_name(code)).or_default() += 1;
                    }
                    Outcome::Timeout => report.timeouts += 1,
                    Outcome::Malformed => report.malformed += 1,
                }
            }
            Ok(None) => {}
            Err(_) => report.io_errors += 1,
        }
        if cfg.spin {
            std::hint::spin_loop();
        }
    }
    report.elapsed = last_done.saturating_duration_since(measure_from);
    report
}

/// The stable name of a raw error code.
pub fn code_name(code: u16) -> String {
    match sluice_wire::ErrorCode::from_u16(code) {
        Some(c) => c.as_str().to_string(),
        None => format!("code_{code}"),
    }
}
