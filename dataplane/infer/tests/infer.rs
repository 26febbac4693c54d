//! The inference stage against the real ONNX Runtime and the bundled models.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use common::*;
use sluice_infer::{AlignedBuf, InferError, ModelSpec, OrtModel, RunStats};
use sluice_models::bundled::{self, BIG_LEN, MLP_IN, MLP_OUT, TWO_IO_WIDTH};
use sluice_wire::{DType, ErrorCode, Frame, Kind};

fn load(spec: &ModelSpec) -> OrtModel {
    init();
    OrtModel::load(spec).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `x` through the MLP and returns y and the stats.
fn run_mlp(model: &mut OrtModel, x: &[f32], adapter: Option<&str>) -> (Vec<f32>, RunStats) {
    let batch = (x.len() / MLP_IN) as u64;
    let data = f32_bytes(x);
    let rx = request(
        "mlp",
        adapter.unwrap_or(""),
        &[Input {
            name: "x",
            dtype: DType::F32,
            dims: &[batch, MLP_IN as u64],
            data: &data,
        }],
    );
    let req = Frame::new_checked(rx.as_slice()).unwrap();
    let mut tx = AlignedBuf::new(64 << 10);
    let mut stats = RunStats::default();
    let n = model
        .run_into(&req, adapter, tx.as_mut_slice(), &mut stats)
        .unwrap_or_else(|r| panic!("{r}: {}", model.last_error()));
    let resp = Frame::new_checked(&tx.as_slice()[..n]).unwrap();
    assert_eq!(resp.kind(), Kind::Response);
    let y = resp.tensor("y").expect("response carries y");
    assert_eq!(y.dtype, DType::F32);
    assert_eq!(y.dims(), [batch, MLP_OUT as u64]);
    (f32s(resp.tensor_data(&y)), stats)
}

#[test]
fn signature_is_read_from_the_model() {
    let model = load(&mlp_spec());
    let sig = model.signature();
    assert_eq!(
        sig.inputs.len(),
        1,
        "LoRA initializers are not request inputs"
    );
    assert_eq!(sig.inputs[0].name, "x");
    assert_eq!(sig.inputs[0].dtype, DType::F32);
    assert_eq!(sig.inputs[0].dims, [-1, 4]);
    assert_eq!(sig.inputs[0].dim_names[0], "batch");
    assert_eq!(sig.outputs.len(), 1);
    assert_eq!(sig.outputs[0].name, "y");
    assert_eq!(sig.outputs[0].dims, [-1, 3]);
    assert_eq!(model.adapter_ids().collect::<Vec<_>>(), ["formal"]);
}

#[test]
fn mlp_batch_1_matches_the_reference() {
    let mut model = load(&mlp_spec());
    let x = sixteenths(MLP_IN, 1);
    let (y, stats) = run_mlp(&mut model, &x, None);
    assert_eq!(y, bundled::mlp_reference(&x, None));
    assert_eq!(stats.runs, 1);
}

#[test]
fn mlp_batch_32_matches_the_reference() {
    let mut model = load(&mlp_spec());
    let x = sixteenths(32 * MLP_IN, 2);
    let (y, _) = run_mlp(&mut model, &x, None);
    assert_eq!(y.len(), 32 * MLP_OUT);
    assert_eq!(y, bundled::mlp_reference(&x, None));
}

#[test]
fn lora_adapter_adds_x_a_b_per_request() {
    let mut model = load(&mlp_spec());
    let x = sixteenths(8 * MLP_IN, 3);
    let lora = bundled::formal_lora();
    let base = bundled::mlp_reference(&x, None);
    let tuned = bundled::mlp_reference(&x, Some(&lora));
    assert_ne!(base, tuned, "the test input must make the adapter visible");

    // The same session serves both, chosen per request, in any order.
    let (y0, _) = run_mlp(&mut model, &x, None);
    let (y1, _) = run_mlp(&mut model, &x, Some("formal"));
    let (y2, _) = run_mlp(&mut model, &x, Some(""));
    let (y3, _) = run_mlp(&mut model, &x, Some("formal"));
    assert_eq!(y0, base);
    assert_eq!(y1, tuned);
    assert_eq!(y2, base, "an empty adapter id is the base model");
    assert_eq!(y3, tuned);
}

#[test]
fn two_io_writes_both_outputs() {
    let mut model = load(&spec("two_io.onnx", "two_io"));
    let batch = 3u64;
    let n = batch as usize * TWO_IO_WIDTH;
    let a = sixteenths(n, 4);
    let b = sixteenths(n, 5);
    let (ab, bb) = (f32_bytes(&a), f32_bytes(&b));
    let dims = [batch, TWO_IO_WIDTH as u64];
    let rx = request(
        "two_io",
        "",
        &[
            Input {
                name: "b",
                dtype: DType::F32,
                dims: &dims,
                data: &bb,
            },
            Input {
                name: "a",
                dtype: DType::F32,
                dims: &dims,
                data: &ab,
            },
        ],
    );
    let req = Frame::new_checked(rx.as_slice()).unwrap();
    let mut tx = AlignedBuf::new(4096);
    let mut stats = RunStats::default();
    let len = model
        .run_into(&req, None, tx.as_mut_slice(), &mut stats)
        .unwrap();
    let resp = Frame::new_checked(&tx.as_slice()[..len]).unwrap();
    let names: Vec<&str> = resp.tensors().map(|t| t.name).collect();
    assert_eq!(names, ["sum", "prod"], "outputs in model order");
    let sum = f32s(resp.tensor_data(&resp.tensor("sum").unwrap()));
    let prod = f32s(resp.tensor_data(&resp.tensor("prod").unwrap()));
    let want_sum: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    let want_prod: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x * y).collect();
    assert_eq!(sum, want_sum);
    assert_eq!(prod, want_prod);
    assert_eq!(stats.payload_bytes_in_place, 2 * n as u64 * 4);
    assert_eq!(stats.output_bytes_in_place, 2 * n as u64 * 4);
}

#[test]
fn zero_copy_both_ways() {
    let mut model = load(&mlp_spec());
    let x = sixteenths(4 * MLP_IN, 6);
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
    let x_desc = req.tensor("x").unwrap();
    let x_in_rx = req.tensor_data(&x_desc);

    // ORT's input tensor reads the receive buffer itself.
    let probe = model.probe_inputs(&req).unwrap();
    assert_eq!(probe.len(), 1);
    assert_eq!(probe[0].ort_ptr, x_in_rx.as_ptr() as usize);
    assert_eq!(probe[0].buffer_ptr, x_in_rx.as_ptr() as usize);
    assert_eq!(probe[0].len, 64);

    // The output is written into tx: fill tx with a marker first, run, and
    // find the answer inside tx at the response's tensor offset.
    let mut tx = AlignedBuf::new(4096);
    tx.as_mut_slice().fill(0xAB);
    let mut stats = RunStats::default();
    let rx_before = rx.as_slice().to_vec();
    let len = model
        .run_into(&req, None, tx.as_mut_slice(), &mut stats)
        .unwrap();
    assert_eq!(
        rx.as_slice(),
        &rx_before[..],
        "ORT must only read the request buffer"
    );
    assert_eq!(stats.payload_bytes_copied, 0);
    assert_eq!(stats.payload_bytes_in_place, 64);
    assert_eq!(stats.output_bytes_in_place, 4 * 3 * 4);
    let resp = Frame::new_checked(&tx.as_slice()[..len]).unwrap();
    let y = resp.tensor("y").unwrap();
    let want = f32_bytes(&bundled::mlp_reference(&x, None));
    assert_eq!(&tx.as_slice()[y.data_range()], &want[..]);
    assert_eq!(y.data_offset % 64, 0);
    // The header echoes the request and names what ran.
    assert_eq!(resp.request_id(), req.request_id());
    assert_eq!(resp.tenant_id(), 1);
    assert_eq!(resp.trace(), TRACE);
    assert_eq!(resp.model(), "mlp");
    assert_eq!(resp.model_version(), "1.0.0");
}

#[test]
fn big_input_is_summed_in_place() {
    let mut model = load(&spec("big.onnx", "big"));
    let x: Vec<f32> = (0..BIG_LEN)
        .map(|i| ((i % 5) as f32 - 2.0) / 16.0 + 0.25)
        .collect();
    let want: f32 = x.iter().sum();
    let data = f32_bytes(&x);
    let rx = request(
        "big",
        "",
        &[Input {
            name: "x",
            dtype: DType::F32,
            dims: &[1, BIG_LEN as u64],
            data: &data,
        }],
    );
    let req = Frame::new_checked(rx.as_slice()).unwrap();
    let mut tx = AlignedBuf::new(4096);
    let mut stats = RunStats::default();
    let len = model
        .run_into(&req, None, tx.as_mut_slice(), &mut stats)
        .unwrap();
    let resp = Frame::new_checked(&tx.as_slice()[..len]).unwrap();
    let total = resp.tensor("total").unwrap();
    assert_eq!(total.dims(), [1, 1]);
    assert_eq!(f32s(resp.tensor_data(&total)), [want]);
    assert_eq!(stats.payload_bytes_in_place, 512 << 10);
    assert_eq!(stats.payload_bytes_copied, 0);
}

/// Runs a request that must be rejected; returns the reject and checks that
/// nothing ran.
fn reject(
    model: &mut OrtModel,
    rx: &[u8],
    adapter: Option<&str>,
    tx_len: usize,
) -> sluice_infer::Reject {
    let req = Frame::new_checked(rx).unwrap();
    let mut tx = AlignedBuf::new(tx_len);
    let mut stats = RunStats::default();
    let r = model
        .run_into(&req, adapter, tx.as_mut_slice(), &mut stats)
        .unwrap_err();
    assert_eq!(stats.runs, 0);
    assert_eq!(stats.rejects, 1);
    r
}

#[test]
fn inputs_that_do_not_match_the_model_are_rejected_with_a_code() {
    let mut mlp = load(&mlp_spec());
    let x4 = f32_bytes(&sixteenths(4, 0));
    let bad = |code: ErrorCode, message: &str, r: sluice_infer::Reject| {
        assert_eq!(r.code, code, "{r}");
        assert_eq!(r.message, message);
    };

    // A tensor the model does not have.
    let rx = request(
        "mlp",
        "",
        &[
            Input {
                name: "x",
                dtype: DType::F32,
                dims: &[1, 4],
                data: &x4,
            },
            Input {
                name: "z",
                dtype: DType::F32,
                dims: &[1, 4],
                data: &x4,
            },
        ],
    );
    bad(
        ErrorCode::BadTensor,
        "tensor is not an input of the model",
        reject(&mut mlp, rx.as_slice(), None, 4096),
    );

    // The same input twice.
    let rx = request(
        "mlp",
        "",
        &[
            Input {
                name: "x",
                dtype: DType::F32,
                dims: &[1, 4],
                data: &x4,
            },
            Input {
                name: "x",
                dtype: DType::F32,
                dims: &[1, 4],
                data: &x4,
            },
        ],
    );
    bad(
        ErrorCode::BadTensor,
        "input tensor sent twice",
        reject(&mut mlp, rx.as_slice(), None, 4096),
    );

    // Wrong dtype (same byte length).
    let rx = request(
        "mlp",
        "",
        &[Input {
            name: "x",
            dtype: DType::I32,
            dims: &[1, 4],
            data: &x4,
        }],
    );
    bad(
        ErrorCode::BadTensor,
        "input dtype does not match the model",
        reject(&mut mlp, rx.as_slice(), None, 4096),
    );

    // Wrong rank.
    let rx = request(
        "mlp",
        "",
        &[Input {
            name: "x",
            dtype: DType::F32,
            dims: &[4],
            data: &x4,
        }],
    );
    bad(
        ErrorCode::BadTensor,
        "input rank does not match the model",
        reject(&mut mlp, rx.as_slice(), None, 4096),
    );

    // Wrong fixed dimension: [2, 2] has the right byte length.
    let rx = request(
        "mlp",
        "",
        &[Input {
            name: "x",
            dtype: DType::F32,
            dims: &[2, 2],
            data: &x4,
        }],
    );
    bad(
        ErrorCode::BadTensor,
        "input dimension does not match the model",
        reject(&mut mlp, rx.as_slice(), None, 4096),
    );
}

#[test]
fn a_model_with_two_inputs_needs_both_with_one_batch() {
    let mut two = load(&spec("two_io.onnx", "two_io"));
    let bad = |code: ErrorCode, message: &str, r: sluice_infer::Reject| {
        assert_eq!(r.code, code, "{r}");
        assert_eq!(r.message, message);
    };

    // Missing input.
    let w = f32_bytes(&sixteenths(TWO_IO_WIDTH, 1));
    let rx = request(
        "two_io",
        "",
        &[Input {
            name: "a",
            dtype: DType::F32,
            dims: &[1, 8],
            data: &w,
        }],
    );
    bad(
        ErrorCode::BadTensor,
        "a model input is missing",
        reject(&mut two, rx.as_slice(), None, 4096),
    );

    // Inconsistent batch across inputs.
    let w2 = f32_bytes(&sixteenths(2 * TWO_IO_WIDTH, 1));
    let rx = request(
        "two_io",
        "",
        &[
            Input {
                name: "a",
                dtype: DType::F32,
                dims: &[1, 8],
                data: &w,
            },
            Input {
                name: "b",
                dtype: DType::F32,
                dims: &[2, 8],
                data: &w2,
            },
        ],
    );
    bad(
        ErrorCode::BadTensor,
        "inputs disagree on a shared dimension (e.g. batch)",
        reject(&mut two, rx.as_slice(), None, 4096),
    );
}

#[test]
fn misplaced_or_unservable_requests_are_rejected_with_a_code() {
    let mut mlp = load(&mlp_spec());
    let x4 = f32_bytes(&sixteenths(4, 0));
    let x8 = f32_bytes(&sixteenths(8, 0));
    let bad = |code: ErrorCode, message: &str, r: sluice_infer::Reject| {
        assert_eq!(r.code, code, "{r}");
        assert_eq!(r.message, message);
    };

    // Misaligned: the frame starts 2 bytes past a 64-byte boundary, so the
    // f32 data is not 4-byte aligned in memory.
    let (buf, range) = request_at(
        2,
        "mlp",
        "",
        &[Input {
            name: "x",
            dtype: DType::F32,
            dims: &[2, 4],
            data: &x8,
        }],
    );
    bad(
        ErrorCode::BadTensor,
        "input data not aligned for its dtype",
        reject(&mut mlp, &buf.as_slice()[range], None, 4096),
    );

    // Unknown adapter.
    let rx = request(
        "mlp",
        "casual",
        &[Input {
            name: "x",
            dtype: DType::F32,
            dims: &[1, 4],
            data: &x4,
        }],
    );
    bad(
        ErrorCode::UnknownAdapter,
        "LoRA adapter not loaded for this model",
        reject(&mut mlp, rx.as_slice(), Some("casual"), 4096),
    );

    // Response too large for the reply buffer: the header fits, the output not.
    let rx = request(
        "mlp",
        "",
        &[Input {
            name: "x",
            dtype: DType::F32,
            dims: &[1, 4],
            data: &x4,
        }],
    );
    bad(
        ErrorCode::ResponseTooLarge,
        "response does not fit the reply buffer",
        reject(&mut mlp, rx.as_slice(), None, 128),
    );
    bad(
        ErrorCode::ResponseTooLarge,
        "response does not fit the reply buffer",
        reject(&mut mlp, rx.as_slice(), None, 0),
    );

    // Not a request.
    let mut tx = AlignedBuf::new(256);
    let n = sluice_wire::FrameRepr {
        kind: Kind::Ping,
        ..Default::default()
    }
    .emit(tx.as_mut_slice())
    .unwrap()
    .frame_len;
    bad(
        ErrorCode::UnsupportedKind,
        "only request frames can be run",
        reject(&mut mlp, &tx.as_slice()[..n], None, 4096),
    );

    // After all that, the sessions still answer correctly.
    let x = sixteenths(MLP_IN, 9);
    assert_eq!(
        run_mlp(&mut mlp, &x, Some("formal")).0,
        bundled::mlp_reference(&x, Some(&bundled::formal_lora()))
    );
}

/// A model that loads and whose output shape is known, but which ONNX
/// Runtime fails to run on some data: Gather with an out-of-range index.
fn gather_model() -> std::path::PathBuf {
    use sluice_models::onnx::*;
    let m = Model {
        ir_version: bundled::IR_VERSION,
        opset: bundled::OPSET,
        producer: "sluice-infer-test".into(),
        doc: String::new(),
        graph: Graph {
            name: "gather".into(),
            nodes: vec![Node::new("Gather", "g", &["table", "idx"], &["out"])],
            initializers: vec![Tensor::f32("table", &[4], &[1.0, 2.0, 3.0, 4.0])],
            inputs: vec![ValueInfo::new("idx", elem::INT64, vec![Dim::Fixed(1)])],
            outputs: vec![ValueInfo::new("out", elem::FLOAT, vec![Dim::Fixed(1)])],
        },
    };
    write_temp("gather.onnx", &m.encode())
}

#[test]
fn onnx_runtime_failure_is_inference_failed_and_the_session_survives() {
    init();
    let spec = ModelSpec {
        name: "gather".into(),
        version: "1".into(),
        path: gather_model(),
        adapters: vec![],
    };
    let mut model = OrtModel::load(&spec).unwrap_or_else(|e| panic!("{e}"));
    let run = |model: &mut OrtModel, idx: i64| {
        let data = idx.to_le_bytes();
        let rx = request(
            "gather",
            "",
            &[Input {
                name: "idx",
                dtype: DType::I64,
                dims: &[1],
                data: &data,
            }],
        );
        let req = Frame::new_checked(rx.as_slice()).unwrap();
        let mut tx = AlignedBuf::new(1024);
        let mut stats = RunStats::default();
        let r = model.run_into(&req, None, tx.as_mut_slice(), &mut stats);
        (r.map(|n| f32s(&tx.as_slice()[n - 4..n])), stats)
    };
    let (r, stats) = run(&mut model, 7);
    let e = r.unwrap_err();
    assert_eq!(e.code, ErrorCode::InferenceFailed);
    assert_eq!(stats.failures, 1);
    assert!(!model.last_error().is_empty(), "ORT's message is kept");
    let (r, _) = run(&mut model, 2);
    assert_eq!(r.unwrap(), [3.0]);
}

#[test]
fn load_errors_are_clear() {
    init();
    let missing = ModelSpec {
        path: "/nonexistent/model.onnx".into(),
        ..spec("mlp.onnx", "mlp")
    };
    assert!(matches!(
        OrtModel::load(&missing),
        Err(InferError::ModelNotFound { .. })
    ));

    // Not a model: ORT's parser refuses it.
    let garbage = ModelSpec {
        path: model_path("mlp_formal.onnx_adapter"),
        ..spec("mlp.onnx", "x")
    };
    let e = OrtModel::load(&garbage).unwrap_err();
    assert!(matches!(e, InferError::Session { .. }), "{e}");

    // Adapter file missing, not an adapter, or for another model.
    let mut s = mlp_spec();
    s.adapters[0].path = "/nonexistent.onnx_adapter".into();
    assert!(matches!(
        OrtModel::load(&s),
        Err(InferError::Adapter { .. })
    ));
    let mut s = mlp_spec();
    s.adapters[0].path = model_path("mlp.onnx");
    let e = OrtModel::load(&s).unwrap_err();
    assert!(matches!(e, InferError::Adapter { .. }), "{e}");
    let mut s = spec("two_io.onnx", "two_io");
    s.adapters = mlp_spec().adapters;
    let e = OrtModel::load(&s).unwrap_err();
    assert!(
        matches!(&e, InferError::Adapter { id, .. } if id == "formal"),
        "{e}"
    );

    let mut s = mlp_spec();
    s.adapters.push(s.adapters[0].clone());
    assert!(matches!(
        OrtModel::load(&s),
        Err(InferError::DuplicateAdapter { .. })
    ));
}

#[test]
fn model_is_send_and_runs_on_another_thread() {
    let mut model = load(&mlp_spec());
    let x = sixteenths(2 * MLP_IN, 11);
    let want = bundled::mlp_reference(&x, None);
    let y = std::thread::spawn(move || run_mlp(&mut model, &x, None).0)
        .join()
        .unwrap();
    assert_eq!(y, want);
}

/// A model whose declared output shape is wrong for some requests: Pad with
/// pads from the request, output declared [batch, 4]. ONNX Runtime checks
/// pre-allocated outputs against the computed shape, so the run fails and
/// nothing is written outside the output region.
#[test]
fn a_model_lying_about_its_output_shape_fails_cleanly() {
    use sluice_models::onnx::*;
    init();
    let batch = || Dim::Param("batch".into());
    let m = Model {
        ir_version: bundled::IR_VERSION,
        opset: bundled::OPSET,
        producer: "sluice-infer-test".into(),
        doc: String::new(),
        graph: Graph {
            name: "pad".into(),
            nodes: vec![Node::new("Pad", "pad", &["x", "pads"], &["y"])],
            initializers: vec![],
            inputs: vec![
                ValueInfo::new("x", elem::FLOAT, vec![batch(), Dim::Fixed(4)]),
                ValueInfo::new("pads", elem::INT64, vec![Dim::Fixed(4)]),
            ],
            outputs: vec![ValueInfo::new(
                "y",
                elem::FLOAT,
                vec![batch(), Dim::Fixed(4)],
            )],
        },
    };
    let spec = ModelSpec {
        name: "pad".into(),
        version: "1".into(),
        path: write_temp("pad.onnx", &m.encode()),
        adapters: vec![],
    };
    let mut model = OrtModel::load(&spec).unwrap_or_else(|e| panic!("{e}"));
    let x = f32_bytes(&sixteenths(8, 1));
    for (pads, ok) in [
        ([0i64, 0, 0, 0], true),
        ([0, 0, 0, 4], false),
        ([0, 0, 5, 0], false),
        ([0, 0, 0, -2], false),
    ] {
        let p: Vec<u8> = pads.iter().flat_map(|v| v.to_le_bytes()).collect();
        let rx = request(
            "pad",
            "",
            &[
                Input {
                    name: "x",
                    dtype: DType::F32,
                    dims: &[2, 4],
                    data: &x,
                },
                Input {
                    name: "pads",
                    dtype: DType::I64,
                    dims: &[4],
                    data: &p,
                },
            ],
        );
        let req = Frame::new_checked(rx.as_slice()).unwrap();
        let mut tx = AlignedBuf::new(4096);
        tx.as_mut_slice().fill(0xEE);
        let mut stats = RunStats::default();
        let r = model.run_into(&req, None, tx.as_mut_slice(), &mut stats);
        // The response is 256 bytes at most (header + 32 bytes of data).
        assert!(
            tx.as_slice()[256..].iter().all(|&b| b == 0xEE),
            "pads {pads:?} wrote past the response"
        );
        if ok {
            let n = r.unwrap();
            assert_eq!(&tx.as_slice()[n - 32..n], &x[..]);
        } else {
            assert_eq!(
                r.unwrap_err().code,
                ErrorCode::InferenceFailed,
                "pads {pads:?}"
            );
            assert!(
                model.last_error().contains("shape"),
                "{}",
                model.last_error()
            );
        }
    }
}

#[test]
fn an_empty_batch_never_crashes() {
    let mut model = load(&mlp_spec());
    let rx = request(
        "mlp",
        "",
        &[Input {
            name: "x",
            dtype: DType::F32,
            dims: &[0, 4],
            data: &[],
        }],
    );
    let req = Frame::new_checked(rx.as_slice()).unwrap();
    let mut tx = AlignedBuf::new(4096);
    let mut stats = RunStats::default();
    match model.run_into(&req, Some("formal"), tx.as_mut_slice(), &mut stats) {
        Ok(n) => {
            let resp = Frame::new_checked(&tx.as_slice()[..n]).unwrap();
            assert_eq!(resp.tensor("y").unwrap().dims(), [0, 3]);
        }
        Err(r) => assert_eq!(r.code, ErrorCode::InferenceFailed, "{r}"),
    }
    // And the session still serves.
    let x = sixteenths(MLP_IN, 5);
    assert_eq!(
        run_mlp(&mut model, &x, None).0,
        bundled::mlp_reference(&x, None)
    );
}

#[test]
fn bool_inputs_must_be_0_or_1() {
    use sluice_models::onnx::*;
    init();
    let m = Model {
        ir_version: bundled::IR_VERSION,
        opset: bundled::OPSET,
        producer: "sluice-infer-test".into(),
        doc: String::new(),
        graph: Graph {
            name: "not".into(),
            nodes: vec![Node::new("Not", "not", &["b"], &["nb"])],
            initializers: vec![],
            inputs: vec![ValueInfo::new("b", 9, vec![Dim::Param("n".into())])],
            outputs: vec![ValueInfo::new("nb", 9, vec![Dim::Param("n".into())])],
        },
    };
    let spec = ModelSpec {
        name: "not".into(),
        version: "1".into(),
        path: write_temp("not.onnx", &m.encode()),
        adapters: vec![],
    };
    let mut model = OrtModel::load(&spec).unwrap_or_else(|e| panic!("{e}"));
    let mut run = |bytes: &[u8]| {
        let rx = request(
            "not",
            "",
            &[Input {
                name: "b",
                dtype: DType::Bool,
                dims: &[bytes.len() as u64],
                data: bytes,
            }],
        );
        let req = Frame::new_checked(rx.as_slice()).unwrap();
        let mut tx = AlignedBuf::new(1024);
        let mut stats = RunStats::default();
        model
            .run_into(&req, None, tx.as_mut_slice(), &mut stats)
            .map(|n| tx.as_slice()[n - bytes.len()..n].to_vec())
    };
    assert_eq!(run(&[0, 1, 1]).unwrap(), [1, 0, 0]);
    let r = run(&[0, 2, 1]).unwrap_err();
    assert_eq!(
        (r.code, r.message),
        (
            ErrorCode::BadTensor,
            "bool tensor holds a byte other than 0 or 1"
        )
    );
}
