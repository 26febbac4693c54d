//! `Sluice-HMAC-v2` over a real front door: a signed request passes; a
//! changed body, a replayed nonce, a v1 header and a stale timestamp are
//! refused and counted; a full nonce set answers 503; gRPC signs its first
//! message; and the worked example in docs/frontdoor.md is what the code
//! computes, byte for byte.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_frontdoor::signing::{self, Signed};
use sluice_wire::TenantKey;

const PATH: &str = "/v2/models/null/versions/1/infer";
const BODY: &[u8] = br#"{"inputs":[{"name":"x","shape":[2],"datatype":"INT8","data":[1,2]}]}"#;

fn key() -> TenantKey {
    TenantKey::new(&(0..32u8).collect::<Vec<u8>>())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A nonce no other request of this run uses.
fn nonce() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{:016x}{:016x}",
        now_ms(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn sign(path: &str, ts_ms: u64, nonce: &str, body: &[u8]) -> String {
    let digest = signing::sha256_hex([body]);
    signing::header(
        &key(),
        &Signed {
            tenant: 7,
            method: "POST",
            path,
            ts_ms,
            nonce,
            body_sha256: &digest,
            ..Signed::default()
        },
    )
}

/// One HTTP/1.1 request: status and body.
fn post(addr: SocketAddr, path: &str, auth: &str, body: &[u8]) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(
        format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\nauthorization: {auth}\r\ncontent-length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

#[test]
fn the_documented_vector_is_what_the_code_signs() {
    let body = br#"{"inputs":[]}"#;
    let digest = signing::sha256_hex([&body[..]]);
    assert_eq!(
        digest,
        "62b512d8c76bbed3048fc81bd94bd2aeaab2de4d3b36edbed2f3d3dd8ff3e33e"
    );
    let s = Signed {
        tenant: 7,
        method: "POST",
        path: "/v2/models/mlp/versions/1/infer",
        ts_ms: 1_700_000_000_000,
        nonce: "0123456789abcdef0123456789abcdef",
        body_sha256: &digest,
        ..Signed::default()
    };
    let canonical = "SLUICE-HMAC-V2\n7\nPOST\n/v2/models/mlp/versions/1/infer\n\n\n\n\n1700000000000\n0123456789abcdef0123456789abcdef\n62b512d8c76bbed3048fc81bd94bd2aeaab2de4d3b36edbed2f3d3dd8ff3e33e";
    assert_eq!(signing::canonical(&s), canonical);
    let header = "Sluice-HMAC-v2 tenant=7, ts=1700000000000, nonce=0123456789abcdef0123456789abcdef, body=62b512d8c76bbed3048fc81bd94bd2aeaab2de4d3b36edbed2f3d3dd8ff3e33e, sig=e1fc251d80cae3f08eac8cacb147ecd884c2067e60354eefd21f7ed792b6e375";
    assert_eq!(signing::header(&key(), &s), header);
    // The document shows the same bytes.
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/frontdoor.md"
    ))
    .unwrap();
    assert!(doc.contains(header), "docs/frontdoor.md lacks the header");
    let shown = canonical.replace('\n', "\\n");
    assert!(
        doc.contains(&shown),
        "docs/frontdoor.md lacks the canonical string\n{shown}"
    );
}

#[test]
fn signed_requests_pass_once_with_their_own_body_and_time() {
    let fd = common::start("hmac_skew_ms = 5000\n", true);
    let n = nonce();
    let auth = sign(PATH, now_ms(), &n, BODY);
    let (st, text) = post(fd.http, PATH, &auth, BODY);
    assert_eq!(st, 200, "{text}");

    // The same headers again: the nonce is spent.
    let (st, text) = post(fd.http, PATH, &auth, BODY);
    assert_eq!(st, 409, "{text}");
    assert!(text.contains("nonce already used"), "{text}");
    assert_eq!(fd.stat("hmac_replayed"), 1);

    // Fresh headers for one body, sent with another: 401 after the read.
    let other = br#"{"inputs":[{"name":"x","shape":[2],"datatype":"INT8","data":[9,9]}]}"#;
    let auth = sign(PATH, now_ms(), &nonce(), BODY);
    let (st, text) = post(fd.http, PATH, &auth, other);
    assert_eq!(st, 401, "{text}");
    assert!(text.contains("does not match its signed SHA-256"), "{text}");
    assert_eq!(fd.stat("hmac_body_mismatch"), 1);

    // Another path (another model) with the same signature: 401.
    let auth = sign(PATH, now_ms(), &nonce(), BODY);
    let (st, _) = post(fd.http, "/v2/models/null/versions/2/infer", &auth, BODY);
    assert_eq!(st, 401);
    assert_eq!(fd.stat("hmac_bad_signature"), 1);

    // Outside hmac_skew_ms, either way.
    for ts in [now_ms() - 10_000, now_ms() + 10_000] {
        let auth = sign(PATH, ts, &nonce(), BODY);
        let (st, text) = post(fd.http, PATH, &auth, BODY);
        assert_eq!(st, 401, "{text}");
        assert!(text.contains("hmac_skew_ms"), "{text}");
    }
    assert_eq!(fd.stat("hmac_stale"), 2);

    // The v1 header: refused, naming the new format.
    let v1 = format!(
        "Sluice-HMAC tenant=7, ts={}, sig={}",
        now_ms() / 1000,
        "ab".repeat(32)
    );
    let (st, text) = post(fd.http, PATH, &v1, BODY);
    assert_eq!(st, 401, "{text}");
    assert!(text.contains("Sluice-HMAC-v2"), "{text}");
    assert_eq!(fd.stat("hmac_old_format"), 1);

    // A malformed nonce.
    let auth = sign(PATH, now_ms(), "short", BODY);
    assert_eq!(post(fd.http, PATH, &auth, BODY).0, 401);
    assert_eq!(fd.stat("hmac_malformed"), 1);
}

#[test]
fn an_unknown_tenant_costs_no_body_read() {
    let fd = common::start("", true);
    // Tenant 99 does not exist: refused on the header alone, with the
    // declared body never sent.
    let auth = sign(PATH, now_ms(), &nonce(), BODY).replace("tenant=7", "tenant=99");
    let mut s = std::net::TcpStream::connect(fd.http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(
        format!(
            "POST {PATH} HTTP/1.1\r\nhost: x\r\nauthorization: {auth}\r\ncontent-length: 60000\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let mut b = [0u8; 512];
    let n = s.read(&mut b).unwrap();
    let head = String::from_utf8_lossy(&b[..n]);
    assert!(head.starts_with("HTTP/1.1 401"), "{head}");
    assert_eq!(fd.stat("hmac_bad_signature"), 1);
}

#[test]
fn a_full_nonce_set_refuses_503_rather_than_forget() {
    let fd = common::start("hmac_nonces_max = 2\n", true);
    for _ in 0..2 {
        let auth = sign(PATH, now_ms(), &nonce(), BODY);
        assert_eq!(post(fd.http, PATH, &auth, BODY).0, 200);
    }
    let auth = sign(PATH, now_ms(), &nonce(), BODY);
    let (st, text) = post(fd.http, PATH, &auth, BODY);
    assert_eq!(st, 503, "{text}");
    assert!(text.contains("hmac_nonces_max"), "{text}");
    assert_eq!(fd.stat("hmac_nonces_full"), 1);
}

/// gRPC: the digest is the first message's, as framed without its prefix.
#[test]
fn grpc_signs_the_first_message() {
    use http_body_util::BodyExt;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use prost::Message;
    use sluice_frontdoor::pb;

    let fd = common::start("", true);
    let msg = pb::ModelInferRequest {
        model_name: "null".into(),
        model_version: "1".into(),
        inputs: vec![pb::model_infer_request::InferInputTensor {
            name: "x".into(),
            datatype: "INT8".into(),
            shape: vec![1, 2],
            contents: Some(pb::InferTensorContents {
                int_contents: vec![1, 2],
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    }
    .encode_to_vec();
    let path = "/inference.GRPCInferenceService/ModelInfer";
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let call = |auth: String, payload: Vec<u8>| {
        let addr = fd.grpc;
        async move {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (mut tx, conn) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                    .await
                    .unwrap();
            tokio::spawn(conn);
            let mut framed = vec![0u8];
            framed.extend_from_slice(&(payload.len() as u32).to_be_bytes());
            framed.extend_from_slice(&payload);
            let req = http::Request::post(format!("http://x{path}"))
                .header("content-type", "application/grpc")
                .header("te", "trailers")
                .header("authorization", auth)
                .body(http_body_util::Full::new(bytes::Bytes::from(framed)))
                .unwrap();
            let resp = tx.send_request(req).await.unwrap();
            let head = resp.headers().clone();
            let trailers = resp
                .into_body()
                .collect()
                .await
                .ok()
                .and_then(|c| c.trailers().cloned())
                .unwrap_or_default();
            head.get("grpc-status")
                .or(trailers.get("grpc-status"))
                .map_or(-1, |v| v.to_str().unwrap().parse::<i32>().unwrap())
        }
    };
    rt.block_on(async {
        let ok = sign(path, now_ms(), &nonce(), &msg);
        assert_eq!(call(ok.clone(), msg.clone()).await, 0);
        // Replayed: refused on the metadata (ALREADY_EXISTS).
        assert_eq!(call(ok, msg.clone()).await, 6);
        // Another message under a fresh signature of the first.
        let mut other = msg.clone();
        other.push(0x1a);
        other.extend_from_slice(&[2, b'i', b'd']);
        let auth = sign(path, now_ms(), &nonce(), &msg);
        assert_eq!(call(auth, other).await, 16);
    });
    assert_eq!(fd.stat("hmac_replayed"), 1);
    assert_eq!(fd.stat("hmac_body_mismatch"), 1);
}
