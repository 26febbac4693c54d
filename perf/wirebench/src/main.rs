//! wirebench: what it costs a receiver to get from received bytes to a
//! tensor's data, for a Sluice frame and for the same tensor in a protobuf
//! message shaped like KServe v2's `ModelInferRequest`, decoded with prost.
//!
//! For each size the Sluice cost is `Frame::new_checked` + finding the tensor
//! by name + taking its data slice. Protobuf is measured three ways:
//! `raw_input_contents` decoded into `Vec<u8>` (what prost generates by
//! default), the same decoded into `bytes::Bytes` from a `Bytes` buffer (prost's
//! zero-copy best case), and `contents.fp32_contents` (typed floats). Each
//! figure is the median of several repetitions, each a batch long enough to
//! swamp the clock's cost. Ratios, not absolute times, are the result: the
//! machine is shared and noisy.
#![deny(unsafe_code)]

use std::hint::black_box;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bytes::Bytes;
use prost::Message;
use sluice_wire::{DType, Frame, FrameRepr, Kind, TenantKey, TensorRepr};

/// KServe v2 `ModelInferRequest` (grpc_predict_v2.proto), the fields a
/// single-input request uses; field numbers as in the KServe proto.
#[derive(Clone, PartialEq, Message)]
struct ModelInferRequest {
    #[prost(string, tag = "1")]
    model_name: String,
    #[prost(string, tag = "2")]
    model_version: String,
    #[prost(string, tag = "3")]
    id: String,
    #[prost(message, repeated, tag = "5")]
    inputs: Vec<InferInputTensor>,
    #[prost(bytes = "vec", repeated, tag = "7")]
    raw_input_contents: Vec<Vec<u8>>,
}

/// The same message with `raw_input_contents` as `Bytes`, which prost fills
/// by slicing the input buffer when that is a `Bytes`.
#[derive(Clone, PartialEq, Message)]
struct ModelInferRequestBytes {
    #[prost(string, tag = "1")]
    model_name: String,
    #[prost(string, tag = "2")]
    model_version: String,
    #[prost(string, tag = "3")]
    id: String,
    #[prost(message, repeated, tag = "5")]
    inputs: Vec<InferInputTensor>,
    #[prost(bytes = "bytes", repeated, tag = "7")]
    raw_input_contents: Vec<Bytes>,
}

#[derive(Clone, PartialEq, Message)]
struct InferInputTensor {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    datatype: String,
    #[prost(int64, repeated, tag = "3")]
    shape: Vec<i64>,
    #[prost(message, optional, tag = "5")]
    contents: Option<InferTensorContents>,
}

#[derive(Clone, PartialEq, Message)]
struct InferTensorContents {
    #[prost(float, repeated, tag = "6")]
    fp32_contents: Vec<f32>,
}

/// Tensor data sizes measured, in bytes.
const SIZES_BYTES: &[usize] = &[64, 4 << 10, 64 << 10, 1 << 20, 16 << 20];
/// Repetitions per figure; the median is reported.
const REPS_DEFAULT: usize = 7;
/// Shortest batch: long enough that `Instant::now` costs nothing measurable.
const BATCH_MIN_MS_DEFAULT: u64 = 20;
/// Most iterations in one batch.
const BATCH_ITERS_MAX: u64 = 1 << 24;

const MODEL: &str = "resnet50";
const VERSION: &str = "v2";
const INPUT: &str = "input";

struct Inputs {
    elems: usize,
    floats: Vec<f32>,
    frame: Vec<u8>,
    pb_raw: Vec<u8>,
    pb_raw_bytes: Bytes,
    pb_fp32: Vec<u8>,
}

fn build(size_bytes: usize) -> Result<Inputs, String> {
    let elems = size_bytes / 4;
    let floats: Vec<f32> = (0..elems).map(|i| i as f32 * 0.5).collect();
    let data: Vec<u8> = floats.iter().flat_map(|f| f.to_le_bytes()).collect();
    let dims = [1, elems as u64];
    let tensors = [TensorRepr {
        name: INPUT,
        dtype: DType::F32,
        dims: &dims,
        data: Some(&data),
    }];
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id: 42,
        tenant_id: 7,
        model: MODEL,
        model_version: VERSION,
        tensors: &tensors,
        ..FrameRepr::default()
    };
    let layout = repr.layout().map_err(|e| format!("layout: {e}"))?;
    let mut frame = vec![0u8; layout.frame_len];
    repr.emit(&mut frame).map_err(|e| format!("emit: {e}"))?;
    let mut f = Frame::new_checked(&mut frame[..]).map_err(|e| format!("parse: {e}"))?;
    TenantKey::new(b"bench-key").sign(&mut f);

    let input = |contents| InferInputTensor {
        name: INPUT.into(),
        datatype: "FP32".into(),
        shape: vec![1, elems as i64],
        contents,
    };
    let raw = ModelInferRequest {
        model_name: MODEL.into(),
        model_version: VERSION.into(),
        id: "42".into(),
        inputs: vec![input(None)],
        raw_input_contents: vec![data.clone()],
    };
    let typed = ModelInferRequest {
        model_name: MODEL.into(),
        model_version: VERSION.into(),
        id: "42".into(),
        inputs: vec![input(Some(InferTensorContents {
            fp32_contents: floats.clone(),
        }))],
        raw_input_contents: vec![],
    };
    let pb_raw = raw.encode_to_vec();
    Ok(Inputs {
        elems,
        floats,
        frame,
        pb_raw_bytes: Bytes::from(pb_raw.clone()),
        pb_raw,
        pb_fp32: typed.encode_to_vec(),
    })
}

// The measured operations. Each returns the tensor's data as the receiver
// would hand it on, so the optimizer cannot drop the work.

fn sluice(frame: &[u8]) -> Option<(usize, usize)> {
    let f = Frame::new_checked(frame).ok()?;
    let t = f.tensor(INPUT)?;
    let data = f.tensor_data(&t);
    Some((data.as_ptr() as usize, data.len()))
}

fn sluice_auth(frame: &[u8], key: &TenantKey) -> Option<(usize, usize)> {
    let f = Frame::new_checked(frame).ok()?;
    if !key.verify(&f) {
        return None;
    }
    let t = f.tensor(INPUT)?;
    let data = f.tensor_data(&t);
    Some((data.as_ptr() as usize, data.len()))
}

fn pb_raw(buf: &[u8]) -> Option<(usize, usize)> {
    let m = ModelInferRequest::decode(buf).ok()?;
    let i = m.inputs.iter().position(|t| t.name == INPUT)?;
    let data = m.raw_input_contents.get(i)?;
    Some((black_box(data.as_ptr()) as usize, data.len()))
}

fn pb_raw_bytes(buf: &Bytes) -> Option<(usize, usize)> {
    let m = ModelInferRequestBytes::decode(buf.clone()).ok()?;
    let i = m.inputs.iter().position(|t| t.name == INPUT)?;
    let data = m.raw_input_contents.get(i)?;
    Some((black_box(data.as_ptr()) as usize, data.len()))
}

fn pb_fp32(buf: &[u8]) -> Option<(usize, usize)> {
    let m = ModelInferRequest::decode(buf).ok()?;
    let t = m.inputs.iter().find(|t| t.name == INPUT)?;
    let data = &t.contents.as_ref()?.fp32_contents;
    Some((black_box(data.as_ptr()) as usize, data.len() * 4))
}

/// One measured operation: returns the tensor data's address and length.
type Op<'a> = Box<dyn FnMut() -> Option<(usize, usize)> + 'a>;

/// Iterations per batch so that one batch of `op` lasts at least `batch_min`.
fn calibrate(batch_min: Duration, op: &mut dyn FnMut() -> Option<(usize, usize)>) -> u64 {
    let mut iters: u64 = 1;
    loop {
        let t = Instant::now();
        for _ in 0..iters {
            black_box(op());
        }
        if t.elapsed() >= batch_min || iters >= BATCH_ITERS_MAX {
            return iters;
        }
        iters *= 2;
    }
}

/// ns per call of one batch.
fn batch(iters: u64, op: &mut dyn FnMut() -> Option<(usize, usize)>) -> f64 {
    let t = Instant::now();
    for _ in 0..iters {
        black_box(op());
    }
    t.elapsed().as_nanos() as f64 / iters as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn human(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

fn run(reps: usize, batch_min: Duration) -> Result<(), String> {
    let key = TenantKey::new(b"bench-key");
    println!(
        "wirebench: one f32 tensor, receive bytes -> checked view -> tensor data; \
         median of {reps} batches of >= {} ms",
        batch_min.as_millis()
    );
    println!();
    println!(
        "| tensor | sluice ns/op | sluice+hmac ns/op | protobuf raw (Vec) ns/op | ratio pb/sluice | protobuf raw (Bytes) ns/op | protobuf fp32_contents ns/op |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let inputs = SIZES_BYTES
        .iter()
        .map(|&s| build(s))
        .collect::<Result<Vec<_>, _>>()?;
    for (inp, &size) in inputs.iter().zip(SIZES_BYTES) {
        // Every path must see the same tensor, or the comparison is void.
        let want = inp.elems * 4;
        let got = [
            sluice(&inp.frame).map(|d| d.1),
            sluice_auth(&inp.frame, &key).map(|d| d.1),
            pb_raw(&inp.pb_raw).map(|d| d.1),
            pb_raw_bytes(&inp.pb_raw_bytes).map(|d| d.1),
            pb_fp32(&inp.pb_fp32).map(|d| d.1),
        ];
        if got.iter().any(|g| *g != Some(want)) || inp.floats.len() * 4 != want {
            return Err(format!("{}: decoders disagree: {got:?}", human(size)));
        }
    }
    // One closure per (size, method); repetitions are interleaved across all
    // of them so that a noisy moment on the shared machine hits every column.
    const METHODS: usize = 5;
    let mut ops: Vec<Op<'_>> = Vec::new();
    for inp in &inputs {
        let key = &key;
        ops.push(Box::new(move || sluice(black_box(&inp.frame))));
        ops.push(Box::new(move || sluice_auth(black_box(&inp.frame), key)));
        ops.push(Box::new(move || pb_raw(black_box(&inp.pb_raw))));
        ops.push(Box::new(move || pb_raw_bytes(black_box(&inp.pb_raw_bytes))));
        ops.push(Box::new(move || pb_fp32(black_box(&inp.pb_fp32))));
    }
    let iters: Vec<u64> = ops
        .iter_mut()
        .map(|op| calibrate(batch_min, op.as_mut()))
        .collect();
    let mut samples = vec![Vec::with_capacity(reps); ops.len()];
    for _ in 0..reps {
        for (i, op) in ops.iter_mut().enumerate() {
            samples[i].push(batch(iters[i], op.as_mut()));
        }
    }
    let med: Vec<f64> = samples.into_iter().map(median).collect();
    for (row, &size) in med.chunks(METHODS).zip(SIZES_BYTES) {
        let [s, sa, pr, pbb, pf] = [row[0], row[1], row[2], row[3], row[4]];
        println!(
            "| {} | {s:.1} | {sa:.1} | {pr:.1} | {:.1}x | {pbb:.1} | {pf:.1} |",
            human(size),
            pr / s
        );
    }
    let first = med[0];
    let last = med[(SIZES_BYTES.len() - 1) * METHODS];
    println!();
    println!(
        "sluice cost at 16 MiB / at 64 B: {:.2} (1.00 = flat in payload size)",
        last / first
    );
    Ok(())
}

fn main() -> ExitCode {
    let mut reps = REPS_DEFAULT;
    let mut batch_min_ms = BATCH_MIN_MS_DEFAULT;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |name: &str| -> Result<u64, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .filter(|&v| v > 0)
                .ok_or_else(|| format!("{name} needs a positive integer"))
        };
        let r = match a.as_str() {
            "--reps" => num("--reps").map(|v| reps = v.min(1000) as usize),
            "--batch-min-ms" => num("--batch-min-ms").map(|v| batch_min_ms = v.min(10_000)),
            "-h" | "--help" => {
                println!(
                    "usage: wirebench [--reps N (default {REPS_DEFAULT})] [--batch-min-ms MS (default {BATCH_MIN_MS_DEFAULT})]"
                );
                return ExitCode::SUCCESS;
            }
            other => Err(format!("unknown argument {other:?}; try --help")),
        };
        if let Err(e) = r {
            eprintln!("wirebench: {e}");
            return ExitCode::from(2);
        }
    }
    match run(reps, Duration::from_millis(batch_min_ms)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wirebench: {e}");
            ExitCode::FAILURE
        }
    }
}
