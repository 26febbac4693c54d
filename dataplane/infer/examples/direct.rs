//! In-process latency of the inference stage, no network: `run_into` on a
//! request already in memory, for the bundled MLP (batch 1 and 32) and the
//! 512 KiB-input model. Each case also runs a "copy first" baseline in the
//! same process (the request copied into a staging buffer before the run, as
//! a copying receive path would) and reports the ratio.
//!
//! ```text
//! scripts/setup-onnxruntime.sh
//! cargo run --release -p sluice-infer --example direct [-- --iters N] [--only 'batch 1']
//! ```
//! Library: `SLUICE_ORT_LIB` or `.cache/onnxruntime/libonnxruntime.so.1.31.1`.

use std::hint::black_box;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use hdrhistogram::Histogram;
use sluice_infer::{AdapterSpec, AlignedBuf, ModelSpec, OrtModel, RunStats};
use sluice_models::bundled::{BIG_LEN, MLP_IN};
use sluice_wire::{DType, Frame, FrameRepr, Kind, TensorRepr};

struct Case {
    label: &'static str,
    model: &'static str,
    file: &'static str,
    input: &'static str,
    dims: Vec<u64>,
    adapter: Option<&'static str>,
}

struct Summary {
    p50_ns: u64,
    p99_ns: u64,
    p999_ns: u64,
}

fn summarize(h: &Histogram<u64>) -> Summary {
    Summary {
        p50_ns: h.value_at_quantile(0.50),
        p99_ns: h.value_at_quantile(0.99),
        p999_ns: h.value_at_quantile(0.999),
    }
}

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn request(case: &Case) -> Result<AlignedBuf> {
    let n: u64 = case.dims.iter().product();
    let data: Vec<u8> = (0..n)
        .flat_map(|i| (((i % 13) as f32 - 6.0) / 16.0).to_le_bytes())
        .collect();
    let tensors = [TensorRepr {
        name: case.input,
        dtype: DType::F32,
        dims: &case.dims,
        data: Some(&data),
    }];
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id: 1,
        tenant_id: 1,
        model: case.model,
        model_version: "1",
        adapter: case.adapter.unwrap_or(""),
        tensors: &tensors,
        ..FrameRepr::default()
    };
    let mut buf = AlignedBuf::new(repr.layout()?.frame_len);
    repr.emit(buf.as_mut_slice())?;
    Ok(buf)
}

fn main() -> ExitCode {
    let mut iters: u64 = 20_000;
    let mut only = String::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_default();
        match (a.as_str(), v.parse::<u64>()) {
            ("--iters", Ok(n)) if n > 0 => iters = n,
            ("--only", _) => only = v,
            _ => {
                eprintln!("usage: direct [--iters N] [--only CASE-SUBSTRING]");
                return ExitCode::FAILURE;
            }
        }
    }
    let lib = sluice_infer::library_path(None).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../.cache/onnxruntime/libonnxruntime.so.1.31.1")
    });
    if let Err(e) = sluice_infer::init(&lib) {
        eprintln!("direct: {e}");
        return ExitCode::FAILURE;
    }
    let models = sluice_models::models_dir();
    let cases = [
        Case {
            label: "mlp batch 1",
            model: "mlp",
            file: "mlp.onnx",
            input: "x",
            dims: vec![1, MLP_IN as u64],
            adapter: None,
        },
        Case {
            label: "mlp batch 1 + LoRA",
            model: "mlp",
            file: "mlp.onnx",
            input: "x",
            dims: vec![1, MLP_IN as u64],
            adapter: Some("formal"),
        },
        Case {
            label: "mlp batch 32",
            model: "mlp",
            file: "mlp.onnx",
            input: "x",
            dims: vec![32, MLP_IN as u64],
            adapter: None,
        },
        Case {
            label: "big 512 KiB in",
            model: "big",
            file: "big.onnx",
            input: "x",
            dims: vec![1, BIG_LEN as u64],
            adapter: None,
        },
    ];
    println!(
        "sluice-infer direct: {iters} runs per case (big: {}), ONNX Runtime {}",
        iters / 10,
        lib.display()
    );
    println!(
        "{:<20} {:>9} {:>9} {:>10} | {:>14} {:>14} | {:>7}",
        "case", "p50 ns", "p99 ns", "p99.9 ns", "copy-first p50", "copy-first p99", "ratio"
    );
    for case in cases.iter().filter(|c| c.label.contains(only.as_str())) {
        if let Err(e) = bench(case, iters, &models) {
            eprintln!("direct: {}: {e}", case.label);
            return ExitCode::FAILURE;
        }
    }
    println!(
        "ratio = copy-first p50 / in-place p50 (same process, interleaved); payload_bytes_copied = 0 on every run"
    );
    ExitCode::SUCCESS
}

/// Runs one case both ways (in place, copy first) and prints a row.
fn bench(case: &Case, iters: u64, models: &std::path::Path) -> Result<()> {
    let spec = ModelSpec {
        name: case.model.to_string(),
        version: "1.0.0".to_string(),
        path: models.join(case.file),
        adapters: vec![AdapterSpec {
            id: "formal".into(),
            path: models.join("mlp_formal.onnx_adapter"),
        }]
        .into_iter()
        .filter(|_| case.model == "mlp")
        .collect(),
    };
    let mut model = OrtModel::load(&spec)?;
    let rx = request(case)?;
    let mut staging = AlignedBuf::new(rx.as_slice().len());
    let mut tx = AlignedBuf::new(64 << 10);
    let mut stats = RunStats::default();
    let n = if case.model == "big" {
        iters / 10
    } else {
        iters
    }
    .max(100);
    let mut in_place = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    let mut copied = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    // Warm up, then alternate the two paths so both see the same noise.
    for _ in 0..n / 10 {
        let req = Frame::new_checked(rx.as_slice())?;
        black_box(model.run_into(&req, case.adapter, tx.as_mut_slice(), &mut stats)?);
    }
    for _ in 0..n {
        let t = Instant::now();
        let req = Frame::new_checked(rx.as_slice())?;
        black_box(model.run_into(&req, case.adapter, tx.as_mut_slice(), &mut stats)?);
        in_place.saturating_record(t.elapsed().as_nanos() as u64);

        let t = Instant::now();
        staging
            .as_mut_slice()
            .copy_from_slice(black_box(rx.as_slice()));
        let req = Frame::new_checked(staging.as_slice())?;
        black_box(model.run_into(&req, case.adapter, tx.as_mut_slice(), &mut stats)?);
        copied.saturating_record(t.elapsed().as_nanos() as u64);
    }
    let (a, b) = (summarize(&in_place), summarize(&copied));
    println!(
        "{:<20} {:>9} {:>9} {:>10} | {:>14} {:>14} | {:>6.2}x",
        case.label,
        a.p50_ns,
        a.p99_ns,
        a.p999_ns,
        b.p50_ns,
        b.p99_ns,
        b.p50_ns as f64 / a.p50_ns.max(1) as f64
    );
    if stats.payload_bytes_copied != 0 {
        return Err("the in-place path copied payload bytes".into());
    }
    Ok(())
}
