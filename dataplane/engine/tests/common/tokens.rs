//! Token-stream helpers shared by e2e_tokens and no_alloc_tokens: an
//! engine with the bundled decoder (`decoder`: EOS 0, 32 tokens;
//! `endless`: no EOS) and the MLP, and the frames of a token stream.

use std::net::{SocketAddr, UdpSocket};

use super::*;
use sluice_engine::Engine;
use sluice_wire::{DType, ExtRepr, Frame, FrameRepr, Kind, StreamHeader, TensorRepr, stream_flags};

pub const PROMPTS: &[&str] = &["hello", "Sluice", "a", "token streams", "zz", "0123456789"];
pub const MAX_TOKENS: u32 = 32;

pub fn config(idle_ms: u32) -> sluice_engine::Config {
    config_with(idle_ms, 64)
}

/// [`config`] with the generative models' `step_batch_max` (1: each
/// stream's decode step runs on its own).
pub fn config_with(idle_ms: u32, step_batch_max: u32) -> sluice_engine::Config {
    let root = repo_root();
    sluice_engine::Config::parse(&config_text(idle_ms, step_batch_max), root).unwrap()
}

/// The text of [`config_with`].
pub fn config_text(idle_ms: u32, step_batch_max: u32) -> String {
    let root = repo_root();
    format!(
        r#"
[auth]
mode = "none"
[engine]
workers = [0]
[io_uring]
listen = "127.0.0.1:0"
rx_buffers = 256
tx_buffers = 256
[onnxruntime]
library = "{lib}"
[streams]
per_worker = 64
per_tenant = 64
idle_ms = {idle_ms}
[[shards]]
name = "s"
[[routes]]
name = "all"
shard = "s"
{decoders}[[models]]
name = "mlp"
version = "1"
path = "{root}/models/mlp.onnx"
"#,
        lib = ort_lib().display(),
        root = root.display(),
        decoders = decoder_models(&root, step_batch_max),
    )
}

/// The `[[models]]` blocks of the bundled decoder under `root`: `decoder`
/// (EOS 0, [`MAX_TOKENS`]) and `endless` (no EOS), both with
/// `step_batch_max`.
pub fn decoder_models(root: &std::path::Path, step_batch_max: u32) -> String {
    format!(
        r#"
[[models]]
name = "decoder"
version = "1"
path = "{root}/models/decoder.onnx"
[models.stream]
state = [{{ input = "h", output = "hN", shape = [1, 16] }}]
[models.stream.generate]
token_input = "token"
token_output = "next"
eos = 0
max_tokens = {MAX_TOKENS}
step_batch_max = {step_batch_max}
[[models]]
name = "endless"
version = "1"
path = "{root}/models/decoder.onnx"
[models.stream]
state = [{{ input = "h", output = "hN", shape = [1, 16] }}]
[models.stream.generate]
token_input = "token"
token_output = "next"
max_tokens = 1000000
step_batch_max = {step_batch_max}
"#,
        root = root.display(),
    )
}

pub fn start(idle_ms: u32) -> (Engine, SocketAddr) {
    let e = started(config(idle_ms));
    let addr = e.local_addr().unwrap();
    (e, addr)
}

#[allow(clippy::too_many_arguments)]
pub fn stream_frame(
    model: &str,
    id: u64,
    seq: u32,
    flags: u8,
    prompt: Option<&[u8]>,
    tokens_per_frame: u16,
    max_tokens: u32,
    deadline_us: u64,
) -> (u64, Vec<u8>) {
    let data: Vec<u8> = prompt
        .unwrap_or(&[])
        .iter()
        .flat_map(|&b| i64::from(b).to_le_bytes())
        .collect();
    let dims = [prompt.map_or(0, |p| p.len() as u64)];
    let t = [TensorRepr {
        name: "token",
        dtype: DType::I64,
        dims: &dims,
        data: Some(&data),
    }];
    let sh = StreamHeader {
        stream_id: id,
        seq,
        flags,
        tokens_per_frame,
        max_tokens,
        ..StreamHeader::default()
    }
    .to_bytes();
    let ext = [ExtRepr::stream(&sh)];
    let rid = next_id();
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id: rid,
        tenant_id: 7,
        deadline_us,
        model,
        model_version: "1",
        extensions: &ext,
        tensors: if prompt.is_some() { &t } else { &[] },
        ..FrameRepr::default()
    };
    let mut buf = vec![0u8; 4096];
    let n = repr.emit(&mut buf).unwrap().frame_len;
    buf.truncate(n);
    (rid, buf)
}

pub fn open(model: &str, id: u64, prompt: &str, tpf: u16, max_tokens: u32) -> (u64, Vec<u8>) {
    stream_frame(
        model,
        id,
        0,
        stream_flags::OPEN,
        Some(prompt.as_bytes()),
        tpf,
        max_tokens,
        now_us() + 60_000_000,
    )
}

pub fn cancel(model: &str, id: u64) -> (u64, Vec<u8>) {
    stream_frame(model, id, 1, stream_flags::CANCEL, None, 0, 0, 0)
}

pub fn recv(s: &UdpSocket) -> Vec<u8> {
    let mut buf = vec![0u8; 70_000];
    let (n, _) = s.recv_from(&mut buf).expect("a frame arrives");
    buf.truncate(n);
    buf
}

/// Every token frame of `n` streams generating at once on `s`: per
/// stream id, its tokens and end reason (seqs checked: 0, 1, 2, ...).
pub fn collect_streams(s: &UdpSocket, n: usize) -> std::collections::BTreeMap<u64, (Vec<i64>, u8)> {
    let mut seqs = std::collections::BTreeMap::new();
    let mut out = std::collections::BTreeMap::new();
    while out.len() < n {
        let (id, seq, end, t) = token_frame(&recv(s));
        let (next, toks) = seqs.entry(id).or_insert((0u32, Vec::new()));
        assert_eq!(seq, *next, "stream {id}: a lost or reordered frame");
        *next += 1;
        toks.extend(t);
        if let Some(r) = end {
            out.insert(id, (std::mem::take(toks), r));
        }
    }
    out
}

/// A token frame: (stream id, seq, END reason if last, tokens).
pub fn token_frame(a: &[u8]) -> (u64, u32, Option<u8>, Vec<i64>) {
    let f = Frame::new_checked(a).unwrap();
    assert_eq!(f.kind(), Kind::Response, "{:?}", f.error_body());
    let h = f.stream().expect("token frames carry the stream header");
    assert!(h.has(stream_flags::CONTINUE));
    let toks = match f.tensor("token") {
        Some(t) => {
            assert_eq!(t.dtype, DType::I64);
            f.tensor_data(&t)
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                .collect()
        }
        None => Vec::new(),
    };
    let end = h.has(stream_flags::END).then_some(h.end_reason);
    (h.stream_id, h.seq, end, toks)
}

/// The whole stream of one OPEN: tokens and end reason; checks the seqs
/// run 0, 1, 2, … and every frame echoes the OPEN's request id.
pub fn collect(s: &UdpSocket, rid: u64, tpf: usize) -> (Vec<i64>, u8) {
    let mut toks = Vec::new();
    let mut seq = 0;
    loop {
        let a = recv(s);
        assert_eq!(Frame::new_checked(a.as_slice()).unwrap().request_id(), rid);
        let (_, sq, end, t) = token_frame(&a);
        assert_eq!(sq, seq, "token frames are numbered 0, 1, 2, ...");
        assert!(t.len() <= tpf);
        seq += 1;
        toks.extend(t);
        if let Some(r) = end {
            return (toks, r);
        }
        assert_eq!(toks.len() % tpf, 0, "only the last frame is short");
    }
}

pub fn mlp_request(id: u64) -> Vec<u8> {
    let x: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let t = [TensorRepr {
        name: "x",
        dtype: DType::F32,
        dims: &[1, 4],
        data: Some(&x),
    }];
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id: id,
        tenant_id: 7,
        model: "mlp",
        model_version: "1",
        tensors: &t,
        ..FrameRepr::default()
    };
    let mut buf = vec![0u8; 1024];
    let n = repr.emit(&mut buf).unwrap().frame_len;
    buf.truncate(n);
    buf
}
