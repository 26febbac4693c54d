//! What dynamic batching saves on one worker core, without the network: the
//! time to answer N requests one by one (`run_into` each, the zero-copy
//! path) against one batched run (`run_batch` gathering them, then
//! `batch_reply` for each), in the same process, interleaved rounds,
//! medians. Includes the frame checks, the gather and split copies and the
//! reply headers: everything the worker does per request but receive/send.
//!
//! ```text
//! cargo run --release -p sluice-infer --example batch [-- --rounds R --n N]
//! ```
//! Models: the bundled MLP, and NudeNet's detector at 64x64 when
//! `scripts/setup-models.sh` has fetched it (`.cache/models/nudenet_320n.onnx`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use sluice_infer::{AlignedBuf, BatchSlot, ModelSpec, OrtModel, RunStats};
use sluice_wire::{DType, Frame, FrameRepr, Kind, TensorRepr};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

struct Case {
    label: &'static str,
    path: PathBuf,
    input: &'static str,
    dims: Vec<u64>,
}

fn request(case: &Case, seed: u64) -> Result<AlignedBuf> {
    let n: u64 = case.dims.iter().product();
    let data: Vec<u8> = (0..n)
        .flat_map(|i| ((((i + seed) % 17) as f32) / 17.0).to_le_bytes())
        .collect();
    let tensors = [TensorRepr {
        name: case.input,
        dtype: DType::F32,
        dims: &case.dims,
        data: Some(&data),
    }];
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id: seed,
        tenant_id: 1,
        model: "m",
        model_version: "1",
        tensors: &tensors,
        ..FrameRepr::default()
    };
    let mut buf = AlignedBuf::new(repr.layout()?.frame_len);
    repr.emit(buf.as_mut_slice())?;
    Ok(buf)
}

fn median(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// Prints one row: ns per request one by one, batched, and the ratio.
fn bench(case: &Case, n: usize, rounds: usize) -> Result<()> {
    let mut model = OrtModel::load(&ModelSpec {
        name: "m".into(),
        version: "1".into(),
        path: case.path.clone(),
        adapters: vec![],
    })?;
    model
        .batchable()
        .map_err(|why| format!("{}: cannot batch: {why}", case.label))?;
    let reqs: Vec<AlignedBuf> = (0..n as u64)
        .map(|i| request(case, i))
        .collect::<Result<_>>()?;
    let bytes: Vec<&[u8]> = reqs.iter().map(|r| r.as_slice()).collect();
    let frames: Vec<Frame<&[u8]>> = bytes
        .iter()
        .map(|b| Frame::new_checked(*b))
        .collect::<std::result::Result<_, _>>()?;
    let mut tx = AlignedBuf::new(64 << 10);
    let mut input = AlignedBuf::new(16 << 20);
    let mut output = AlignedBuf::new(16 << 20);
    let mut slots = vec![BatchSlot::Left; n];
    let mut stats = RunStats::default();
    let (mut single, mut batched) = (Vec::new(), Vec::new());
    for round in 0..rounds + 2 {
        let t0 = Instant::now();
        for f in &frames {
            model
                .run_into(f, None, tx.as_mut_slice(), &mut stats)
                .map_err(|e| format!("run_into: {e}"))?;
        }
        let t1 = Instant::now();
        let rows = model
            .run_batch(
                &bytes,
                None,
                input.as_mut_slice(),
                output.as_mut_slice(),
                &mut slots,
                &mut stats,
            )
            .map_err(|e| format!("run_batch: {e}: {}", model.last_error()))?;
        for (f, &slot) in frames.iter().zip(&slots) {
            model
                .batch_reply(
                    f,
                    None,
                    slot,
                    output.as_slice(),
                    tx.as_mut_slice(),
                    &mut stats,
                )
                .map_err(|e| format!("batch_reply: {e}"))?;
        }
        let t2 = Instant::now();
        if rows != n {
            return Err(format!("{}: {rows} of {n} rows stacked", case.label).into());
        }
        // The first two rounds warm both paths up.
        if round >= 2 {
            single.push((t1 - t0).as_nanos() as u64 / n as u64);
            batched.push((t2 - t1).as_nanos() as u64 / n as u64);
        }
    }
    let (s, b) = (median(&mut single), median(&mut batched));
    println!(
        "{:<22} {:>4} {:>14} {:>14} {:>8.2}x",
        case.label,
        n,
        s,
        b,
        s as f64 / b.max(1) as f64
    );
    Ok(())
}

fn main() -> ExitCode {
    let (mut rounds, mut n) = (200usize, 32usize);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().and_then(|v| v.parse::<usize>().ok());
        match (a.as_str(), v) {
            ("--rounds", Some(r)) if r > 0 => rounds = r,
            ("--n", Some(k)) if (2..=sluice_infer::BATCH_ROWS_MAX).contains(&k) => n = k,
            _ => {
                eprintln!("usage: batch [--rounds R] [--n 2..=256]");
                return ExitCode::FAILURE;
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let lib = sluice_infer::library_path(None)
        .unwrap_or_else(|| root.join(".cache/onnxruntime/libonnxruntime.so.1.31.1"));
    if let Err(e) = sluice_infer::init(&lib) {
        eprintln!("batch: {e}");
        return ExitCode::FAILURE;
    }
    let mut cases = vec![Case {
        label: "mlp [1,4]",
        path: sluice_models::models_dir().join("mlp.onnx"),
        input: "x",
        dims: vec![1, 4],
    }];
    let nudenet = root.join(".cache/models/nudenet_320n.onnx");
    if nudenet.is_file() {
        cases.push(Case {
            label: "nudenet [1,3,64,64]",
            path: nudenet,
            input: "images",
            dims: vec![1, 3, 64, 64],
        });
    }
    println!("sluice-infer batch: {n} requests per round, median of {rounds} rounds, one core");
    println!(
        "{:<22} {:>4} {:>14} {:>14} {:>9}",
        "model", "n", "ns/req single", "ns/req batch", "ratio"
    );
    for case in &cases {
        // NudeNet runs are ~1000x the MLP's: fewer rounds.
        let r = if case.label.starts_with("nudenet") {
            (rounds / 20).max(5)
        } else {
            rounds
        };
        if let Err(e) = bench(case, n, r) {
            eprintln!("batch: {}: {e}", case.label);
            return ExitCode::FAILURE;
        }
    }
    println!("ratio = single / batched time per request (same process, interleaved rounds)");
    ExitCode::SUCCESS
}
