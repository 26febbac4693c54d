//! The OpenAI API on the front door's HTTP listener (docs/backends.md):
//! `POST /v1/chat/completions`, `/v1/completions`, `/v1/embeddings` and
//! `GET /v1/models`, for models of `kind = "backend"`, dispatched to the
//! pools whose labels match the request's shard.
//!
//! A request is authenticated from its headers before its body is read,
//! placed by the engine's route table (model, version, adapter, intent,
//! tenant, the body's content), then sent to an endpoint: the body as it
//! came when no field changes, re-encoded once (counted) when the model's
//! upstream name differs. An event stream is relayed chunk by chunk as it
//! arrives; a client that goes away cancels the upstream request.

mod errors;
mod hop;
mod request;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use sluice_engine::config::ModelKind;

pub use errors::ApiError;
pub use request::join as join_body;

use crate::ctx::{Ctx, Stats};
use crate::http::body::Chunks;

/// Events queued for a slow stream reader; when full, relaying waits (the
/// backend's connection is read no faster than the client reads).
pub const STREAM_CHUNKS_QUEUED_MAX: usize = 64;

/// An OpenAI endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `POST /v1/chat/completions`.
    Chat,
    /// `POST /v1/completions`.
    Completions,
    /// `POST /v1/embeddings`.
    Embeddings,
    /// `GET /v1/models`.
    Models,
}

/// The OpenAI endpoint a path names.
pub fn route(path: &str) -> Option<Op> {
    match path.trim_end_matches('/') {
        "/v1/chat/completions" => Some(Op::Chat),
        "/v1/completions" => Some(Op::Completions),
        "/v1/embeddings" => Some(Op::Embeddings),
        "/v1/models" => Some(Op::Models),
        _ => None,
    }
}

impl Op {
    fn path(self) -> &'static str {
        match self {
            Op::Chat => "/v1/chat/completions",
            Op::Completions => "/v1/completions",
            Op::Embeddings => "/v1/embeddings",
            Op::Models => "/v1/models",
        }
    }
}

/// Serves one OpenAI request; every refusal is OpenAI's error body.
pub async fn serve(ctx: &Arc<Ctx>, req: Request<Incoming>, op: Op) -> Response<Chunks> {
    Stats::add(&ctx.stats.openai_requests, 1);
    match handle(ctx, req, op).await {
        Ok(r) => r,
        Err(e) => e.response(ctx),
    }
}

async fn handle(
    ctx: &Arc<Ctx>,
    req: Request<Incoming>,
    op: Op,
) -> Result<Response<Chunks>, ApiError> {
    let recv_ns = hop::now_ns();
    let want = if op == Op::Models {
        Method::GET
    } else {
        Method::POST
    };
    if req.method() != want {
        return Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{} takes {want}", op.path()),
        ));
    }
    let tables = ctx.tables();
    let auth = crate::semantic::authenticate(
        req.headers(),
        &ctx.env(&tables),
        &crate::http::call_of(&req),
    )
    .map_err(ApiError::from)?;
    if op == Op::Models {
        return Ok(models(&tables, &auth.tenant));
    }
    let Some(backends) = ctx.backends.clone() else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "this appliance has no [[backends]]: the OpenAI API serves nothing",
        ));
    };
    if !ctx.ready() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "appliance is shutting down",
        )
        .code("shutting_down"));
    }
    drop(tables);
    let trace = match req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
    {
        Some(t) => crate::semantic::parse_traceparent(t),
        None => sluice_wire::TraceContext::default(),
    };
    let mut hop = Some(hop::Hop::start(trace, &ctx.sampler, recv_ns));
    if let Some(h) = hop.as_mut() {
        h.mark(|t| t.auth_ns = hop::now_ns());
    }
    let r = forward(ctx, req, op, auth, backends, &mut hop).await;
    // A hop that ended before its answer was relayed ends here.
    if let (Some(h), Err(e)) = (hop.take(), &r) {
        h.finish(e.status.as_u16(), &ctx.spans);
    }
    r
}

/// Reads, places and sends one request; `hop` goes to whoever relays the
/// answer (left in place when the request fails before).
async fn forward(
    ctx: &Arc<Ctx>,
    req: Request<Incoming>,
    op: Op,
    auth: crate::semantic::Auth,
    backends: Arc<sluice_backends::Backends>,
    hop: &mut Option<hop::Hop>,
) -> Result<Response<Chunks>, ApiError> {
    let mark = |hop: &mut Option<hop::Hop>, f: fn(&mut sluice_engine::trace::SpanTimes, u64)| {
        if let Some(h) = hop.as_mut() {
            h.mark(|t| f(t, hop::now_ns()));
        }
    };
    let (parts, incoming) = req.into_parts();
    let received = crate::http::read_body(ctx, &parts.headers, incoming)
        .await
        .map_err(ApiError::from)?;
    crate::semantic::check_body(
        &ctx.stats,
        auth.body_sha256.as_deref(),
        received.chunks.iter().map(|c| &c[..]),
    )
    .map_err(ApiError::from)?;
    let raw = request::join(&ctx.stats, received.chunks, received.len);
    let mut body = request::parse(&raw)?;
    mark(hop, |t, now| t.validate_ns = now);
    let tables = ctx.tables();
    let placed = request::place(ctx, &tables, &parts.headers, &auth.tenant, &body, &raw)?;
    drop(tables);
    mark(hop, |t, now| t.route_ns = now);
    if let Some(h) = hop.as_mut() {
        let adapter = if placed.upstream == placed.model {
            ""
        } else {
            &placed.upstream
        };
        h.describe(
            &placed.model,
            &placed.version,
            adapter,
            auth.tenant.id,
            placed.shard_index,
        );
    }
    if placed.stream && op == Op::Embeddings {
        return Err(ApiError::bad("embeddings do not stream").param("stream"));
    }
    let pools = backends.serving(
        &placed.labels,
        &placed.upstream,
        sluice_engine::config::BackendProtocol::Openai,
    );
    if pools.is_empty() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "no backend pool with the labels of shard {:?} serves {:?} now",
                placed.shard, placed.upstream
            ),
        )
        .code("backend_unavailable"));
    }
    let send = if placed.upstream == placed.model {
        raw
    } else {
        body.insert(
            "model".into(),
            serde_json::Value::String(placed.upstream.clone()),
        );
        let v = serde_json::to_vec(&body).map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("re-encoding the body: {e}"),
            )
        })?;
        Stats::add(&ctx.stats.openai_bodies_reencoded, 1);
        Stats::add(&ctx.stats.openai_bytes_reencoded, v.len() as u64);
        Bytes::from(v)
    };
    let pool_timeout = backends.pools[pools[0]].cfg.request_timeout_ms;
    let timeout = placed
        .timeout
        .unwrap_or(Duration::from_millis(u64::from(pool_timeout)));
    let call = sluice_backends::Call {
        method: Method::POST,
        path: op.path().to_owned(),
        body: send,
        headers: upstream_headers(&parts.headers, hop.as_ref().and_then(hop::Hop::traceparent)),
        model: placed.upstream.clone(),
        stream: placed.stream,
        deadline: tokio::time::Instant::now() + timeout,
        answer_bytes_max: ctx.cfg.reply_bytes_max as usize,
    };
    let answer = sluice_backends::send(&backends, &pools, &call).await?;
    let mut hop = hop.take();
    if let Some(h) = hop.as_mut() {
        let now = hop::now_ns();
        let sent = now.saturating_sub(answer.sent.elapsed().as_nanos() as u64);
        h.mark(|t| {
            t.run_start_ns = sent;
            t.run_end_ns = now;
        });
    }
    Ok(respond(ctx, answer, &placed, &call, hop))
}

/// Headers that go upstream: the content type and the trace context
/// (`traceparent` naming the hop's span when it is traced).
fn upstream_headers(h: &http::HeaderMap, traceparent: Option<String>) -> http::HeaderMap {
    let mut out = http::HeaderMap::new();
    out.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    for name in ["tracestate", "accept"] {
        if let Some(v) = h.get(name) {
            out.insert(http::HeaderName::from_static(name), v.clone());
        }
    }
    if let Some(tp) = traceparent.and_then(|t| http::HeaderValue::from_str(&t).ok()) {
        out.insert(http::HeaderName::from_static("traceparent"), tp);
    }
    out
}

fn respond(
    ctx: &Arc<Ctx>,
    a: sluice_backends::Answer,
    placed: &request::Placed,
    call: &sluice_backends::Call,
    hop: Option<hop::Hop>,
) -> Response<Chunks> {
    let sluice_backends::Answer {
        status,
        content_type,
        body,
        lease,
        sent,
        ..
    } = a;
    let pool_name = lease.pool().cfg.name.clone();
    let streamed = matches!(body, sluice_backends::Body::Stream(_));
    let body = match body {
        sluice_backends::Body::Whole(b) => {
            let pool = lease.pool();
            if status.is_success() {
                pool.stats
                    .ok
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let us = sent.elapsed().as_micros() as u64;
                pool.stats.latency.record(us);
                if let Some(m) = lease.model_stats(&placed.upstream) {
                    m.latency.record(us);
                }
            } else {
                // The backend refused the request itself (its OpenAI error
                // body goes to the client as it came).
                pool.stats.failed(sluice_backends::Cause::Status4xx);
                ctx.stats.refusal(status);
            }
            drop(lease);
            if let Some(h) = hop {
                let outcome = if status.is_success() {
                    0
                } else {
                    status.as_u16()
                };
                h.finish(outcome, &ctx.spans);
            }
            Chunks::one(b)
        }
        sluice_backends::Body::Stream(incoming) => {
            Stats::add(&ctx.stats.openai_streams, 1);
            let (tx, rx) = tokio::sync::mpsc::channel(STREAM_CHUNKS_QUEUED_MAX);
            let model = placed.upstream.clone();
            let deadline = call.deadline;
            let spans = Arc::clone(&ctx.spans);
            tokio::spawn(async move {
                let ended =
                    sluice_backends::relay::relay(lease, sent, incoming, tx, &model, deadline)
                        .await;
                if let Some(h) = hop {
                    // A stream cut or timed out ends as a gateway error.
                    let outcome = match ended {
                        sluice_backends::relay::Ended::Done => 0,
                        sluice_backends::relay::Ended::Cancelled => 499,
                        sluice_backends::relay::Ended::Failed(_) => 502,
                    };
                    h.finish(outcome, &spans);
                }
            });
            Chunks::live(rx)
        }
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    if let Some(ct) = content_type {
        r.headers_mut().insert(http::header::CONTENT_TYPE, ct);
    }
    if streamed {
        r.headers_mut().insert(
            http::header::CACHE_CONTROL,
            http::HeaderValue::from_static("no-cache"),
        );
    }
    // Where the request went: the pool, the route and the version.
    for (name, v) in [
        ("x-sluice-backend", &pool_name),
        ("x-sluice-route", &placed.route),
        ("x-sluice-model-version", &placed.version),
    ] {
        if let Ok(v) = http::HeaderValue::from_str(v) {
            r.headers_mut().insert(name, v);
        }
    }
    r
}

/// `GET /v1/models`: the models of kind `backend` the tenant may use.
fn models(
    tables: &sluice_engine::tables::Tables,
    tenant: &crate::semantic::Tenant,
) -> Response<Chunks> {
    let row = tables.tenant(tenant.id);
    let mut seen = std::collections::BTreeSet::new();
    let data: Vec<_> = tables
        .models
        .entries()
        .iter()
        .filter(|m| m.kind == ModelKind::Backend)
        .filter(|m| !tables.auth.required || row.is_some_and(|t| t.allows_model(&m.name)))
        .filter(|m| seen.insert(m.name.clone()))
        .map(|m| {
            serde_json::json!({
                "id": m.name,
                "object": "model",
                "created": 0,
                "owned_by": "sluice",
            })
        })
        .collect();
    crate::http::json(
        StatusCode::OK,
        &serde_json::json!({ "object": "list", "data": data }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(route("/v1/chat/completions"), Some(Op::Chat));
        assert_eq!(route("/v1/completions/"), Some(Op::Completions));
        assert_eq!(route("/v1/embeddings"), Some(Op::Embeddings));
        assert_eq!(route("/v1/models"), Some(Op::Models));
        assert_eq!(route("/v1/models/x"), None);
        assert_eq!(route("/v2/models"), None);
    }

    #[test]
    fn malformed_json_names_its_place() {
        let e = request::parse(b"{\"model\": \"m\",\n  \"stream\": tru }").unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(e.message.contains("line 2 column"), "{}", e.message);
        assert!(request::parse(b"[1]").is_err());
    }
}
