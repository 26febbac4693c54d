//! nats-requester: the load loop of loadgen (closed or open loop, HDR
//! latency) over NATS request-reply, with the same mix files.
//!
//! nats-requester --nats 127.0.0.1:4222 --mix perf/mixes/mlp.toml [--closed 1]
//!     [--rate R] [--duration 5s | --requests N] [--warmup 1s] [--block] [--json]
#![deny(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use sluice_nats_responder::NatsTransport;
use sluice_perf::driver::{self, Load, RunConfig, Stop};
use sluice_perf::mix::Mix;

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (n, unit) = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((s, "s"), |i| s.split_at(i));
    let n: f64 = n.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let secs = match unit {
        "s" => n,
        "ms" => n / 1e3,
        "us" => n / 1e6,
        _ => return Err(format!("bad duration unit in {s:?} (s, ms, us)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"))
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nats-requester: {e}");
            ExitCode::from(1)
        }
    }
}

fn run() -> Result<(), String> {
    let mut nats = SocketAddr::from(([127, 0, 0, 1], 4222));
    let mut subject = "sluice.infer".to_string();
    let mut mix_path = PathBuf::from("perf/mixes/mlp.toml");
    let mut load = Load::Closed { outstanding: 1 };
    let mut stop = Stop::Duration(Duration::from_secs(5));
    let mut warmup = Duration::from_secs(1);
    let mut timeout = Duration::from_secs(1);
    let mut spin = true;
    let mut json = false;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--nats" => nats = val()?.parse().map_err(|e| format!("--nats: {e}"))?,
            "--subject" => subject = val()?,
            "--mix" => mix_path = val()?.into(),
            "--closed" => {
                load = Load::Closed {
                    outstanding: val()?.parse().map_err(|e| format!("--closed: {e}"))?,
                }
            }
            "--rate" => {
                let r: f64 = val()?.parse().map_err(|e| format!("--rate: {e}"))?;
                load = Load::Open {
                    rate_per_sec: r,
                    outstanding_max: 4096,
                };
            }
            "--duration" => stop = Stop::Duration(parse_duration(&val()?)?),
            "--requests" => {
                stop = Stop::Requests(val()?.parse().map_err(|e| format!("--requests: {e}"))?)
            }
            "--warmup" => warmup = parse_duration(&val()?)?,
            "--timeout" => timeout = parse_duration(&val()?)?,
            "--block" => spin = false,
            "--json" => json = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if !sluice_perf::is_loopback(&nats) {
        return Err(format!("{nats} is not a loopback address"));
    }
    let mix = Mix::load(&mix_path).map_err(|e| format!("{}: {e}", mix_path.display()))?;
    let mut t = NatsTransport::connect(nats, &subject, &mix, timeout).map_err(|e| e.to_string())?;
    let cfg = RunConfig {
        load,
        stop,
        spin,
        warmup,
        seed: 1,
    };
    let report = driver::run(&mut t, &|r| mix.pick(r), &cfg);
    if json {
        println!("{}", report.json());
    } else {
        println!("{}", report.human());
    }
    Ok(())
}
