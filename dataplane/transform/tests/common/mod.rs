//! Helpers for the transform tests: the runtime, the project's built
//! transforms, hand-written modules, request frames.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use sluice_transform::{Limits, Module, Runtime};
use sluice_wire::{DType, FrameRepr, SECTION_TENSOR_NAME, TensorRepr};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The project's own transform `name`, built by scripts/build-transforms.sh.
pub fn guest(name: &str) -> Vec<u8> {
    let p = root()
        .join("../../target/transforms")
        .join(format!("{name}.wasm"));
    std::fs::read(&p).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: run scripts/build-transforms.sh first (scripts/test.sh does)",
            p.display()
        )
    })
}

pub fn runtime(limits: Limits) -> Runtime {
    Runtime::new(limits).unwrap()
}

pub fn small_limits() -> Limits {
    Limits {
        deadline_us: 20_000,
        memory_bytes_max: 4 << 20,
        instances_max: 32,
        faults_before_quarantine: 3,
        quarantine_us: 200_000,
        quarantine_max_us: 1_000_000,
        ..Limits::default()
    }
}

/// A hand-written core module in WAT, given the world and made a
/// component (as wit-bindgen and wit-component do for Rust).
pub fn core_component(wat: &str) -> Vec<u8> {
    let mut core = wat::parse_str(wat).unwrap();
    sluice_componentize::embed_world(&mut core, &root().join("wit"), "transform").unwrap();
    sluice_componentize::componentize(&core).unwrap()
}

/// The bump allocator and memory every hand-written core module carries.
pub const CORE_PRELUDE: &str = r#"
  (memory (export "memory") 1)
  (global $bump (mut i32) (i32.const 1024))
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $p i32)
    (local.set $p
      (i32.and
        (i32.add (global.get $bump) (i32.sub (local.get 2) (i32.const 1)))
        (i32.sub (i32.const 0) (local.get 2))))
    (global.set $bump (i32.add (local.get $p) (local.get 3)))
    (local.get $p))
"#;

/// The core name of the export.
pub const EXPORT: &str = "sluice:transform/transformer@1.0.0#transform";

pub fn load(rt: &Runtime, bytes: &[u8]) -> Arc<Module> {
    rt.load(bytes).unwrap_or_else(|e| panic!("load: {e}"))
}

/// A request with a JSON section (and optionally one other tensor).
pub fn section_request(section: &[u8], schema_id: u32, version: u32, other: bool) -> Vec<u8> {
    let len = [section.len() as u64];
    let dims = [2u64, 2];
    let data = [1u8, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0];
    let mut tensors = vec![TensorRepr {
        name: SECTION_TENSOR_NAME,
        dtype: DType::U8,
        dims: &len,
        data: Some(section),
    }];
    if other {
        tensors.push(TensorRepr {
            name: "x",
            dtype: DType::F32,
            dims: &dims,
            data: Some(&data),
        });
    }
    let ext = [sluice_wire::ExtRepr {
        key: "k",
        value: b"v1",
    }];
    let repr = FrameRepr {
        request_id: 42,
        tenant_id: 7,
        schema_id,
        schema_version: version,
        model: "chat",
        model_version: "1.0.0",
        intent: "ask",
        extensions: &ext,
        tensors: &tensors,
        ..FrameRepr::default()
    };
    let mut buf = vec![0u8; 8192];
    let l = repr.emit(&mut buf).unwrap();
    buf.truncate(l.frame_len);
    buf
}

/// A request with one u8 HWC image tensor.
pub fn image_request(h: u64, w: u64, pixels: &[u8], with_section: bool) -> Vec<u8> {
    let dims = [h, w, 3];
    let sdims = [2u64];
    let mut tensors = vec![TensorRepr {
        name: "image",
        dtype: DType::U8,
        dims: &dims,
        data: Some(pixels),
    }];
    if with_section {
        tensors.push(TensorRepr {
            name: SECTION_TENSOR_NAME,
            dtype: DType::U8,
            dims: &sdims,
            data: Some(b"{}"),
        });
    }
    let repr = FrameRepr {
        request_id: 9,
        schema_id: 20,
        schema_version: 1,
        model: "vision",
        model_version: "2.0.0",
        tensors: &tensors,
        ..FrameRepr::default()
    };
    let mut buf = vec![0u8; 1 << 16];
    let l = repr.emit(&mut buf).unwrap();
    buf.truncate(l.frame_len);
    buf
}
