//! The fuzz seed corpus `fuzz/corpus/parse_frame/`: the spec examples plus a
//! few built frames that reach the limits. `write_fuzz_corpus` (ignored)
//! regenerates the files; `corpus_is_current` keeps the checked-in seeds equal
//! to what this file builds.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::path::PathBuf;

use common::{EXAMPLES, example};
use sluice_wire::{
    BodyRepr, DType, ErrorCode, ExtRepr, Frame, FrameRepr, Kind, TenantKey, TensorRepr, limits,
};

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/parse_frame")
}

fn emit(repr: &FrameRepr<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; repr.layout().unwrap().frame_len];
    repr.emit(&mut buf).unwrap();
    buf
}

/// (file name, frame) for every seed.
fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = EXAMPLES
        .iter()
        .map(|n| (format!("spec-{n}"), example(n)))
        .collect();

    // Every dtype, ranks 0 to 8, a zero-sized tensor.
    let dims: Vec<Vec<u64>> = (0..=8).map(|r| vec![2; r]).collect();
    let names: Vec<String> = (0..DType::ALL.len()).map(|i| format!("t{i}")).collect();
    let mut tensors: Vec<TensorRepr<'_>> = DType::ALL
        .iter()
        .enumerate()
        .map(|(i, &dtype)| TensorRepr {
            name: &names[i],
            dtype,
            dims: &dims[i % 5],
            data: None,
        })
        .collect();
    tensors.push(TensorRepr {
        name: "rank8",
        dtype: DType::U8,
        dims: &dims[8],
        data: None,
    });
    tensors.push(TensorRepr {
        name: "empty",
        dtype: DType::F32,
        dims: &[3, 0],
        data: None,
    });
    out.push((
        "seed-all-dtypes".into(),
        emit(&FrameRepr {
            kind: Kind::Response,
            model: "m",
            tensors: &tensors,
            ..FrameRepr::default()
        }),
    ));

    // Limits: longest strings, 16 extensions, 16 tensors, authenticated.
    let long = "x".repeat(64);
    let key = "k".repeat(limits::EXT_KEY_LEN_MAX);
    let value = [0xeeu8; 64];
    let exts = [ExtRepr {
        key: &key,
        value: &value,
    }; limits::EXT_COUNT_MAX];
    let t = TensorRepr {
        name: &long,
        dtype: DType::BF16,
        dims: &[3],
        data: Some(&[1; 6]),
    };
    let mut big = emit(&FrameRepr {
        kind: Kind::Request,
        flags: sluice_wire::flags::FORWARDED,
        model: &long,
        model_version: &long[..32],
        adapter: &long,
        intent: &long[..32],
        extensions: &exts,
        tensors: &[t; limits::TENSOR_COUNT_MAX],
        ..FrameRepr::default()
    });
    TenantKey::new(b"seed").sign(&mut Frame::new_checked(&mut big[..]).unwrap());
    out.push(("seed-limits".into(), big));

    let msg = "e".repeat(limits::ERROR_MESSAGE_LEN_MAX);
    out.push((
        "seed-error-long".into(),
        emit(&FrameRepr {
            kind: Kind::Error,
            body: BodyRepr::Error {
                code: ErrorCode::ConnectionLost,
                message: &msg,
            },
            ..FrameRepr::default()
        }),
    ));
    out
}

#[test]
fn corpus_is_current() {
    for (name, bytes) in seeds() {
        Frame::new_checked(&bytes[..]).unwrap_or_else(|e| panic!("seed {name}: {e}"));
        let path = corpus_dir().join(&name);
        let on_disk = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run `cargo test -p sluice-wire --test corpus -- --ignored`",
                path.display()
            )
        });
        assert_eq!(on_disk, bytes, "{} is stale", path.display());
    }
}

#[test]
#[ignore]
fn write_fuzz_corpus() {
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in seeds() {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}
