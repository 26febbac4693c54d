//! Silero VAD, chunk by chunk: a stateful stream (the appliance keeps the
//! recurrent state; each request carries the 576-sample step, each answer
//! the speech probability) against plain requests that carry the state both
//! ways (the client sends `state` and gets `stateN` back), in one run, on
//! one socket, alternating rounds so both see the same machine.
//! perf/streams.sh starts the engine and runs this.
#![deny(unsafe_code)]

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use sluice_client::{Client, ClientConfig, PollMode, Request, StateStream, TransportMode};

#[derive(Debug, Parser)]
#[command(name = "stream-bench")]
struct Args {
    /// Server address.
    #[arg(long, default_value = "127.0.0.1:7070")]
    addr: SocketAddr,
    /// Model and version (a stream model with state `state` <- `stateN`).
    #[arg(long, default_value = "silero")]
    model: String,
    #[arg(long, default_value = "6")]
    version: String,
    /// Tenant id and key (hex).
    #[arg(long, default_value_t = 7)]
    tenant: u32,
    #[arg(long)]
    key_hex: String,
    /// Steps per stream (one stream per round per mode).
    #[arg(long, default_value_t = 312)]
    steps: u32,
    /// Rounds (each: one stream and one plain run).
    #[arg(long, default_value_t = 20)]
    rounds: u32,
}

const STEP: usize = 576;
const STATE: usize = 2 * 128;

fn hex(s: &str) -> Option<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok()))
        .collect()
}

fn hist() -> Histogram<u64> {
    #[allow(
        clippy::expect_used,
        reason = "constant bounds, valid by hdrhistogram's rules"
    )]
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds")
}

fn audio(step: u32) -> Vec<f32> {
    // A tone that changes with the step: the work is the same either way.
    (0..STEP)
        .map(|i| ((step as f32 * 0.37 + i as f32 * 0.05).sin()) * 0.2)
        .collect()
}

fn main() -> ExitCode {
    let a = Args::parse();
    let Some(key) = hex(&a.key_hex) else {
        eprintln!("stream-bench: --key-hex is not hex");
        return ExitCode::FAILURE;
    };
    let cfg = ClientConfig {
        tenant_id: a.tenant,
        key: Some(key),
        timeout: Duration::from_secs(2),
        poll: PollMode::Spin,
        transport: TransportMode::Udp,
        ..ClientConfig::default()
    };
    let mut c = match Client::connect(a.addr, cfg) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("stream-bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let sr = [16000i64];
    let (mut hs, mut hp) = (hist(), hist());
    let (mut req_s, mut ans_s, mut req_p, mut ans_p) = (0u64, 0u64, 0u64, 0u64);
    let mut errors = 0u64;
    for _ in 0..a.rounds {
        let mut s = StateStream::with_random_id();
        for step in 0..a.steps {
            let x = audio(step);
            let req = Request::new(&a.model, &a.version)
                .tensor_f32("input", &[1, STEP as u64], &x)
                .tensor_i64("sr", &[], &sr);
            let t = Instant::now();
            let r = if step + 1 == a.steps {
                s.finish(&mut c, req)
            } else {
                s.step(&mut c, req)
            };
            let dt = t.elapsed().as_nanos() as u64;
            match r {
                Ok(resp) => {
                    hs.saturating_record(dt);
                    req_s += (STEP * 4 + 8) as u64;
                    ans_s += resp.frame().payload_len() as u64;
                }
                Err(e) => {
                    errors += 1;
                    eprintln!("stream step {step}: {e}");
                    break;
                }
            }
        }
        let mut state = vec![0f32; STATE];
        for step in 0..a.steps {
            let x = audio(step);
            let req = Request::new(&a.model, &a.version)
                .tensor_f32("input", &[1, STEP as u64], &x)
                .tensor_f32("state", &[2, 1, 128], &state)
                .tensor_i64("sr", &[], &sr);
            let t = Instant::now();
            let r = c.call(&req);
            let dt = t.elapsed().as_nanos() as u64;
            match r.and_then(|resp| {
                let next = resp
                    .tensor("stateN")
                    .ok_or(sluice_client::ClientError::Malformed("no stateN"))?
                    .to_f32_vec()?;
                Ok((resp.frame().payload_len(), next))
            }) {
                Ok((len, next)) => {
                    hp.saturating_record(dt);
                    req_p += ((STEP + STATE) * 4 + 8) as u64;
                    ans_p += len as u64;
                    state = next;
                }
                Err(e) => {
                    errors += 1;
                    eprintln!("plain step {step}: {e}");
                    break;
                }
            }
        }
    }
    let us = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let n = |h: &Histogram<u64>| h.len().max(1);
    println!(
        "{{\"stream\":{{\"n\":{},\"p50_us\":{:.1},\"p99_us\":{:.1},\"request_body_bytes\":{},\"answer_body_bytes\":{}}},\
\"plain\":{{\"n\":{},\"p50_us\":{:.1},\"p99_us\":{:.1},\"request_body_bytes\":{},\"answer_body_bytes\":{}}},\"errors\":{}}}",
        hs.len(),
        us(&hs, 0.5),
        us(&hs, 0.99),
        req_s / n(&hs),
        ans_s / n(&hs),
        hp.len(),
        us(&hp, 0.5),
        us(&hp, 0.99),
        req_p / n(&hp),
        ans_p / n(&hp),
        errors
    );
    if errors > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
