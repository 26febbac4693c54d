//! Sending one request to a pool: pick an endpoint, send, and on a
//! failure before any byte of the answer reached the client (connect
//! error, 5xx, an answer that is not JSON) try another endpoint, within
//! `retries` and the pool's retry budget. A timeout is the request's
//! deadline: never retried.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;

use crate::pool::{Backends, Lease, NoEndpoint};
use crate::stats::Cause;

/// KServe v2's binary tensor extension header.
pub const INFERENCE_HEADER: &str = "inference-header-content-length";

/// One request for a pool.
#[derive(Debug)]
pub struct Call {
    /// `GET` or `POST`.
    pub method: Method,
    /// The path and query, e.g. `/v1/chat/completions`.
    pub path: String,
    /// The body, sent as is to every endpoint tried.
    pub body: Bytes,
    /// Headers sent (content type, `traceparent`, ...).
    pub headers: HeaderMap,
    /// The model name the endpoints serve it as.
    pub model: String,
    /// The answer is a server-sent event stream.
    pub stream: bool,
    /// The request's deadline (`X-AI-Timeout`, or the pool's
    /// `request_timeout_ms`).
    pub deadline: tokio::time::Instant,
    /// Largest whole answer read, bytes.
    pub answer_bytes_max: usize,
}

/// The answer's body.
#[derive(Debug)]
pub enum Body {
    /// Read whole (and, for 2xx, checked to be JSON).
    Whole(Bytes),
    /// A 2xx event stream, to relay as it arrives.
    Stream(Incoming),
}

/// An endpoint's answer, with its place still held.
#[derive(Debug)]
pub struct Answer {
    /// Its status.
    pub status: StatusCode,
    /// Its content type, if any.
    pub content_type: Option<http::HeaderValue>,
    /// KServe's binary extension: the length of the JSON part of a body
    /// that binary tensor data follows.
    pub json_len: Option<usize>,
    /// Its body.
    pub body: Body,
    /// The place, given back when the answer is relayed.
    pub lease: Lease,
    /// When the chosen attempt was sent.
    pub sent: Instant,
    /// Attempts made.
    pub attempts: u32,
}

/// No answer to relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Counted as.
    pub cause: Cause,
    /// HTTP status for the client (429, 502, 503, 504).
    pub status: StatusCode,
    /// For the client.
    pub message: String,
}

impl Failure {
    fn of(cause: Cause, status: StatusCode, message: impl Into<String>) -> Failure {
        Failure {
            cause,
            status,
            message: message.into(),
        }
    }
}

/// What one attempt came to.
enum Attempt {
    Answer(Answer),
    /// Failed; may be tried elsewhere.
    Retry(Failure),
    /// Failed; no other endpoint would do better.
    Final(Failure),
}

/// Sends `call` to an endpoint of `pools`.
pub async fn send(
    backends: &Arc<Backends>,
    pools: &[usize],
    call: &Call,
) -> Result<Answer, Failure> {
    let mut tried: Vec<u64> = Vec::new();
    let mut first_pool = pools.first().copied().unwrap_or(0);
    let mut counted = false;
    loop {
        let lease = match backends
            .acquire(pools, &call.model, &tried, call.deadline)
            .await
        {
            Ok(l) => l,
            Err(e) => {
                let f = refusal(e, &call.model, tried.len());
                if let Some(&p) = pools.first() {
                    backends.pools[p].stats.failed(f.cause);
                }
                return Err(f);
            }
        };
        let pool = lease.pool();
        if !counted {
            counted = true;
            pool.stats
                .requests
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if let Some(m) = lease.model_stats(&call.model) {
                m.requests
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        if tried.is_empty() {
            first_pool = lease.pool;
        }
        tried.push(lease.endpoint().id);
        let this_pool = lease.pool;
        let attempts = tried.len() as u32;
        match attempt(lease, call, attempts).await {
            Attempt::Answer(a) => return Ok(a),
            Attempt::Final(f) => {
                backends.pools[first_pool].stats.failed(f.cause);
                return Err(f);
            }
            Attempt::Retry(f) => {
                let pool = &backends.pools[this_pool];
                pool.stats.failed(f.cause);
                if attempts > pool.cfg.retries || !pool.take_retry() {
                    return Err(f);
                }
                pool.stats
                    .retries
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
}

fn refusal(e: NoEndpoint, model: &str, tried: usize) -> Failure {
    match e {
        NoEndpoint::NotServed => Failure::of(
            Cause::Unavailable,
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no backend serves {model:?} for this shard"),
        ),
        NoEndpoint::Unavailable if tried > 0 => Failure::of(
            Cause::Unavailable,
            StatusCode::BAD_GATEWAY,
            format!("every backend endpoint serving {model:?} failed or is unavailable"),
        ),
        NoEndpoint::Unavailable => Failure::of(
            Cause::Unavailable,
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no healthy backend endpoint serves {model:?} now"),
        ),
        NoEndpoint::QueueFull => Failure::of(
            Cause::QueueFull,
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "every backend endpoint serving {model:?} is at max_concurrency and the queue is full (queue_depth)"
            ),
        ),
        NoEndpoint::Deadline => Failure::of(
            Cause::Timeout,
            StatusCode::GATEWAY_TIMEOUT,
            "the request's deadline passed while it waited for a backend endpoint",
        ),
    }
}

async fn attempt(lease: Lease, call: &Call, attempts: u32) -> Attempt {
    let pool = lease.pool();
    let ep = lease.endpoint();
    ep.stats
        .requests
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let cfg = &pool.cfg;
    let fail = |cause: Cause| {
        if matches!(
            cause,
            Cause::Connect | Cause::Timeout | Cause::Status5xx | Cause::Garbage
        ) {
            ep.failed(
                lease.now_ms(),
                cfg.eject_errors,
                cfg.eject_ms,
                cfg.eject_max_ms,
            );
        }
    };
    let uri = match http::Uri::builder()
        .scheme(if ep.parsed.https { "https" } else { "http" })
        .authority(ep.authority.clone())
        .path_and_query(call.path.as_str())
        .build()
    {
        Ok(u) => u,
        Err(e) => {
            return Attempt::Final(Failure::of(
                Cause::Garbage,
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("upstream URI: {e}"),
            ));
        }
    };
    if ep.parsed.https {
        // The client has no TLS yet (docs/backends.md says so); config
        // accepts https:// so that a pool's URLs need not change later.
        return Attempt::Final(Failure::of(
            Cause::Connect,
            StatusCode::BAD_GATEWAY,
            format!("{}: TLS to backends is not built yet", ep.url),
        ));
    }
    let mut req = http::Request::new(Full::new(call.body.clone()));
    *req.method_mut() = call.method.clone();
    *req.uri_mut() = uri;
    *req.headers_mut() = call.headers.clone();
    let sent = Instant::now();
    let client = crate::client::client(cfg.connect_timeout_ms);
    let resp = match tokio::time::timeout_at(call.deadline, client.request(req)).await {
        Err(_) => {
            fail(Cause::Timeout);
            return Attempt::Final(Failure::of(
                Cause::Timeout,
                StatusCode::GATEWAY_TIMEOUT,
                format!("{} did not answer before the request's deadline", ep.url),
            ));
        }
        Ok(Err(e)) => {
            fail(Cause::Connect);
            let what = if e.is_connect() { "connect" } else { "request" };
            return Attempt::Retry(Failure::of(
                Cause::Connect,
                StatusCode::BAD_GATEWAY,
                format!("{}: {what} failed: {e}", ep.url),
            ));
        }
        Ok(Ok(r)) => r,
    };
    let status = resp.status();
    let content_type = resp.headers().get(http::header::CONTENT_TYPE).cloned();
    let json_len = resp
        .headers()
        .get(INFERENCE_HEADER)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    let is_sse = content_type
        .as_ref()
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if status.is_success() && call.stream && is_sse {
        return Attempt::Answer(Answer {
            status,
            content_type,
            json_len,
            body: Body::Stream(resp.into_body()),
            lease,
            sent,
            attempts,
        });
    }
    let read = tokio::time::timeout_at(
        call.deadline,
        read_bounded(resp.into_body(), call.answer_bytes_max),
    )
    .await;
    let body = match read {
        Err(_) => {
            fail(Cause::Timeout);
            return Attempt::Final(Failure::of(
                Cause::Timeout,
                StatusCode::GATEWAY_TIMEOUT,
                format!(
                    "{}'s answer did not end before the request's deadline",
                    ep.url
                ),
            ));
        }
        Ok(Err(m)) => {
            fail(Cause::Garbage);
            return Attempt::Retry(Failure::of(
                Cause::Garbage,
                StatusCode::BAD_GATEWAY,
                format!("{}: {m}", ep.url),
            ));
        }
        Ok(Ok(b)) => b,
    };
    if status.is_server_error() {
        fail(Cause::Status5xx);
        return Attempt::Retry(Failure::of(
            Cause::Status5xx,
            StatusCode::BAD_GATEWAY,
            format!(
                "{} answered {}: {}",
                ep.url,
                status.as_u16(),
                String::from_utf8_lossy(&body[..body.len().min(512)])
            ),
        ));
    }
    // The JSON part: all of it, or what KServe's binary extension says.
    let json = match json_len {
        Some(n) => body.get(..n).unwrap_or(&body[..]),
        None => &body[..],
    };
    if serde_json::from_slice::<serde::de::IgnoredAny>(json).is_err() {
        fail(Cause::Garbage);
        return Attempt::Retry(Failure::of(
            Cause::Garbage,
            StatusCode::BAD_GATEWAY,
            format!(
                "{} answered {} with a body that is not JSON ({} bytes)",
                ep.url,
                status.as_u16(),
                body.len()
            ),
        ));
    }
    // A 2xx, or a 4xx that is the request's fault: the endpoint is alive.
    ep.succeeded();
    Attempt::Answer(Answer {
        status,
        content_type,
        json_len,
        body: Body::Whole(body),
        lease,
        sent,
        attempts,
    })
}

/// Reads a body of at most `max` bytes.
async fn read_bounded(mut body: Incoming, max: usize) -> Result<Bytes, String> {
    let mut parts: Vec<Bytes> = Vec::new();
    let mut len = 0usize;
    while let Some(f) = body.frame().await {
        let f = f.map_err(|e| format!("the answer was cut: {e}"))?;
        if let Ok(d) = f.into_data() {
            len += d.len();
            if len > max {
                return Err(format!("the answer is larger than {max} bytes"));
            }
            parts.push(d);
        }
    }
    Ok(match parts.len() {
        0 => Bytes::new(),
        1 => parts.pop().unwrap_or_default(),
        _ => {
            let mut v = Vec::with_capacity(len);
            for p in &parts {
                v.extend_from_slice(p);
            }
            Bytes::from(v)
        }
    })
}
