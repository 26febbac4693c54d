//! `decoder.onnx`: a tiny byte-level generative model, one decode step per
//! run, with its recurrent state as an explicit input and output, so a
//! token stream keeps the state in the appliance (`h` ← `hN`, docs/wire.md
//! "Streams") and greedy decoding makes the output deterministic.
//!
//! One step: `e = E[token]`, `hN = clip(floor((e + h·W)·16)/16, -8, 8)`,
//! `next = argmax(hN·O)` (the first index on a tie, ONNX `ArgMax`'s
//! default). Weights are sixteenths with small numerators and the state is
//! floored to sixteenths each step, so every product and partial sum is
//! exact in f32: ONNX Runtime, onnxruntime-python and [`decoder_step`]
//! agree bit for bit at every step of any length of generation.

use crate::bundled::{IR_VERSION, OPSET};
use crate::onnx::{Attr, Dim, Graph, Model, Node, Tensor, ValueInfo, elem};

/// Vocabulary: bytes.
pub const DECODER_VOCAB: usize = 256;
/// Width of the hidden state.
pub const DECODER_HIDDEN: usize = 16;
/// The end-of-sequence token: generation stops when it is chosen (it is
/// not sent).
pub const DECODER_EOS: i64 = 0;
/// Input names: the token of the step (i64 [batch]) and the state (f32
/// [batch, 16]).
pub const DECODER_TOKEN: &str = "token";
/// See [`DECODER_TOKEN`].
pub const DECODER_STATE: &str = "h";
/// Output names: the greedy next token (i64 [batch]) and the next state.
pub const DECODER_NEXT: &str = "next";
/// See [`DECODER_NEXT`].
pub const DECODER_STATE_NEXT: &str = "hN";
/// Bound of every state element.
pub const DECODER_CLIP: f32 = 8.0;

fn q(k: i64) -> f32 {
    k as f32 / 16.0
}

/// The fixed weights: `e` [256][16], `w` [16][16], `o` [16][256],
/// row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct DecoderWeights {
    /// Embedding.
    pub e: Vec<f32>,
    /// Recurrence.
    pub w: Vec<f32>,
    /// Output projection.
    pub o: Vec<f32>,
}

/// The decoder's weights (a fixed function of the indices).
pub fn decoder_weights() -> DecoderWeights {
    let (v, h) = (DECODER_VOCAB as i64, DECODER_HIDDEN as i64);
    let mut e = Vec::with_capacity((v * h) as usize);
    for t in 0..v {
        for j in 0..h {
            e.push(q((t * 7 + j * 13 + (t * j) % 5) % 17 - 8));
        }
    }
    let mut w = Vec::with_capacity((h * h) as usize);
    for i in 0..h {
        for j in 0..h {
            // A shifted permutation plus a little mixing, so the state
            // carries the past instead of collapsing.
            let k = if (i + 3) % h == j {
                12
            } else {
                (i * 5 + j * 11) % 7 - 3
            };
            w.push(q(k));
        }
    }
    let mut o = Vec::with_capacity((h * v) as usize);
    for j in 0..h {
        for t in 0..v {
            o.push(q((j * 29 + t * 17 + (j * t) % 11) % 13 - 6));
        }
    }
    DecoderWeights { e, w, o }
}

/// One decode step in plain Rust: what `decoder.onnx` computes for one
/// row. Returns the next token; `h` becomes the next state.
pub fn decoder_step(w: &DecoderWeights, token: i64, h: &mut [f32; DECODER_HIDDEN]) -> i64 {
    let (hd, v) = (DECODER_HIDDEN, DECODER_VOCAB);
    let t = token.clamp(0, v as i64 - 1) as usize;
    let mut next = [0f32; DECODER_HIDDEN];
    for (j, n) in next.iter_mut().enumerate() {
        let mut acc = 0f32;
        for (i, hi) in h.iter().enumerate() {
            acc += hi * w.w[i * hd + j];
        }
        let x = w.e[t * hd + j] + acc;
        *n = ((x * 16.0).floor() / 16.0).clamp(-DECODER_CLIP, DECODER_CLIP);
    }
    *h = next;
    let mut best = (f32::NEG_INFINITY, 0usize);
    for c in 0..v {
        let mut acc = 0f32;
        for (j, hj) in h.iter().enumerate() {
            acc += hj * w.o[j * v + c];
        }
        if acc > best.0 {
            best = (acc, c);
        }
    }
    best.1 as i64
}

/// Greedy generation as a token stream runs it: the state starts at zero,
/// each prompt token is one step, the prompt's last step chooses the first
/// token, each chosen token is the next step's input; ends at
/// [`DECODER_EOS`] (not included) or after `max_tokens` tokens.
pub fn decoder_generate(prompt: &[i64], max_tokens: usize) -> Vec<i64> {
    let w = decoder_weights();
    let mut h = [0f32; DECODER_HIDDEN];
    let mut next = DECODER_EOS;
    for &t in prompt {
        next = decoder_step(&w, t, &mut h);
    }
    let mut out = Vec::new();
    while out.len() < max_tokens && next != DECODER_EOS && !prompt.is_empty() {
        out.push(next);
        if out.len() == max_tokens {
            break;
        }
        next = decoder_step(&w, next, &mut h);
    }
    out
}

/// `decoder.onnx`: `token` i64 [batch], `h` f32 [batch, 16] → `next` i64
/// [batch], `hN` f32 [batch, 16].
pub fn decoder_model() -> Model {
    let w = decoder_weights();
    let (v, h) = (DECODER_VOCAB as i64, DECODER_HIDDEN as i64);
    let batch = || Dim::Param("batch".to_string());
    Model {
        ir_version: IR_VERSION,
        opset: OPSET,
        producer: "sluice-models".to_string(),
        doc: "Sluice bundled byte-level decoder step: hN = clip(floor((E[token] + h*W)*16)/16, -8, 8), next = argmax(hN*O)".to_string(),
        graph: Graph {
            name: "decoder".to_string(),
            nodes: vec![
                Node::new("Gather", "embed", &["E", DECODER_TOKEN], &["e"]).attr("axis", Attr::Int(0)),
                Node::new("MatMul", "recur", &[DECODER_STATE, "W"], &["hw"]),
                Node::new("Add", "mix", &["e", "hw"], &["pre"]),
                Node::new("Mul", "scale_up", &["pre", "sixteen"], &["pre16"]),
                Node::new("Floor", "quantize", &["pre16"], &["fl"]),
                Node::new("Mul", "scale_down", &["fl", "sixteenth"], &["hq"]),
                Node::new("Clip", "bound", &["hq", "lo", "hi"], &[DECODER_STATE_NEXT]),
                Node::new("MatMul", "project", &[DECODER_STATE_NEXT, "O"], &["logits"]),
                Node::new("ArgMax", "greedy", &["logits"], &[DECODER_NEXT])
                    .attr("axis", Attr::Int(1))
                    .attr("keepdims", Attr::Int(0)),
            ],
            initializers: vec![
                Tensor::f32("E", &[v, h], &w.e),
                Tensor::f32("W", &[h, h], &w.w),
                Tensor::f32("O", &[h, v], &w.o),
                Tensor::f32("sixteen", &[], &[16.0]),
                Tensor::f32("sixteenth", &[], &[1.0 / 16.0]),
                Tensor::f32("lo", &[], &[-DECODER_CLIP]),
                Tensor::f32("hi", &[], &[DECODER_CLIP]),
            ],
            inputs: vec![
                ValueInfo::new(DECODER_TOKEN, elem::INT64, vec![batch()]),
                ValueInfo::new(DECODER_STATE, elem::FLOAT, vec![batch(), Dim::Fixed(h)]),
            ],
            outputs: vec![
                ValueInfo::new(DECODER_NEXT, elem::INT64, vec![batch()]),
                ValueInfo::new(DECODER_STATE_NEXT, elem::FLOAT, vec![batch(), Dim::Fixed(h)]),
            ],
        },
    }
}
