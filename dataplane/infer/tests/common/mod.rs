//! Shared by the integration tests: the real ONNX Runtime library, the
//! bundled models, and request frames in 64-byte aligned buffers.
#![allow(dead_code)]

use std::path::PathBuf;

use sluice_infer::{AdapterSpec, AlignedBuf, ModelSpec};
use sluice_wire::{DType, FrameRepr, Kind, TensorRepr, TraceContext};

/// The library the setup script installs, or `SLUICE_ORT_LIB`. Fails the
/// test (never skips) when it is absent.
pub fn lib_path() -> PathBuf {
    let path = sluice_infer::library_path(None).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../.cache/onnxruntime/libonnxruntime.so.1.31.1")
    });
    assert!(
        path.is_file(),
        "ONNX Runtime library not found at {}: run scripts/setup-onnxruntime.sh (or set SLUICE_ORT_LIB)",
        path.display()
    );
    path
}

/// Loads the library once for this test binary (idempotent).
pub fn init() {
    sluice_infer::init(&lib_path()).unwrap_or_else(|e| panic!("{e}"));
}

pub fn model_path(file: &str) -> PathBuf {
    sluice_models::models_dir().join(file)
}

pub fn spec(file: &str, name: &str) -> ModelSpec {
    ModelSpec {
        name: name.to_string(),
        version: "1.0.0".to_string(),
        path: model_path(file),
        adapters: Vec::new(),
    }
}

pub fn mlp_spec() -> ModelSpec {
    ModelSpec {
        adapters: vec![AdapterSpec {
            id: "formal".to_string(),
            path: model_path("mlp_formal.onnx_adapter"),
        }],
        ..spec("mlp.onnx", "mlp")
    }
}

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Small multiples of 1/16: every MLP product and sum stays exact in f32.
pub fn sixteenths(n: usize, seed: i64) -> Vec<f32> {
    (0..n as i64)
        .map(|i| (((i * 7 + seed * 3) % 13) - 6) as f32 / 16.0)
        .collect()
}

pub struct Input<'a> {
    pub name: &'a str,
    pub dtype: DType,
    pub dims: &'a [u64],
    pub data: &'a [u8],
}

pub const TRACE: TraceContext = TraceContext {
    trace_id: [7; 16],
    parent_id: [9; 8],
    flags: 1,
};

/// A request frame emitted at `offset` bytes past a 64-byte boundary;
/// returns the buffer and the frame's byte range within it.
pub fn request_at(
    offset: usize,
    model: &str,
    adapter: &str,
    inputs: &[Input<'_>],
) -> (AlignedBuf, std::ops::Range<usize>) {
    let tensors: Vec<TensorRepr<'_>> = inputs
        .iter()
        .map(|i| TensorRepr {
            name: i.name,
            dtype: i.dtype,
            dims: i.dims,
            data: Some(i.data),
        })
        .collect();
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id: 0x1234_5678_9abc,
        tenant_id: 1,
        trace: TRACE,
        model,
        model_version: "1",
        adapter,
        tensors: &tensors,
        ..FrameRepr::default()
    };
    let len = repr.layout().expect("test request is valid").frame_len;
    let mut buf = AlignedBuf::new(offset + len);
    repr.emit(&mut buf.as_mut_slice()[offset..]).expect("emit");
    (buf, offset..offset + len)
}

pub fn request(model: &str, adapter: &str, inputs: &[Input<'_>]) -> AlignedBuf {
    request_at(0, model, adapter, inputs).0
}

/// Writes `bytes` to a file in this test process's temp directory.
pub fn write_temp(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-infer-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}
