//! The client's token-stream iterator against the real engine and ONNX
//! Runtime (the bundled decoder, models/decoder.onnx): the tokens equal the
//! model's reference generation (itself checked against onnxruntime-python
//! in sluice-models), the frames carry at most `tokens_per_frame` tokens
//! and the last one says why the stream ended; a cancel stops a stream
//! that would not end by itself.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::time::Duration;

use sluice_client::{Client, ClientConfig, Request, TensorData, TokenStream};
use sluice_engine::{Config, Engine, EngineOptions};
use sluice_models::decoder::decoder_generate;

fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn ort_lib() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("SLUICE_ORT_LIB") {
        return p.into();
    }
    repo_root().join(".cache/onnxruntime/libonnxruntime.so.1.31.1")
}

fn engine() -> Engine {
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
[[tenants]]
name = "t"
id = 7
key = "hex:000102030405060708090a0b0c0d0e0f"
models = ["*"]
routes = ["*"]
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
max_tokens = 32
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
"#,
        lib = ort_lib().display(),
        root = root.display()
    );
    let mut e = Engine::new(
        Config::parse(&text, root).unwrap(),
        EngineOptions {
            no_pin: true,
            ..Default::default()
        },
    )
    .unwrap();
    e.start().unwrap();
    e
}

fn client(e: &Engine) -> Client {
    Client::connect(
        e.local_addr().unwrap(),
        ClientConfig {
            tenant_id: 7,
            key: Some((0..16u8).collect()),
            timeout: Duration::from_secs(10),
            ..ClientConfig::default()
        },
    )
    .unwrap()
}

fn prompt(p: &str) -> Vec<i64> {
    p.bytes().map(i64::from).collect()
}

#[test]
fn token_stream_iterates_the_generation() {
    let e = engine();
    let mut c = client(&e);
    for (id, p) in ["hello", "zz", "token streams"].iter().enumerate() {
        let toks = prompt(p);
        let req = Request::new("decoder", "1").tensor(
            "token",
            &[toks.len() as u64],
            TensorData::I64(&toks),
        );
        let mut s = TokenStream::open(&mut c, id as u64 + 1, req, 3, 0).unwrap();
        let mut got = Vec::new();
        let mut last = None;
        for (k, f) in s.by_ref().enumerate() {
            let f = f.unwrap();
            assert_eq!(f.seq, k as u32);
            assert!(f.tokens.len() <= 3);
            got.extend(f.tokens);
            last = f.end;
        }
        let want = decoder_generate(&toks, 32);
        assert_eq!(got, want, "prompt {p:?}");
        let reason = if want.len() == 32 { 2 } else { 1 };
        assert_eq!(last, Some(reason), "max_tokens (2) or eos (1)");
    }
}

#[test]
fn token_stream_cancel_stops_it() {
    let e = engine();
    let mut c = client(&e);
    let toks = prompt("forever");
    let req =
        Request::new("endless", "1").tensor("token", &[toks.len() as u64], TensorData::I64(&toks));
    let mut s = TokenStream::open(&mut c, 77, req, 1, 0).unwrap();
    let first: Vec<_> = s.by_ref().take(4).map(|f| f.unwrap()).collect();
    assert_eq!(first.len(), 4);
    assert!(first.iter().all(|f| f.end.is_none() && f.tokens.len() == 1));
    let sent = s.cancel().unwrap();
    assert!(sent >= 4, "the stream sent {sent} frames");
    // The gauge is set at the worker's next iteration.
    let t0 = std::time::Instant::now();
    while e.stats().workers[0].tokens.running != 0 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(e.stats().workers[0].tokens.running, 0);
}

#[test]
fn followed_stream_shares_the_client_with_plain_calls() {
    // Send the OPEN, follow its id, and read the frames with
    // recv_followed, while other calls on the same client go on: their
    // answers and the stream's frames are told apart by id.
    use sluice_wire::{STREAM_EXT_KEY, StreamHeader, stream_flags};
    let e = engine();
    let mut c = client(&e);
    let toks = prompt("hello");
    let h = StreamHeader {
        stream_id: 901,
        flags: stream_flags::OPEN,
        tokens_per_frame: 1,
        ..StreamHeader::default()
    }
    .to_bytes();
    let req = Request::new("decoder", "1")
        .tensor("token", &[toks.len() as u64], TensorData::I64(&toks))
        .extension(STREAM_EXT_KEY, &h);
    let id = c.send(&req).unwrap();
    c.follow(id).unwrap();
    let mut got = Vec::new();
    let mut seq = 0;
    loop {
        let r = c
            .recv_followed(id, Duration::from_secs(10))
            .unwrap()
            .expect("a frame within the timeout");
        let sh = r.frame().stream().unwrap();
        assert_eq!(sh.seq, seq, "{:?}", c.stats());
        seq += 1;
        got.extend(
            r.tensors()
                .next()
                .map_or_else(Vec::new, |t| t.to_i64_vec().unwrap()),
        );
        if sh.has(stream_flags::END) {
            break;
        }
        if seq == 2 {
            // A call on the same client in the middle of the stream.
            let ping = c.ping().unwrap();
            assert!(ping < Duration::from_secs(10));
        }
    }
    assert_eq!(got, decoder_generate(&toks, 32));
    assert!(c.recv_followed(id, Duration::ZERO).unwrap().is_none());
    c.unfollow(id);
    assert!(c.recv_followed(id, Duration::ZERO).is_err());
}
