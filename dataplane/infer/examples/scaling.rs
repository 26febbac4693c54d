//! Issue 22's model-side curves, on one core, real ONNX Runtime, one run:
//!
//! 1. RSS per worker session of a model with 32 MiB of weights
//!    (`weights.onnx`), 1/2/4/8 sessions, each session's own copy against
//!    weights shared across sessions (each in a child process of its own).
//! 2. Per-request cost of the MLP with 1 to 4,096 configured LoRA
//!    adapters, the requests cycling through a hot set that fits the
//!    adapter cache, and through all of them (past 64, every request a
//!    miss: the load cost), as ratios against 1 adapter.
//!
//! ```text
//! cargo run --release -p sluice-infer --example scaling
//! ```
//! `SLUICE_ORT_LIB` (or `.cache/onnxruntime/`) names the library.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use sluice_infer::{ADAPTER_CACHE_MAX, AdapterSpec, AlignedBuf, ModelSpec, OrtModel, RunStats};
use sluice_models::bundled::{self, MLP_IN, WEIGHTS_IN, WEIGHTS_OUT};
use sluice_wire::{DType, Frame, FrameRepr, Kind, TensorRepr};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const SESSIONS: [usize; 4] = [1, 2, 4, 8];

fn lib() -> PathBuf {
    sluice_infer::library_path(None).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../.cache/onnxruntime/libonnxruntime.so.1.31.1")
    })
}

fn rss_bytes() -> Result<u64> {
    let s = std::fs::read_to_string("/proc/self/status")?;
    let kb = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .ok_or("no VmRSS")?
        .parse::<u64>()?;
    Ok(kb * 1024)
}

fn request(model: &str, adapter: &str, input: &str, dims: &[u64]) -> Result<AlignedBuf> {
    let n: u64 = dims.iter().product();
    let data: Vec<u8> = (0..n)
        .flat_map(|i| (((i % 13) as f32 - 6.0) / 16.0).to_le_bytes())
        .collect();
    let tensors = [TensorRepr {
        name: input,
        dtype: DType::F32,
        dims,
        data: Some(&data),
    }];
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id: 1,
        tenant_id: 1,
        model,
        model_version: "1",
        adapter,
        tensors: &tensors,
        ..FrameRepr::default()
    };
    let mut buf = AlignedBuf::new(repr.layout()?.frame_len);
    repr.emit(buf.as_mut_slice())?;
    Ok(buf)
}

fn run(
    m: &mut OrtModel,
    rx: &AlignedBuf,
    adapter: Option<&str>,
    tx: &mut AlignedBuf,
) -> Result<()> {
    let req = Frame::new_checked(rx.as_slice())?;
    let mut stats = RunStats::default();
    m.run_into(&req, adapter, tx.as_mut_slice(), &mut stats)
        .map_err(|r| format!("{r}: {}", m.last_error()))?;
    Ok(())
}

/// The child of curve 1: loads sessions, prints RSS over base after each
/// count in SESSIONS.
fn rss_child(share: bool, path: &Path) -> Result<()> {
    sluice_infer::init(&lib())?;
    sluice_infer::set_weight_sharing(share);
    let rx = request("weights", "", "x", &[1, WEIGHTS_IN as u64])?;
    let mut tx = AlignedBuf::new(WEIGHTS_OUT * 4 + (64 << 10));
    let base = rss_bytes()?;
    let mut models = Vec::new();
    let mut out = Vec::new();
    while models.len() < SESSIONS[SESSIONS.len() - 1] {
        let mut m = OrtModel::load(&ModelSpec {
            name: "weights".into(),
            version: "1".into(),
            path: path.to_path_buf(),
            adapters: Vec::new(),
        })?;
        run(&mut m, &rx, None, &mut tx)?;
        models.push(m);
        if SESSIONS.contains(&models.len()) {
            out.push((rss_bytes()? - base).to_string());
        }
    }
    println!("{}", out.join(" "));
    Ok(())
}

fn rss_curve(dir: &Path) -> Result<()> {
    let path = dir.join("weights.onnx");
    std::fs::write(&path, bundled::weights_model().encode())?;
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let mut rows = Vec::new();
    for share in [false, true] {
        let out = Command::new(std::env::current_exe()?)
            .args(["--rss-child", if share { "1" } else { "0" }])
            .arg(&path)
            .output()?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned().into());
        }
        let v: Vec<u64> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::parse)
            .collect::<std::result::Result<_, _>>()?;
        rows.push(v);
    }
    println!("## 1. RSS per worker session, 32 MiB of weights (`weights.onnx`)\n");
    println!("| sessions | own copy each, MiB over base | shared, MiB over base | shared / own |");
    println!("| ---: | ---: | ---: | ---: |");
    for (k, n) in SESSIONS.iter().enumerate() {
        let (own, shared) = (rows[0][k], rows[1][k]);
        println!(
            "| {n} | {:.1} | {:.1} | {:.2}× |",
            mib(own),
            mib(shared),
            shared as f64 / own as f64
        );
    }
    let per = |v: &[u64]| mib(v[3] - v[0]) / 7.0;
    println!(
        "\nEach added session: {:.1} MiB own copy, {:.1} MiB shared (weights {} MiB).\n",
        per(&rows[0]),
        per(&rows[1]),
        (WEIGHTS_IN * WEIGHTS_OUT * 4) >> 20
    );
    Ok(())
}

fn adapter_curve(dir: &Path) -> Result<()> {
    let formal = bundled::formal_adapter();
    let counts = [1usize, 16, 64, 256, 1024, 4096];
    let max = counts[counts.len() - 1];
    let mut specs = Vec::with_capacity(max);
    for i in 0..max {
        let p = dir.join(format!("a{i}.onnx_adapter"));
        std::fs::write(&p, &formal)?;
        specs.push(AdapterSpec {
            id: format!("a{i}"),
            path: p,
        });
    }
    let model = sluice_models::models_dir().join("mlp.onnx");
    let hot = 32.min(ADAPTER_CACHE_MAX);
    let mut tx = AlignedBuf::new(64 << 10);
    println!("## 2. LoRA adapters per model (the MLP), ns per request on one core\n");
    println!(
        "| adapters | hot set of {hot}: ns | ratio | cycling through all: ns | ratio | loads | evictions | load ms |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let mut base: Option<(f64, f64)> = None;
    for &n in &counts {
        let t0 = Instant::now();
        let mut m = OrtModel::load(&ModelSpec {
            name: "mlp".into(),
            version: "1".into(),
            path: model.clone(),
            adapters: specs[..n].to_vec(),
        })?;
        let load_ms = t0.elapsed().as_secs_f64() * 1e3;
        let reqs: Vec<(String, AlignedBuf)> = (0..n)
            .map(|i| {
                let id = format!("a{i}");
                let rx = request("mlp", &id, "x", &[1, MLP_IN as u64]);
                rx.map(|r| (id, r))
            })
            .collect::<Result<_>>()?;
        let mut per =
            |m: &mut OrtModel, ids: &mut dyn Iterator<Item = usize>, k: usize| -> Result<f64> {
                let t = Instant::now();
                for i in ids.take(k) {
                    let (id, rx) = &reqs[i];
                    run(m, rx, Some(id), &mut tx)?;
                }
                Ok(t.elapsed().as_nanos() as f64 / k as f64)
            };
        let k = 4000;
        // Warm both patterns once, then measure.
        per(&mut m, &mut (0..n).cycle(), n.min(k))?;
        let hot_ns = per(&mut m, &mut (0..n.min(hot)).cycle(), k)?;
        let all_ns = per(&mut m, &mut (0..n).cycle(), k)?;
        let (_, loads, evictions) = m.adapter_cache();
        let b = *base.get_or_insert((hot_ns, all_ns));
        println!(
            "| {n} | {hot_ns:.0} | {:.2}× | {all_ns:.0} | {:.2}× | {loads} | {evictions} | {load_ms:.0} |",
            hot_ns / b.0,
            all_ns / b.1
        );
    }
    println!(
        "\nThe cache holds {ADAPTER_CACHE_MAX} adapters per session: a hot set that fits stays flat; \
         cycling through more than that makes every request a miss (the adapter file read and \
         loaded on the worker), which is the cost the eviction counter exposes.\n"
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let r = if args.get(1).map(String::as_str) == Some("--rss-child") {
        match (args.get(2), args.get(3)) {
            (Some(s), Some(p)) => rss_child(s == "1", Path::new(p)),
            _ => Err("usage: --rss-child 0|1 <model>".into()),
        }
    } else {
        (|| -> Result<()> {
            sluice_infer::init(&lib())?;
            let dir = std::env::temp_dir().join(format!("sluice-scaling-{}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            let r = rss_curve(&dir).and_then(|()| adapter_curve(&dir));
            let _ = std::fs::remove_dir_all(&dir);
            r
        })()
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scaling: {e}");
            ExitCode::FAILURE
        }
    }
}
