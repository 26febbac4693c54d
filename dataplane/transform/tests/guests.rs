//! The project's own transforms (dataplane/transform/guests), built to wasm
//! by scripts/build-transforms.sh, run through the host: outputs checked
//! value by value and against the target schema version.
// Tests may unwrap: a failed unwrap is a failed test (clippy.toml covers
// #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::time::Instant;

use common::*;
use sluice_transform::{ALIGN, Fault, Input, Limits, Target, abi::ErrorCode};
use sluice_validate::json::JsonSchema;
use sluice_wire::{DType, Frame, SECTION_TENSOR_NAME};

fn section_of(frame: &[u8]) -> serde_json::Value {
    let f = Frame::new_checked(frame).unwrap();
    let s = f.tensor(SECTION_TENSOR_NAME).unwrap();
    serde_json::from_slice(f.tensor_data(&s)).unwrap()
}

#[test]
fn json_migration_renames_and_fills_defaults() {
    let rt = runtime(small_limits());
    let m = load(&rt, &guest("json-migrate"));
    let mut inst = m.instantiate().unwrap();
    let v1 = br#"{"user":"ada","prompt":"hello","max_tokens":64}"#;
    let req = section_request(v1, 11, 1, true);
    let req = Frame::new_checked(&req[..]).unwrap();
    let target = Target {
        schema_id: 12,
        schema_version: 2,
    };
    let (out, cost) = inst
        .run(&req, Input::Section, 1, 2, target, Instant::now())
        .unwrap();
    assert_eq!(out.as_ptr() as usize % ALIGN, 0);
    let f = Frame::new_checked(out).unwrap();
    // The request's fields, at the target version.
    assert_eq!(f.request_id(), 42);
    assert_eq!(f.tenant_id(), 7);
    assert_eq!(f.schema_id(), 12);
    assert_eq!(f.schema_version(), 2);
    assert_eq!(f.model(), "chat");
    assert_eq!(f.model_version(), "1.0.0");
    assert_eq!(f.intent(), "ask");
    assert_eq!(f.extension("k"), Some(&b"v1"[..]));
    // The other tensor rides along unchanged.
    let x = f.tensor("x").unwrap();
    assert_eq!(x.dims(), &[2, 2]);
    assert_eq!(
        f.tensor_data(&x),
        &[1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0]
    );
    let want = serde_json::json!({
        "user_id": "ada", "prompt": "hello", "max_output_tokens": 64,
        "temperature": 1.0, "lang": "en"
    });
    assert_eq!(section_of(out), want);
    // Valid at the target version, and not at the source version.
    let s = f.tensor(SECTION_TENSOR_NAME).unwrap();
    assert_eq!(s.data_offset % ALIGN, 0);
    let v2 = JsonSchema::compile(include_str!("../testdata/chat-v2.json"), &[]).unwrap();
    let v1s = JsonSchema::compile(include_str!("../testdata/chat-v1.json"), &[]).unwrap();
    assert!(v2.validate(f.tensor_data(&s)).is_ok());
    assert!(v1s.validate(f.tensor_data(&s)).is_err());
    // What it cost: the section in, the section and the other tensor out.
    assert_eq!(cost.bytes_in, v1.len() as u64);
    assert_eq!(cost.bytes_copied, s.data_len as u64 + 16);
}

#[test]
fn json_migration_defaults_and_the_way_back() {
    let rt = runtime(small_limits());
    let m = load(&rt, &guest("json-migrate"));
    let mut inst = m.instantiate().unwrap();
    let t2 = Target {
        schema_id: 12,
        schema_version: 2,
    };
    let req = section_request(br#"{"user":"bo","prompt":"p"}"#, 11, 1, false);
    let req = Frame::new_checked(&req[..]).unwrap();
    let (out, _) = inst
        .run(&req, Input::Section, 1, 2, t2, Instant::now())
        .unwrap();
    assert_eq!(
        section_of(out),
        serde_json::json!({"user_id":"bo","prompt":"p","max_output_tokens":256,"temperature":1.0,"lang":"en"})
    );
    let back = section_request(
        br#"{"user_id":"bo","prompt":"p","max_output_tokens":9,"temperature":0.5,"lang":"fr"}"#,
        12,
        2,
        false,
    );
    let back = Frame::new_checked(&back[..]).unwrap();
    let t1 = Target {
        schema_id: 11,
        schema_version: 1,
    };
    let (out, _) = inst
        .run(&back, Input::Section, 2, 1, t1, Instant::now())
        .unwrap();
    assert_eq!(
        section_of(out),
        serde_json::json!({"user":"bo","prompt":"p","max_tokens":9})
    );
    // Pairs it does not know, and input that is not its version, are the
    // module's answers: refusals, not faults.
    assert_eq!(
        inst.run(&req, Input::Section, 1, 3, t2, Instant::now())
            .unwrap_err(),
        Fault::Refused(ErrorCode::UnsupportedVersions)
    );
    assert_eq!(
        inst.run(&back, Input::Section, 1, 2, t2, Instant::now())
            .unwrap_err(),
        Fault::Refused(ErrorCode::InvalidInput)
    );
    let junk = section_request(b"[1,2", 11, 1, false);
    let junk = Frame::new_checked(&junk[..]).unwrap();
    assert_eq!(
        inst.run(&junk, Input::Section, 1, 2, t2, Instant::now())
            .unwrap_err(),
        Fault::Refused(ErrorCode::InvalidInput)
    );
    // Still serving after refusals; nothing recycled.
    assert!(
        inst.run(&req, Input::Section, 1, 2, t2, Instant::now())
            .is_ok()
    );
    assert_eq!(
        inst.stats()
            .recycles
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

#[test]
fn json_output_past_the_limit_is_refused() {
    let limits = Limits {
        output_bytes_max: 40,
        ..small_limits()
    };
    let rt = runtime(limits);
    let m = load(&rt, &guest("json-migrate"));
    let mut inst = m.instantiate().unwrap();
    let req = section_request(br#"{"user":"ada","prompt":"hello"}"#, 11, 1, false);
    let req = Frame::new_checked(&req[..]).unwrap();
    let t = Target {
        schema_id: 12,
        schema_version: 2,
    };
    assert_eq!(
        inst.run(&req, Input::Section, 1, 2, t, Instant::now())
            .unwrap_err(),
        Fault::OutputTooLarge
    );
}

#[test]
fn tensor_migration_changes_dtype_and_layout() {
    let rt = runtime(small_limits());
    let m = load(&rt, &guest("tensor-migrate"));
    let mut inst = m.instantiate().unwrap();
    let (h, w) = (4u64, 5u64);
    let pixels: Vec<u8> = (0..h * w * 3).map(|i| (i * 7 % 256) as u8).collect();
    let req = image_request(h, w, &pixels, true);
    let req = Frame::new_checked(&req[..]).unwrap();
    let t = Target {
        schema_id: 21,
        schema_version: 2,
    };
    let (out, cost) = inst
        .run(&req, Input::Tensors, 1, 2, t, Instant::now())
        .unwrap();
    let f = Frame::new_checked(out).unwrap();
    assert_eq!(f.schema_version(), 2);
    assert_eq!(f.model(), "vision");
    let img = f.tensor("image").unwrap();
    assert_eq!(img.dtype, DType::F32);
    assert_eq!(img.dims(), &[3, h, w]);
    assert_eq!((out.as_ptr() as usize + img.data_offset) % ALIGN, 0);
    let data = f.tensor_data(&img);
    let plane = (h * w) as usize;
    for i in 0..plane {
        for ch in 0..3 {
            let at = (ch * plane + i) * 4;
            let v = f32::from_le_bytes(data[at..at + 4].try_into().unwrap());
            assert_eq!(v, f32::from(pixels[i * 3 + ch]) / 255.0);
        }
    }
    // The section rides along, after the outputs.
    let s = f.tensor(SECTION_TENSOR_NAME).unwrap();
    assert_eq!(f.tensor_data(&s), b"{}");
    assert_eq!(cost.bytes_in, pixels.len() as u64);
    assert_eq!(cost.bytes_copied, data.len() as u64 + 2);
    // Only 1 -> 2; a wrong shape is invalid input.
    assert_eq!(
        inst.run(&req, Input::Tensors, 2, 1, t, Instant::now())
            .unwrap_err(),
        Fault::Refused(ErrorCode::UnsupportedVersions)
    );
    let bad = image_request(2, 2, &[0; 12], false);
    let bad = Frame::new_checked(&bad[..]).unwrap();
    assert!(
        inst.run(&bad, Input::Tensors, 1, 2, t, Instant::now())
            .is_ok()
    );
    // A section-reading call on a tensors transform is the module's refusal.
    assert_eq!(
        inst.run(&req, Input::Section, 1, 2, t, Instant::now())
            .unwrap_err(),
        Fault::Refused(ErrorCode::UnsupportedVersions)
    );
}

#[test]
fn instances_do_not_share_state() {
    let rt = runtime(small_limits());
    let m = load(&rt, &guest("json-migrate"));
    let mut a = m.instantiate().unwrap();
    let mut b = m.instantiate().unwrap();
    let t = Target {
        schema_id: 12,
        schema_version: 2,
    };
    let ra = section_request(br#"{"user":"a","prompt":"1"}"#, 11, 1, false);
    let rb = section_request(br#"{"user":"b","prompt":"2"}"#, 11, 1, false);
    let ra = Frame::new_checked(&ra[..]).unwrap();
    let rb = Frame::new_checked(&rb[..]).unwrap();
    for _ in 0..100 {
        let (oa, _) = a.run(&ra, Input::Section, 1, 2, t, Instant::now()).unwrap();
        assert_eq!(section_of(oa)["user_id"], "a");
        let (ob, _) = b.run(&rb, Input::Section, 1, 2, t, Instant::now()).unwrap();
        assert_eq!(section_of(ob)["user_id"], "b");
    }
}
