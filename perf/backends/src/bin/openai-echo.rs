//! A fast OpenAI-shaped server: the backend fast enough not to be the limit
//! in the hop benchmarks, and, called directly, their floor. It answers
//! every `POST /v1/chat/completions` and `/v1/completions` with one fixed
//! small completion, or with `--tokens` stream events spaced `--itl-us`
//! apart when the request asks for a stream; `GET /v1/models`, `/health`,
//! `/get_server_info` and `/get_model_info` answer what routers probe.
//! HTTP/1.1 with keep-alive; `--threads` tokio worker threads.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use clap::Parser;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;

#[derive(Parser)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8401")]
    listen: SocketAddr,
    /// Model name it serves.
    #[arg(long, default_value = "echo-model")]
    model: String,
    /// Stream events per streamed answer.
    #[arg(long, default_value_t = 16)]
    tokens: u32,
    /// Time between two stream events, µs (the first comes after one gap).
    #[arg(long, default_value_t = 1000)]
    itl_us: u64,
    /// Worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn full(status: StatusCode, ct: &'static str, b: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(b.into()).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(ct),
    );
    r
}

async fn serve(
    req: Request<Incoming>,
    model: String,
    tokens: u32,
    itl: Duration,
) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_string();
    match path.as_str() {
        "/v1/models" => {
            let b = serde_json::json!({"object":"list","data":[{"id": model, "object":"model","owned_by":"perf"}]});
            return Ok(full(StatusCode::OK, "application/json", b.to_string()));
        }
        "/health" | "/health_generate" => {
            return Ok(full(StatusCode::OK, "application/json", "{}"));
        }
        "/get_server_info" | "/get_model_info" => {
            let b = serde_json::json!({"model_path": model, "is_generation": true});
            return Ok(full(StatusCode::OK, "application/json", b.to_string()));
        }
        "/v1/chat/completions" | "/v1/completions" => {}
        _ => {
            return Ok(full(
                StatusCode::NOT_FOUND,
                "application/json",
                r#"{"error":{"message":"not found"}}"#,
            ));
        }
    }
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Ok(full(StatusCode::BAD_REQUEST, "application/json", "{}")),
    };
    let stream = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("stream").and_then(|s| s.as_bool()))
        .unwrap_or(false);
    if !stream {
        let b = serde_json::json!({"id":"cmpl-perf","object":"chat.completion","created":0,"model":model,
            "choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],
            "usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}});
        return Ok(full(StatusCode::OK, "application/json", b.to_string()));
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    tokio::spawn(async move {
        for i in 0..tokens {
            tokio::time::sleep(itl).await;
            let ev = format!(
                "data: {{\"id\":\"cmpl-perf\",\"object\":\"chat.completion.chunk\",\"model\":\"{model}\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"t{i}\"}}}}]}}\n\n"
            );
            if tx.send(Bytes::from(ev)).await.is_err() {
                return;
            }
        }
        let _ = tx.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
    });
    let mut r = Response::new(BodyExt::boxed(Chan(rx)));
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    Ok(r)
}

/// A body of what arrives on a channel until it closes.
struct Chan(tokio::sync::mpsc::Receiver<Bytes>);

impl http_body::Body for Chan {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

fn main() -> std::io::Result<()> {
    let a = Args::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(a.threads.max(1))
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let l = tokio::net::TcpListener::bind(a.listen).await?;
        eprintln!("openai-echo: listening on {}", l.local_addr()?);
        let itl = Duration::from_micros(a.itl_us);
        loop {
            let (s, _) = l.accept().await?;
            let _ = s.set_nodelay(true);
            let model = a.model.clone();
            let tokens = a.tokens;
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |r| serve(r, model.clone(), tokens, itl));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(s), svc)
                    .await;
            });
        }
    })
}
