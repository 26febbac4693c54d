//! Weights shared across workers, against the real ONNX Runtime: every
//! session of a model version shares one copy of its pre-packed weights, so
//! a worker added costs far less than the model's weights, and answers stay
//! bit-identical to sessions that keep their own copy.
//!
//! RSS is measured in child processes (this test binary run again on the
//! ignored `rss_child` test), one with sharing and one without, so neither
//! sees the other's heap.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::process::Command;

use common::*;
use sluice_infer::{AlignedBuf, OrtModel, RunStats};
use sluice_models::bundled::{self, WEIGHTS_IN, WEIGHTS_OUT};
use sluice_wire::{DType, Frame};

const CHILD_ENV: &str = "SLUICE_WEIGHTS_CHILD";
const WEIGHTS_BYTES: f64 = (WEIGHTS_IN * WEIGHTS_OUT * 4) as f64;
/// Sessions loaded by a child (RSS is reported after 1, 2 and 4).
const SESSIONS: usize = 4;

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

fn run(model: &mut OrtModel, x: &[f32]) -> Vec<f32> {
    let data = f32_bytes(x);
    let rx = request(
        "weights",
        "",
        &[Input {
            name: "x",
            dtype: DType::F32,
            dims: &[1, WEIGHTS_IN as u64],
            data: &data,
        }],
    );
    let req = Frame::new_checked(rx.as_slice()).unwrap();
    let mut tx = AlignedBuf::new(WEIGHTS_OUT * 4 + (64 << 10));
    let mut stats = RunStats::default();
    let n = model
        .run_into(&req, None, tx.as_mut_slice(), &mut stats)
        .unwrap_or_else(|r| panic!("{r}: {}", model.last_error()));
    let resp = Frame::new_checked(&tx.as_slice()[..n]).unwrap();
    let y = resp.tensor("y").expect("response carries y");
    f32s(resp.tensor_data(&y))
}

/// The child: loads `SESSIONS` sessions of the model named by the
/// environment, sharing or not, runs each once, and prints RSS and the
/// answers' bits.
#[test]
#[ignore = "run by shared_weights_cost_less_than_a_copy_per_worker in a child process"]
fn rss_child() {
    let arg = std::env::var(CHILD_ENV).expect("run by the parent test");
    let (share, path) = arg.split_once(',').unwrap();
    init();
    sluice_infer::set_weight_sharing(share == "1");
    let x = sixteenths(WEIGHTS_IN, 5);
    let mut models = Vec::new();
    let base = rss_bytes();
    let mut line = format!("RSS base={base}");
    let mut bits: Option<Vec<u32>> = None;
    for k in 1..=SESSIONS {
        let spec = sluice_infer::ModelSpec {
            name: "weights".into(),
            version: "1".into(),
            path: path.into(),
            adapters: Vec::new(),
        };
        let mut m = OrtModel::load(&spec).unwrap_or_else(|e| panic!("{e}"));
        let y: Vec<u32> = run(&mut m, &x).iter().map(|v| v.to_bits()).collect();
        match &bits {
            None => bits = Some(y),
            Some(b) => assert_eq!(&y, b, "session {k} answers differently"),
        }
        models.push(m);
        line += &format!(" s{k}={}", rss_bytes());
    }
    let bits = bits.unwrap();
    let digest = bits.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    println!("{line} digest={digest:016x}");
}

struct Figures {
    base: u64,
    after: [u64; SESSIONS],
    digest: String,
}

fn child(share: bool, model: &std::path::Path) -> Figures {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "rss_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            CHILD_ENV,
            format!("{},{}", u8::from(share), model.display()),
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // libtest prints its "test rss_child ... " on the same line.
    let line = stdout
        .lines()
        .find_map(|l| l.find("RSS base=").map(|at| &l[at..]))
        .unwrap_or_else(|| panic!("no figures from the child: {stdout}"));
    let field = |k: &str| {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(&format!("{k}=")))
            .unwrap()
            .to_string()
    };
    let mut after = [0; SESSIONS];
    for (k, a) in after.iter_mut().enumerate() {
        *a = field(&format!("s{}", k + 1)).parse().unwrap();
    }
    Figures {
        base: field("base").parse().unwrap(),
        after,
        digest: field("digest"),
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / f64::from(1 << 20)
}

#[test]
fn shared_weights_cost_less_than_a_copy_per_worker() {
    init();
    let path = write_temp("weights.onnx", &bundled::weights_model().encode());
    // Answers are right (exact: weights and inputs are sixteenths).
    let mut m = OrtModel::load(&sluice_infer::ModelSpec {
        name: "weights".into(),
        version: "1".into(),
        path: path.clone(),
        adapters: Vec::new(),
    })
    .unwrap();
    let x = sixteenths(WEIGHTS_IN, 5);
    let y = run(&mut m, &x);
    let want = bundled::weights_reference(&x);
    assert!(
        y.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()),
        "weights.onnx answers differ from the reference"
    );
    drop(m);

    let own = child(false, &path);
    let shared = child(true, &path);
    let _ = std::fs::remove_file(&path);
    for (name, f) in [("own copy", &own), ("shared", &shared)] {
        println!(
            "{name}: RSS over base after 1/2/4 sessions: {:.1} / {:.1} / {:.1} MiB (weights {:.0} MiB)",
            mib(f.after[0] - f.base),
            mib(f.after[1] - f.base),
            mib(f.after[3] - f.base),
            WEIGHTS_BYTES / f64::from(1 << 20),
        );
    }
    assert_eq!(
        own.digest, shared.digest,
        "shared sessions must answer bit-identically"
    );
    let per_added = |f: &Figures| (f.after[3] as f64 - f.after[0] as f64) / 3.0;
    // The baseline really pays a copy per session (else this measures nothing).
    assert!(
        per_added(&own) > 0.75 * WEIGHTS_BYTES,
        "unshared sessions should each cost about the weights: {:.1} MiB",
        per_added(&own) / f64::from(1 << 20)
    );
    assert!(
        per_added(&shared) < 0.25 * WEIGHTS_BYTES,
        "a shared session costs {:.1} MiB, the weights are {:.0} MiB",
        per_added(&shared) / f64::from(1 << 20),
        WEIGHTS_BYTES / f64::from(1 << 20)
    );
}
