//! Token streams through the front door on a real engine with the bundled
//! decoder in ONNX Runtime: HTTP `generate` and `generate_stream` over a
//! real socket, the tokens equal to the model's reference generation
//! (`sluice_models::decoder`, itself checked against onnxruntime-python),
//! and a client that goes away mid-stream frees its stream and its slot.
//! The unmodified tritonclient (gRPC ModelStreamInfer) and curl run
//! against sluiced in tests/frontdoor/test_streaming.py.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use sluice_engine::{Engine, EngineOptions};
use sluice_models::decoder::decoder_generate;

const SLOTS: u32 = 4;

fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn ort_lib() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("SLUICE_ORT_LIB") {
        return p.into();
    }
    root().join(".cache/onnxruntime/libonnxruntime.so.1.31.1")
}

fn engine() -> (Engine, SocketAddr) {
    engine_with("")
}

/// The engine with more `[frontdoor]` keys.
fn engine_with(frontdoor: &str) -> (Engine, SocketAddr) {
    let root = root();
    let mut models = String::new();
    for (name, eos, max) in [("decoder", "eos = 0\n", 32), ("endless", "", 1_000_000)] {
        models += &format!(
            r#"
[[models]]
name = "{name}"
version = "1"
path = "{root}/models/decoder.onnx"
[models.stream]
state = [{{ input = "h", output = "hN", shape = [1, 16] }}]
[models.stream.generate]
token_input = "token"
token_output = "next"
{eos}max_tokens = {max}
"#,
            root = root.display()
        );
    }
    let text = format!(
        r#"
[engine]
workers = [0]
poll = "adaptive"
spin_us = 50
[io_uring]
listen = "127.0.0.1:0"
rx_buffers = 64
tx_buffers = 64
[auth]
mode = "none"
[frontdoor]
http_listen = "127.0.0.1:0"
slots = {SLOTS}
body_bytes_max = 65536
reply_bytes_max = 65536
{frontdoor}
[onnxruntime]
library = "{lib}"
[[shards]]
name = "s"
[[routes]]
name = "all"
shard = "s"
{models}
"#,
        lib = ort_lib().display(),
    );
    let cfg = sluice_engine::Config::parse(&text, root).unwrap();
    let mut e = Engine::new(
        cfg,
        EngineOptions {
            no_pin: true,
            frontdoor: Some(sluice_frontdoor::start),
            ..Default::default()
        },
    )
    .unwrap();
    e.start().unwrap();
    let http = e.frontdoor_addrs().0.unwrap();
    (e, http)
}

fn post(addr: SocketAddr, path: &str, body: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).unwrap();
    s
}

/// The whole response (the connection closes after it).
fn read_all(mut s: TcpStream) -> (u16, String) {
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let status = text.split(' ').nth(1).unwrap().parse().unwrap();
    (status, text)
}

fn json_body(text: &str) -> serde_json::Value {
    let body = &text[text.find("\r\n\r\n").unwrap() + 4..];
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// The `data:` events of a server-sent event stream (chunked framing
/// lines are not JSON objects and are skipped).
fn events(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

fn tokens_of(v: &serde_json::Value) -> Vec<i64> {
    v["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_i64().unwrap())
        .collect()
}

fn prompt(p: &str) -> Vec<i64> {
    p.bytes().map(i64::from).collect()
}

fn stat(e: &Engine, name: &str) -> u64 {
    e.frontdoor_stats()[name].as_u64().unwrap()
}

#[test]
fn generate_and_generate_stream_give_the_reference_tokens() {
    let (e, http) = engine();
    for p in ["hello", "Sluice", "a"] {
        let want = decoder_generate(&prompt(p), 32);
        assert!(!want.is_empty());
        let body = format!(r#"{{"text_input":"{p}"}}"#);
        let (status, text) = read_all(post(http, "/v2/models/decoder/versions/1/generate", &body));
        assert_eq!(status, 200, "{text}");
        let v = json_body(&text);
        assert_eq!(tokens_of(&v), want, "{p}");
        assert_eq!(v["model_name"], "decoder");

        let (status, text) = read_all(post(
            http,
            "/v2/models/decoder/versions/1/generate_stream",
            &body,
        ));
        assert_eq!(status, 200, "{text}");
        assert!(text.contains("text/event-stream"), "{text}");
        let evs = events(&text);
        let got: Vec<i64> = evs.iter().flat_map(tokens_of).collect();
        assert_eq!(got, want, "{p}");
        assert!(evs[..want.len()].iter().all(|e| tokens_of(e).len() == 1));
        assert!(evs.last().unwrap()["finish_reason"].is_string());
    }
    // Several frames' tokens per event.
    let (_, text) = read_all(post(
        http,
        "/v2/models/endless/versions/1/generate_stream",
        r#"{"text_input":"hello","parameters":{"max_tokens":10,"tokens_per_frame":4}}"#,
    ));
    let evs = events(&text);
    let sizes: Vec<usize> = evs.iter().map(|e| tokens_of(e).len()).collect();
    assert_eq!(sizes, [4, 4, 2]);
    assert_eq!(evs[2]["finish_reason"], "max_tokens");
    assert_eq!(
        evs.iter().flat_map(tokens_of).collect::<Vec<_>>(),
        decoder_generate(&prompt("hello"), 10)
    );
    assert_eq!(stat(&e, "streams_open"), 0);
}

#[test]
fn refusals_are_http_errors() {
    let (_e, http) = engine();
    let cases = [
        ("/v2/models/decoder/versions/1/generate", "{", 400),
        (
            "/v2/models/decoder/versions/1/generate",
            r#"{"text_input":"x","parameters":{"top_p":0.5}}"#,
            400,
        ),
        (
            "/v2/models/decoder/versions/1/generate",
            r#"{"text_input":""}"#,
            400,
        ),
        (
            "/v2/models/nope/versions/1/generate",
            r#"{"text_input":"x"}"#,
            404,
        ),
    ];
    for (path, body, want) in cases {
        let (status, text) = read_all(post(http, path, body));
        assert_eq!(status, want, "{path} {body}: {text}");
        assert!(json_body(&text)["error"].is_string(), "{text}");
    }
}

#[test]
fn a_client_gone_mid_stream_frees_the_stream_and_its_slot() {
    let (e, http) = engine();
    // More streams in turn than the front door has slots: each one's slot
    // must come back after its client went away.
    for round in 0..(2 * SLOTS) {
        let mut s = post(
            http,
            "/v2/models/endless/versions/1/generate_stream",
            r#"{"text_input":"forever"}"#,
        );
        let mut got = Vec::new();
        let mut b = [0u8; 4096];
        while got.windows(6).filter(|w| w == b"data: ").count() < 3 {
            let n = s.read(&mut b).unwrap();
            assert!(n > 0, "round {round}: closed early");
            got.extend_from_slice(&b[..n]);
        }
        drop(s);
        let t0 = Instant::now();
        while stat(&e, "streams_open") != 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "round {round}: stream still open"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    assert!(stat(&e, "streams_cancelled") >= u64::from(2 * SLOTS));
    // The engine stopped generating: no stream runs on the worker.
    let t0 = Instant::now();
    loop {
        let running: u64 = e.stats().workers.iter().map(|w| w.tokens.running).sum();
        if running == 0 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "still generating");
        std::thread::sleep(Duration::from_millis(20));
    }
    // And a new stream still gets a slot and its tokens.
    let (status, text) = read_all(post(
        http,
        "/v2/models/decoder/versions/1/generate",
        r#"{"text_input":"hello"}"#,
    ));
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        tokens_of(&json_body(&text)),
        decoder_generate(&prompt("hello"), 32)
    );
}

/// A client that opens a token stream and never reads it (a small
/// receive buffer, so its socket fills at once): the bounded queues fill,
/// the worker is held back (credits held), and after write_timeout_ms the
/// client is cut off, counted, and the stream's slot freed for others.
#[test]
fn a_stream_whose_client_never_reads_is_cut_off_and_its_slot_freed() {
    let (e, http) = engine_with("write_timeout_ms = 300\n");
    for round in 0..=SLOTS {
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.set_recv_buffer_size(4096).unwrap();
        sock.connect(&http.into()).unwrap();
        let mut s: TcpStream = sock.into();
        let body = r#"{"text_input":"forever"}"#;
        s.write_all(
            format!(
                "POST /v2/models/endless/versions/1/generate_stream HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .unwrap();
        let t0 = Instant::now();
        while stat(&e, "streams_opened") <= u64::from(round) || stat(&e, "streams_open") != 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "round {round}: the unread stream still holds its slot: {}",
                e.frontdoor_stats()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(s);
    }
    let cut = stat(&e, "closed_write_timeout") + stat(&e, "streams_slow_reader");
    assert!(cut > u64::from(SLOTS), "{}", e.frontdoor_stats());
    assert!(stat(&e, "streams_cancelled") > u64::from(SLOTS));
    // More unread streams than slots came and went: a new one still runs.
    let (status, text) = read_all(post(
        http,
        "/v2/models/decoder/versions/1/generate",
        r#"{"text_input":"hello"}"#,
    ));
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        tokens_of(&json_body(&text)),
        decoder_generate(&prompt("hello"), 32)
    );
}
