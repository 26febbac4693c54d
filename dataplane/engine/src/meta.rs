//! Model metadata for the control plane and clients: every loaded version
//! of a model with its inputs and outputs (symbolic dimensions shown), the
//! platform, aliases, adapters and what the model file says about itself.
//!
//! Read from the model file on first ask (a session load, off the hot
//! path) and cached per file for the life of the process.

use std::collections::BTreeMap;
#[cfg(feature = "onnx")]
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
#[cfg(feature = "onnx")]
use std::sync::{Mutex, OnceLock};

use serde::Serialize;

use crate::config::{Config, ModelCfg, ModelKind};
use crate::engine::{Engine, EngineError};

/// Everything about one model name.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ModelMeta {
    /// Model name.
    pub name: String,
    /// Loaded versions, in config order.
    pub versions: Vec<VersionMeta>,
}

/// One loaded version.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct VersionMeta {
    /// Exact version.
    pub version: String,
    /// Aliases that resolve to it.
    pub aliases: Vec<String>,
    /// Backend (`onnx`, `null`, `echo`).
    pub kind: ModelKind,
    /// KServe-style platform name (`onnxruntime_onnx` for ONNX models).
    pub platform: &'static str,
    /// LoRA adapter ids.
    pub adapters: Vec<String>,
    /// Inputs a request must send.
    pub inputs: Vec<TensorMeta>,
    /// Inputs with a default that a request may override.
    pub optional_inputs: Vec<TensorMeta>,
    /// Outputs, in model order.
    pub outputs: Vec<TensorMeta>,
    /// Producer named in the file (`pytorch`, `tf2onnx`, ...).
    pub producer: String,
    /// Graph name.
    pub graph: String,
    /// Model domain.
    pub domain: String,
    /// Doc string.
    pub description: String,
    /// The file's own `model_version` (0 when unset).
    pub model_version: i64,
    /// `metadata_props`.
    pub metadata: BTreeMap<String, String>,
    /// Whether requests can be stacked into one run (dimension 0 of every
    /// input and output declared with one symbol).
    pub batchable: bool,
    /// Why not, when not.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub batch_refusal: String,
    /// The model's own `batch_max` (else its shard's applies).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_max: Option<u32>,
    /// The model's own `batch_delay_us`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_delay_us: Option<u32>,
    /// A generative model's token streams (`[models.stream.generate]`):
    /// the front door opens one per generate request. Not part of the
    /// admin API's model document.
    #[serde(skip)]
    pub generate: Option<crate::config::GenerateCfg>,
}

/// One tensor of a signature.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TensorMeta {
    /// Name.
    pub name: String,
    /// KServe v2 datatype (`FP32`, `INT64`, ...).
    pub datatype: &'static str,
    /// Sluice dtype name (`f32`, `i64`, ...).
    pub dtype: &'static str,
    /// Shape, -1 for a dynamic dimension (KServe style).
    pub shape: Vec<i64>,
    /// Each dimension: its size, its symbol ("batch"), or null when dynamic
    /// and unnamed.
    pub dims: Vec<serde_json::Value>,
    /// Outputs: `in-place-preallocated` or `allocator-placed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<&'static str>,
}

#[cfg(feature = "onnx")]
fn tensor(t: &sluice_infer::TensorSig, placement: Option<&'static str>) -> TensorMeta {
    TensorMeta {
        name: t.name.clone(),
        datatype: t.dtype.kserve_name(),
        dtype: t.dtype.as_str(),
        shape: t.dims.iter().map(|&d| if d < 0 { -1 } else { d }).collect(),
        dims: t
            .dims
            .iter()
            .zip(&t.dim_names)
            .map(|(&d, n)| {
                if d >= 0 {
                    serde_json::Value::from(d)
                } else if n.is_empty() {
                    serde_json::Value::Null
                } else {
                    serde_json::Value::from(n.as_str())
                }
            })
            .collect(),
        placement,
    }
}

/// The signature part of a version, cached per model file.
#[derive(Debug, Clone, PartialEq)]
struct Described {
    inputs: Vec<TensorMeta>,
    optional_inputs: Vec<TensorMeta>,
    outputs: Vec<TensorMeta>,
    producer: String,
    graph: String,
    domain: String,
    description: String,
    model_version: i64,
    metadata: BTreeMap<String, String>,
    batch_refusal: Option<String>,
}

#[cfg(feature = "onnx")]
fn cache() -> &'static Mutex<HashMap<PathBuf, Described>> {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, Described>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

#[cfg(feature = "onnx")]
fn describe(cfg: &Config, path: PathBuf) -> Result<Described, EngineError> {
    if let Some(d) = cache().lock().unwrap_or_else(|p| p.into_inner()).get(&path) {
        return Ok(d.clone());
    }
    let configured = cfg.onnxruntime.library.as_deref().map(|p| cfg.resolve(p));
    let lib = sluice_infer::library_path(configured.as_deref())
        .ok_or_else(|| EngineError::Model("no ONNX Runtime library configured".into()))?;
    sluice_infer::init(&lib).map_err(|e| EngineError::Model(e.to_string()))?;
    let d = sluice_infer::describe(&path).map_err(|e| EngineError::Model(e.to_string()))?;
    let s = &d.signature;
    let described = Described {
        inputs: s.inputs.iter().map(|t| tensor(t, None)).collect(),
        optional_inputs: s.optional_inputs.iter().map(|t| tensor(t, None)).collect(),
        outputs: s
            .outputs
            .iter()
            .zip(&d.placements)
            .map(|(t, p)| tensor(t, Some(p.as_str())))
            .collect(),
        producer: d.info.producer,
        graph: d.info.graph_name,
        domain: d.info.domain,
        description: d.info.description,
        model_version: d.info.model_version,
        metadata: d.info.custom.into_iter().collect(),
        batch_refusal: d.batchable.err(),
    };
    cache()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(path, described.clone());
    Ok(described)
}

#[cfg(not(feature = "onnx"))]
fn describe(_cfg: &Config, _path: PathBuf) -> Result<Described, EngineError> {
    Err(EngineError::Unsupported(
        "this binary was built without the `onnx` feature".into(),
    ))
}

impl Engine {
    /// Metadata of every loaded version of model `name` (or of the version
    /// an alias of that name points to). `NotFound` when none is loaded.
    pub fn model_meta(&self, name: &str) -> Result<ModelMeta, EngineError> {
        meta_of(self.config(), &self.live().models, name)
    }

    /// A metadata lookup that outlives this borrow (the front door's
    /// threads call it): it reads the live model list under the control
    /// lock, then describes the files without it.
    pub fn meta_fn(&self) -> MetaFn {
        let control = Arc::clone(&self.control);
        let cfg = self.config().clone();
        Arc::new(move |name: &str| {
            let models: Vec<ModelCfg> = control
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .live
                .models
                .iter()
                .filter(|m| m.name == name)
                .cloned()
                .collect();
            meta_of(&cfg, &models, name)
        })
    }
}

/// Model metadata from any thread (see [`Engine::meta_fn`]).
pub type MetaFn = Arc<dyn Fn(&str) -> Result<ModelMeta, EngineError> + Send + Sync>;

/// Metadata of model `name` among `models` (a live model list).
fn meta_of(cfg: &Config, models: &[ModelCfg], name: &str) -> Result<ModelMeta, EngineError> {
    {
        let mut versions = Vec::new();
        for m in models.iter().filter(|m| m.name == name) {
            let (platform, d) = match m.kind {
                ModelKind::Onnx => {
                    let path =
                        m.path.as_deref().map(|p| cfg.resolve(p)).ok_or_else(|| {
                            EngineError::Model("an onnx model needs a path".into())
                        })?;
                    ("onnxruntime_onnx", Some(describe(cfg, path)?))
                }
                ModelKind::Null => ("sluice_null", None),
                ModelKind::Echo => ("sluice_echo", None),
                ModelKind::Backend => ("sluice_backend", None),
            };
            let d = d.unwrap_or(Described {
                inputs: vec![],
                optional_inputs: vec![],
                outputs: vec![],
                producer: String::new(),
                graph: String::new(),
                domain: String::new(),
                description: String::new(),
                model_version: 0,
                metadata: BTreeMap::new(),
                batch_refusal: Some(format!("{} models do not batch", platform)),
            });
            versions.push(VersionMeta {
                version: m.version.clone(),
                aliases: m.aliases.clone(),
                kind: m.kind,
                platform,
                adapters: m.adapters.iter().map(|a| a.id.clone()).collect(),
                inputs: d.inputs,
                optional_inputs: d.optional_inputs,
                outputs: d.outputs,
                producer: d.producer,
                graph: d.graph,
                domain: d.domain,
                description: d.description,
                model_version: d.model_version,
                metadata: d.metadata,
                batchable: d.batch_refusal.is_none(),
                batch_refusal: d.batch_refusal.unwrap_or_default(),
                batch_max: m.batch_max,
                batch_delay_us: m.batch_delay_us,
                generate: m.stream.as_ref().and_then(|s| s.generate.clone()),
            });
        }
        if versions.is_empty() {
            return Err(EngineError::NotFound(format!("no model named {name:?}")));
        }
        Ok(ModelMeta {
            name: name.to_string(),
            versions,
        })
    }
}
