//! Dynamic batching in the inference stage against the real ONNX Runtime:
//! stacked runs answer every request exactly as its own run would (whole
//! reply frames compared byte for byte), refusals stay per request, and
//! what cannot stack is left out, not failed.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use common::*;
use sluice_infer::{AlignedBuf, BatchSlot, ModelSpec, OrtModel, RunStats};
use sluice_models::bundled;
use sluice_models::onnx::*;
use sluice_wire::{DType, ErrorCode, Frame};

/// Floats with every bit pattern class a model meets (not small exact
/// fractions): a batched run must match a single one bit for bit anyway.
fn noise(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 7.3
        })
        .collect()
}

fn x_request(model: &str, adapter: &str, rows: u64, cols: u64, seed: u64) -> AlignedBuf {
    let data = f32_bytes(&noise((rows * cols) as usize, seed));
    request(
        model,
        adapter,
        &[Input {
            name: "x",
            dtype: DType::F32,
            dims: &[rows, cols],
            data: &data,
        }],
    )
}

/// The reply `run_into` gives, alone.
fn single(m: &mut OrtModel, rx: &AlignedBuf, adapter: Option<&str>) -> Vec<u8> {
    let req = Frame::new_checked(rx.as_slice()).unwrap();
    let mut tx = AlignedBuf::new(64 << 10);
    let mut stats = RunStats::default();
    let len = m
        .run_into(&req, adapter, tx.as_mut_slice(), &mut stats)
        .unwrap_or_else(|e| panic!("{e}: {}", m.last_error()));
    tx.as_slice()[..len].to_vec()
}

struct Batch {
    input: AlignedBuf,
    output: AlignedBuf,
    slots: Vec<BatchSlot>,
    stats: RunStats,
}

impl Batch {
    fn new(input_len: usize) -> Batch {
        Batch {
            input: AlignedBuf::new(input_len),
            output: AlignedBuf::new(4 << 20),
            slots: vec![BatchSlot::Left; 64],
            stats: RunStats::default(),
        }
    }

    /// Runs `reqs` as one batch; returns the rows run and each request's
    /// reply (stacked) or refusal.
    fn run(
        &mut self,
        m: &mut OrtModel,
        reqs: &[&AlignedBuf],
        adapter: Option<&str>,
    ) -> (usize, Vec<Result<Vec<u8>, BatchSlot>>) {
        let bytes: Vec<&[u8]> = reqs.iter().map(|b| b.as_slice()).collect();
        let rows = m
            .run_batch(
                &bytes,
                adapter,
                self.input.as_mut_slice(),
                self.output.as_mut_slice(),
                &mut self.slots,
                &mut self.stats,
            )
            .unwrap_or_else(|e| panic!("{e}: {}", m.last_error()));
        let mut out = Vec::new();
        for (i, b) in bytes.iter().enumerate() {
            let slot = self.slots[i];
            if let BatchSlot::Stacked { .. } = slot {
                let req = Frame::new_checked(*b).unwrap();
                let mut tx = AlignedBuf::new(64 << 10);
                let len = m
                    .batch_reply(
                        &req,
                        adapter,
                        slot,
                        self.output.as_slice(),
                        tx.as_mut_slice(),
                        &mut self.stats,
                    )
                    .unwrap();
                out.push(Ok(tx.as_slice()[..len].to_vec()));
            } else {
                out.push(Err(slot));
            }
        }
        (rows, out)
    }
}

#[test]
fn mlp_batches_answer_bit_for_bit_as_single_runs() {
    init();
    let mut m = OrtModel::load(&mlp_spec()).unwrap();
    assert_eq!(m.batchable(), Ok(()));
    let rows = [1u64, 3, 1, 2, 7, 1, 1, 16];
    for adapter in [None, Some("formal")] {
        let reqs: Vec<AlignedBuf> = rows
            .iter()
            .enumerate()
            .map(|(i, &r)| x_request("mlp", adapter.unwrap_or(""), r, 4, i as u64 + 1))
            .collect();
        let want: Vec<Vec<u8>> = reqs.iter().map(|r| single(&mut m, r, adapter)).collect();
        let mut b = Batch::new(1 << 20);
        let refs: Vec<&AlignedBuf> = reqs.iter().collect();
        let (total, got) = b.run(&mut m, &refs, adapter);
        assert_eq!(total as u64, rows.iter().sum::<u64>());
        let mut row = 0u32;
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                b.slots[i],
                BatchSlot::Stacked {
                    row,
                    rows: rows[i] as u32
                }
            );
            row += rows[i] as u32;
            assert_eq!(g.as_ref().unwrap(), w, "request {i}, adapter {adapter:?}");
        }
        // One copy in (every input byte), one copy out (every output byte).
        let in_bytes: u64 = rows.iter().map(|r| r * 4 * 4).sum();
        let out_bytes: u64 = rows.iter().map(|r| r * 3 * 4).sum();
        assert_eq!(b.stats.batch_runs, 1);
        assert_eq!(b.stats.batch_input_bytes_copied, in_bytes);
        assert_eq!(b.stats.batch_output_bytes_copied, out_bytes);
        assert_eq!(b.stats.payload_bytes_copied, in_bytes + out_bytes);
        assert_eq!(b.stats.runs, rows.len() as u64);
    }
}

#[test]
fn refusals_are_per_request_and_the_rest_of_the_batch_runs() {
    init();
    let mut m = OrtModel::load(&mlp_spec()).unwrap();
    let good = [
        x_request("mlp", "", 2, 4, 10),
        x_request("mlp", "", 1, 4, 11),
    ];
    let wrong_dim = x_request("mlp", "", 1, 5, 12);
    let x8 = vec![0u8; 8 * 4];
    let wrong_dtype = request(
        "mlp",
        "",
        &[Input {
            name: "x",
            dtype: DType::F64,
            dims: &[1, 4],
            data: &x8,
        }],
    );
    let want: Vec<Vec<u8>> = good.iter().map(|r| single(&mut m, r, None)).collect();
    // What run_into says about each bad one.
    let alone = |m: &mut OrtModel, rx: &AlignedBuf| {
        let req = Frame::new_checked(rx.as_slice()).unwrap();
        let mut tx = AlignedBuf::new(4096);
        m.run_into(&req, None, tx.as_mut_slice(), &mut RunStats::default())
            .unwrap_err()
    };
    let e_dim = alone(&mut m, &wrong_dim);
    let e_dtype = alone(&mut m, &wrong_dtype);
    assert_eq!(e_dim.code, ErrorCode::BadTensor);

    let mut b = Batch::new(1 << 20);
    let (total, got) = b.run(
        &mut m,
        &[&wrong_dim, &good[0], &wrong_dtype, &good[1]],
        None,
    );
    assert_eq!(total, 3);
    assert_eq!(got[0], Err(BatchSlot::Refused(e_dim)));
    assert_eq!(got[2], Err(BatchSlot::Refused(e_dtype)));
    assert_eq!(got[1].as_ref().unwrap(), &want[0]);
    assert_eq!(got[3].as_ref().unwrap(), &want[1]);
    assert_eq!(b.stats.rejects, 2);
}

/// Identity over [batch, n] with an output whose dimension 1 no input
/// names: stacks only requests of the same n, and the output is placed by
/// the reply allocator inside the batch buffer.
#[test]
fn other_shapes_are_left_out_and_allocator_placed_outputs_split() {
    init();
    let m = Model {
        ir_version: bundled::IR_VERSION,
        opset: bundled::OPSET,
        producer: "sluice-infer-test".into(),
        doc: String::new(),
        graph: Graph {
            name: "ident".into(),
            nodes: vec![Node::new("Identity", "id", &["x"], &["y"])],
            initializers: vec![],
            inputs: vec![ValueInfo::new(
                "x",
                elem::FLOAT,
                vec![Dim::Param("batch".into()), Dim::Param("n".into())],
            )],
            outputs: vec![ValueInfo::new(
                "y",
                elem::FLOAT,
                vec![Dim::Param("batch".into()), Dim::Param("free".into())],
            )],
        },
    };
    let spec = ModelSpec {
        name: "ident".into(),
        version: "1".into(),
        path: write_temp("batch_ident.onnx", &m.encode()),
        adapters: vec![],
    };
    let mut m = OrtModel::load(&spec).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.batchable(), Ok(()));
    let a = x_request("ident", "", 2, 6, 1);
    let other = x_request("ident", "", 1, 9, 2);
    let c = x_request("ident", "", 3, 6, 3);
    // Keys differ for different n, agree for equal n.
    let key = |rx: &AlignedBuf| {
        m.batch_key(&Frame::new_checked(rx.as_slice()).unwrap(), None)
            .unwrap()
    };
    assert_eq!(key(&a).rows, 2);
    assert_eq!(key(&a).key, key(&c).key);
    assert_ne!(key(&a).key, key(&other).key);
    let want_a = single(&mut m, &a, None);
    let want_c = single(&mut m, &c, None);
    let mut b = Batch::new(1 << 20);
    let (total, got) = b.run(&mut m, &[&a, &other, &c], None);
    assert_eq!(total, 5);
    assert_eq!(got[1], Err(BatchSlot::Left));
    assert_eq!(got[0].as_ref().unwrap(), &want_a);
    assert_eq!(got[2].as_ref().unwrap(), &want_c);

    // A batch input buffer that holds 4 rows of 6 floats (plus alignment
    // slack) leaves the request that would overflow it for the next run.
    let mut small = Batch::new(4 * 6 * 4 + 64 * 16);
    let (total, got) = small.run(&mut m, &[&a, &c, &a], None);
    assert_eq!(total, 4);
    assert_eq!(got[1], Err(BatchSlot::Left));
    assert_eq!(got[0].as_ref().unwrap(), &want_a);
    assert_eq!(got[2].as_ref().unwrap(), &want_a);
}

#[test]
fn what_cannot_batch_says_why() {
    init();
    // Dimension 0 unnamed.
    let m = Model {
        ir_version: bundled::IR_VERSION,
        opset: bundled::OPSET,
        producer: "sluice-infer-test".into(),
        doc: String::new(),
        graph: Graph {
            name: "anon".into(),
            nodes: vec![Node::new("Identity", "id", &["x"], &["y"])],
            initializers: vec![],
            inputs: vec![ValueInfo::new(
                "x",
                elem::FLOAT,
                vec![Dim::Unknown, Dim::Fixed(4)],
            )],
            outputs: vec![ValueInfo::new(
                "y",
                elem::FLOAT,
                vec![Dim::Unknown, Dim::Fixed(4)],
            )],
        },
    };
    let anon = ModelSpec {
        name: "anon".into(),
        version: "1".into(),
        path: write_temp("batch_anon.onnx", &m.encode()),
        adapters: vec![],
    };
    let mut m = OrtModel::load(&anon).unwrap();
    let why = m.batchable().unwrap_err().to_string();
    assert!(why.contains("\"x\" dimension 0 is not named"), "{why}");
    let rx = x_request("anon", "", 1, 4, 1);
    assert_eq!(
        m.batch_key(&Frame::new_checked(rx.as_slice()).unwrap(), None),
        None
    );
    let mut b = Batch::new(1 << 16);
    let bytes = [rx.as_slice()];
    let e = m
        .run_batch(
            &bytes,
            None,
            b.input.as_mut_slice(),
            b.output.as_mut_slice(),
            &mut b.slots,
            &mut b.stats,
        )
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Internal);

    // A fixed batch of 1 (the 512 KiB model) cannot batch either.
    let big = OrtModel::load(&spec("big.onnx", "big")).unwrap();
    let why = big.batchable().unwrap_err().to_string();
    assert!(why.contains("fixed dimension 0 (1)"), "{why}");
    // Requests that send an optional input (the MLP's LoRA parameters)
    // run alone.
    let mlp = OrtModel::load(&mlp_spec()).unwrap();
    let a = f32_bytes(&[0.0; 4 * 2]);
    let rx = request(
        "mlp",
        "",
        &[
            Input {
                name: "x",
                dtype: DType::F32,
                dims: &[1, 4],
                data: &f32_bytes(&[1.0; 4]),
            },
            Input {
                name: "lora_a",
                dtype: DType::F32,
                dims: &[4, 2],
                data: &a,
            },
        ],
    );
    assert_eq!(
        mlp.batch_key(&Frame::new_checked(rx.as_slice()).unwrap(), None),
        None
    );
}
