//! Thousands of random, mostly wrong requests: every one is answered (a
//! response frame that parses, or a reject), none panics, and the sessions
//! still compute the right answer afterwards.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use common::*;
use sluice_infer::{AlignedBuf, OrtModel, RunStats};
use sluice_models::bundled;
use sluice_wire::{DType, ErrorCode, Frame, FrameRepr, Kind, TensorRepr};

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
}

/// The inputs of a random request for model `m` (0: mlp, 1: two_io): a
/// valid set, then 0 to 2 random mutations (name, dtype, shape, one input
/// more or less), so that valid and invalid requests both occur.
#[allow(clippy::type_complexity)]
fn random_inputs(rng: &mut Rng, m: usize) -> (Vec<(&'static str, DType)>, Vec<Vec<u64>>) {
    let names = ["x", "a", "b", "z"];
    let dtypes = [
        DType::F32,
        DType::F32,
        DType::F32,
        DType::I32,
        DType::Bool,
        DType::F64,
        DType::U8,
    ];
    let batch = rng.below(5);
    let mut meta: Vec<(&str, DType)> = Vec::new();
    let mut dims: Vec<Vec<u64>> = Vec::new();
    if m == 0 {
        meta.push(("x", DType::F32));
        dims.push(vec![batch, 4]);
    } else {
        meta.extend([("a", DType::F32), ("b", DType::F32)]);
        dims.extend([vec![batch, 8], vec![batch, 8]]);
    }
    for _ in 0..rng.below(3) {
        let i = rng.below(meta.len().max(1) as u64) as usize;
        match rng.below(6) {
            0 if !meta.is_empty() => meta[i].0 = *rng.pick(&names),
            1 if !meta.is_empty() => meta[i].1 = *rng.pick(&dtypes),
            2 if !meta.is_empty() => {
                let rank = *rng.pick(&[0usize, 1, 2, 3]);
                dims[i] = (0..rank).map(|_| *rng.pick(&[0u64, 1, 2, 4, 8])).collect();
            }
            3 if !meta.is_empty() => {
                meta.remove(i);
                dims.remove(i);
            }
            _ => {
                meta.push((*rng.pick(&names), *rng.pick(&dtypes)));
                dims.push(vec![rng.below(3), *rng.pick(&[4u64, 8])]);
            }
        }
    }
    (meta, dims)
}

#[test]
fn random_requests_are_answered_or_rejected_never_crash() {
    init();
    let mut models = [
        OrtModel::load(&mlp_spec()).unwrap(),
        OrtModel::load(&spec("two_io.onnx", "two_io")).unwrap(),
    ];
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let adapters = [None, None, Some("formal"), Some("nope"), Some("")];
    let tx_lens = [0usize, 100, 200, 4096, 4096];
    let mut stats = RunStats::default();
    let (mut ok, mut total) = (0u64, 0u64);
    let mut codes = std::collections::BTreeSet::new();

    for _ in 0..4000 {
        let m = rng.below(2) as usize;
        let (meta, dims) = random_inputs(&mut rng, m);
        let data: Vec<Vec<u8>> = meta
            .iter()
            .zip(&dims)
            .map(|((_, dt), d)| {
                let len = dt.byte_len(d).unwrap();
                (0..len)
                    .map(|_| rng.next() as u8 & if *dt == DType::Bool { 1 } else { 0x3f })
                    .collect()
            })
            .collect();
        let tensors: Vec<TensorRepr<'_>> = meta
            .iter()
            .zip(&dims)
            .zip(&data)
            .map(|(((name, dtype), d), bytes)| TensorRepr {
                name,
                dtype: *dtype,
                dims: d,
                data: Some(bytes),
            })
            .collect();
        let adapter = *rng.pick(&adapters);
        let repr = FrameRepr {
            kind: Kind::Request,
            request_id: rng.next(),
            model: "m",
            model_version: "1",
            adapter: adapter.unwrap_or(""),
            tensors: &tensors,
            ..FrameRepr::default()
        };
        let offset = *rng.pick(&[0usize, 0, 0, 1, 2, 4]);
        let len = repr.layout().unwrap().frame_len;
        let mut rx = AlignedBuf::new(offset + len);
        repr.emit(&mut rx.as_mut_slice()[offset..]).unwrap();
        let req = Frame::new_checked(&rx.as_slice()[offset..]).unwrap();
        let mut tx = AlignedBuf::new(*rng.pick(&tx_lens));
        total += 1;
        match models[m].run_into(&req, adapter, tx.as_mut_slice(), &mut stats) {
            Ok(n) => {
                ok += 1;
                let resp = Frame::new_checked(&tx.as_slice()[..n]).expect("responses parse");
                assert_eq!(resp.kind(), Kind::Response);
                assert_eq!(resp.request_id(), req.request_id());
                let outs = models[m].signature().outputs.len();
                assert_eq!(resp.tensor_count(), outs);
            }
            Err(r) => {
                codes.insert(r.code.as_str());
                assert!(
                    matches!(
                        r.code,
                        ErrorCode::BadTensor
                            | ErrorCode::UnknownAdapter
                            | ErrorCode::ResponseTooLarge
                            | ErrorCode::InferenceFailed
                    ),
                    "{r}"
                );
            }
        }
    }
    assert_eq!(stats.runs + stats.rejects + stats.failures, total);
    assert_eq!(stats.runs, ok);
    assert_eq!(stats.payload_bytes_copied, 0);
    eprintln!("{ok} of {total} ran; rejects: {codes:?}");
    // The generator reaches both outcomes and the main reject kinds.
    assert!(ok > 20, "only {ok} valid requests of {total}");
    for c in ["bad_tensor", "unknown_adapter", "response_too_large"] {
        assert!(codes.contains(c), "never produced {c}: {codes:?}");
    }

    let x = sixteenths(4 * 4, 3);
    let data = f32_bytes(&x);
    let rx = request(
        "mlp",
        "",
        &[Input {
            name: "x",
            dtype: DType::F32,
            dims: &[4, 4],
            data: &data,
        }],
    );
    let req = Frame::new_checked(rx.as_slice()).unwrap();
    let mut tx = AlignedBuf::new(4096);
    let n = models[0]
        .run_into(&req, Some("formal"), tx.as_mut_slice(), &mut stats)
        .unwrap();
    let resp = Frame::new_checked(&tx.as_slice()[..n]).unwrap();
    let y = resp.tensor("y").unwrap();
    assert_eq!(
        f32s(resp.tensor_data(&y)),
        bundled::mlp_reference(&x, Some(&bundled::formal_lora()))
    );
}
