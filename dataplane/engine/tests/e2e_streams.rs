//! Stateful streams through the whole engine over io_uring (docs/wire.md
//! "Streams"): Silero VAD 6.2.3 (the published model, scripts/setup-models.sh)
//! with its recurrent state kept in the appliance. 10 s of 16 kHz speech
//! (espeak-ng) in 512-sample chunks; every step's speech probability equals
//! onnxruntime-python running the same loop with the state carried by hand
//! (tests/streams/silero_reference.py). Then the stream rules: sequence
//! errors that say the expected seq, unknown and cancelled streams, the
//! state input refused in a request, idle streams reclaimed and counted.
//!
//! Ignored in the workspace run (it needs the published model and
//! onnxruntime-python); scripts/test.sh runs it with `--ignored` after
//! scripts/setup-models.sh.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::time::Duration;

use common::*;
use sluice_engine::{Engine, EngineOptions};
use sluice_wire::{
    DType, EndReason, ErrorCode, ExtRepr, Frame, FrameRepr, Kind, StreamHeader, TenantKey,
    TensorRepr, stream_flags,
};

const CHUNK: usize = 512;
const CONTEXT: usize = 64;

fn models_dir() -> PathBuf {
    std::env::var_os("SLUICE_MODELS_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".cache/models"))
}

fn model_path() -> PathBuf {
    let p = models_dir().join("silero_vad_16k_op15.onnx");
    assert!(
        p.is_file(),
        "{} missing: run scripts/setup-models.sh",
        p.display()
    );
    p
}

fn config(idle_ms: u32) -> sluice_engine::Config {
    let root = repo_root();
    let text = format!(
        r#"
[engine]
workers = [0]
[io_uring]
listen = "127.0.0.1:0"
rx_buffers = 64
tx_buffers = 64
[onnxruntime]
library = "{lib}"
[streams]
per_worker = 4
per_tenant = 4
idle_ms = {idle_ms}
[[shards]]
name = "s"
[[routes]]
name = "all"
shard = "s"
[[models]]
name = "silero"
version = "6.2.3"
path = "{model}"
aliases = ["6"]
[models.stream]
state = [{{ input = "state", output = "stateN", shape = [2, 1, 128] }}]
[[tenants]]
name = "t"
id = 7
key = "hex:{KEY_HEX}"
"#,
        lib = ort_lib().display(),
        model = model_path().display(),
    );
    sluice_engine::Config::parse(&text, root).unwrap()
}

/// The reference run of onnxruntime-python: the audio and one probability
/// per chunk.
fn reference() -> (Vec<f32>, Vec<f32>) {
    let dir = tempdir();
    let prefix = dir.join("silero");
    let python = std::env::var("SLUICE_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(&python)
        .arg(repo_root().join("tests/streams/silero_reference.py"))
        .arg(model_path())
        .arg(&prefix)
        .output()
        .unwrap_or_else(|e| panic!("{python}: {e}"));
    assert!(
        out.status.success(),
        "silero_reference.py failed (needs onnxruntime, numpy and espeak-ng: scripts/setup.sh): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let audio: Vec<f32> = std::fs::read(prefix.with_extension("f32"))
        .unwrap()
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(prefix.with_extension("json")).unwrap()).unwrap();
    assert_eq!(json["chunk"], CHUNK);
    assert_eq!(json["context"], CONTEXT);
    let probs = json["probs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    std::fs::remove_dir_all(&dir).ok();
    (audio, probs)
}

fn tempdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "sluice-streams-{}-{}",
        std::process::id(),
        next_id()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// One step of stream `id`: `input` (context + chunk) and `sr`, signed.
fn step_frame(
    id: u64,
    seq: u32,
    flags: u8,
    input: &[f32],
    state: Option<&[f32]>,
    buf: &mut [u8],
) -> usize {
    let x: Vec<u8> = input.iter().flat_map(|v| v.to_le_bytes()).collect();
    let sr = 16000i64.to_le_bytes();
    let st: Vec<u8> = state
        .unwrap_or(&[])
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let dims = [1, input.len() as u64];
    let mut t = vec![
        TensorRepr {
            name: "input",
            dtype: DType::F32,
            dims: &dims,
            data: Some(&x),
        },
        TensorRepr {
            name: "sr",
            dtype: DType::I64,
            dims: &[],
            data: Some(&sr),
        },
    ];
    if state.is_some() {
        t.push(TensorRepr {
            name: "state",
            dtype: DType::F32,
            dims: &[2, 1, 128],
            data: Some(&st),
        });
    }
    let sh = StreamHeader {
        stream_id: id,
        seq,
        flags,
        ..StreamHeader::default()
    }
    .to_bytes();
    let ext = [ExtRepr::stream(&sh)];
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id: next_id(),
        tenant_id: 7,
        deadline_us: fresh_deadline(),
        model: "silero",
        model_version: "6",
        extensions: if flags == 0 { &[] } else { &ext },
        tensors: &t,
        ..FrameRepr::default()
    };
    let n = repr.emit(buf).unwrap().frame_len;
    TenantKey::new(&key_bytes()).sign(&mut Frame::new_unchecked(&mut buf[..n]));
    n
}

fn ask(s: &UdpSocket, addr: SocketAddr, frame: &[u8]) -> Vec<u8> {
    roundtrip(s, addr, frame)
}

fn prob(a: &[u8]) -> f32 {
    let f = Frame::new_checked(a).unwrap();
    assert_eq!(f.kind(), Kind::Response, "{:?}", f.error_body());
    assert!(
        f.tensor("stateN").is_none(),
        "the state stays in the appliance"
    );
    let o = f.tensor("output").expect("output");
    f32::from_le_bytes(f.tensor_data(&o).try_into().unwrap())
}

fn refusal(a: &[u8]) -> (ErrorCode, StreamHeader) {
    let f = Frame::new_checked(a).unwrap();
    assert_eq!(f.kind(), Kind::Error);
    (
        f.error_body().unwrap().code().unwrap(),
        f.stream()
            .expect("a stream error carries the stream header"),
    )
}

fn start(idle_ms: u32) -> (Engine, SocketAddr) {
    let mut e = Engine::new(
        config(idle_ms),
        EngineOptions {
            no_pin: true,
            ..Default::default()
        },
    )
    .unwrap();
    e.start().unwrap();
    let addr = e.local_addr().unwrap();
    (e, addr)
}

#[test]
#[ignore = "needs the published model and onnxruntime-python: scripts/test.sh runs it"]
fn silero_stream_equals_onnxruntime_python() {
    let (audio, want) = reference();
    assert_eq!(want.len(), audio.len() / CHUNK);
    let (mut e, addr) = start(10_000);
    let s = client();
    let mut buf = vec![0u8; 16384];
    let mut context = [0f32; CONTEXT];
    let mut got = Vec::with_capacity(want.len());
    let last = want.len() - 1;
    for (i, chunk) in audio.chunks_exact(CHUNK).enumerate() {
        let mut input = context.to_vec();
        input.extend_from_slice(chunk);
        let flags = match i {
            0 => stream_flags::OPEN,
            i if i == last => stream_flags::CONTINUE | stream_flags::END,
            _ => stream_flags::CONTINUE,
        };
        let n = step_frame(0x5e5e, i as u32, flags, &input, None, &mut buf);
        let a = ask(&s, addr, &buf[..n]);
        let sh = Frame::new_checked(&a[..])
            .unwrap()
            .stream()
            .expect("stream header");
        assert_eq!((sh.stream_id, sh.seq), (0x5e5e, i as u32));
        if i == last {
            assert!(sh.has(stream_flags::END));
            assert_eq!(sh.reason(), EndReason::Client);
        }
        got.push(prob(&a));
        context.copy_from_slice(&chunk[CHUNK - CONTEXT..]);
    }
    let max_diff = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let speech = want.iter().filter(|&&p| p > 0.5).count();
    eprintln!(
        "silero stream: {} chunks, {speech} with speech, max |sluice - onnxruntime-python| = {max_diff:e}",
        got.len()
    );
    assert!(
        speech > 50 && speech < want.len() - 20,
        "the audio has speech and pauses"
    );
    assert!(max_diff <= 1e-6, "probabilities differ by up to {max_diff}");

    // The stream ended with its END frame: the next frame is unknown.
    let input = vec![0f32; CHUNK + CONTEXT];
    let n = step_frame(
        0x5e5e,
        want.len() as u32,
        stream_flags::CONTINUE,
        &input,
        None,
        &mut buf,
    );
    assert_eq!(
        refusal(&ask(&s, addr, &buf[..n])).0,
        ErrorCode::UnknownStream
    );
    let st = e.stats();
    assert_eq!(
        st.total(|w| w.payload_bytes_copied),
        0,
        "no payload byte copied"
    );
    e.stop(Duration::ZERO);
}

#[test]
#[ignore = "needs the published model: scripts/test.sh runs it"]
fn stream_rules_sequence_cancel_state_and_idle() {
    let (mut e, addr) = start(300);
    let s = client();
    let mut buf = vec![0u8; 16384];
    let input = vec![0.01f32; CHUNK + CONTEXT];

    // A frame for a stream never opened.
    let n = step_frame(1, 3, stream_flags::CONTINUE, &input, None, &mut buf);
    let (code, sh) = refusal(&ask(&s, addr, &buf[..n]));
    assert_eq!(
        (code, sh.stream_id, sh.seq),
        (ErrorCode::UnknownStream, 1, 3)
    );

    // Open, then a gap: refused with the seq the stream expects.
    let n = step_frame(1, 0, stream_flags::OPEN, &input, None, &mut buf);
    let p0 = prob(&ask(&s, addr, &buf[..n]));
    let n = step_frame(1, 2, stream_flags::CONTINUE, &input, None, &mut buf);
    let (code, sh) = refusal(&ask(&s, addr, &buf[..n]));
    assert_eq!((code, sh.seq), (ErrorCode::StreamSequence, 1));
    // The OPEN resent (as after a lost answer): refused, expected seq 1.
    let n = step_frame(1, 0, stream_flags::OPEN, &input, None, &mut buf);
    let (code, sh) = refusal(&ask(&s, addr, &buf[..n]));
    assert_eq!((code, sh.seq), (ErrorCode::StreamSequence, 1));
    // The refused frames changed nothing: step 1 runs on step 0's state,
    // which differs from a fresh stream's zero state.
    let n = step_frame(1, 1, stream_flags::CONTINUE, &input, None, &mut buf);
    let p1 = prob(&ask(&s, addr, &buf[..n]));
    let n = step_frame(2, 0, stream_flags::OPEN, &input, None, &mut buf);
    assert_eq!(
        prob(&ask(&s, addr, &buf[..n])),
        p0,
        "a new stream starts from zero state"
    );
    assert_ne!(p0, p1, "the state moved on");

    // The state input is the appliance's: a request carrying it is refused.
    let state = vec![0f32; 256];
    let n = step_frame(2, 1, stream_flags::CONTINUE, &input, Some(&state), &mut buf);
    assert_eq!(refusal(&ask(&s, addr, &buf[..n])).0, ErrorCode::BadTensor);
    // A plain request (no stream header) that carries the state both ways
    // is an ordinary run.
    let n = step_frame(0, 0, 0, &input, Some(&state), &mut buf);
    let a = ask(&s, addr, &buf[..n]);
    let f = Frame::new_checked(&a[..]).unwrap();
    assert_eq!(f.kind(), Kind::Response, "{:?}", f.error_body());
    assert!(f.tensor("stateN").is_some() && f.stream().is_none());

    // Cancel: answered with END, reason cancelled, seq = frames taken.
    let cancel = {
        let sh = StreamHeader {
            stream_id: 2,
            seq: 1,
            flags: stream_flags::CANCEL,
            ..StreamHeader::default()
        }
        .to_bytes();
        let ext = [ExtRepr::stream(&sh)];
        let repr = FrameRepr {
            kind: Kind::Request,
            request_id: next_id(),
            tenant_id: 7,
            deadline_us: fresh_deadline(),
            model: "silero",
            model_version: "6",
            extensions: &ext,
            ..FrameRepr::default()
        };
        let n = repr.emit(&mut buf).unwrap().frame_len;
        TenantKey::new(&key_bytes()).sign(&mut Frame::new_unchecked(&mut buf[..n]));
        buf[..n].to_vec()
    };
    let a = ask(&s, addr, &cancel);
    let f = Frame::new_checked(&a[..]).unwrap();
    assert_eq!(f.kind(), Kind::Response);
    let sh = f.stream().unwrap();
    assert_eq!((sh.seq, sh.reason()), (1, EndReason::Cancelled));
    let n = step_frame(2, 1, stream_flags::CONTINUE, &input, None, &mut buf);
    assert_eq!(
        refusal(&ask(&s, addr, &buf[..n])).0,
        ErrorCode::UnknownStream
    );

    // Slots: 4 per worker; stream 1 is still open.
    for id in 10..13 {
        let n = step_frame(id, 0, stream_flags::OPEN, &input, None, &mut buf);
        prob(&ask(&s, addr, &buf[..n]));
    }
    let n = step_frame(13, 0, stream_flags::OPEN, &input, None, &mut buf);
    let (code, _) = refusal(&ask(&s, addr, &buf[..n]));
    assert_eq!(code, ErrorCode::StreamLimit);

    // Idle for longer than idle_ms: reclaimed by the worker and counted.
    std::thread::sleep(Duration::from_millis(800));
    let n = step_frame(1, 2, stream_flags::CONTINUE, &input, None, &mut buf);
    assert_eq!(
        refusal(&ask(&s, addr, &buf[..n])).0,
        ErrorCode::UnknownStream
    );
    // The counts reach the stats at the worker's next tick (50 ms).
    let mut streams = e.stats().workers[0].streams;
    for _ in 0..100 {
        if streams.reclaimed >= 4 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        streams = e.stats().workers[0].streams;
    }
    eprintln!("stream counts: {streams:?}");
    assert_eq!(streams.reclaimed, 4, "streams 1, 10, 11, 12");
    assert_eq!(streams.open, 0);
    assert_eq!(streams.opened, 5, "1, 2, 10, 11, 12");
    e.stop(Duration::ZERO);
}

/// The bundled stream model `accum` (models/accum.onnx: sN = s + x, y =
/// sN / 2), so this runs in the workspace test run: two streams of one
/// tenant interleaved on one worker, each answering half the running sum
/// of its own inputs, exactly; a plain request to the same model still
/// runs (it carries `s` itself).
#[test]
fn accum_streams_keep_their_own_state() {
    let root = repo_root();
    let text = format!(
        r#"
[engine]
workers = [0]
[io_uring]
listen = "127.0.0.1:0"
rx_buffers = 64
tx_buffers = 64
[onnxruntime]
library = "{lib}"
[[shards]]
name = "s"
[[routes]]
name = "all"
shard = "s"
[[models]]
name = "accum"
version = "1.0.0"
path = "{root}/models/accum.onnx"
aliases = ["1"]
[models.stream]
state = [{{ input = "s", output = "sN", shape = [1, 8] }}]
[[tenants]]
name = "t"
id = 7
key = "hex:{KEY_HEX}"
"#,
        lib = ort_lib().display(),
        root = root.display()
    );
    let mut e = Engine::new(
        sluice_engine::Config::parse(&text, root).unwrap(),
        EngineOptions {
            no_pin: true,
            ..Default::default()
        },
    )
    .unwrap();
    e.start().unwrap();
    let addr = e.local_addr().unwrap();
    let s = client();
    let mut buf = vec![0u8; 8192];
    let frame = |id: u64, seq: u32, flags: u8, x: &[f32], state: Option<&[f32]>, buf: &mut [u8]| {
        let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let sb: Vec<u8> = state
            .unwrap_or(&[])
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut t = vec![TensorRepr {
            name: "x",
            dtype: DType::F32,
            dims: &[1, 8],
            data: Some(&xb),
        }];
        if state.is_some() {
            t.push(TensorRepr {
                name: "s",
                dtype: DType::F32,
                dims: &[1, 8],
                data: Some(&sb),
            });
        }
        let sh = StreamHeader {
            stream_id: id,
            seq,
            flags,
            ..StreamHeader::default()
        }
        .to_bytes();
        let ext = [ExtRepr::stream(&sh)];
        let repr = FrameRepr {
            kind: Kind::Request,
            request_id: next_id(),
            tenant_id: 7,
            deadline_us: fresh_deadline(),
            model: "accum",
            model_version: "1",
            extensions: if flags == 0 { &[] } else { &ext },
            tensors: &t,
            ..FrameRepr::default()
        };
        let n = repr.emit(buf).unwrap().frame_len;
        TenantKey::new(&key_bytes()).sign(&mut Frame::new_unchecked(&mut buf[..n]));
        n
    };
    let y_of = |a: &[u8]| -> Vec<f32> {
        let f = Frame::new_checked(a).unwrap();
        assert_eq!(f.kind(), Kind::Response, "{:?}", f.error_body());
        f.tensor_data(&f.tensor("y").unwrap())
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let mut sums = [[0f32; 8]; 2];
    for step in 0..40u32 {
        for (k, sum) in sums.iter_mut().enumerate() {
            let x: Vec<f32> = (0..8)
                .map(|i| ((i as i64 * 5 + step as i64 * 3 + k as i64 * 7) % 11 - 5) as f32 / 16.0)
                .collect();
            for (s, v) in sum.iter_mut().zip(&x) {
                *s += v;
            }
            let flags = if step == 0 {
                stream_flags::OPEN
            } else {
                stream_flags::CONTINUE
            };
            let n = frame(100 + k as u64, step, flags, &x, None, &mut buf);
            let want: Vec<f32> = sum.iter().map(|v| v * 0.5).collect();
            assert_eq!(
                y_of(&roundtrip(&s, addr, &buf[..n])),
                want,
                "stream {k} step {step}"
            );
        }
    }
    // A plain request carries the state itself and keeps nothing.
    let x = [1.0f32; 8];
    let n = frame(0, 0, 0, &x, Some(&[2.0; 8]), &mut buf);
    assert_eq!(y_of(&roundtrip(&s, addr, &buf[..n])), vec![1.5f32; 8]);
    let st = e.stats();
    assert_eq!(
        st.total(|w| w.payload_bytes_copied),
        0,
        "no payload byte copied"
    );
    e.stop(Duration::ZERO);
}

/// An alias switch under a stream: to a version whose state has the same
/// shapes, the stream goes on (its state moved over, once); to one whose
/// state has other shapes, the next frame ends the stream with
/// `stream_state_mismatch`.
#[test]
fn alias_switch_keeps_or_ends_the_stream() {
    let root = repo_root();
    let model = |version: &str, alias: &str, shape: &str| {
        format!(
            r#"
[[models]]
name = "accum"
version = "{version}"
path = "{root}/models/accum.onnx"
aliases = [{alias}]
[models.stream]
state = [{{ input = "s", output = "sN", shape = {shape} }}]
"#,
            root = root.display()
        )
    };
    let text = format!(
        r#"
[engine]
workers = [0]
[io_uring]
listen = "127.0.0.1:0"
rx_buffers = 64
tx_buffers = 64
[onnxruntime]
library = "{lib}"
[[shards]]
name = "s"
[[routes]]
name = "all"
shard = "s"
{m1}{m2}{m3}
[[tenants]]
name = "t"
id = 7
key = "hex:{KEY_HEX}"
"#,
        lib = ort_lib().display(),
        m1 = model("1.0.0", "\"live\"", "[1, 8]"),
        m2 = model("2.0.0", "", "[1, 8]"),
        m3 = model("3.0.0", "", "[2, 8]"),
    );
    let mut e = Engine::new(
        sluice_engine::Config::parse(&text, root).unwrap(),
        EngineOptions {
            no_pin: true,
            ..Default::default()
        },
    )
    .unwrap();
    e.start().unwrap();
    let addr = e.local_addr().unwrap();
    let s = client();
    let mut buf = vec![0u8; 8192];
    let step = |seq: u32, buf: &mut [u8]| {
        let x = [0.25f32; 8];
        let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
        let t = [TensorRepr {
            name: "x",
            dtype: DType::F32,
            dims: &[1, 8],
            data: Some(&xb),
        }];
        let sh = StreamHeader {
            stream_id: 5,
            seq,
            flags: if seq == 0 {
                stream_flags::OPEN
            } else {
                stream_flags::CONTINUE
            },
            ..StreamHeader::default()
        }
        .to_bytes();
        let ext = [ExtRepr::stream(&sh)];
        let repr = FrameRepr {
            kind: Kind::Request,
            request_id: next_id(),
            tenant_id: 7,
            deadline_us: fresh_deadline(),
            model: "accum",
            model_version: "live",
            extensions: &ext,
            tensors: &t,
            ..FrameRepr::default()
        };
        let n = repr.emit(buf).unwrap().frame_len;
        TenantKey::new(&key_bytes()).sign(&mut Frame::new_unchecked(&mut buf[..n]));
        n
    };
    let answer = |a: &[u8]| -> (String, Option<f32>, Option<ErrorCode>, StreamHeader) {
        let f = Frame::new_checked(a).unwrap();
        let sh = f.stream().unwrap();
        match f.kind() {
            Kind::Response => {
                let y = f.tensor_data(&f.tensor("y").unwrap());
                (
                    f.model_version().to_string(),
                    Some(f32::from_le_bytes(y[..4].try_into().unwrap())),
                    None,
                    sh,
                )
            }
            _ => (String::new(), None, f.error_body().unwrap().code(), sh),
        }
    };
    for seq in 0..3 {
        let n = step(seq, &mut buf);
        let (v, y, _, _) = answer(&roundtrip(&s, addr, &buf[..n]));
        assert_eq!((v.as_str(), y), ("1.0.0", Some(0.125 * (seq + 1) as f32)));
    }
    // Same state shapes: the stream goes on where it was, on 2.0.0.
    e.set_alias("accum", "live", "2.0.0").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let n = step(3, &mut buf);
    let (v, y, _, _) = answer(&roundtrip(&s, addr, &buf[..n]));
    assert_eq!(
        (v.as_str(), y),
        ("2.0.0", Some(0.5)),
        "the state moved over"
    );
    // Other shapes: the stream ends with a clear error.
    e.set_alias("accum", "live", "3.0.0").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let n = step(4, &mut buf);
    let (_, _, code, sh) = answer(&roundtrip(&s, addr, &buf[..n]));
    assert_eq!(code, Some(ErrorCode::StreamStateMismatch));
    assert!(sh.has(stream_flags::END) && sh.reason() == EndReason::Error);
    let n = step(5, &mut buf);
    assert_eq!(
        answer(&roundtrip(&s, addr, &buf[..n])).2,
        Some(ErrorCode::UnknownStream)
    );
    let mut moved = 0;
    for _ in 0..100 {
        moved = e.stats().workers[0].streams.moved;
        if moved > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(moved, 1);
    e.stop(Duration::ZERO);
}
