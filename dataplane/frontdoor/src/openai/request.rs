//! An OpenAI request read and placed: its credentials (before the body is
//! read), its body (within `body_bytes_max`: a larger declared length is
//! refused 413 before a byte is read), its model and version (the header,
//! or `[openai].default_versions`), the tenant's rights, and its route and
//! shard, found by the engine's own route table, like every other request.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use sluice_engine::config::ModelKind;
use sluice_engine::route::{RouteFound, RouteKey};
use sluice_engine::tables::Tables;

use super::errors::ApiError;
use crate::ctx::{Ctx, Stats};
use crate::semantic::{self, Headers};

/// What routing found.
#[derive(Debug)]
pub struct Placed {
    /// The model as requested.
    pub model: String,
    /// Its full version.
    pub version: String,
    /// The name the backends serve it as (a LoRA adapter's id when one is
    /// named: OpenAI servers take adapters in the `model` field).
    pub upstream: String,
    /// The route's name.
    pub route: String,
    /// The shard's name.
    pub shard: String,
    /// Its index in the tables.
    pub shard_index: usize,
    /// The shard's labels, matched against the pools'.
    pub labels: std::collections::BTreeMap<String, String>,
    /// `X-AI-Timeout`, if sent.
    pub timeout: Option<Duration>,
    /// The request asks for an event stream.
    pub stream: bool,
}

/// The body whole, as one buffer (joined when it came in several chunks:
/// one copy, counted).
pub fn join(stats: &Stats, chunks: Vec<Bytes>, len: usize) -> Bytes {
    if chunks.len() == 1 {
        return chunks.into_iter().next().unwrap_or_default();
    }
    Stats::add(&stats.openai_bodies_joined, 1);
    let mut v = Vec::with_capacity(len);
    for c in &chunks {
        v.extend_from_slice(c);
    }
    Bytes::from(v)
}

/// Parses the body as a JSON object; a malformed one names its position.
pub fn parse(body: &[u8]) -> Result<serde_json::Map<String, serde_json::Value>, ApiError> {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Object(m)) => Ok(m),
        Ok(_) => Err(ApiError::bad("the request body must be a JSON object")),
        Err(e) => Err(ApiError::bad(format!(
            "malformed JSON at line {} column {}: {e}",
            e.line(),
            e.column()
        ))
        .code("malformed_json")),
    }
}

fn text<'a>(h: &'a HeaderMap, name: &str, max: usize) -> Result<&'a str, ApiError> {
    let v = h.text(name).map_err(ApiError::from)?.unwrap_or("").trim();
    if v.len() > max {
        return Err(ApiError::bad(format!("{name}: longer than {max} bytes")));
    }
    Ok(v)
}

/// Resolves the model, checks the tenant's rights and finds the route.
pub fn place(
    ctx: &Ctx,
    tables: &Tables,
    headers: &HeaderMap,
    tenant: &semantic::Tenant,
    body: &serde_json::Map<String, serde_json::Value>,
    raw: &[u8],
) -> Result<Placed, ApiError> {
    use sluice_wire::limits::{ADAPTER_LEN_MAX, INTENT_LEN_MAX, MODEL_VERSION_LEN_MAX};
    let model = match body.get("model") {
        Some(serde_json::Value::String(m)) if !m.is_empty() => m.clone(),
        Some(_) => return Err(ApiError::bad("model must be a non-empty string").param("model")),
        None => return Err(ApiError::bad("model is required").param("model")),
    };
    let stream = match body.get("stream") {
        None | Some(serde_json::Value::Null) => false,
        Some(serde_json::Value::Bool(b)) => *b,
        Some(_) => return Err(ApiError::bad("stream must be true or false").param("stream")),
    };
    let header_version = text(headers, "x-model-version", MODEL_VERSION_LEN_MAX)?;
    let version = if !header_version.is_empty() {
        header_version.to_owned()
    } else if let Some(v) = ctx.openai.default_versions.get(&model) {
        v.clone()
    } else {
        return Err(ApiError::bad(format!(
            "X-Model-Version is required for {model:?} (or name a default in [openai].default_versions)"
        ))
        .code("model_version_required"));
    };
    let auth = tables.auth.required;
    let not_found = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            format!("the model {model:?} (version {version:?}) does not exist or you do not have access to it"),
        )
        .param("model")
        .code("model_not_found")
    };
    let tenant_row = if auth { tables.tenant(tenant.id) } else { None };
    if auth && !tenant_row.is_some_and(|t| t.allows_model(&model)) {
        return Err(not_found());
    }
    let entry = tables
        .models
        .resolve(&model, &version)
        .ok_or_else(not_found)?;
    if entry.kind != ModelKind::Backend {
        return Err(ApiError::bad(format!(
            "{model:?} runs on this appliance's own cores: the OpenAI API serves models of kind \"backend\"; use /v2/models/{model}/infer"
        ))
        .param("model"));
    }
    let adapter = text(headers, "x-lora-adapter-id", ADAPTER_LEN_MAX)?;
    if !adapter.is_empty() && auth && !tenant_row.is_some_and(|t| t.allows_adapter(adapter)) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("unknown adapter {adapter:?}"),
        )
        .code("unknown_adapter"));
    }
    // A registered JSON Schema on the body, named as on every ingress.
    let schema_id = text(headers, "x-schema-id", 10)?;
    if !schema_id.is_empty() {
        let id: u32 = schema_id
            .parse()
            .map_err(|_| ApiError::bad("X-Schema-Id: not a schema id"))?;
        let version: u32 = match text(headers, "x-schema-version", 10)? {
            "" => 0,
            v => v
                .parse()
                .map_err(|_| ApiError::bad("X-Schema-Version: not a version"))?,
        };
        tables
            .schemas
            .validate_json(id, version, raw)
            .map_err(|r| ApiError::bad(r.message).code(r.code.as_str()))?;
    }
    let intent = text(headers, "x-ai-intent", INTENT_LEN_MAX)?;
    let timeout = match text(headers, "x-ai-timeout", 32)? {
        "" => None,
        t => Some(semantic::parse_duration(t).ok_or_else(|| {
            ApiError::bad(format!(
                "X-AI-Timeout: {t:?} is not a duration like 8s or 250ms (at most 1h)"
            ))
        })?),
    };
    let key = RouteKey {
        model: &model,
        version: &entry.version,
        adapter,
        intent,
        tenant: if auth { &tenant.name } else { "" },
        json: Some(raw),
    };
    let route = match tables.routes.first_allowed(&key, |r| {
        !auth || tenant_row.is_some_and(|t| t.allows_route(&r.name))
    }) {
        RouteFound::Route(r) => r,
        _ => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no route takes {model:?} version {version:?}"),
            )
            .code("no_route"));
        }
    };
    let shard = tables.shards.get(route.shard).ok_or_else(|| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the route's shard is gone",
        )
    })?;
    Ok(Placed {
        upstream: if adapter.is_empty() {
            entry.upstream.clone()
        } else {
            adapter.to_owned()
        },
        model,
        version: entry.version.clone(),
        route: route.name.clone(),
        shard: shard.name.clone(),
        shard_index: route.shard,
        labels: shard.labels.clone(),
        timeout,
        stream,
    })
}
