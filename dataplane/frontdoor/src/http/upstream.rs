//! KServe v2 inference for models of `kind = "backend"`: the request goes
//! to a `kserve-http` pool whose labels match its shard (Triton, KServe's
//! ModelServer, MLServer), its body as it came (JSON, or JSON followed by
//! binary tensor data: `Inference-Header-Content-Length` goes with it), on
//! the path `/v2/models/{upstream}/infer`; the answer comes back as sent.
//! Routing, tenants and deadlines are the same as for every request.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Method, Response, StatusCode};
use hyper::body::Incoming;
use sluice_engine::config::BackendProtocol;
use sluice_engine::route::{RouteFound, RouteKey};
use sluice_wire::ErrorCode;
use tonic::Code;

use super::body::Chunks;
use crate::ctx::{Ctx, Stats};
use crate::errors::Refusal;
use crate::semantic::Semantic;

fn failure(f: sluice_backends::Failure) -> Refusal {
    let grpc = match f.status.as_u16() {
        429 => Code::ResourceExhausted,
        504 => Code::DeadlineExceeded,
        _ => Code::Unavailable,
    };
    Refusal::other(f.status, grpc, f.message)
}

/// Forwards one inference request for a backend model.
pub async fn infer(
    ctx: &Arc<Ctx>,
    sem: Semantic,
    headers: HeaderMap,
    incoming: Incoming,
    upstream: String,
    version: String,
) -> Result<Response<Chunks>, Refusal> {
    let Some(backends) = ctx.backends.clone() else {
        return Err(Refusal::code(
            ErrorCode::NoRouteToShard,
            "this model is served by backends and none is configured",
        ));
    };
    let received = super::read_body(ctx, &headers, incoming).await?;
    crate::semantic::check_body(
        &ctx.stats,
        sem.body_sha256.as_deref(),
        received.chunks.iter().map(|c| &c[..]),
    )?;
    let raw = crate::openai::join_body(&ctx.stats, received.chunks, received.len);
    let json_len = headers
        .get(sluice_backends::dispatch::INFERENCE_HEADER)
        .map(|v| {
            v.to_str()
                .ok()
                .and_then(|s| s.parse::<usize>().ok())
                .filter(|&n| n <= raw.len())
                .ok_or_else(|| {
                    Refusal::bad("Inference-Header-Content-Length: not a length within the body")
                })
        })
        .transpose()?;
    let tables = ctx.tables();
    let auth = tables.auth.required;
    let row = if auth {
        tables.tenant(sem.tenant.id)
    } else {
        None
    };
    let key = RouteKey {
        model: &sem.model,
        version: &version,
        adapter: &sem.adapter,
        intent: &sem.intent,
        tenant: if auth { &sem.tenant.name } else { "" },
        json: Some(&raw[..json_len.unwrap_or(raw.len())]),
    };
    let route = match tables.routes.first_allowed(&key, |r| {
        !auth || row.is_some_and(|t| t.allows_route(&r.name))
    }) {
        RouteFound::Route(r) => r,
        _ => {
            return Err(Refusal::code(
                ErrorCode::NoRoute,
                "no route takes this request",
            ));
        }
    };
    let labels = tables
        .shards
        .get(route.shard)
        .map(|s| s.labels.clone())
        .unwrap_or_default();
    drop(tables);
    let pools = backends.serving(&labels, &upstream, BackendProtocol::KserveHttp);
    if pools.is_empty() {
        return Err(Refusal::other(
            StatusCode::SERVICE_UNAVAILABLE,
            Code::Unavailable,
            format!("no KServe v2 backend pool with the shard's labels serves {upstream:?} now"),
        ));
    }
    let mut out = HeaderMap::new();
    out.insert(
        http::header::CONTENT_TYPE,
        headers
            .get(http::header::CONTENT_TYPE)
            .cloned()
            .unwrap_or(http::HeaderValue::from_static("application/json")),
    );
    for name in [
        sluice_backends::dispatch::INFERENCE_HEADER,
        "traceparent",
        "tracestate",
    ] {
        if let Some(v) = headers.get(name) {
            out.insert(http::HeaderName::from_static(name), v.clone());
        }
    }
    let timeout = sem.timeout.unwrap_or(Duration::from_millis(u64::from(
        backends.pools[pools[0]].cfg.request_timeout_ms,
    )));
    let path = format!("/v2/models/{}/infer", percent_encode(&upstream));
    let call = sluice_backends::Call {
        method: Method::POST,
        path,
        body: raw,
        headers: out,
        model: upstream,
        stream: false,
        deadline: tokio::time::Instant::now() + timeout,
        answer_bytes_max: ctx.cfg.reply_bytes_max as usize,
    };
    let a = sluice_backends::send(&backends, &pools, &call)
        .await
        .map_err(failure)?;
    let sluice_backends::Body::Whole(body) = a.body else {
        return Err(Refusal::other(
            StatusCode::BAD_GATEWAY,
            Code::Unavailable,
            "the backend answered an inference with an event stream",
        ));
    };
    let pool = a.lease.pool();
    if a.status.is_success() {
        pool.stats
            .ok
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let us = a.sent.elapsed().as_micros() as u64;
        pool.stats.latency.record(us);
        if let Some(m) = a.lease.model_stats(&call.model) {
            m.latency.record(us);
        }
    } else {
        pool.stats.failed(sluice_backends::Cause::Status4xx);
        ctx.stats.refusal(a.status);
    }
    Stats::add(&ctx.stats.answered, 1);
    let mut r = Response::new(Chunks::one(body));
    *r.status_mut() = a.status;
    if let Some(ct) = a.content_type {
        r.headers_mut().insert(http::header::CONTENT_TYPE, ct);
    }
    if let Some(n) = a.json_len {
        r.headers_mut().insert(
            http::HeaderName::from_static(sluice_backends::dispatch::INFERENCE_HEADER),
            http::HeaderValue::from(n),
        );
    }
    if let Ok(v) = http::HeaderValue::from_str(&pool.cfg.name) {
        r.headers_mut().insert("x-sluice-backend", v);
    }
    Ok(r)
}

/// Percent-encodes a model name for a path segment.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
