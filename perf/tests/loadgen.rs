//! The load loop against real servers on loopback, and the loadgen binary.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::process::Command;
use std::time::Duration;

use sluice_perf::driver::{self, Load, RunConfig, Stop};
use sluice_perf::mix::Mix;
use sluice_perf::transport::SluiceTransport;
use sluice_perf::uring::UringEchoConfig;

fn mix(entries: &[(&str, u32)]) -> Mix {
    let mut s = String::new();
    for (model, weight) in entries {
        s.push_str(&format!(
            "[[request]]\nweight = {weight}\nmodel = \"{model}\"\nversion = \"1\"\ntenant_id = 1\nkey = \"k\"\n\
             [[request.tensors]]\nname = \"x\"\ndtype = \"f32\"\nshape = [2, 2]\nfill = 1.5\n"
        ));
    }
    Mix::parse(&s).unwrap()
}

#[test]
fn closed_loop_counts_answers_and_errors_by_code() {
    let server = common::sluice_responder(Duration::ZERO);
    let m = mix(&[("null", 3), ("busy", 1)]);
    let mut t = SluiceTransport::connect(server.addr, &m, Duration::from_secs(2), true).unwrap();
    let cfg = RunConfig {
        load: Load::Closed { outstanding: 8 },
        stop: Stop::Requests(2000),
        spin: true,
        warmup: Duration::ZERO,
        seed: 3,
    };
    let r = driver::run(&mut t, &|x| m.pick(x), &cfg);
    let busy = r.errors.get("busy").copied().unwrap_or(0);
    assert_eq!(r.sent, 2000);
    assert_eq!(r.ok + busy, 2000, "{r:?}");
    assert_eq!(r.errors.len(), 1);
    assert_eq!(
        r.latency_ns.len(),
        r.ok,
        "only successes are in the histogram"
    );
    // Weights 3:1 with a fixed seed; wide bounds, the split is not the point.
    assert!((300..700).contains(&busy), "busy {busy}");
    assert_eq!((r.timeouts, r.malformed, r.io_errors), (0, 0, 0));
    assert_eq!(server.stop(), 2000);
}

#[test]
fn open_loop_measures_from_the_intended_send_time() {
    // The first request stalls the server 60 ms. With one request allowed in
    // flight, the requests scheduled during the stall go out late, and their
    // latency must include that wait (no coordinated omission): at 1000/s,
    // about 30 of them are scheduled 30 ms or more before they can be sent.
    let server = common::sluice_responder(Duration::from_millis(60));
    let m = mix(&[("stall", 1)]);
    let mut t = SluiceTransport::connect(server.addr, &m, Duration::from_secs(2), true).unwrap();
    let cfg = RunConfig {
        load: Load::Open {
            rate_per_sec: 1000.0,
            outstanding_max: 1,
        },
        stop: Stop::Requests(100),
        spin: true,
        warmup: Duration::ZERO,
        seed: 1,
    };
    let r = driver::run(&mut t, &|x| m.pick(x), &cfg);
    assert_eq!(r.ok, 100);
    let slow = r
        .latency_ns
        .count_between(30_000_000, driver::LATENCY_NS_MAX);
    assert!(slow >= 20, "only {slow} requests carry the stall");
    assert!(r.latency_ns.max() >= 60_000_000);
}

#[test]
fn open_loop_sends_on_schedule() {
    let server = common::sluice_responder(Duration::ZERO);
    let m = mix(&[("null", 1)]);
    let mut t = SluiceTransport::connect(server.addr, &m, Duration::from_secs(2), false).unwrap();
    let cfg = RunConfig {
        load: Load::Open {
            rate_per_sec: 2000.0,
            outstanding_max: 64,
        },
        stop: Stop::Requests(200),
        spin: false,
        warmup: Duration::ZERO,
        seed: 1,
    };
    let r = driver::run(&mut t, &|x| m.pick(x), &cfg);
    assert_eq!((r.sent, r.ok), (200, 200));
    // 200 sends at 2000/s cannot finish before the last one is due (99.5 ms).
    assert!(
        r.elapsed >= Duration::from_micros(99_500),
        "{:?}",
        r.elapsed
    );
}

#[test]
fn timeouts_are_counted() {
    // Nothing answers: the port is bound but never read.
    let quiet = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let m = mix(&[("null", 1)]);
    let mut t = SluiceTransport::connect(
        quiet.local_addr().unwrap(),
        &m,
        Duration::from_millis(30),
        true,
    )
    .unwrap();
    let cfg = RunConfig {
        load: Load::Closed { outstanding: 4 },
        stop: Stop::Requests(8),
        spin: true,
        warmup: Duration::ZERO,
        seed: 1,
    };
    let r = driver::run(&mut t, &|x| m.pick(x), &cfg);
    assert_eq!((r.sent, r.ok, r.timeouts), (8, 0, 8));
    assert!(r.latency_ns.is_empty());
}

fn loadgen() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_loadgen"));
    c.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    c
}

#[test]
fn loadgen_binary_measures_the_echo_floor_as_json() {
    let server = common::uring_echo(UringEchoConfig {
        busy_poll: false,
        ..UringEchoConfig::default()
    });
    let out = loadgen()
        .args([
            "--mode",
            "echo",
            "--addr",
            &server.addr.to_string(),
            "--closed",
            "4",
        ])
        .args([
            "--requests",
            "400",
            "--warmup",
            "50ms",
            "--json",
            "--timeout",
            "5s",
            "--mix",
            "perf/mixes/mixed.toml",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["mode"], "echo");
    assert_eq!(v["sent"], 400);
    assert_eq!(v["ok"], 400);
    assert_eq!(v["latency_us"]["count"], 400);
    let p50 = v["latency_us"]["p50"].as_f64().unwrap();
    let p99 = v["latency_us"]["p99"].as_f64().unwrap();
    let max = v["latency_us"]["max"].as_f64().unwrap();
    assert!(p50 > 0.0 && p50 <= p99 && p99 <= max, "{v}");
    assert!(v["throughput_per_sec"].as_f64().unwrap() > 0.0);
    let pts = v["percentiles_us"].as_array().unwrap();
    assert_eq!(pts.len(), sluice_perf::driver::PLOT_QUANTILES.len());
    let us: Vec<f64> = pts.iter().map(|p| p[1].as_f64().unwrap()).collect();
    assert!(us.windows(2).all(|w| w[0] <= w[1]), "not monotonic: {us:?}");
    assert_eq!(us.last(), Some(&max));
    // The echo datagrams are the mix's requests, byte for byte in size.
    let sizes: Vec<u64> = v["extra"]["datagram_bytes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(sizes.len(), 3);
    assert!(sizes.iter().all(|&s| s > 96));
}

#[test]
fn loadgen_binary_drives_sluice_and_prints_text() {
    let server = common::sluice_responder(Duration::ZERO);
    let out = loadgen()
        .args([
            "--addr",
            &server.addr.to_string(),
            "--rate",
            "5000",
            "--requests",
            "300",
            "--block",
            "--timeout",
            "5s",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("sent 300 ok 300 timeouts 0"), "{text}");
    assert!(text.contains("latency µs: p50"), "{text}");
}

#[test]
fn loadgen_refuses_remote_addresses_and_bad_arguments() {
    let out = loadgen()
        .args(["--addr", "10.99.0.2:9", "--requests", "1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not loopback"));

    for bad in [
        &["--closed", "0"][..],
        &["--rate", "-5"],
        &["--duration", "5parsecs"],
        &["--mix", "perf/mixes/does-not-exist.toml"],
        &["--closed", "2", "--rate", "10"],
    ] {
        let out = loadgen()
            .args(bad)
            .args(["--requests", "1"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad:?} was accepted");
        assert!(!out.stderr.is_empty(), "{bad:?} gave no message");
    }
}

#[test]
fn mmsg_client_counts_answers_and_errors_and_checks_echoes() {
    use sluice_perf::mmsg::MmsgTransport;
    let cfg = RunConfig {
        load: Load::Closed { outstanding: 16 },
        stop: Stop::Requests(2000),
        spin: true,
        warmup: Duration::ZERO,
        seed: 3,
    };
    // Against a Sluice responder: answers and error codes, as the client.
    let server = common::sluice_responder(Duration::ZERO);
    let m = mix(&[("null", 3), ("busy", 1)]);
    let mut t = MmsgTransport::connect(server.addr, &m, Duration::from_secs(2), false).unwrap();
    let r = driver::run(&mut t, &|x| m.pick(x), &cfg);
    let busy = r.errors.get("busy").copied().unwrap_or(0);
    assert_eq!(r.sent, 2000);
    assert_eq!(r.ok + busy, 2000, "{r:?}");
    assert!((300..700).contains(&busy), "busy {busy}");
    assert_eq!(
        (r.timeouts, r.malformed, r.io_errors, t.ignored),
        (0, 0, 0, 0)
    );
    // Several datagrams per system call on average (16 in flight).
    assert!(
        t.send_calls < 2000 && t.recv_calls < 2000,
        "{} {}",
        t.send_calls,
        t.recv_calls
    );
    assert_eq!(server.stop(), 2000);
    // Against the echo: every echo is a signed request whose tag verifies.
    let echo = common::uring_echo(UringEchoConfig {
        busy_poll: false,
        ..UringEchoConfig::default()
    });
    let m = mix(&[("null", 1)]);
    let mut t = MmsgTransport::connect(echo.addr, &m, Duration::from_secs(2), true).unwrap();
    let r = driver::run(&mut t, &|x| m.pick(x), &cfg);
    assert_eq!((r.sent, r.ok), (2000, 2000), "{r:?}");
    assert_eq!((r.timeouts, r.malformed, t.ignored), (0, 0, 0));
    drop(echo);
}
