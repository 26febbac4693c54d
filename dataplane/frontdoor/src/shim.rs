// TEMPORARY until h/models merges: the types of sluice_engine::meta.
#![allow(missing_docs, dead_code)]
use std::sync::Arc;
#[derive(Debug, Clone)]
pub struct ModelMeta { pub name: String, pub versions: Vec<VersionMeta> }
#[derive(Debug, Clone)]
pub struct VersionMeta { pub version: String, pub platform: &'static str, pub inputs: Vec<TensorMeta>, pub optional_inputs: Vec<TensorMeta>, pub outputs: Vec<TensorMeta>, pub batchable: bool }
#[derive(Debug, Clone)]
pub struct TensorMeta { pub name: String, pub datatype: &'static str, pub shape: Vec<i64> }
#[derive(Debug, Clone, Copy)]
pub struct BatchPolicy { pub max: u32, pub delay_us: u32 }
impl BatchPolicy { pub fn of(_m: &sluice_engine::tables::ModelEntry, _s: &sluice_engine::tables::Shard) -> BatchPolicy { BatchPolicy { max: 1, delay_us: 0 } } }
pub type MetaFn = Arc<dyn Fn(&str) -> Result<ModelMeta, sluice_engine::EngineError> + Send + Sync>;
