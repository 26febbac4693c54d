//! gRPC calls are authenticated on their metadata before any of their
//! message is read; small calls are capped; a message that does not arrive
//! within body_timeout_ms is refused; narrow integer contents out of range
//! are refused (gRPC and HTTP JSON) rather than wrapped.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use sluice_frontdoor::pb;

/// A request body sent as its chunks arrive on a channel.
struct Chan(tokio::sync::mpsc::Receiver<Bytes>);

impl Body for Chan {
    type Data = Bytes;
    type Error = std::convert::Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

fn framed(m: &impl Message) -> Bytes {
    let body = m.encode_to_vec();
    let mut out = vec![0u8];
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out.into()
}

/// One gRPC call: its grpc-status and grpc-message.
async fn call(addr: SocketAddr, method: &str, auth: Option<&str>, body: Chan) -> (i32, String) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut tx, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::post(format!("http://x/inference.GRPCInferenceService/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    let resp = tx.send_request(req.body(body).unwrap()).await.unwrap();
    let head = resp.headers().clone();
    let trailers = resp
        .into_body()
        .collect()
        .await
        .ok()
        .and_then(|c| c.trailers().cloned())
        .unwrap_or_default();
    let get = |k: &str| {
        head.get(k)
            .or(trailers.get(k))
            .map(|v| v.to_str().unwrap().to_string())
    };
    let status = get("grpc-status").map_or(-1, |s| s.parse().unwrap());
    // grpc-message is percent-encoded; spaces are all these tests need.
    let msg = get("grpc-message").unwrap_or_default().replace("%20", " ");
    (status, msg)
}

/// A body of `chunks`, then the end.
fn whole(chunks: Vec<Bytes>) -> Chan {
    let (tx, rx) = tokio::sync::mpsc::channel(chunks.len().max(1));
    for c in chunks {
        tx.try_send(c).unwrap();
    }
    Chan(rx)
}

fn infer_int8(values: Vec<i32>) -> pb::ModelInferRequest {
    pb::ModelInferRequest {
        model_name: "null".into(),
        model_version: "1".into(),
        inputs: vec![pb::model_infer_request::InferInputTensor {
            name: "x".into(),
            datatype: "INT8".into(),
            shape: vec![1, values.len() as i64],
            contents: Some(pb::InferTensorContents {
                int_contents: values,
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn unauthenticated_calls_are_refused_before_their_message_is_read() {
    let fd = common::start("body_timeout_ms = 300\n", true);
    let bearer = format!("Bearer {}", common::TOKEN);
    rt().block_on(async {
        // A 60 KB message without credentials: UNAUTHENTICATED, unread.
        let big = pb::ModelInferRequest {
            model_name: "null".into(),
            model_version: "1".into(),
            raw_input_contents: vec![vec![7u8; 60_000].into()],
            ..Default::default()
        };
        let (st, msg) = call(fd.grpc, "ModelInfer", None, whole(vec![framed(&big)])).await;
        assert_eq!(st, 16, "{msg}");
        let (st, _) = call(
            fd.grpc,
            "ModelInfer",
            Some("Bearer not-the-token-0123456789"),
            whole(vec![framed(&big)]),
        )
        .await;
        assert_eq!(st, 16);
        assert_eq!(fd.stat("grpc_refused_unread"), 2);
        assert_eq!(
            fd.stat("grpc_bytes_read"),
            0,
            "no byte of either message was read"
        );

        // Calls without tensors are capped at a few KiB.
        let pad = pb::ModelReadyRequest {
            name: "x".repeat(10_000),
            version: String::new(),
        };
        let (st, msg) = call(fd.grpc, "ServerLive", None, whole(vec![framed(&pad)])).await;
        assert_eq!(st, 8, "RESOURCE_EXHAUSTED: {msg}");

        // Authenticated, in range: read and served.
        let ok = infer_int8(vec![-128, 127]);
        let (st, msg) = call(
            fd.grpc,
            "ModelInfer",
            Some(&bearer),
            whole(vec![framed(&ok)]),
        )
        .await;
        assert_eq!(st, 0, "{msg}");
        assert!(fd.stat("grpc_bytes_read") > 0);

        // Out of range: INVALID_ARGUMENT naming input and value.
        let bad = infer_int8(vec![1, 300]);
        let (st, msg) = call(
            fd.grpc,
            "ModelInfer",
            Some(&bearer),
            whole(vec![framed(&bad)]),
        )
        .await;
        assert_eq!(st, 3, "{msg}");
        assert!(msg.contains("input x") && msg.contains("300"), "{msg}");

        // Half a message, then nothing: DEADLINE_EXCEEDED at body_timeout_ms.
        let slow0 = fd.stat("slow_clients");
        let m = framed(&ok);
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        tx.send(m.slice(..m.len() / 2)).await.unwrap();
        let (st, msg) = tokio::time::timeout(
            Duration::from_secs(10),
            call(fd.grpc, "ModelInfer", Some(&bearer), Chan(rx)),
        )
        .await
        .unwrap();
        assert_eq!(st, 4, "{msg}");
        assert_eq!(fd.stat("slow_clients"), slow0 + 1);
        drop(tx);
    });
}

#[test]
fn http_json_narrow_integers_out_of_range_get_400() {
    use std::io::{Read, Write};
    let fd = common::start("", false);
    let body = br#"{"inputs":[{"name":"x","shape":[2],"datatype":"INT16","data":[1,40000]}]}"#;
    let mut s = std::net::TcpStream::connect(fd.http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(
        format!(
            "POST /v2/models/null/versions/1/infer HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    assert!(
        out.contains("input x") && out.contains("40000") && out.contains("INT16"),
        "{out}"
    );
}
