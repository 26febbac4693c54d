//! Migrates the `image` model input between its two registered tensor
//! signatures (dataplane/transform/testdata/):
//!
//! * version 1: `image`, u8, shape `[H, W, 3]` (interleaved RGB, as cameras
//!   and decoders hand it over);
//! * version 2: `image`, f32, shape `[3, H, W]` (planar, scaled to 0..1, as
//!   vision models take it).
//!
//! Only 1 → 2: the other way loses precision, so it is not offered.

wit_bindgen::generate!({ world: "transform", path: "../../wit" });

use exports::sluice::transform::transformer::Guest;
use sluice::transform::host;
use sluice::transform::types::{ErrorCode, Payload, Tensor};

const DTYPE_U8: u8 = 2;
const DTYPE_F32: u8 = 1;

struct Migrate;

impl Guest for Migrate {
    fn transform(input: Payload, from: u32, to: u32) -> Result<(), ErrorCode> {
        if (from, to) != (1, 2) {
            return Err(ErrorCode::UnsupportedVersions);
        }
        let Payload::Tensors(tensors) = input else {
            return Err(ErrorCode::UnsupportedVersions);
        };
        let [t] = tensors.as_slice() else {
            return Err(ErrorCode::InvalidInput);
        };
        let &[h, w, c] = t.shape.as_slice() else {
            return Err(ErrorCode::InvalidInput);
        };
        if t.dtype != DTYPE_U8 || c != 3 {
            return Err(ErrorCode::InvalidInput);
        }
        let (h, w) = (h as usize, w as usize);
        let plane = h.checked_mul(w).ok_or(ErrorCode::InvalidInput)?;
        if t.data.len() != plane * 3 {
            return Err(ErrorCode::InvalidInput);
        }
        let out_len = plane * 3 * 4;
        if out_len > host::output_bytes_max() as usize {
            return Err(ErrorCode::OutputTooLarge);
        }
        let mut data = vec![0u8; out_len];
        for (i, px) in t.data.chunks_exact(3).enumerate() {
            for (ch, &v) in px.iter().enumerate() {
                let at = (ch * plane + i) * 4;
                data[at..at + 4].copy_from_slice(&(f32::from(v) / 255.0).to_le_bytes());
            }
        }
        host::emit_tensors(&[Tensor {
            name: t.name.clone(),
            dtype: DTYPE_F32,
            shape: vec![3, h as u64, w as u64],
            data,
        }])
    }
}

export!(Migrate);
