//! The engine's USDT probes under a real bpftrace: attach to this test
//! process, send N answered requests and N refused ones, and check how
//! often each probe fired. Needs root, bpftrace and the probes compiled in
//! (sys/sdt.h, systemtap-sdt-dev): `scripts/test-usdt.sh` runs it
//! (`--ignored`) from scripts/test.sh as root.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use sluice_wire::{ErrorCode, Kind};

const PROBES: [&str; 11] = [
    "parse",
    "auth",
    "validate",
    "route",
    "admit",
    "infer_start",
    "infer_end",
    "send",
    "pool_alloc",
    "pool_free",
    "error",
];

#[test]
#[ignore = "needs root and bpftrace: scripts/test-usdt.sh runs it"]
fn every_probe_fires_once_per_request_under_bpftrace() {
    assert!(
        probes_sys::compiled_in(),
        "probes compiled out: install systemtap-sdt-dev and rebuild"
    );
    let mut e = started(test_config(""));
    let exe = std::env::current_exe().unwrap();
    let pid = std::process::id();
    let script: String = PROBES
        .iter()
        .map(|p| format!("usdt:{}:sluice:{p} {{ @{p} = count(); }}\n", exe.display()))
        .collect();
    let mut bt = Command::new("bpftrace")
        .args(["-p", &pid.to_string(), "-e", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bpftrace runs");
    let mut out = BufReader::new(bt.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.starts_with("Attaching"), "bpftrace said {line:?}");
    // The semaphores are set as the probes are attached, one by one.
    let t = Instant::now();
    while !probes_sys::all_attached() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "semaphores never set"
        );
        std::thread::sleep(Duration::from_millis(10));
    }

    const N: u64 = 200;
    let s = client();
    let mut buf = vec![0u8; 4096];
    for id in 0..N {
        let n = build(
            &Req {
                id: next_id() + id,
                ..Req::default()
            },
            &mut buf,
        );
        let a = roundtrip(&s, e.local_addr().unwrap(), &buf[..n]);
        assert_eq!(answer_kind(&a).0, Kind::Response);
        let n = build(
            &Req {
                id: next_id(),
                model: "nope",
                ..Req::default()
            },
            &mut buf,
        );
        let a = roundtrip(&s, e.local_addr().unwrap(), &buf[..n]);
        assert_eq!(answer_kind(&a).1, Some(ErrorCode::UnknownModel));
    }
    std::thread::sleep(Duration::from_millis(200));
    // SIGINT: bpftrace prints its maps and exits.
    Command::new("kill")
        .args(["-INT", &bt.id().to_string()])
        .status()
        .unwrap();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let status = bt.wait().unwrap();
    let mut err = String::new();
    bt.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(status.success(), "bpftrace: {status}\n{err}");
    let counts: BTreeMap<String, u64> = rest
        .lines()
        .filter_map(|l| {
            let (k, v) = l.strip_prefix('@')?.split_once(": ")?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect();
    // N answered (null model) and N refused: "nope" is outside tenant
    // acme's model list, refused after authentication, before validation.
    let want: BTreeMap<String, u64> = [
        ("parse", 2 * N),
        ("auth", 2 * N),
        ("validate", N),
        ("route", N),
        ("admit", N),
        ("infer_start", N),
        ("infer_end", N),
        ("send", 2 * N), // one answer a burst: the client waits for each
        ("pool_alloc", 2 * N),
        ("pool_free", 0), // only buffers returned unsent
        ("error", N),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(counts, want, "probe counts\n{rest}");
    // Detached: the semaphores are back to 0, the probes cost a test again.
    assert!(!probes_sys::any_attached());

    // The shipped scripts, all three at once, on the same kind of traffic.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut runs: Vec<_> = ["bytes_by_tenant", "errors_by_code", "stage_latency"]
        .iter()
        .map(|name| {
            let path = root.join(format!("scripts/trace/{name}.bt"));
            let mut c = Command::new("bpftrace")
                .args(["-p", &pid.to_string()])
                .arg(&path)
                .arg(&exe)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("bpftrace runs");
            let mut r = BufReader::new(c.stdout.take().unwrap());
            let mut l = String::new();
            r.read_line(&mut l).unwrap();
            assert!(l.starts_with("Attaching"), "{name}: {l:?}");
            (name, c, r)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    const M: u64 = 50;
    for _ in 0..M {
        for model in ["null", "nope"] {
            let n = build(
                &Req {
                    id: next_id(),
                    model,
                    ..Req::default()
                },
                &mut buf,
            );
            roundtrip(&s, e.local_addr().unwrap(), &buf[..n]);
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let mut outs = BTreeMap::new();
    for (name, c, r) in &mut runs {
        Command::new("kill")
            .args(["-INT", &c.id().to_string()])
            .status()
            .unwrap();
        let mut o = String::new();
        r.read_to_string(&mut o).unwrap();
        assert!(c.wait().unwrap().success(), "{name}");
        outs.insert(name.to_string(), o);
    }
    let code = ErrorCode::UnknownModel as u32;
    let bytes = &outs["bytes_by_tenant"];
    assert!(
        bytes.contains(&format!("@frames_by_tenant[7]: {}", 2 * M)),
        "{bytes}"
    );
    assert!(bytes.contains("@bytes_by_tenant[7]: "), "{bytes}");
    let errs = &outs["errors_by_code"];
    assert!(
        errs.contains(&format!("@errors_by_code[{code}]: {M}"))
            && errs.contains(&format!("@errors_by_tenant_code[7, {code}]: {M}")),
        "{errs}"
    );
    let lat = &outs["stage_latency"];
    for stage in ["1 parse+auth+validate+route", "2 queue wait", "3 inference"] {
        assert!(lat.contains(&format!("@stage_ns[{stage}]:")), "{lat}");
    }
    e.stop(Duration::ZERO);
}
