//! Outputs whose shape is known only after the run (unnamed, named only by
//! the output, data-dependent), rank-0 and int32 inputs, optional inputs
//! with defaults, several outputs: against the real ONNX Runtime.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use common::*;
use sluice_infer::{AlignedBuf, ModelSpec, OrtModel, Placement, RunStats};
use sluice_models::bundled;
use sluice_models::onnx::*;
use sluice_wire::{DType, ErrorCode, Frame};

fn model(
    name: &str,
    nodes: Vec<Node>,
    inits: Vec<Tensor>,
    ins: Vec<ValueInfo>,
    outs: Vec<ValueInfo>,
) -> OrtModel {
    init();
    let m = Model {
        ir_version: bundled::IR_VERSION,
        opset: bundled::OPSET,
        producer: "sluice-infer-test".into(),
        doc: String::new(),
        graph: Graph {
            name: name.into(),
            nodes,
            initializers: inits,
            inputs: ins,
            outputs: outs,
        },
    };
    let spec = ModelSpec {
        name: name.into(),
        version: "1".into(),
        path: write_temp(&format!("{name}.onnx"), &m.encode()),
        adapters: vec![],
    };
    OrtModel::load(&spec).unwrap_or_else(|e| panic!("{e}"))
}

fn run(
    m: &mut OrtModel,
    inputs: &[Input<'_>],
    tx_len: usize,
) -> (Result<usize, sluice_infer::Reject>, AlignedBuf, RunStats) {
    let rx = request(m.name(), "", inputs);
    let req = Frame::new_checked(rx.as_slice()).unwrap();
    let mut tx = AlignedBuf::new(tx_len);
    let mut stats = RunStats::default();
    let r = m.run_into(&req, None, tx.as_mut_slice(), &mut stats);
    (r, tx, stats)
}

fn i64s(b: &[u8]) -> Vec<i64> {
    b.chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Identity whose output dimension has a name no input binds: ORT decides
/// the size, the reply allocator places it, and it lands where the frame
/// wants it (no intermediate tensor sits before it): no byte copied.
#[test]
fn an_output_named_only_by_itself_is_allocator_placed_in_place() {
    let mut m = model(
        "free",
        vec![Node::new("Identity", "id", &["x"], &["y"])],
        vec![],
        vec![ValueInfo::new(
            "x",
            elem::FLOAT,
            vec![Dim::Param("m".into())],
        )],
        vec![ValueInfo::new(
            "y",
            elem::FLOAT,
            vec![Dim::Param("n".into())],
        )],
    );
    assert_eq!(
        m.placements().collect::<Vec<_>>(),
        [("y", Placement::Allocator)]
    );
    for n in [1usize, 5, 300] {
        let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 3.0).collect();
        let data = f32_bytes(&x);
        let (r, tx, stats) = run(
            &mut m,
            &[Input {
                name: "x",
                dtype: DType::F32,
                dims: &[n as u64],
                data: &data,
            }],
            64 << 10,
        );
        let len = r.unwrap_or_else(|e| panic!("{e}: {}", m.last_error()));
        let resp = Frame::new_checked(&tx.as_slice()[..len]).unwrap();
        let y = resp.tensor("y").unwrap();
        assert_eq!(y.dims(), [n as u64]);
        assert_eq!(f32s(resp.tensor_data(&y)), x);
        assert_eq!(stats.output_bytes_in_place, 4 * n as u64, "in place, n={n}");
        assert_eq!(stats.payload_bytes_copied, 0, "n={n}");
        assert_eq!(stats.heap_allocs, 0);
    }
    assert!(m.arena_enabled());
}

/// NonZero: a data-dependent, unnamed output dimension. Every size of
/// answer is right, and a reply buffer too small answers
/// `response_too_large` with the length that was needed.
#[test]
fn a_data_dependent_output_is_sized_by_the_run() {
    let mut m = model(
        "nz",
        vec![Node::new("NonZero", "nz", &["x"], &["idx"])],
        vec![],
        vec![ValueInfo::new("x", elem::FLOAT, vec![Dim::Unknown])],
        vec![ValueInfo::new(
            "idx",
            elem::INT64,
            vec![Dim::Fixed(1), Dim::Unknown],
        )],
    );
    assert_eq!(m.placements().next().unwrap().1, Placement::Allocator);
    for (n, every) in [(10usize, 3usize), (1000, 7), (64, 1), (5, 100)] {
        let x: Vec<f32> = (0..n)
            .map(|i| if i.is_multiple_of(every) { 1.5 } else { 0.0 })
            .collect();
        let want: Vec<i64> = (0..n as i64)
            .filter(|i| (*i as usize).is_multiple_of(every))
            .collect();
        let data = f32_bytes(&x);
        let (r, tx, stats) = run(
            &mut m,
            &[Input {
                name: "x",
                dtype: DType::F32,
                dims: &[n as u64],
                data: &data,
            }],
            64 << 10,
        );
        let len = r.unwrap_or_else(|e| panic!("{e}: {}", m.last_error()));
        let resp = Frame::new_checked(&tx.as_slice()[..len]).unwrap();
        let idx = resp.tensor("idx").unwrap();
        assert_eq!(idx.dtype, DType::I64);
        assert_eq!(idx.dims(), [1, want.len() as u64]);
        assert_eq!(i64s(resp.tensor_data(&idx)), want);
        // Placed or moved once: every byte is accounted for.
        assert_eq!(
            stats.output_bytes_in_place + stats.payload_bytes_copied,
            8 * want.len() as u64
        );
    }
    // 4000 indices (32000 bytes) do not fit a 4 KiB reply.
    let x = vec![1.0f32; 4000];
    let data = f32_bytes(&x);
    let (r, _, stats) = run(
        &mut m,
        &[Input {
            name: "x",
            dtype: DType::F32,
            dims: &[4000],
            data: &data,
        }],
        4096,
    );
    let e = r.unwrap_err();
    assert_eq!(e.code, ErrorCode::ResponseTooLarge);
    assert!(
        e.needed_len > 32000 && e.needed_len < 32000 + 4096,
        "needed {}",
        e.needed_len
    );
    assert_eq!(stats.rejects, 1);
    // And the model keeps serving.
    let (r, _, _) = run(
        &mut m,
        &[Input {
            name: "x",
            dtype: DType::F32,
            dims: &[3],
            data: &f32_bytes(&[0.0, 2.0, 0.0]),
        }],
        4096,
    );
    r.unwrap();
}

/// Several outputs of both kinds, a rank-0 int64 input, an int32 input and
/// an optional input with a default (an initializer that is also a graph
/// input).
#[test]
fn mixed_outputs_scalar_int32_and_optional_inputs() {
    let batch = || Dim::Param("batch".into());
    let mut m = model(
        "mixed",
        vec![
            Node::new("Mul", "mul", &["x", "scale"], &["y"]),
            Node::new("NonZero", "nz", &["n"], &["nz"]),
            Node::new("Add", "add", &["k", "k"], &["kk"]),
        ],
        vec![Tensor::f32("scale", &[1], &[2.0])],
        vec![
            ValueInfo::new("x", elem::FLOAT, vec![batch(), Dim::Fixed(4)]),
            ValueInfo::new("k", elem::INT64, vec![]),
            ValueInfo::new("n", elem::INT32, vec![batch()]),
            ValueInfo::new("scale", elem::FLOAT, vec![Dim::Fixed(1)]),
        ],
        vec![
            ValueInfo::new("nz", elem::INT64, vec![Dim::Fixed(1), Dim::Unknown]),
            ValueInfo::new("y", elem::FLOAT, vec![batch(), Dim::Fixed(4)]),
            ValueInfo::new("kk", elem::INT64, vec![]),
        ],
    );
    let sig = m.signature();
    assert_eq!(
        sig.inputs
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["x", "k", "n"]
    );
    assert_eq!(sig.optional_inputs.len(), 1);
    assert_eq!(sig.optional_inputs[0].name, "scale");
    assert_eq!(
        m.placements().collect::<Vec<_>>(),
        [
            ("nz", Placement::Allocator),
            ("y", Placement::Preallocated),
            ("kk", Placement::Preallocated)
        ]
    );
    let x: Vec<f32> = (0..12).map(|i| i as f32 - 5.0).collect();
    let xb = f32_bytes(&x);
    let k = 21i64.to_le_bytes();
    let n: Vec<u8> = [0i32, 7, -1].iter().flat_map(|v| v.to_le_bytes()).collect();
    let three = f32_bytes(&[3.0]);
    for scale in [None, Some(&three)] {
        let mut ins = vec![
            Input {
                name: "x",
                dtype: DType::F32,
                dims: &[3, 4],
                data: &xb,
            },
            Input {
                name: "k",
                dtype: DType::I64,
                dims: &[],
                data: &k,
            },
            Input {
                name: "n",
                dtype: DType::I32,
                dims: &[3],
                data: &n,
            },
        ];
        if let Some(s) = scale {
            ins.push(Input {
                name: "scale",
                dtype: DType::F32,
                dims: &[1],
                data: s,
            });
        }
        let (r, tx, _) = run(&mut m, &ins, 64 << 10);
        let len = r.unwrap_or_else(|e| panic!("{e}: {}", m.last_error()));
        let resp = Frame::new_checked(&tx.as_slice()[..len]).unwrap();
        let f = if scale.is_some() { 3.0 } else { 2.0 };
        let y = resp.tensor("y").unwrap();
        assert_eq!(y.dims(), [3, 4]);
        assert_eq!(
            f32s(resp.tensor_data(&y)),
            x.iter().map(|v| v * f).collect::<Vec<_>>()
        );
        let kk = resp.tensor("kk").unwrap();
        assert_eq!(kk.dims(), [] as [u64; 0]);
        assert_eq!(i64s(resp.tensor_data(&kk)), [42]);
        let nz = resp.tensor("nz").unwrap();
        assert_eq!(nz.dims(), [1, 2]);
        assert_eq!(i64s(resp.tensor_data(&nz)), [1, 2]);
        // The table lists the preallocated outputs first.
        let names: Vec<&str> = resp.tensors().map(|t| t.name).collect();
        assert_eq!(names, ["y", "kk", "nz"]);
    }
    // A scalar sent with rank 1 is a bad tensor.
    let (r, _, _) = run(
        &mut m,
        &[
            Input {
                name: "x",
                dtype: DType::F32,
                dims: &[3, 4],
                data: &xb,
            },
            Input {
                name: "k",
                dtype: DType::I64,
                dims: &[1],
                data: &k,
            },
            Input {
                name: "n",
                dtype: DType::I32,
                dims: &[3],
                data: &n,
            },
        ],
        64 << 10,
    );
    assert_eq!(r.unwrap_err().code, ErrorCode::BadTensor);
}
