//! The checked-in files under `models/` are exactly what this crate writes.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use sluice_models::adapter::decode_adapter;
use sluice_models::bundled::{self, LORA_A, LORA_B};

#[test]
fn checked_in_models_regenerate_byte_identical() {
    let dir = sluice_models::models_dir();
    for (name, bytes) in bundled::bundled_files() {
        let path = dir.join(name);
        let on_disk = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run `cargo run -p sluice-models --bin gen-models`",
                path.display()
            )
        });
        assert!(
            on_disk == bytes,
            "{} differs from the generator's output ({} vs {} bytes); run `cargo run -p sluice-models --bin gen-models` and commit",
            path.display(),
            on_disk.len(),
            bytes.len()
        );
    }
}

#[test]
fn formal_adapter_carries_the_lora_matrices() {
    let d = decode_adapter(&bundled::formal_adapter()).unwrap();
    assert_eq!(d.format_version, 1);
    let lora = bundled::formal_lora();
    let f32s = |raw: &[u8]| -> Vec<f32> {
        raw.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    assert_eq!(d.params.len(), 2);
    assert_eq!(d.params[0].name, LORA_A);
    assert_eq!(d.params[0].dims, [4, 2]);
    assert_eq!(f32s(&d.params[0].raw), lora.a);
    assert_eq!(d.params[1].name, LORA_B);
    assert_eq!(d.params[1].dims, [2, 3]);
    assert_eq!(f32s(&d.params[1].raw), lora.b);
}

#[test]
fn reference_mlp_lora_is_linear_in_the_adapter() {
    // The adapter's contribution is exactly (x·A)·B, and it is not zero.
    let x: Vec<f32> = (0..8).map(|i| (i as f32 - 3.0) / 16.0).collect();
    let lora = bundled::formal_lora();
    let base = bundled::mlp_reference(&x, None);
    let with = bundled::mlp_reference(&x, Some(&lora));
    assert_ne!(base, with);
    // Row 0: x0·A·B by hand.
    let x0 = &x[..4];
    let xa: Vec<f32> = (0..2)
        .map(|r| (0..4).map(|i| x0[i] * lora.a[i * 2 + r]).sum())
        .collect();
    for k in 0..3 {
        let delta: f32 = (0..2).map(|r| xa[r] * lora.b[r * 3 + k]).sum();
        assert_eq!(with[k], base[k] + delta);
    }
}
