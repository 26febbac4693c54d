//! The HTTP/REST front door (KServe v2 / Open Inference Protocol, and
//! Triton's model configuration endpoint), HTTP/1.1 and cleartext HTTP/2.

pub mod body;
pub mod generate;
pub mod infer;
pub mod models;
mod upstream;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use sluice_wire::ErrorCode;

use body::Chunks;

use crate::ctx::{Ctx, Stats};
use crate::errors::Refusal;

/// What a path names.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// `GET /v2/health/live`.
    Live,
    /// `GET /v2/health/ready`.
    Ready,
    /// `GET /v2`.
    Server,
    /// `/v2/models/{m}[/versions/{v}]{tail}`.
    Model {
        /// Model name (percent-decoded).
        name: String,
        /// Version, "" for none.
        version: String,
        /// What of it.
        what: ModelOp,
    },
}

/// What is asked of a model.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum ModelOp {
    /// Metadata.
    Metadata,
    /// Readiness.
    Ready,
    /// Triton model configuration.
    Config,
    /// Inference.
    Infer,
    /// Triton's generate extension: one JSON answer with every token.
    Generate,
    /// The same as server-sent events, one per token frame.
    GenerateStream,
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(h, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Parses a path; `None` for anything this front door does not serve.
pub fn route(path: &str) -> Option<Route> {
    let p = path.trim_end_matches('/');
    match p {
        "/v2/health/live" => return Some(Route::Live),
        "/v2/health/ready" => return Some(Route::Ready),
        "/v2" => return Some(Route::Server),
        _ => {}
    }
    let rest = p.strip_prefix("/v2/models/")?;
    let parts: Vec<&str> = rest.split('/').collect();
    let (name, version, tail) = match parts.as_slice() {
        [m] => (*m, "", ""),
        [m, t] => (*m, "", *t),
        [m, "versions", v] => (*m, *v, ""),
        [m, "versions", v, t] => (*m, *v, *t),
        _ => return None,
    };
    let what = match tail {
        "" => ModelOp::Metadata,
        "ready" => ModelOp::Ready,
        "config" => ModelOp::Config,
        "infer" => ModelOp::Infer,
        "generate" => ModelOp::Generate,
        "generate_stream" => ModelOp::GenerateStream,
        _ => return None,
    };
    let name = percent_decode(name)?;
    let version = percent_decode(version)?;
    if name.is_empty() {
        return None;
    }
    Some(Route::Model {
        name,
        version,
        what,
    })
}

/// A JSON response.
pub fn json(status: StatusCode, v: &serde_json::Value) -> Response<Chunks> {
    let body = serde_json::to_vec(v).unwrap_or_default();
    let mut r = Response::new(Chunks::one(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

/// The KServe error body for a refusal.
pub fn refusal(ctx: &Ctx, r: &Refusal) -> Response<Chunks> {
    ctx.stats.refusal(r.status);
    let mut resp = json(r.status, &serde_json::json!({ "error": r.message }));
    if r.retryable() {
        resp.headers_mut().insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("1"),
        );
    }
    resp
}

/// Serves one request.
pub async fn handle(
    ctx: Arc<Ctx>,
    req: Request<Incoming>,
    streams: crate::tokens::ConnStreams,
) -> Result<Response<Chunks>, Infallible> {
    Stats::add(&ctx.stats.http_requests, 1);
    Ok(match serve(&ctx, req, &streams).await {
        Ok(r) => r,
        Err(r) => refusal(&ctx, &r),
    })
}

async fn serve(
    ctx: &Arc<Ctx>,
    req: Request<Incoming>,
    streams: &crate::tokens::ConnStreams,
) -> Result<Response<Chunks>, Refusal> {
    let path = req.uri().path().to_string();
    if let Some(op) = crate::openai::route(&path) {
        return Ok(crate::openai::serve(ctx, req, op).await);
    }
    let Some(r) = route(&path) else {
        return Err(Refusal::not_found(format!("no such endpoint: {path}")));
    };
    let method = req.method().clone();
    let want = |m: Method| -> Result<(), Refusal> {
        if method == m || (m == Method::GET && method == Method::HEAD) {
            Ok(())
        } else {
            Err(Refusal::other(
                StatusCode::METHOD_NOT_ALLOWED,
                tonic::Code::Unimplemented,
                format!("{path} takes {m}"),
            ))
        }
    };
    match r {
        Route::Live => {
            want(Method::GET)?;
            Ok(json(StatusCode::OK, &serde_json::json!({ "live": true })))
        }
        Route::Ready => {
            want(Method::GET)?;
            let ready = ctx.ready();
            let status = if ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            Ok(json(status, &serde_json::json!({ "ready": ready })))
        }
        Route::Server => {
            want(Method::GET)?;
            Ok(json(StatusCode::OK, &crate::models::server_metadata()))
        }
        Route::Model {
            name,
            version,
            what: ModelOp::Infer,
        } => {
            want(Method::POST)?;
            infer_request(ctx, req, &name, &version).await
        }
        Route::Model {
            name,
            version,
            what: what @ (ModelOp::Generate | ModelOp::GenerateStream),
        } => {
            want(Method::POST)?;
            let stream = what == ModelOp::GenerateStream;
            generate::serve(ctx, req, &name, &version, stream, streams).await
        }
        Route::Model {
            name,
            version,
            what,
        } => {
            want(Method::GET)?;
            let call = call_of(&req);
            models::serve(ctx, req.headers(), &call, &name, &version, what)
        }
    }
}

/// The request as a signature covers it.
pub fn call_of<B>(req: &Request<B>) -> crate::semantic::Call<'_> {
    crate::semantic::Call {
        method: req.method().as_str(),
        path: req.uri().path(),
        query: req.uri().query().unwrap_or(""),
        checked: None,
    }
}

async fn infer_request(
    ctx: &Arc<Ctx>,
    req: Request<Incoming>,
    model: &str,
    version: &str,
) -> Result<Response<Chunks>, Refusal> {
    let tables = ctx.tables();
    // Everything routing needs comes from the path and headers: a request
    // that cannot go anywhere (or is not authenticated) is refused before
    // its body is read.
    let sem = crate::semantic::read(
        req.headers(),
        &ctx.env(&tables),
        &call_of(&req),
        model,
        version,
    )?;
    let Some(entry) = tables.models.resolve(&sem.model, &sem.version) else {
        return Err(Refusal::code(
            ErrorCode::UnknownModel,
            "unknown model or version",
        ));
    };
    let backend = (entry.kind == sluice_engine::config::ModelKind::Backend)
        .then(|| (entry.upstream.clone(), entry.version.clone()));
    drop(tables);
    if !ctx.ready() {
        return Err(Refusal::code(
            ErrorCode::ShuttingDown,
            "appliance is shutting down",
        ));
    }
    let (parts, incoming) = req.into_parts();
    if let Some((upstream, version)) = backend {
        return upstream::infer(ctx, sem, parts.headers, incoming, upstream, version).await;
    }
    let received = read_body(ctx, &parts.headers, incoming).await?;
    crate::semantic::check_body(
        &ctx.stats,
        sem.body_sha256.as_deref(),
        received.chunks.iter().map(|c| &c[..]),
    )?;
    infer::run(ctx, sem, &parts.headers, received).await
}

/// Reads a request body within `body_bytes_max` and `body_timeout_ms`.
pub async fn read_body(
    ctx: &Ctx,
    headers: &http::HeaderMap,
    incoming: Incoming,
) -> Result<body::Received, Refusal> {
    let max = ctx.cfg.body_bytes_max as usize;
    let declared = match headers.get(http::header::CONTENT_LENGTH) {
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.parse::<usize>().ok())
                .ok_or_else(|| Refusal::bad("Content-Length: not a number"))?,
        ),
        None => None,
    };
    if declared.is_some_and(|n| n > max) {
        return Err(body::too_large(max));
    }
    let timeout = Duration::from_millis(ctx.cfg.body_timeout_ms as u64);
    let received = match body::receive(incoming, max, timeout).await {
        Ok(b) => b,
        Err(e) => {
            if e.status == StatusCode::REQUEST_TIMEOUT {
                Stats::add(&ctx.stats.slow_clients, 1);
            }
            return Err(e);
        }
    };
    if declared.is_some_and(|n| n != received.len) {
        return Err(Refusal::bad(
            "the body's length differs from Content-Length",
        ));
    }
    Ok(received)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(route("/v2/health/live"), Some(Route::Live));
        assert_eq!(route("/v2/"), Some(Route::Server));
        assert_eq!(
            route("/v2/models/mlp/versions/1.0.0/infer"),
            Some(Route::Model {
                name: "mlp".into(),
                version: "1.0.0".into(),
                what: ModelOp::Infer
            })
        );
        assert_eq!(
            route("/v2/models/a%2Db/config"),
            Some(Route::Model {
                name: "a-b".into(),
                version: "".into(),
                what: ModelOp::Config
            })
        );
        assert_eq!(
            route("/v2/models/decoder/generate_stream"),
            Some(Route::Model {
                name: "decoder".into(),
                version: "".into(),
                what: ModelOp::GenerateStream
            })
        );
        assert_eq!(route("/v2/models/mlp/versions/1/nope"), None);
        assert_eq!(route("/v2/models//infer"), None);
        assert_eq!(route("/v1/models/mlp"), None);
        assert_eq!(route("/v2/models/%zz"), None);
    }
}
