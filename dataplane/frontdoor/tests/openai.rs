//! The OpenAI API on a real engine and front door, against a fake OpenAI
//! server on loopback (a thread speaking HTTP/1.1; the real backends,
//! llama.cpp's server with a real model, are tests/backends' and
//! scripts/test-backends.sh's). Each fake model name is a behaviour.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sluice_engine::Engine;

mod common;

const TOKEN: &str = "openai-test-token-0123456789abcd";

/// What the fake server saw.
#[derive(Default)]
struct Seen {
    bodies: std::sync::Mutex<Vec<String>>,
    traceparents: std::sync::Mutex<Vec<String>>,
    cancelled: AtomicU64,
}

fn fake_backend() -> (SocketAddr, Arc<Seen>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let s = Arc::clone(&seen);
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { continue };
            let s = Arc::clone(&s);
            std::thread::spawn(move || serve_conn(c, &s));
        }
    });
    (addr, seen)
}

fn serve_conn(c: TcpStream, seen: &Seen) {
    let mut r = BufReader::new(c.try_clone().unwrap());
    let mut w = c;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        let mut len = 0usize;
        let mut inference_header = String::new();
        loop {
            let mut h = String::new();
            r.read_line(&mut h).unwrap();
            if h == "\r\n" {
                break;
            }
            let lower = h.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                len = v.trim().parse().unwrap();
            }
            if let Some(v) = lower.strip_prefix("inference-header-content-length:") {
                inference_header = v.trim().to_string();
            }
            if let Some(v) = lower.strip_prefix("traceparent:") {
                seen.traceparents.lock().unwrap().push(v.trim().to_string());
            }
        }
        let mut body = vec![0u8; len];
        r.read_exact(&mut body).unwrap();
        let text = String::from_utf8_lossy(&body).to_string();
        if path == "/v2/health/ready" {
            reply(&mut w, 200, "application/json", "{}");
            continue;
        }
        if path == "/v2/models/tiny-up/infer" {
            // Answers the JSON part's length and the binary part's, with
            // a binary answer of its own when the request had one.
            let n: usize = inference_header.parse().unwrap_or(len);
            let head = format!(
                r#"{{"model_name":"tiny-up","json_bytes":{n},"binary_bytes":{}}}"#,
                len - n
            );
            if inference_header.is_empty() {
                reply(&mut w, 200, "application/json", &head);
            } else {
                write!(w, "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ninference-header-content-length: {}\r\ncontent-length: {}\r\n\r\n{head}abcd", head.len(), head.len() + 4).unwrap();
            }
            continue;
        }
        if path == "/v1/models" {
            let b = r#"{"object":"list","data":[{"id":"up-ok"},{"id":"up-cut"},{"id":"up-garbage"},{"id":"up-slow"},{"id":"m-same"}]}"#;
            reply(&mut w, 200, "application/json", b);
            continue;
        }
        seen.bodies.lock().unwrap().push(text.clone());
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let model = v["model"].as_str().unwrap_or("").to_string();
        let stream = v["stream"].as_bool().unwrap_or(false);
        match (model.as_str(), stream) {
            ("up-garbage", _) => reply(&mut w, 200, "application/json", "<html>oops"),
            ("up-slow", _) => {
                // Never answers: waits for the client (Sluice) to close.
                let mut b = [0u8; 1];
                let _ = r.read(&mut b);
                seen.cancelled.fetch_add(1, Ordering::SeqCst);
                return;
            }
            (_, false) => {
                let b = serde_json::json!({"id":"x","object":"chat.completion","model":model,
                    "choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]});
                reply(&mut w, 200, "application/json", &b.to_string());
            }
            (m, true) => {
                write!(w, "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n").unwrap();
                for i in 0..3 {
                    let ev = format!(
                        "data: {{\"choices\":[{{\"delta\":{{\"content\":\"t{i}\"}}}}]}}\n\n"
                    );
                    write!(w, "{:x}\r\n{ev}\r\n", ev.len()).unwrap();
                    w.flush().unwrap();
                    std::thread::sleep(Duration::from_millis(20));
                }
                if m == "up-cut" {
                    // The server dies mid-stream: no [DONE], no last chunk.
                    let _ = w.shutdown(std::net::Shutdown::Both);
                    return;
                }
                let ev = "data: [DONE]\n\n";
                write!(w, "{:x}\r\n{ev}\r\n0\r\n\r\n", ev.len()).unwrap();
            }
        }
    }
}

fn reply(w: &mut TcpStream, status: u16, ct: &str, body: &str) {
    write!(
        w,
        "HTTP/1.1 {status} X\r\ncontent-type: {ct}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
}

fn start(backend: SocketAddr, max_concurrency: u32, queue_depth: u32) -> (Engine, SocketAddr) {
    use sha2::Digest;
    let d: String = sha2::Sha256::digest(TOKEN.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
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
[frontdoor]
http_listen = "127.0.0.1:0"
slots = 16
body_bytes_max = 65536
[[shards]]
name = "gpu"
labels = {{ gpu = "hbm2" }}
[[shards]]
name = "cpu"
labels = {{ gpu = "none" }}
[[routes]]
name = "orphan"
model = "orphan"
shard = "cpu"
[[routes]]
name = "all"
shard = "gpu"
[[models]]
name = "qwen3-72b"
version = "1"
kind = "backend"
upstream = "up-ok"
aliases = ["latest"]
[[models]]
name = "cut"
version = "1"
kind = "backend"
upstream = "up-cut"
[[models]]
name = "garbage"
version = "1"
kind = "backend"
upstream = "up-garbage"
[[models]]
name = "slow"
version = "1"
kind = "backend"
upstream = "up-slow"
[[models]]
name = "m-same"
version = "1"
kind = "backend"
[[models]]
name = "orphan"
version = "1"
kind = "backend"
[[models]]
name = "null"
version = "1"
kind = "null"
[[models]]
name = "tiny"
version = "1"
kind = "backend"
upstream = "tiny-up"
[openai]
default_versions = {{ "qwen3-72b" = "latest" }}
[[backends]]
name = "fake"
protocol = "openai"
endpoints = ["http://{backend}"]
labels = {{ gpu = "hbm2", zone = "a" }}
max_concurrency = {max_concurrency}
queue_depth = {queue_depth}
retries = 0
[[backends]]
name = "kfake"
protocol = "kserve-http"
endpoints = ["http://{backend}"]
labels = {{ gpu = "hbm2" }}
models = ["tiny-up"]
[[tenants]]
name = "acme"
id = 7
key = "hex:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
models = ["qwen3-72b", "cut", "garbage", "slow", "m-same", "orphan", "null", "tiny"]
tokens = ["sha256:{d}"]
"#
    );
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let e = common::engine(&text, root);
    let http = e.frontdoor_addrs().0.unwrap();
    (e, http)
}

struct Resp {
    status: u16,
    head: String,
    body: String,
}

/// One request on a new connection; the response read to its close.
fn post(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &str) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body.as_bytes()).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    Resp {
        status,
        head: head.to_ascii_lowercase(),
        body: dechunk(head, body),
    }
}

fn dechunk(head: &str, body: &str) -> String {
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return body.to_string();
    }
    let mut out = String::new();
    let mut rest = body;
    while let Some((n, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(n.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&tail[..n]);
        rest = &tail[n + 2..];
    }
    out
}

const AUTH: (&str, &str) = ("authorization", "Bearer openai-test-token-0123456789abcd");

fn err_code(r: &Resp) -> serde_json::Value {
    let v: serde_json::Value =
        serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("{e}: {}", r.body));
    assert!(v["error"]["message"].is_string(), "{}", r.body);
    assert!(v["error"]["type"].is_string(), "{}", r.body);
    v["error"]["code"].clone()
}

fn wait_healthy(http: SocketAddr) {
    // The first health round runs before the doors open; this only
    // guards against a slow machine.
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        let r = post(
            http,
            "/v1/chat/completions",
            &[AUTH],
            r#"{"model":"qwen3-72b","messages":[]}"#,
        );
        if r.status == 200 {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the fake backend never became ready");
}

#[test]
fn dispatch_stream_and_refusals() {
    let (backend, seen) = fake_backend();
    let (e, http) = start(backend, 4, 2);
    wait_healthy(http);

    // A plain request: the model maps to its upstream name (the body is
    // re-encoded once, counted); the answer comes back as sent.
    let r = post(
        http,
        "/v1/chat/completions",
        &[AUTH, ("x-model-version", "1")],
        r#"{"model":"qwen3-72b","messages":[{"role":"user","content":"x"}]}"#,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.head.contains("x-sluice-backend: fake"), "{}", r.head);
    assert!(r.head.contains("x-sluice-route: all"), "{}", r.head);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["model"], "up-ok");
    let last = seen.bodies.lock().unwrap().last().cloned().unwrap();
    assert!(last.contains(r#""model":"up-ok""#), "{last}");

    // The same name upstream: the body goes through byte for byte.
    let exact = r#"{ "model" : "m-same", "messages" : [ ] }"#;
    let r = post(
        http,
        "/v1/chat/completions",
        &[AUTH, ("x-model-version", "1")],
        exact,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(seen.bodies.lock().unwrap().last().unwrap(), exact);

    // A stream is relayed event by event and ends with [DONE].
    let r = post(
        http,
        "/v1/chat/completions",
        &[AUTH],
        r#"{"model":"qwen3-72b","stream":true,"messages":[]}"#,
    );
    assert_eq!(r.status, 200);
    assert!(r.head.contains("text/event-stream"), "{}", r.head);
    assert_eq!(r.body.matches("data: ").count(), 4, "{}", r.body);
    assert!(r.body.ends_with("data: [DONE]\n\n"), "{}", r.body);

    // A backend that dies mid-stream: the events so far, then an error event.
    let r = post(
        http,
        "/v1/completions",
        &[AUTH, ("x-model-version", "1")],
        r#"{"model":"cut","stream":true,"prompt":"x"}"#,
    );
    assert_eq!(r.status, 200);
    assert!(r.body.contains("t0"), "{}", r.body);
    assert!(
        r.body.contains(r#""code":"backend_stream_cut""#),
        "{}",
        r.body
    );
    assert!(!r.body.contains("[DONE]"), "{}", r.body);

    // Garbage from the backend: 502 with a message.
    let r = post(
        http,
        "/v1/completions",
        &[AUTH, ("x-model-version", "1")],
        r#"{"model":"garbage","prompt":"x"}"#,
    );
    assert_eq!(r.status, 502, "{}", r.body);
    assert_eq!(err_code(&r), "backend_bad_answer");

    // Bad input gets OpenAI's error body and the expected status.
    // (headers, body, status, OpenAI error code; "" for any)
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, u16, &'a str);
    let cases: &[Case] = &[
        (&[], r#"{"model":"qwen3-72b"}"#, 401, "unauthenticated"),
        (
            &[AUTH],
            r#"{"model":"nope"}"#,
            400,
            "model_version_required",
        ),
        (
            &[AUTH, ("x-model-version", "1")],
            r#"{"model":"nope"}"#,
            404,
            "model_not_found",
        ),
        (
            &[AUTH, ("x-model-version", "9")],
            r#"{"model":"qwen3-72b"}"#,
            404,
            "model_not_found",
        ),
        (
            &[AUTH],
            "{\"model\":\n \"qwen3-72b\",,}",
            400,
            "malformed_json",
        ),
        (
            &[AUTH, ("x-model-version", "1")],
            r#"{"model":"null"}"#,
            400,
            "",
        ),
        (
            &[AUTH, ("x-model-version", "1")],
            r#"{"model":"orphan"}"#,
            503,
            "backend_unavailable",
        ),
        (
            &[AUTH, ("x-ai-timeout", "soon")],
            r#"{"model":"qwen3-72b"}"#,
            400,
            "",
        ),
    ];
    for (h, body, status, code) in cases {
        let r = post(http, "/v1/chat/completions", h, body);
        assert_eq!(r.status, *status, "{body}: {}", r.body);
        let c = err_code(&r);
        if !code.is_empty() {
            assert_eq!(c, *code, "{body}: {}", r.body);
        }
        if *code == "malformed_json" {
            assert!(r.body.contains("line 2 column"), "{}", r.body);
        }
    }
    // An oversized body: 413 before it is read.
    let mut s = TcpStream::connect(http).unwrap();
    write!(s, "POST /v1/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\ncontent-length: 10000000\r\n\r\n").unwrap();
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 413"));

    // GET /v1/models lists the backend models.
    let mut s = TcpStream::connect(http).unwrap();
    write!(s, "GET /v1/models HTTP/1.1\r\nhost: x\r\nconnection: close\r\nauthorization: Bearer {TOKEN}\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.contains(r#""id":"qwen3-72b""#), "{out}");
    assert!(!out.contains(r#""id":"null""#), "{out}");

    // A client that goes away cancels the upstream request.
    let before = seen.cancelled.load(Ordering::SeqCst);
    let mut s = TcpStream::connect(http).unwrap();
    let body = r#"{"model":"slow","prompt":"x","stream":true}"#;
    write!(s, "POST /v1/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\nx-model-version: 1\r\ncontent-length: {}\r\n\r\n{body}", body.len()).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(s);
    let until = Instant::now() + Duration::from_secs(10);
    while seen.cancelled.load(Ordering::SeqCst) == before {
        assert!(
            Instant::now() < until,
            "the upstream request was not cancelled"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // A registered JSON Schema on the body: checked before it goes upstream.
    e.set_schemas(
        vec![sluice_engine::schema::SchemaCfg {
            id: 41,
            subject: "chat-request".into(),
            version: 1,
            schema_type: "JSON".into(),
            schema: r#"{"type":"object","required":["messages"],"properties":{"max_tokens":{"type":"integer","maximum":64}}}"#.into(),
            retired: false,
            references: vec![],
        }],
        60_000,
    )
    .unwrap();
    let schema = [AUTH, ("x-schema-id", "41")];
    let before = seen.bodies.lock().unwrap().len();
    let r = post(
        http,
        "/v1/chat/completions",
        &schema,
        r#"{"model":"qwen3-72b","messages":[],"max_tokens":999}"#,
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(err_code(&r), "schema_mismatch");
    let r = post(
        http,
        "/v1/chat/completions",
        &[AUTH, ("x-schema-id", "77")],
        r#"{"model":"qwen3-72b","messages":[]}"#,
    );
    assert_eq!(err_code(&r), "unknown_schema");
    assert_eq!(
        seen.bodies.lock().unwrap().len(),
        before,
        "refused bodies never go upstream"
    );
    let r = post(
        http,
        "/v1/chat/completions",
        &schema,
        r#"{"model":"qwen3-72b","messages":[],"max_tokens":9}"#,
    );
    assert_eq!(r.status, 200, "{}", r.body);

    // A traced request: the hop's span under the caller's, named as the
    // parent in the traceparent sent upstream.
    let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let r = post(
        http,
        "/v1/chat/completions",
        &[AUTH, ("traceparent", tp)],
        r#"{"model":"qwen3-72b","messages":[]}"#,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let sent = seen.traceparents.lock().unwrap().last().cloned().unwrap();
    assert!(
        sent.starts_with("00-0af7651916cd43dd8448eb211c80319c-"),
        "{sent}"
    );
    let mut recs = vec![sluice_engine::trace::SpanRecord::default(); 64];
    let n = e.drain_spans(&mut recs);
    let rec = recs[..n]
        .iter()
        .find(|r| r.kind == sluice_engine::trace::kind::BACKEND)
        .expect("a backend span");
    assert_eq!(
        rec.parent_id,
        [0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31]
    );
    let hex: String = rec.span_id.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        sent,
        format!("00-0af7651916cd43dd8448eb211c80319c-{hex}-01")
    );
    let t = rec.times;
    assert!(t.recv_ns <= t.auth_ns && t.auth_ns <= t.route_ns && t.route_ns <= t.run_start_ns);
    assert!(
        t.run_start_ns <= t.run_end_ns && t.run_end_ns <= t.send_ns,
        "{t:?}"
    );
    assert_eq!(rec.outcome, 0);

    // Counted per pool and cause.
    let st = e.frontdoor_stats();
    let b = e.backends_stats();
    let pool = &b["pools"][0];
    assert!(pool["ok"].as_u64().unwrap() >= 3, "{pool}");
    assert_eq!(pool["errors"]["garbage"], 1, "{pool}");
    assert_eq!(pool["errors"]["stream_cut"], 1, "{pool}");
    assert!(pool["ttft"]["count"].as_u64().unwrap() >= 1, "{pool}");
    assert!(st["openai_bodies_reencoded"].as_u64().unwrap() >= 1, "{st}");
}

#[test]
fn kserve_v2_to_a_kserve_pool() {
    let (backend, _seen) = fake_backend();
    let (_e, http) = start(backend, 4, 2);
    wait_healthy(http);
    let json = r#"{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}]}"#;
    let r = post(
        http,
        "/v2/models/tiny/infer",
        &[AUTH, ("x-model-version", "1")],
        json,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.head.contains("x-sluice-backend: kfake"), "{}", r.head);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["json_bytes"], json.len());
    // Binary tensor data: the header goes with it, and comes back.
    let head = r#"{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":16}}]}"#;
    let body = format!("{head}0123456789abcdef");
    let n = head.len().to_string();
    let r = post(
        http,
        "/v2/models/tiny/infer",
        &[
            AUTH,
            ("x-model-version", "1"),
            ("inference-header-content-length", &n),
        ],
        &body,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains(r#""binary_bytes":16"#), "{}", r.body);
    assert!(r.body.ends_with("abcd"), "{}", r.body);
    assert!(
        r.head.contains("inference-header-content-length:"),
        "{}",
        r.head
    );
    // A model no pool serves over KServe v2 (the OpenAI pool has it):
    // 503, not a silent hop to the wrong protocol.
    let r = post(
        http,
        "/v2/models/qwen3-72b/infer",
        &[AUTH, ("x-model-version", "1")],
        json,
    );
    assert_eq!(r.status, 503, "{}", r.body);
}

#[test]
fn queue_full_is_429() {
    let (backend, _seen) = fake_backend();
    // One place, one waiting: the third request in flight gets 429.
    let (e, http) = start(backend, 1, 1);
    wait_healthy(http);
    let open = |body: &'static str| {
        let mut s = TcpStream::connect(http).unwrap();
        write!(s, "POST /v1/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\nx-model-version: 1\r\nx-ai-timeout: 3s\r\ncontent-length: {}\r\n\r\n{body}", body.len()).unwrap();
        s
    };
    let _a = open(r#"{"model":"slow","prompt":"x"}"#);
    let _b = open(r#"{"model":"slow","prompt":"x"}"#);
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let st = e.backends_stats();
        if st["pools"][0]["waiting"] == 1 {
            break;
        }
        assert!(Instant::now() < until, "{st}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = post(
        http,
        "/v1/completions",
        &[AUTH, ("x-model-version", "1")],
        r#"{"model":"slow","prompt":"x"}"#,
    );
    assert_eq!(r.status, 429, "{}", r.body);
    assert!(r.head.contains("retry-after: 1"), "{}", r.head);
    assert_eq!(err_code(&r), "busy");
}
