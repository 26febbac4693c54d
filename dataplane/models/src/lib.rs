//! Writes Sluice's bundled ONNX models and ONNX Runtime LoRA adapters.
//!
//! No protoc, no flatc, no Python: [`onnx`] encodes the few `ModelProto`
//! messages a model needs and [`adapter`] lays out the adapter FlatBuffer by
//! hand. [`bundled`] defines the checked-in files under `models/` and plain
//! Rust references of what they compute; `cargo run -p sluice-models --bin
//! gen-models` rewrites them, and a test asserts that regenerating them gives
//! the checked-in bytes.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod adapter;
pub mod bundled;
pub mod decoder;
pub mod onnx;
mod pb;

use std::path::PathBuf;

/// The repository's `models/` directory.
pub fn models_dir() -> PathBuf {
    let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    match crate_dir.parent().and_then(|p| p.parent()) {
        Some(root) => root.join("models"),
        None => crate_dir.join("../../models"),
    }
}
