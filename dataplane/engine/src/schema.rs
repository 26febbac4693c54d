//! Schemas as the data plane sees them: looked up by id for validation and
//! by subject for in-band negotiation. The registry (compatibility rules,
//! REST API, storage) lives in the Go control plane, which pushes changes here.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sluice_validate::Reference;
use sluice_validate::avro::AvroSchema;
use sluice_validate::json::{CompileOptions, Draft, FormatMode, JsonSchema};
use sluice_validate::protobuf::ProtobufSchema;
use sluice_wire::{DType, Frame, SECTION_TENSOR_NAME, SchemaType};

use crate::config::JsonSchemaFormat;
use crate::vocab::Reject;
use sluice_wire::ErrorCode;

/// Limits on pushed schemas.
pub mod limits {
    /// Most schema versions held by the data plane.
    pub const SCHEMA_COUNT_MAX: usize = 65_536;
    /// Most tensors in a signature.
    pub const SIGNATURE_TENSORS_MAX: usize = sluice_wire::limits::TENSOR_COUNT_MAX;
    /// Deepest chain of references (a references b references c ...).
    pub const REFERENCE_DEPTH_MAX: usize = 16;
    /// Most schemas one schema may pull in through references.
    pub const REFERENCES_MAX: usize = 64;
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
    /// Other schemas this one uses (Confluent references), resolved against
    /// the same pushed set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<SchemaRefCfg>,
}

/// A reference from one schema to another version of a subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaRefCfg {
    /// The name the referring schema uses (import path, `$ref`, type name).
    pub name: String,
    /// Subject of the referenced schema.
    pub subject: String,
    /// Its version.
    pub version: u32,
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

/// What the hot path checks a request against, compiled once per push.
#[derive(Debug)]
enum Check {
    Tensor(CompiledSig),
    Json(JsonSchema),
    Avro(AvroSchema),
    Protobuf(ProtobufSchema),
    /// The registry accepted the schema but the data plane cannot compile
    /// it (an unsupported feature); requests naming it are refused rather
    /// than passed unchecked.
    Unenforceable(String),
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
    check: Arc<Check>,
    /// Hash of what the check was compiled from (see `fingerprint`).
    fingerprint: u64,
}

impl SchemaEntry {
    /// What of this schema the data plane does not enforce: the reason it
    /// could not be compiled, or JSON Schema keywords it skips. Empty when
    /// the whole schema is enforced.
    pub fn unenforced(&self) -> Vec<String> {
        match &*self.check {
            Check::Unenforceable(r) => vec![r.clone()],
            Check::Json(j) => j.unenforced().to_vec(),
            _ => Vec::new(),
        }
    }
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

fn compile_signature(s: &SchemaCfg) -> Result<CompiledSig, String> {
    let sig: Signature = serde_json::from_str(&s.schema)
        .map_err(|e| format!("schema {}: bad tensor signature: {e}", s.id))?;
    if sig.inputs.len() > limits::SIGNATURE_TENSORS_MAX {
        return Err(format!("schema {}: too many tensors", s.id));
    }
    let mut inputs = Vec::new();
    for i in &sig.inputs {
        let d = DType::parse(&i.dtype)
            .ok_or_else(|| format!("schema {}: unknown dtype {:?}", s.id, i.dtype))?;
        if i.shape.len() > sluice_wire::limits::RANK_MAX || i.shape.iter().any(|&d| d < -1) {
            return Err(format!("schema {}: bad shape for {:?}", s.id, i.name));
        }
        inputs.push((i.name.clone(), d, i.shape.clone()));
    }
    Ok(CompiledSig { inputs })
}

/// The texts of every schema `s` references, transitively, by the names the
/// referring schemas use. Bounded by `REFERENCE_DEPTH_MAX` and
/// `REFERENCES_MAX`.
fn resolve_refs<'a>(
    s: &'a SchemaCfg,
    by_key: &HashMap<(&'a str, u32), &'a SchemaCfg>,
) -> Result<Vec<(&'a str, &'a str)>, String> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    let mut stack: Vec<(&SchemaCfg, usize)> = vec![(s, 0)];
    while let Some((cur, depth)) = stack.pop() {
        for r in &cur.references {
            if out.iter().any(|(n, _)| *n == r.name) {
                continue;
            }
            if depth >= limits::REFERENCE_DEPTH_MAX || out.len() >= limits::REFERENCES_MAX {
                return Err(format!(
                    "references nest deeper than {}",
                    limits::REFERENCE_DEPTH_MAX
                ));
            }
            let target = by_key
                .get(&(r.subject.as_str(), r.version))
                .ok_or_else(|| {
                    format!(
                        "reference {:?}: {} version {} not pushed",
                        r.name, r.subject, r.version
                    )
                })?;
            out.push((r.name.as_str(), target.schema.as_str()));
            stack.push((target, depth + 1));
        }
    }
    Ok(out)
}

/// What a compiled check depends on: type, text, state and the texts of
/// its resolved references.
fn fingerprint(
    s: &SchemaCfg,
    by_key: &HashMap<(&str, u32), &SchemaCfg>,
    format: JsonSchemaFormat,
) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&s.schema_type, &s.schema, s.retired).hash(&mut h);
    (format == JsonSchemaFormat::Assertion).hash(&mut h);
    match resolve_refs(s, by_key) {
        Ok(refs) => refs.hash(&mut h),
        Err(e) => e.hash(&mut h),
    }
    h.finish()
}

/// How the engine reads JSON schemas: a schema without `$schema` is
/// draft-07 (as Confluent Schema Registry reads it), `format` as configured.
pub fn json_options(format: JsonSchemaFormat) -> CompileOptions {
    CompileOptions {
        default_draft: Draft::Draft7,
        format: match format {
            JsonSchemaFormat::Annotation => FormatMode::Annotation,
            JsonSchemaFormat::Assertion => FormatMode::Assertion,
        },
    }
}

fn compile_structured(
    t: SchemaType,
    s: &SchemaCfg,
    by_key: &HashMap<(&str, u32), &SchemaCfg>,
    format: JsonSchemaFormat,
) -> Check {
    let refs = match resolve_refs(s, by_key) {
        Ok(r) => r,
        Err(e) => return Check::Unenforceable(e),
    };
    let refs: Vec<Reference<'_>> = refs
        .iter()
        .map(|&(name, schema)| Reference { name, schema })
        .collect();
    let r = match t {
        SchemaType::Json => {
            JsonSchema::compile_with(&s.schema, &refs, &json_options(format)).map(Check::Json)
        }
        SchemaType::Avro => AvroSchema::compile(&s.schema, &refs).map(Check::Avro),
        SchemaType::Protobuf => {
            ProtobufSchema::compile(&s.schema, &refs, None).map(Check::Protobuf)
        }
        SchemaType::Tensor => unreachable!("tensor signatures compile elsewhere"),
    };
    r.unwrap_or_else(|e| Check::Unenforceable(e.to_string()))
}

impl SchemaTable {
    /// Compiles pushed schemas. A tensor signature that does not parse is
    /// refused (the registry checks nothing about it); a structured schema
    /// the data plane cannot compile is kept and refuses its requests.
    pub fn build(list: &[SchemaCfg], ttl_ms: u32) -> Result<SchemaTable, String> {
        SchemaTable::build_reusing(
            list,
            ttl_ms,
            &SchemaTable::default(),
            JsonSchemaFormat::default(),
        )
    }

    /// [`SchemaTable::build`], reusing what `prev` compiled for versions
    /// whose type, text, references and state are unchanged: a push
    /// carries the whole set, and compiling a Protobuf schema takes
    /// milliseconds, so a new version should cost only itself. `format`:
    /// what JSON Schema `format` does (`[engine] json_schema_format`).
    pub fn build_reusing(
        list: &[SchemaCfg],
        ttl_ms: u32,
        prev: &SchemaTable,
        format: JsonSchemaFormat,
    ) -> Result<SchemaTable, String> {
        if list.len() > limits::SCHEMA_COUNT_MAX {
            return Err(format!("at most {} schemas", limits::SCHEMA_COUNT_MAX));
        }
        let mut t = SchemaTable {
            ttl_ms,
            ..SchemaTable::default()
        };
        let by_key: HashMap<(&str, u32), &SchemaCfg> = list
            .iter()
            .map(|s| ((s.subject.as_str(), s.version), s))
            .collect();
        let prev_by_fp: HashMap<u64, &SchemaEntry> =
            prev.entries.iter().map(|e| (e.fingerprint, e)).collect();
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
            let fingerprint = fingerprint(s, &by_key, format);
            let before = prev_by_fp.get(&fingerprint);
            let reused = before
                .filter(|e| *e.text == *s.schema.as_bytes())
                .map(|e| e.check.clone());
            let check = if let Some(c) = reused {
                c
            } else if schema_type == SchemaType::Tensor {
                Arc::new(Check::Tensor(compile_signature(s)?))
            } else if s.retired {
                // Never checked against: refused before its check is read.
                Arc::new(Check::Unenforceable("retired".into()))
            } else {
                Arc::new(compile_structured(schema_type, s, &by_key, format))
            };
            if let Check::Unenforceable(why) = &*check {
                // Warn once per schema, not on every push.
                if !s.retired && before.is_none() {
                    log::warn!(
                        "schema {} ({} v{}): not enforceable on the data plane, its requests are refused: {why}",
                        s.id,
                        s.subject,
                        s.version
                    );
                }
            }
            let idx = t.entries.len();
            t.entries.push(SchemaEntry {
                id: s.id,
                subject: s.subject.clone(),
                version: s.version,
                schema_type,
                text: Arc::from(s.schema.as_bytes()),
                retired: s.retired,
                check,
                fingerprint,
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

    /// Every live schema version with something the data plane does not
    /// enforce, for status and logs.
    pub fn unenforced(&self) -> Vec<(u32, u32, Vec<String>)> {
        self.entries
            .iter()
            .filter(|e| !e.retired)
            .map(|e| (e.id, e.version, e.unenforced()))
            .filter(|(_, _, u)| !u.is_empty())
            .collect()
    }

    /// Answers a negotiation: the latest live version, or the hinted one.
    pub fn negotiate(&self, subject: &str, version_hint: u32) -> Option<&SchemaEntry> {
        self.negotiate_index(subject, version_hint)
            .map(|i| &self.entries[i])
    }

    /// [`SchemaTable::negotiate`] as an index for [`SchemaTable::entry`]:
    /// what a worker carries from classifying a negotiation to answering it.
    pub fn negotiate_index(&self, subject: &str, version_hint: u32) -> Option<usize> {
        let v = self.by_subject.get(subject)?;
        let mut live = v.iter().copied().filter(|&i| !self.entries[i].retired);
        if version_hint == 0 {
            live.next_back()
        } else {
            live.into_iter()
                .find(|&i| self.entries[i].version == version_hint)
        }
    }

    /// The live versions of a subject: (version, id, format), by version.
    /// Control side (allocates).
    pub fn versions(&self, subject: &str) -> Vec<(u32, u32, SchemaType)> {
        self.by_subject.get(subject).map_or_else(Vec::new, |v| {
            v.iter()
                .map(|&i| &self.entries[i])
                .filter(|e| !e.retired)
                .map(|e| (e.version, e.id, e.schema_type))
                .collect()
        })
    }

    /// The entry at an index from [`SchemaTable::negotiate_index`].
    pub fn entry(&self, index: usize) -> Option<&SchemaEntry> {
        self.entries.get(index)
    }

    /// Validates a request that names a schema: its tensor table against a
    /// tensor signature (O(tensors), independent of the payload size), or
    /// its structured section against a JSON, Avro or Protobuf schema
    /// (O(section length)). Returns the section when it is validated JSON,
    /// for content routing. Never allocates.
    pub fn validate<'f>(&self, req: &'f Frame<&[u8]>) -> Result<Option<&'f [u8]>, Reject> {
        let e = self.lookup(req)?;
        SchemaTable::validate_with(e, req)
    }

    /// The live schema version a request names (version 0: the newest live
    /// version of its id).
    pub fn lookup(&self, req: &Frame<&[u8]>) -> Result<&SchemaEntry, Reject> {
        let unknown = Reject::new(ErrorCode::UnknownSchema, crate::vocab::msg::UNKNOWN_SCHEMA);
        let ids = self.by_id.get(&req.schema_id()).ok_or(unknown)?;
        let v = req.schema_version();
        ids.iter()
            .rev()
            .map(|&i| &self.entries[i])
            .find(|e| !e.retired && (v == 0 || e.version == v))
            .ok_or(unknown)
    }

    /// Validates a JSON document (an OpenAI request body, which is no
    /// frame) against the live JSON Schema `id` names at `version` (0: the
    /// newest live version).
    pub fn validate_json(&self, id: u32, version: u32, doc: &[u8]) -> Result<(), Reject> {
        let unknown = Reject::new(ErrorCode::UnknownSchema, crate::vocab::msg::UNKNOWN_SCHEMA);
        let ids = self.by_id.get(&id).ok_or(unknown)?;
        let e = ids
            .iter()
            .rev()
            .map(|&i| &self.entries[i])
            .find(|e| !e.retired && (version == 0 || e.version == version))
            .ok_or(unknown)?;
        let mismatch = |m| Reject::new(ErrorCode::SchemaMismatch, m);
        match &*e.check {
            Check::Json(j) => j.validate(doc).map_err(|i| mismatch(i.message)),
            Check::Unenforceable(_) => Err(mismatch(
                "the data plane cannot enforce this schema; see the appliance's status",
            )),
            _ => Err(mismatch(
                "this schema is not a JSON Schema: a JSON body cannot be checked against it",
            )),
        }
    }

    /// [`SchemaTable::validate`] against an entry [`SchemaTable::lookup`]
    /// found.
    pub fn validate_with<'f>(
        e: &SchemaEntry,
        req: &'f Frame<&[u8]>,
    ) -> Result<Option<&'f [u8]>, Reject> {
        let mismatch = |m| Reject::new(ErrorCode::SchemaMismatch, m);
        let section = || -> Result<&'f [u8], Reject> {
            let d = req.tensor(SECTION_TENSOR_NAME).ok_or(mismatch(
                "the schema is structured but the request has no $section",
            ))?;
            if d.dtype != DType::U8 || d.dims().len() != 1 {
                return Err(mismatch("$section must be a rank-1 uint8 tensor"));
            }
            Ok(req.tensor_data(&d))
        };
        let invalid = |i: sluice_validate::Invalid| mismatch(i.message);
        match &*e.check {
            Check::Tensor(sig) => check_signature(sig, req).map(|()| None),
            Check::Json(j) => {
                let b = section()?;
                j.validate(b).map_err(invalid)?;
                Ok(Some(b))
            }
            Check::Avro(a) => a.validate(section()?).map_err(invalid).map(|()| None),
            Check::Protobuf(p) => p.validate(section()?).map_err(invalid).map(|()| None),
            Check::Unenforceable(_) => Err(mismatch(
                "the data plane cannot enforce this schema; see the appliance's status",
            )),
        }
    }
}

fn check_signature(sig: &CompiledSig, req: &Frame<&[u8]>) -> Result<(), Reject> {
    let mismatch = |m| Reject::new(ErrorCode::SchemaMismatch, m);
    // A section may ride along; the signature describes the model inputs.
    let inputs = req
        .tensors()
        .filter(|t| t.name != SECTION_TENSOR_NAME)
        .count();
    if inputs != sig.inputs.len() {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(id: u32, version: u32, text: &str) -> SchemaCfg {
        SchemaCfg {
            id,
            subject: "s".into(),
            version,
            schema_type: "PROTOBUF".into(),
            schema: text.into(),
            retired: false,
            references: Vec::new(),
        }
    }

    fn json(id: u32, text: &str) -> SchemaCfg {
        SchemaCfg {
            schema_type: "JSON".into(),
            ..cfg(id, 1, text)
        }
    }

    fn check(t: &SchemaTable, k: usize) -> &JsonSchema {
        match &*t.entries[k].check {
            Check::Json(j) => j,
            other => panic!("not compiled as JSON: {other:?}"),
        }
    }

    #[test]
    fn json_schemas_are_draft7_by_default_and_format_follows_the_config() {
        // A Confluent draft-07 schema without $schema: array-form items is
        // the tuple form, not a refusal.
        let tuple = json(
            1,
            r#"{"items":[{"type":"string"}],"additionalItems":false}"#,
        );
        let dated = json(2, r#"{"type":"string","format":"date"}"#);
        let opted = json(
            3,
            r#"{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"string","pattern":"^[a-z]+$"}"#,
        );
        let list = [tuple, dated, opted];
        let t = SchemaTable::build(&list, 1000).unwrap();
        assert!(check(&t, 0).validate(br#"["a"]"#).is_ok());
        assert!(check(&t, 0).validate(br#"["a","b"]"#).is_err());
        // format is an annotation by default, reported as not enforced.
        assert!(check(&t, 1).validate(br#""not a date""#).is_ok());
        assert_eq!(
            t.unenforced(),
            [(
                2,
                1,
                vec!["format \"date\" (annotation only: not asserted) at #".to_string()]
            )]
        );
        assert!(check(&t, 2).validate(br#""abc""#).is_ok());
        assert!(check(&t, 2).validate(br#""ABC""#).is_err());
        // With `json_schema_format = "assertion"` it asserts, and the
        // changed option recompiles (the fingerprint covers it).
        let a = SchemaTable::build_reusing(&list, 1000, &t, JsonSchemaFormat::Assertion).unwrap();
        assert!(!Arc::ptr_eq(&t.entries[1].check, &a.entries[1].check));
        assert!(check(&a, 1).validate(br#""not a date""#).is_err());
        assert!(check(&a, 1).validate(br#""2024-02-29""#).is_ok());
        assert!(a.unenforced().is_empty());
    }

    #[test]
    fn a_push_recompiles_only_what_changed() {
        let a = cfg(1, 1, "syntax = \"proto3\";\nmessage A { string x = 1; }\n");
        let b = cfg(2, 2, "syntax = \"proto3\";\nmessage B { int32 y = 1; }\n");
        let t1 = SchemaTable::build(std::slice::from_ref(&a), 1000).unwrap();
        let t2 = SchemaTable::build_reusing(&[a.clone(), b.clone()], 1000, &t1, Default::default())
            .unwrap();
        assert!(Arc::ptr_eq(&t1.entries[0].check, &t2.entries[0].check));
        assert!(matches!(*t2.entries[1].check, Check::Protobuf(_)));
        // A changed text, or the same text retired, is compiled anew.
        let mut a2 = a.clone();
        a2.schema.push_str("message C { bool z = 1; }\n");
        let t3 =
            SchemaTable::build_reusing(&[a2, b.clone()], 1000, &t2, Default::default()).unwrap();
        assert!(!Arc::ptr_eq(&t2.entries[0].check, &t3.entries[0].check));
        assert!(Arc::ptr_eq(&t2.entries[1].check, &t3.entries[1].check));
        let mut gone = b;
        gone.retired = true;
        let t4 = SchemaTable::build_reusing(&[a, gone], 1000, &t3, Default::default()).unwrap();
        assert!(matches!(*t4.entries[1].check, Check::Unenforceable(_)));
    }
}
