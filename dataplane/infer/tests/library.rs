//! Library loading. Its own test binary (own process) so that the failures
//! happen before any successful load; one test, run in order.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::path::Path;

use sluice_infer::{InferError, OrtModel};

#[test]
fn bad_library_paths_are_clear_errors_then_the_real_one_loads() {
    // Nothing loaded yet: models refuse to load rather than let ort guess a path.
    assert!(!sluice_infer::is_initialized());
    let e = OrtModel::load(&common::mlp_spec()).unwrap_err();
    assert!(matches!(e, InferError::NotInitialized), "{e}");

    let e = sluice_infer::init(Path::new("/nonexistent/libonnxruntime.so.1.31.1")).unwrap_err();
    assert!(matches!(e, InferError::LibraryNotFound { .. }), "{e}");
    assert!(
        e.to_string().contains("scripts/setup-onnxruntime.sh"),
        "{e}"
    );

    // A file that is not a shared library.
    let not_lib = common::model_path("mlp.onnx");
    let e = sluice_infer::init(&not_lib).unwrap_err();
    assert!(matches!(e, InferError::LibraryLoad { .. }), "{e}");

    // A shared library that is not ONNX Runtime.
    let e = sluice_infer::init(Path::new("/lib/x86_64-linux-gnu/libm.so.6")).unwrap_err();
    assert!(matches!(e, InferError::LibraryLoad { .. }), "{e}");
    assert!(e.to_string().contains("OrtGetApiBase"), "{e}");
    assert!(!sluice_infer::is_initialized());

    // The real one, twice (idempotent), then a switch is refused.
    let lib = common::lib_path();
    sluice_infer::init(&lib).unwrap();
    sluice_infer::init(&lib).unwrap();
    assert!(sluice_infer::is_initialized());
    let e = sluice_infer::init(&not_lib).unwrap_err();
    assert!(matches!(e, InferError::AlreadyInitialized { .. }), "{e}");

    // And models load.
    let model = OrtModel::load(&common::mlp_spec()).unwrap();
    assert_eq!(model.signature().inputs[0].name, "x");
}
