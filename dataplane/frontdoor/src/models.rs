//! Model metadata, readiness and Triton's model configuration, from the
//! engine's loaded sessions (`sluice_engine::meta`) and tables, for HTTP
//! and gRPC alike.

use sluice_engine::EngineError;
use sluice_engine::meta::{MetaFn, ModelMeta, TensorMeta, VersionMeta};
use sluice_engine::tables::BatchPolicy;
use sluice_wire::{DType, ErrorCode};

use crate::dtype;
use crate::errors::Refusal;
use crate::semantic::{self, Headers};

/// The protocol extensions this server supports (`GET /v2`).
pub const EXTENSIONS: &[&str] = &[
    "binary_tensor_data",
    "model_configuration",
    "sluice_semantic_headers",
    "generate",
];

/// Server name in `GET /v2` and ServerMetadata.
pub const SERVER_NAME: &str = "sluice";

/// Model metadata through the engine.
pub struct Meta {
    f: MetaFn,
}

impl Meta {
    /// Wraps the engine's lookup.
    pub fn new(f: MetaFn) -> Meta {
        Meta { f }
    }

    /// Every loaded version of `name`.
    pub fn get(&self, name: &str) -> Result<ModelMeta, Refusal> {
        (self.f)(name).map_err(|e| match e {
            EngineError::NotFound(_) => Refusal::code(ErrorCode::UnknownModel, "unknown model"),
            e => Refusal::code(ErrorCode::Internal, e.to_string()),
        })
    }
}

/// What a model endpoint found.
pub struct Found {
    /// All versions.
    pub meta: ModelMeta,
    /// The one asked for (the first loaded when none was named).
    pub index: usize,
    /// Its batching, as Triton's config states it.
    pub batch: Option<BatchPolicy>,
}

impl Found {
    /// The chosen version.
    pub fn version(&self) -> &VersionMeta {
        &self.meta.versions[self.index]
    }
}

/// Looks a model (and version or alias) up for a metadata request;
/// checks the tenant may use it when authentication is on.
pub fn find(
    meta: &Meta,
    env: &semantic::Env<'_>,
    h: &dyn Headers,
    call: &semantic::Call<'_>,
    name: &str,
    version: &str,
) -> Result<Found, Refusal> {
    let tables = env.tables;
    if tables.auth.required {
        let a = semantic::authenticate(h, env, call)?;
        // These requests' bodies are not read (HTTP GET; a gRPC call's
        // message was checked by the gate): an HTTP signature must name
        // the empty body.
        if call.checked.is_none() {
            semantic::check_body(env.stats, a.body_sha256.as_deref(), [&[][..]])?;
        }
        let t = &a.tenant;
        let allowed = tables.tenant(t.id).is_some_and(|t| t.allows_model(name));
        if !allowed {
            // A model outside the tenant's list is answered as one that
            // does not exist (the engine's rule, auth/mod.rs).
            return Err(Refusal::code(
                ErrorCode::UnknownModel,
                sluice_engine::auth::msg::UNKNOWN_MODEL,
            ));
        }
    }
    let m = meta.get(name)?;
    let index = if version.is_empty() {
        0
    } else {
        let full = tables
            .models
            .resolve(name, version)
            .map(|e| e.version.clone())
            .ok_or_else(|| Refusal::code(ErrorCode::UnknownModel, "unknown model or version"))?;
        m.versions
            .iter()
            .position(|v| v.version == full)
            .ok_or_else(|| Refusal::code(ErrorCode::UnknownModel, "unknown model or version"))?
    };
    let v = &m.versions[index];
    let batch = tables.models.resolve(name, &v.version).and_then(|e| {
        let key = sluice_engine::route::RouteKey {
            model: name,
            version: &v.version,
            adapter: "",
            intent: "",
            tenant: "",
            json: None,
        };
        let r = tables.routes.find(&key)?;
        let shard = tables.shards.get(r.shard)?;
        let p = BatchPolicy::of(e, shard);
        (v.batchable && p.max > 1).then_some(p)
    });
    Ok(Found {
        meta: m,
        index,
        batch,
    })
}

/// A tensor's dtype from its metadata.
pub fn dtype_of(t: &TensorMeta) -> Option<DType> {
    DType::from_kserve(t.datatype)
}

/// `GET /v2`.
pub fn server_metadata() -> serde_json::Value {
    serde_json::json!({
        "name": SERVER_NAME,
        "version": env!("CARGO_PKG_VERSION"),
        "extensions": EXTENSIONS,
    })
}

fn tensors(ts: &[TensorMeta]) -> Vec<serde_json::Value> {
    ts.iter()
        .map(|t| serde_json::json!({ "name": t.name, "datatype": t.datatype, "shape": t.shape }))
        .collect()
}

/// `GET /v2/models/{m}[/versions/{v}]`.
pub fn metadata_json(f: &Found) -> serde_json::Value {
    let v = f.version();
    let mut inputs = tensors(&v.inputs);
    inputs.extend(tensors(&v.optional_inputs));
    serde_json::json!({
        "name": f.meta.name,
        "versions": f.meta.versions.iter().map(|v| v.version.as_str()).collect::<Vec<_>>(),
        "platform": v.platform,
        "inputs": inputs,
        "outputs": tensors(&v.outputs),
    })
}

/// Dimensions as Triton's config lists them: without the batch dimension
/// when the model batches.
pub fn config_dims(t: &TensorMeta, batching: bool) -> Vec<i64> {
    if batching && !t.shape.is_empty() {
        t.shape[1..].to_vec()
    } else {
        t.shape.clone()
    }
}

/// `GET /v2/models/{m}/config`: Triton's model configuration as JSON.
pub fn config_json(f: &Found, workers: usize) -> serde_json::Value {
    let v = f.version();
    let batching = f.batch.is_some();
    let io = |t: &TensorMeta, optional: bool, input: bool| {
        let mut j = serde_json::json!({
            "name": t.name,
            "data_type": dtype_of(t).map_or("TYPE_INVALID", dtype::triton_type_name),
            "dims": config_dims(t, batching),
        });
        if input && optional {
            j["optional"] = true.into();
        }
        j
    };
    let mut input: Vec<_> = v.inputs.iter().map(|t| io(t, false, true)).collect();
    input.extend(v.optional_inputs.iter().map(|t| io(t, true, true)));
    let mut j = serde_json::json!({
        "name": f.meta.name,
        "platform": v.platform,
        "backend": if v.platform == "onnxruntime_onnx" { "onnxruntime" } else { "sluice" },
        "max_batch_size": f.batch.map_or(0, |b| b.max),
        "input": input,
        "output": v.outputs.iter().map(|t| io(t, false, false)).collect::<Vec<_>>(),
        "instance_group": [{ "name": f.meta.name, "kind": "KIND_CPU", "count": workers }],
        "version_policy": { "specific": { "versions": [v.version] } },
    });
    if let Some(b) = f.batch {
        j["dynamic_batching"] = serde_json::json!({
            "preferred_batch_size": [b.max],
            "max_queue_delay_microseconds": b.delay_us,
        });
    }
    j
}
