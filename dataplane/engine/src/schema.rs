//! Schemas as the data plane sees them: looked up by id for validation and
//! by subject for in-band negotiation. The registry (compatibility rules,
//! REST API, storage) lives in the Go control plane, which pushes changes here.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sluice_wire::{DType, Frame, SchemaType};

use crate::handler::Reject;
use sluice_wire::ErrorCode;

/// Limits on pushed schemas.
pub mod limits {
    /// Most schema versions held by the data plane.
    pub const SCHEMA_COUNT_MAX: usize = 65_536;
    /// Most tensors in a signature.
    pub const SIGNATURE_TENSORS_MAX: usize = sluice_wire::limits::TENSOR_COUNT_MAX;
}

/// One schema version, as pushed by the control plane.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchemaCfg {
    /// Global id.
    pub id: u32,
    /// Subject.
    pub subject: String,
    /// Version within the subject.
    pub version: u32,
    /// "AVRO", "PROTOBUF", "JSON" or "TENSOR".
    #[serde(rename = "schemaType", alias = "schema_type")]
    pub schema_type: String,
    /// Schema text.
    pub schema: String,
    /// Retired versions answer unknown_schema.
    #[serde(default)]
    pub retired: bool,
}

/// One tensor of a signature; -1 is a dynamic dimension.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorSig {
    /// Name.
    pub name: String,
    /// Dtype name ("f32", ...).
    pub dtype: String,
    /// Shape.
    pub shape: Vec<i64>,
}

/// A tensor signature schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signature {
    /// Inputs.
    pub inputs: Vec<TensorSig>,
    /// Outputs.
    #[serde(default)]
    pub outputs: Vec<TensorSig>,
}

#[derive(Debug, Clone)]
struct CompiledSig {
    inputs: Vec<(String, DType, Vec<i64>)>,
}

/// A compiled schema entry.
#[derive(Debug, Clone)]
pub struct SchemaEntry {
    /// Global id.
    pub id: u32,
    /// Subject.
    pub subject: String,
    /// Version.
    pub version: u32,
    /// Format.
    pub schema_type: SchemaType,
    /// Schema text, shared with negotiation answers.
    pub text: Arc<[u8]>,
    /// Retired.
    pub retired: bool,
    sig: Option<CompiledSig>,
}

/// All schemas, indexed for the hot path.
#[derive(Debug, Clone, Default)]
pub struct SchemaTable {
    entries: Vec<SchemaEntry>,
    by_id: HashMap<u32, Vec<usize>>,
    /// subject -> indices sorted by version
    by_subject: HashMap<String, Vec<usize>>,
    /// Negotiation answers' time to live.
    pub ttl_ms: u32,
}

fn parse_type(t: &str) -> Option<SchemaType> {
    Some(match t {
        "AVRO" | "" => SchemaType::Avro,
        "PROTOBUF" => SchemaType::Protobuf,
        "JSON" => SchemaType::Json,
        "TENSOR" => SchemaType::Tensor,
        _ => return None,
    })
}

impl SchemaTable {
    /// Compiles pushed schemas. A tensor signature that does not parse is refused.
    pub fn build(list: &[SchemaCfg], ttl_ms: u32) -> Result<SchemaTable, String> {
        if list.len() > limits::SCHEMA_COUNT_MAX {
            return Err(format!("at most {} schemas", limits::SCHEMA_COUNT_MAX));
        }
        let mut t = SchemaTable {
            ttl_ms,
            ..SchemaTable::default()
        };
        for s in list {
            let schema_type = parse_type(&s.schema_type)
                .ok_or_else(|| format!("schema {}: unknown type {:?}", s.id, s.schema_type))?;
            if s.schema.len() > sluice_wire::limits::SCHEMA_LEN_MAX {
                return Err(format!(
                    "schema {}: longer than {} bytes",
                    s.id,
                    sluice_wire::limits::SCHEMA_LEN_MAX
                ));
            }
            let sig = if schema_type == SchemaType::Tensor {
                let sig: Signature = serde_json::from_str(&s.schema)
                    .map_err(|e| format!("schema {}: bad tensor signature: {e}", s.id))?;
                if sig.inputs.len() > limits::SIGNATURE_TENSORS_MAX {
                    return Err(format!("schema {}: too many tensors", s.id));
                }
                let mut inputs = Vec::new();
                for i in &sig.inputs {
                    let d = DType::parse(&i.dtype)
                        .ok_or_else(|| format!("schema {}: unknown dtype {:?}", s.id, i.dtype))?;
                    if i.shape.len() > sluice_wire::limits::RANK_MAX
                        || i.shape.iter().any(|&d| d < -1)
                    {
                        return Err(format!("schema {}: bad shape for {:?}", s.id, i.name));
                    }
                    inputs.push((i.name.clone(), d, i.shape.clone()));
                }
                Some(CompiledSig { inputs })
            } else {
                None
            };
            let idx = t.entries.len();
            t.entries.push(SchemaEntry {
                id: s.id,
                subject: s.subject.clone(),
                version: s.version,
                schema_type,
                text: Arc::from(s.schema.as_bytes()),
                retired: s.retired,
                sig,
            });
            t.by_id.entry(s.id).or_default().push(idx);
            t.by_subject.entry(s.subject.clone()).or_default().push(idx);
        }
        for v in t.by_subject.values_mut() {
            v.sort_by_key(|&i| t.entries[i].version);
        }
        Ok(t)
    }

    /// Number of schema versions.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Answers a negotiation: the latest live version, or the hinted one.
    pub fn negotiate(&self, subject: &str, version_hint: u32) -> Option<&SchemaEntry> {
        let v = self.by_subject.get(subject)?;
        let live = v.iter().map(|&i| &self.entries[i]).filter(|e| !e.retired);
        if version_hint == 0 {
            live.last()
        } else {
            live.into_iter().find(|e| e.version == version_hint)
        }
    }

    /// Validates a request that names a schema. O(tensors), independent of
    /// the payload size.
    pub fn validate(&self, req: &Frame<&[u8]>) -> Result<(), Reject> {
        let unknown = Reject::new(ErrorCode::UnknownSchema, "unknown or retired schema");
        let ids = self.by_id.get(&req.schema_id()).ok_or(unknown)?;
        let v = req.schema_version();
        let e = ids
            .iter()
            .map(|&i| &self.entries[i])
            .find(|e| !e.retired && (v == 0 || e.version == v))
            .ok_or(unknown)?;
        let Some(sig) = &e.sig else {
            // Structured payload sections are validated by the control plane's
            // registry; the data plane checks tensor signatures only.
            return Ok(());
        };
        let mismatch = |m| Reject::new(ErrorCode::SchemaMismatch, m);
        if req.tensor_count() != sig.inputs.len() {
            return Err(mismatch("tensor count differs from the schema"));
        }
        for (name, dtype, shape) in &sig.inputs {
            let t = req
                .tensor(name)
                .ok_or(mismatch("a tensor named by the schema is missing"))?;
            if t.dtype != *dtype {
                return Err(mismatch("tensor dtype differs from the schema"));
            }
            if t.dims().len() != shape.len() {
                return Err(mismatch("tensor rank differs from the schema"));
            }
            if t.dims()
                .iter()
                .zip(shape)
                .any(|(&d, &s)| s >= 0 && d != s as u64)
            {
                return Err(mismatch("tensor dimension differs from the schema"));
            }
        }
        Ok(())
    }
}
