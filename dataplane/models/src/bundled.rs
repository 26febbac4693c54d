//! The models and adapter checked in under `models/`, and plain-Rust
//! references of what they compute.
//!
//! Every weight is a small multiple of 1/16. With inputs that are also small
//! multiples of 1/16, every product and partial sum is exactly representable
//! in f32, so ONNX Runtime's result equals the reference bit for bit whatever
//! its summation order or use of FMA.

use crate::adapter::{AdapterParam, encode_adapter};
use crate::onnx::{Attr, Dim, Graph, Model, Node, Tensor, ValueInfo, elem};

/// ONNX IR version of the bundled models.
pub const IR_VERSION: i64 = 8;
/// Default-domain opset of the bundled models.
pub const OPSET: i64 = 17;

/// MLP input width.
pub const MLP_IN: usize = 4;
/// MLP hidden width.
pub const MLP_HIDDEN: usize = 8;
/// MLP output width.
pub const MLP_OUT: usize = 3;
/// Rank of the MLP's LoRA matrices.
pub const LORA_RANK: usize = 2;
/// Width of each `two_io` tensor.
pub const TWO_IO_WIDTH: usize = 8;
/// Elements of `big.onnx`'s input: 131072 f32 = 512 KiB.
pub const BIG_LEN: usize = 131072;

/// Name of the MLP's input.
pub const MLP_INPUT: &str = "x";
/// Name of the MLP's output.
pub const MLP_OUTPUT: &str = "y";
/// Names of the MLP's LoRA parameters (overridable initializers).
pub const LORA_A: &str = "lora_a";
/// See [`LORA_A`].
pub const LORA_B: &str = "lora_b";

fn q(k: i64) -> f32 {
    k as f32 / 16.0
}

/// Weights of `mlp.onnx`: `y = relu(x·w1 + b1)·w2 + b2 + (x·lora_a)·lora_b`.
#[derive(Debug, Clone, PartialEq)]
pub struct MlpWeights {
    /// [MLP_IN][MLP_HIDDEN], row-major.
    pub w1: Vec<f32>,
    /// [MLP_HIDDEN].
    pub b1: Vec<f32>,
    /// [MLP_HIDDEN][MLP_OUT], row-major.
    pub w2: Vec<f32>,
    /// [MLP_OUT].
    pub b2: Vec<f32>,
}

/// LoRA matrices for the MLP.
#[derive(Debug, Clone, PartialEq)]
pub struct Lora {
    /// [MLP_IN][LORA_RANK], row-major.
    pub a: Vec<f32>,
    /// [LORA_RANK][MLP_OUT], row-major.
    pub b: Vec<f32>,
}

/// The MLP's fixed weights.
pub fn mlp_weights() -> MlpWeights {
    let mut w1 = Vec::with_capacity(MLP_IN * MLP_HIDDEN);
    for i in 0..MLP_IN as i64 {
        for j in 0..MLP_HIDDEN as i64 {
            w1.push(q((i * 5 + j * 3) % 9 - 4));
        }
    }
    let b1 = (0..MLP_HIDDEN as i64).map(|j| q(j % 5 - 2)).collect();
    let mut w2 = Vec::with_capacity(MLP_HIDDEN * MLP_OUT);
    for j in 0..MLP_HIDDEN as i64 {
        for k in 0..MLP_OUT as i64 {
            w2.push(q((j * 7 + k * 2) % 11 - 5));
        }
    }
    let b2 = (0..MLP_OUT as i64).map(|k| q(k - 1)).collect();
    MlpWeights { w1, b1, w2, b2 }
}

/// The "formal" adapter's matrices (in `mlp_formal.onnx_adapter`).
pub fn formal_lora() -> Lora {
    let mut a = Vec::with_capacity(MLP_IN * LORA_RANK);
    for i in 0..MLP_IN as i64 {
        for r in 0..LORA_RANK as i64 {
            a.push(q((i + 2 * r) % 5 - 2));
        }
    }
    let mut b = Vec::with_capacity(LORA_RANK * MLP_OUT);
    for r in 0..LORA_RANK as i64 {
        for k in 0..MLP_OUT as i64 {
            b.push(q((3 * r + k) % 7 - 3));
        }
    }
    Lora { a, b }
}

/// Row-major `[n][k]·[k][m]`.
fn matmul(x: &[f32], w: &[f32], n: usize, k: usize, m: usize) -> Vec<f32> {
    let mut out = vec![0.0; n * m];
    for r in 0..n {
        for c in 0..m {
            let mut acc = 0.0f32;
            for i in 0..k {
                acc += x[r * k + i] * w[i * m + c];
            }
            out[r * m + c] = acc;
        }
    }
    out
}

/// What `mlp.onnx` computes for `x` ([batch][MLP_IN], row-major), with the
/// given LoRA (or the model's zero default).
pub fn mlp_reference(x: &[f32], lora: Option<&Lora>) -> Vec<f32> {
    assert_eq!(x.len() % MLP_IN, 0, "x must be [batch][{MLP_IN}]");
    let n = x.len() / MLP_IN;
    let w = mlp_weights();
    let mut h = matmul(x, &w.w1, n, MLP_IN, MLP_HIDDEN);
    for (i, v) in h.iter_mut().enumerate() {
        *v = (*v + w.b1[i % MLP_HIDDEN]).max(0.0);
    }
    let mut y = matmul(&h, &w.w2, n, MLP_HIDDEN, MLP_OUT);
    for (i, v) in y.iter_mut().enumerate() {
        *v += w.b2[i % MLP_OUT];
    }
    if let Some(l) = lora {
        let xa = matmul(x, &l.a, n, MLP_IN, LORA_RANK);
        let delta = matmul(&xa, &l.b, n, LORA_RANK, MLP_OUT);
        for (v, d) in y.iter_mut().zip(delta) {
            *v += d;
        }
    }
    y
}

fn batch() -> Dim {
    Dim::Param("batch".to_string())
}

/// `mlp.onnx`: `x` f32 [batch, 4] → `y` f32 [batch, 3]. `lora_a` [4, 2] and
/// `lora_b` [2, 3] are inputs with zero initializers, so an ONNX Runtime LoRA
/// adapter that supplies them adds `(x·lora_a)·lora_b` to the output.
pub fn mlp_model() -> Model {
    let w = mlp_weights();
    let (i, h, o, r) = (
        MLP_IN as i64,
        MLP_HIDDEN as i64,
        MLP_OUT as i64,
        LORA_RANK as i64,
    );
    let zeros_a = vec![0.0; MLP_IN * LORA_RANK];
    let zeros_b = vec![0.0; LORA_RANK * MLP_OUT];
    Model {
        ir_version: IR_VERSION,
        opset: OPSET,
        producer: "sluice-models".to_string(),
        doc: "Sluice bundled MLP: y = relu(x*w1+b1)*w2+b2 + (x*lora_a)*lora_b".to_string(),
        graph: Graph {
            name: "mlp".to_string(),
            nodes: vec![
                Node::new("Gemm", "fc1", &["x", "w1", "b1"], &["h1"]),
                Node::new("Relu", "relu1", &["h1"], &["h2"]),
                Node::new("Gemm", "fc2", &["h2", "w2", "b2"], &["base"]),
                Node::new("MatMul", "lora_down", &["x", LORA_A], &["xa"]),
                Node::new("MatMul", "lora_up", &["xa", LORA_B], &["delta"]),
                Node::new("Add", "lora_add", &["base", "delta"], &["y"]),
            ],
            initializers: vec![
                Tensor::f32("w1", &[i, h], &w.w1),
                Tensor::f32("b1", &[h], &w.b1),
                Tensor::f32("w2", &[h, o], &w.w2),
                Tensor::f32("b2", &[o], &w.b2),
                Tensor::f32(LORA_A, &[i, r], &zeros_a),
                Tensor::f32(LORA_B, &[r, o], &zeros_b),
            ],
            inputs: vec![
                ValueInfo::new(MLP_INPUT, elem::FLOAT, vec![batch(), Dim::Fixed(i)]),
                ValueInfo::new(LORA_A, elem::FLOAT, vec![Dim::Fixed(i), Dim::Fixed(r)]),
                ValueInfo::new(LORA_B, elem::FLOAT, vec![Dim::Fixed(r), Dim::Fixed(o)]),
            ],
            outputs: vec![ValueInfo::new(
                MLP_OUTPUT,
                elem::FLOAT,
                vec![batch(), Dim::Fixed(o)],
            )],
        },
    }
}

/// `two_io.onnx`: `a`, `b` f32 [batch, 8] → `sum` = a + b, `prod` = a · b
/// (element-wise).
pub fn two_io_model() -> Model {
    let dims = || vec![batch(), Dim::Fixed(TWO_IO_WIDTH as i64)];
    Model {
        ir_version: IR_VERSION,
        opset: OPSET,
        producer: "sluice-models".to_string(),
        doc: "Sluice bundled two-in two-out model: sum = a+b, prod = a*b".to_string(),
        graph: Graph {
            name: "two_io".to_string(),
            nodes: vec![
                Node::new("Add", "add", &["a", "b"], &["sum"]),
                Node::new("Mul", "mul", &["a", "b"], &["prod"]),
            ],
            initializers: vec![],
            inputs: vec![
                ValueInfo::new("a", elem::FLOAT, dims()),
                ValueInfo::new("b", elem::FLOAT, dims()),
            ],
            outputs: vec![
                ValueInfo::new("sum", elem::FLOAT, dims()),
                ValueInfo::new("prod", elem::FLOAT, dims()),
            ],
        },
    }
}

/// Width of `accum.onnx`'s tensors.
pub const ACCUM_WIDTH: usize = 8;

/// `accum.onnx`, the bundled stateful stream model: `x`, `s` f32
/// [batch, 8] → `sN` = s + x (the next state), `y` = sN · 0.5. Run as a
/// stream with `s` ← `sN`, step n answers half the sum of the inputs so
/// far (exact in f32 for inputs in sixteenths).
pub fn accum_model() -> Model {
    let dims = || vec![batch(), Dim::Fixed(ACCUM_WIDTH as i64)];
    Model {
        ir_version: IR_VERSION,
        opset: OPSET,
        producer: "sluice-models".to_string(),
        doc: "Sluice bundled stream model: sN = s + x, y = sN * 0.5".to_string(),
        graph: Graph {
            name: "accum".to_string(),
            nodes: vec![
                Node::new("Add", "add", &["s", "x"], &["sN"]),
                Node::new("Mul", "half", &["sN", "half"], &["y"]),
            ],
            initializers: vec![Tensor::f32("half", &[], &[0.5])],
            inputs: vec![
                ValueInfo::new("x", elem::FLOAT, dims()),
                ValueInfo::new("s", elem::FLOAT, dims()),
            ],
            outputs: vec![
                ValueInfo::new("y", elem::FLOAT, dims()),
                ValueInfo::new("sN", elem::FLOAT, dims()),
            ],
        },
    }
}

/// `big.onnx`: `x` f32 [1, 131072] (512 KiB) → `total` f32 [1, 1], the sum
/// of all elements. Measures reading a large input in place.
pub fn big_model() -> Model {
    Model {
        ir_version: IR_VERSION,
        opset: OPSET,
        producer: "sluice-models".to_string(),
        doc: "Sluice bundled 512 KiB-input model: total = sum(x)".to_string(),
        graph: Graph {
            name: "big".to_string(),
            nodes: vec![
                Node::new("ReduceSum", "sum", &["x"], &["total"]).attr("keepdims", Attr::Int(1)),
            ],
            initializers: vec![],
            inputs: vec![ValueInfo::new(
                "x",
                elem::FLOAT,
                vec![Dim::Fixed(1), Dim::Fixed(BIG_LEN as i64)],
            )],
            outputs: vec![ValueInfo::new(
                "total",
                elem::FLOAT,
                vec![Dim::Fixed(1), Dim::Fixed(1)],
            )],
        },
    }
}

/// Scale of `large.onnx`'s `y`.
pub const LARGE_SCALE: f32 = 0.5;
/// Offset of `large.onnx`'s `y`.
pub const LARGE_OFFSET: f32 = 0.25;

/// `large.onnx`: `x` f32 [batch, n], both dimensions dynamic (an image or
/// a KV-cache block worth of floats: 1 MiB, 16 MiB) → `y` = x·0.5 + 0.25,
/// the same shape (an answer as large as the request), and `total` f32
/// [batch, 1], the sum of each row (every input element read).
pub fn large_model() -> Model {
    let dims = || vec![batch(), Dim::Param("n".to_string())];
    Model {
        ir_version: IR_VERSION,
        opset: OPSET,
        producer: "sluice-models".to_string(),
        doc: "Sluice bundled large-input model: y = x*0.5+0.25, total = row sums of x".to_string(),
        graph: Graph {
            name: "large".to_string(),
            nodes: vec![
                Node::new("Mul", "scale", &["x", "half"], &["xh"]),
                Node::new("Add", "offset", &["xh", "quarter"], &["y"]),
                Node::new("ReduceSum", "rows", &["x", "axes"], &["total"])
                    .attr("keepdims", Attr::Int(1)),
            ],
            initializers: vec![
                Tensor::f32("half", &[], &[LARGE_SCALE]),
                Tensor::f32("quarter", &[], &[LARGE_OFFSET]),
                Tensor::i64("axes", &[1], &[1]),
            ],
            inputs: vec![ValueInfo::new("x", elem::FLOAT, dims())],
            outputs: vec![
                ValueInfo::new("y", elem::FLOAT, dims()),
                ValueInfo::new("total", elem::FLOAT, vec![batch(), Dim::Fixed(1)]),
            ],
        },
    }
}

/// What `large.onnx` computes for one row `x`: `y` exactly, and the row
/// sum in f64 (ONNX Runtime's f32 summation order is its own).
pub fn large_reference(x: &[f32]) -> (Vec<f32>, f64) {
    let y = x.iter().map(|v| v * LARGE_SCALE + LARGE_OFFSET).collect();
    (y, x.iter().map(|&v| f64::from(v)).sum())
}

/// Rows of `weights.onnx`'s weight (the input width).
pub const WEIGHTS_IN: usize = 2048;
/// Columns of `weights.onnx`'s weight (the output width): with
/// [`WEIGHTS_IN`], 2048 x 4096 f32 = 32 MiB of initializer.
pub const WEIGHTS_OUT: usize = 4096;

/// Element `(i, j)` of `weights.onnx`'s weight: a small multiple of 1/16
/// (exact sums, see the module note), from a cheap hash of the position.
pub fn weights_elem(i: usize, j: usize) -> f32 {
    let h = (i as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((j as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F));
    q(((h >> 59) as i64) - 16)
}

/// `weights.onnx`: `x` f32 [1, 2048] → `y` = x · W, W f32 [2048, 4096]
/// (32 MiB of weights). Not checked in (too large for the repository):
/// tests and the scaling benchmark write it to a temporary directory. It
/// measures what a model's weights cost per worker.
pub fn weights_model() -> Model {
    let mut w = Vec::with_capacity(WEIGHTS_IN * WEIGHTS_OUT);
    for i in 0..WEIGHTS_IN {
        for j in 0..WEIGHTS_OUT {
            w.push(weights_elem(i, j));
        }
    }
    Model {
        ir_version: IR_VERSION,
        opset: OPSET,
        producer: "sluice-models".to_string(),
        doc: "Sluice large-weights model: y = x * W, W 32 MiB".to_string(),
        graph: Graph {
            name: "weights".to_string(),
            nodes: vec![Node::new("MatMul", "project", &["x", "w"], &["y"])],
            initializers: vec![Tensor::f32(
                "w",
                &[WEIGHTS_IN as i64, WEIGHTS_OUT as i64],
                &w,
            )],
            inputs: vec![ValueInfo::new(
                "x",
                elem::FLOAT,
                vec![Dim::Fixed(1), Dim::Fixed(WEIGHTS_IN as i64)],
            )],
            outputs: vec![ValueInfo::new(
                "y",
                elem::FLOAT,
                vec![Dim::Fixed(1), Dim::Fixed(WEIGHTS_OUT as i64)],
            )],
        },
    }
}

/// What `weights.onnx` computes for `x` (exact for inputs that are small
/// multiples of 1/16).
pub fn weights_reference(x: &[f32]) -> Vec<f32> {
    (0..WEIGHTS_OUT)
        .map(|j| (0..WEIGHTS_IN).map(|i| x[i] * weights_elem(i, j)).sum())
        .collect()
}

/// `mlp_formal.onnx_adapter`: the "formal" LoRA adapter of `mlp.onnx`.
pub fn formal_adapter() -> Vec<u8> {
    let l = formal_lora();
    encode_adapter(
        1,
        1,
        &[
            AdapterParam::f32(LORA_A, &[MLP_IN as i64, LORA_RANK as i64], &l.a),
            AdapterParam::f32(LORA_B, &[LORA_RANK as i64, MLP_OUT as i64], &l.b),
        ],
    )
}

/// Every bundled file: (file name under `models/`, bytes).
pub fn bundled_files() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("mlp.onnx", mlp_model().encode()),
        ("two_io.onnx", two_io_model().encode()),
        ("accum.onnx", accum_model().encode()),
        ("big.onnx", big_model().encode()),
        ("large.onnx", large_model().encode()),
        ("decoder.onnx", crate::decoder::decoder_model().encode()),
        ("mlp_formal.onnx_adapter", formal_adapter()),
    ]
}
