//! The HTTP front door over a real socket, on a real engine with the
//! bundled MLP in ONNX Runtime: health, JSON and binary inference, the
//! seed's header rules, tenants, and every malformed-input refusal (4xx
//! with a message, never a 5xx or a hang). The unmodified tritonclient
//! runs against it in tests/frontdoor/ (scripts/test-frontdoor.sh).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use sluice_engine::{Engine, EngineOptions};

const TOKEN: &str = "front-door-test-token-0123456789";
const KEY_HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

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
    let p = root().join(".cache/onnxruntime/libonnxruntime.so.1.31.1");
    assert!(
        p.is_file(),
        "ONNX Runtime missing: run scripts/setup-onnxruntime.sh"
    );
    p
}

fn token_sha256() -> String {
    use sha2::Digest;
    sha2::Sha256::digest(TOKEN.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn engine(tenants: bool) -> (Engine, SocketAddr) {
    let root = root();
    let tenant = if tenants {
        format!(
            r#"
[[tenants]]
name = "acme"
id = 7
key = "hex:{KEY_HEX}"
tokens = ["sha256:{}"]
models = ["mlp"]
[[tenants]]
name = "other"
id = 8
key = "hex:{KEY_HEX}"
tokens = ["sha256:{}"]
models = ["null"]
"#,
            token_sha256(),
            // tenant 8's token: the same bytes reversed
            {
                use sha2::Digest;
                let t: String = TOKEN.chars().rev().collect();
                sha2::Sha256::digest(t.as_bytes())
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            }
        )
    } else {
        // No tenants: requests are unsigned (`[auth] mode = "none"`).
        "[auth]\nmode = \"none\"\n".to_string()
    };
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
grpc_listen = "127.0.0.1:0"
slots = 16
body_bytes_max = 65536
body_timeout_ms = 300
[onnxruntime]
library = "{lib}"
[[shards]]
name = "s"
[[routes]]
name = "all"
shard = "s"
[[models]]
name = "mlp"
version = "1.0.0"
path = "{root}/models/mlp.onnx"
aliases = ["1"]
adapters = [{{ id = "formal", path = "{root}/models/mlp_formal.onnx_adapter" }}]
[[models]]
name = "null"
version = "1"
kind = "null"
{tenant}
"#,
        lib = ort_lib().display(),
        root = root.display()
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

struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }
}

/// Reads one HTTP/1.1 response (Content-Length framed).
fn read_resp(s: &mut TcpStream) -> Resp {
    let mut buf = Vec::new();
    let mut b = [0u8; 4096];
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        let n = s.read(&mut b).unwrap();
        assert!(n > 0, "connection closed before a response");
        buf.extend_from_slice(&b[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.trim().to_string(), v.trim().to_string())
        })
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = s.read(&mut b).unwrap();
        assert!(n > 0);
        body.extend_from_slice(&b[..n]);
    }
    Resp {
        status,
        headers,
        body,
    }
}

fn call(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    read_resp(&mut s)
}

const X: [f32; 4] = [0.5, -0.25, 1.0, 0.0];

fn json_infer_body() -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "id": "r1",
        "inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [[0.5, -0.25, 1.0, 0.0]]}],
    }))
    .unwrap()
}

fn binary_infer_body(binary_out: bool) -> (Vec<u8>, usize) {
    let header = serde_json::to_vec(&serde_json::json!({
        "inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "parameters": {"binary_data_size": 16}}],
        "outputs": [{"name": "y", "parameters": {"binary_data": binary_out}}],
    }))
    .unwrap();
    let mut body = header.clone();
    for v in X {
        body.extend_from_slice(&v.to_le_bytes());
    }
    (body, header.len())
}

fn json_y(r: &Resp) -> Vec<f32> {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let j = r.json();
    let out = &j["outputs"][0];
    assert_eq!(out["name"], "y");
    assert_eq!(out["datatype"], "FP32");
    assert_eq!(out["shape"], serde_json::json!([1, 3]));
    out["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect()
}

#[test]
fn health_and_inference_json_and_binary() {
    let (e, addr) = engine(false);
    assert_eq!(call(addr, "GET", "/v2/health/live", &[], b"").status, 200);
    let r = call(addr, "GET", "/v2/health/ready", &[], b"");
    assert_eq!((r.status, r.json()["ready"].clone()), (200, true.into()));
    let r = call(addr, "GET", "/v2", &[], b"");
    assert!(
        r.json()["extensions"]
            .as_array()
            .unwrap()
            .contains(&"binary_tensor_data".into())
    );

    // JSON in, JSON out; the version in the path.
    let r = call(
        addr,
        "POST",
        "/v2/models/mlp/versions/1/infer",
        &[],
        &json_infer_body(),
    );
    let y_json = json_y(&r);
    assert_eq!(r.json()["id"], "r1");
    assert_eq!(r.json()["model_name"], "mlp");

    // The version in X-Model-Version instead.
    let r = call(
        addr,
        "POST",
        "/v2/models/mlp/infer",
        &[("X-Model-Version", "1.0.0")],
        &json_infer_body(),
    );
    assert_eq!(json_y(&r), y_json);

    // Binary in, JSON out.
    let (body, hl) = binary_infer_body(false);
    let hl = hl.to_string();
    let r = call(
        addr,
        "POST",
        "/v2/models/mlp/versions/1/infer",
        &[("Inference-Header-Content-Length", &hl)],
        &body,
    );
    assert_eq!(json_y(&r), y_json);

    // Binary in, binary out: the JSON header, then 12 bytes of f32.
    let (body, hl) = binary_infer_body(true);
    let hl = hl.to_string();
    let r = call(
        addr,
        "POST",
        "/v2/models/mlp/versions/1/infer",
        &[("Inference-Header-Content-Length", &hl)],
        &body,
    );
    assert_eq!(r.status, 200);
    let jl: usize = r
        .header("inference-header-content-length")
        .unwrap()
        .parse()
        .unwrap();
    let j: serde_json::Value = serde_json::from_slice(&r.body[..jl]).unwrap();
    assert_eq!(j["outputs"][0]["parameters"]["binary_data_size"], 12);
    let y: Vec<f32> = r.body[jl..]
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(y, y_json, "binary and JSON outputs agree bit for bit");

    // The adapter header selects the LoRA adapter: a different answer.
    let r = call(
        addr,
        "POST",
        "/v2/models/mlp/versions/1/infer",
        &[("X-Lora-Adapter-ID", "formal")],
        &json_infer_body(),
    );
    assert_ne!(json_y(&r), y_json);
    let r = call(
        addr,
        "POST",
        "/v2/models/mlp/versions/1/infer",
        &[("X-Lora-Adapter-ID", "nope")],
        &json_infer_body(),
    );
    assert_eq!(r.status, 404);
    assert!(r.json()["error"].as_str().unwrap().contains("adapter"));

    // Workers ran and refused the front door's frames as their own.
    let st = e.stats();
    assert_eq!(st.total(|w| w.ok), 5, "{st:?}");
    assert_eq!(st.errors(sluice_wire::ErrorCode::UnknownAdapter), 1);
    drop(e);
}

/// What, headers, body, expected status, a word the message must hold.
type Case = (
    &'static str,
    Vec<(&'static str, &'static str)>,
    Vec<u8>,
    u16,
    &'static str,
);

fn infer(addr: SocketAddr, headers: &[(&str, &str)], body: &[u8]) -> Resp {
    call(
        addr,
        "POST",
        "/v2/models/mlp/versions/1/infer",
        headers,
        body,
    )
}

fn error_of(r: &Resp) -> String {
    r.json()["error"].as_str().unwrap_or_default().to_string()
}

#[test]
fn header_rules_and_bad_input_get_4xx_with_a_message() {
    let (_e, addr) = engine(false);
    // Missing X-Model-Version: 400 with the seed's exact body.
    let r = call(
        addr,
        "POST",
        "/v2/models/mlp/infer",
        &[],
        &json_infer_body(),
    );
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json(),
        serde_json::json!({"error": "X-Model-Version required"})
    );

    let cases: Vec<Case> = vec![
        ("malformed JSON", vec![], b"{\"inputs\": [".to_vec(), 400, "request JSON"),
        ("unknown dtype", vec![], br#"{"inputs":[{"name":"x","shape":[1,4],"datatype":"BYTES","data":[1,2,3,4]}]}"#.to_vec(), 400, "datatype"),
        ("wrong element count", vec![], br#"{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3]}]}"#.to_vec(), 400, "elements"),
        ("shape the model refuses", vec![], br#"{"inputs":[{"name":"x","shape":[1,5],"datatype":"FP32","data":[1,2,3,4,5]}]}"#.to_vec(), 400, ""),
        ("dtype the model refuses", vec![], br#"{"inputs":[{"name":"x","shape":[1,4],"datatype":"INT32","data":[1,2,3,4]}]}"#.to_vec(), 400, ""),
        ("negative dim", vec![], br#"{"inputs":[{"name":"x","shape":[-1,4],"datatype":"FP32","data":[1,2,3,4]}]}"#.to_vec(), 400, "negative"),
        ("no data", vec![], br#"{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32"}]}"#.to_vec(), 400, "no data"),
        ("binary size mismatch", vec![("Inference-Header-Content-Length", "2")], b"{}".to_vec(), 400, ""),
        ("header length past the body", vec![("Inference-Header-Content-Length", "999")], b"{}".to_vec(), 400, "exceeds"),
        ("bad timeout", vec![("X-AI-Timeout", "soon")], json_infer_body(), 400, "X-AI-Timeout"),
        ("unknown output", vec![], br#"{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]}],"outputs":[{"name":"zz"}]}"#.to_vec(), 400, "zz"),
        ("adapter with a space", vec![("X-Lora-Adapter-ID", "a b")], json_infer_body(), 400, "visible ASCII"),
    ];
    for (what, h, body, status, needle) in cases {
        let r = infer(addr, &h, &body);
        assert_eq!(
            r.status,
            status,
            "{what}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let m = error_of(&r);
        assert!(!m.is_empty() && m.contains(needle), "{what}: {m}");
    }
    // Unknown model and version: 404 before the body is read.
    assert_eq!(
        call(addr, "POST", "/v2/models/nope/versions/1/infer", &[], b"{}").status,
        404
    );
    assert_eq!(
        call(addr, "POST", "/v2/models/mlp/versions/9/infer", &[], b"{}").status,
        404
    );
    // Unknown endpoint, wrong method.
    assert_eq!(call(addr, "GET", "/v3/whatever", &[], b"").status, 404);
    assert_eq!(
        call(addr, "GET", "/v2/models/mlp/versions/1/infer", &[], b"").status,
        405
    );

    // Too large: refused from Content-Length alone, before the body.
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"POST /v2/models/mlp/versions/1/infer HTTP/1.1\r\nhost: x\r\ncontent-length: 100000000\r\n\r\n")
        .unwrap();
    let r = read_resp(&mut s);
    assert_eq!(r.status, 413, "{}", error_of(&r));

    // Wrong Content-Length: the client promises more than it sends and
    // closes its side; then promises more and stalls (a slow client).
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"POST /v2/models/mlp/versions/1/infer HTTP/1.1\r\nhost: x\r\ncontent-length: 500\r\n\r\n{\"inputs\":[]}")
        .unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    let text = String::from_utf8_lossy(&rest);
    assert!(
        text.is_empty() || text.starts_with("HTTP/1.1 4"),
        "a short body gets a 4xx or a closed connection, never a 5xx: {text}"
    );

    let t = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(
        b"POST /v2/models/mlp/versions/1/infer HTTP/1.1\r\nhost: x\r\ncontent-length: 500\r\n\r\n{",
    )
    .unwrap();
    let r = read_resp(&mut s);
    assert_eq!(r.status, 408, "{}", error_of(&r));
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "slow clients are cut off at body_timeout_ms"
    );
}

#[test]
fn timeout_header_becomes_the_frame_deadline() {
    let (e, addr) = engine(false);
    // A slow path: the body arrives 50 ms after the headers, so a 1 ms
    // deadline has passed by the time the worker sees the frame.
    let body = json_infer_body();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(
        format!(
            "POST /v2/models/mlp/versions/1/infer HTTP/1.1\r\nhost: x\r\nx-ai-timeout: 1ms\r\ncontent-length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    s.write_all(&body).unwrap();
    let r = read_resp(&mut s);
    assert_eq!(r.status, 504, "{}", error_of(&r));
    assert!(error_of(&r).contains("deadline"));
    // An ample timeout runs.
    assert_eq!(
        infer(addr, &[("X-AI-Timeout", "8s")], &json_infer_body()).status,
        200
    );
    let st = e.stats();
    assert!(st.errors(sluice_wire::ErrorCode::DeadlineExceeded) >= 1);
}

#[test]
fn tenants_authenticate_and_allow_lists_apply() {
    let (_e, addr) = engine(true);
    let body = json_infer_body();
    let r = infer(addr, &[], &body);
    assert_eq!(r.status, 401, "{}", error_of(&r));
    let bearer = format!("Bearer {TOKEN}");
    assert_eq!(
        infer(addr, &[("Authorization", &bearer)], &body).status,
        200
    );
    assert_eq!(
        infer(
            addr,
            &[("Authorization", "Bearer wrong-token-wrong-token")],
            &body
        )
        .status,
        401
    );
    // Tenant 8 may use "null" only: the worker's allow-list refuses mlp,
    // answered as for a model that does not exist (the engine's rule).
    let other: String = TOKEN.chars().rev().collect();
    let r = infer(
        addr,
        &[("Authorization", &format!("Bearer {other}"))],
        &body,
    );
    assert_eq!(r.status, 404, "{}", error_of(&r));
    assert_eq!(error_of(&r), "unknown model or version");
    // Sluice-HMAC-v2 with the tenant key (tests/signing.rs has the rest).
    let key: Vec<u8> = (0..32u8).collect();
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let path = "/v2/models/mlp/versions/1/infer";
    let digest = sluice_frontdoor::signing::sha256_hex([&body[..]]);
    let signed = |nonce: &'static str, ts_ms: u64| {
        sluice_frontdoor::signing::header(
            &sluice_wire::TenantKey::new(&key),
            &sluice_frontdoor::signing::Signed {
                tenant: 7,
                method: "POST",
                path,
                ts_ms,
                nonce,
                body_sha256: &digest,
                ..Default::default()
            },
        )
    };
    let auth = signed("http-rs-nonce-0000000001", ts);
    assert_eq!(infer(addr, &[("Authorization", &auth)], &body).status, 200);
    let stale = signed("http-rs-nonce-0000000002", ts - 1_000_000);
    assert_eq!(infer(addr, &[("Authorization", &stale)], &body).status, 401);
    // Health needs no credentials.
    assert_eq!(call(addr, "GET", "/v2/health/ready", &[], b"").status, 200);
}

/// Mutated request bodies and headers over the real socket: every one gets
/// a 200 or a 4xx with a message, never a 5xx, a hang or a dead server.
#[test]
fn mutated_requests_get_4xx_never_5xx() {
    let (e, addr) = engine(false);
    let (bin, hl) = binary_infer_body(true);
    let seeds: Vec<(Vec<u8>, Option<usize>)> = vec![(json_infer_body(), None), (bin, Some(hl))];
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut statuses = std::collections::BTreeMap::new();
    for k in 0..300 {
        let (seed, hl) = &seeds[k % seeds.len()];
        let mut body = seed.clone();
        for _ in 0..(next() % 4 + 1) {
            let i = (next() as usize) % body.len().max(1);
            match next() % 4 {
                0 => body[i] = next() as u8,
                1 => body.truncate(i),
                2 => body.insert(i, b"[]{},:\"0-e."[(next() % 11) as usize]),
                _ => {
                    let n = (next() % 8) as usize;
                    body.drain(i..(i + n).min(body.len()));
                }
            }
        }
        let hl_s = hl.map(|h| (h as i64 + (next() % 3) as i64 - 1).max(0).to_string());
        let mut headers: Vec<(&str, &str)> = Vec::new();
        if let Some(h) = &hl_s {
            headers.push(("Inference-Header-Content-Length", h));
        }
        let r = infer(addr, &headers, &body);
        assert!(
            r.status == 200 || (400..500).contains(&r.status),
            "case {k}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
        if r.status != 200 {
            assert!(!error_of(&r).is_empty(), "case {k}: a refusal says why");
        }
        *statuses.entry(r.status).or_insert(0) += 1;
    }
    assert!(
        statuses.len() > 1,
        "the mutations reached more than one outcome: {statuses:?}"
    );
    // Still serving, and no worker saw a frame it could not answer.
    assert_eq!(json_y(&infer(addr, &[], &json_infer_body())).len(), 3);
    assert_eq!(e.stats().total(|w| w.not_sluice), 0);
}
