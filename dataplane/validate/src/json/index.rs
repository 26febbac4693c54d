//! Control path, first phase: load the documents a schema needs (the root,
//! the references it names, bundled meta-schemas) and index them: every
//! schema resource (`$id`, a document root) with its URI, dialect and
//! vocabularies, every anchor, and the resource each subschema belongs to.
//! The compiler then resolves `$ref`s against this index, never against the
//! document root alone.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::draft::{self, Vocab};
use super::uri::{self, DEFAULT_BASE};
use super::{CompileOptions, Draft, SCHEMA_BYTES_MAX};
use crate::{CompileError, Reference};

/// Most documents one compile may load (root, references, meta-schemas).
pub const DOCUMENTS_MAX: usize = 256;
/// Longest chain of custom meta-schemas (`$schema` naming a schema whose
/// own `$schema` is custom, ...).
const META_CHAIN_MAX: usize = 4;

/// Keywords whose value is one subschema.
const SINGLE: &[&str] = &[
    "additionalItems",
    "additionalProperties",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
    "items",
];
/// Keywords whose value is an array of subschemas.
const ARRAYS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];
/// Keywords whose value maps names to subschemas.
const MAPS: &[&str] = &[
    "properties",
    "patternProperties",
    "definitions",
    "$defs",
    "dependentSchemas",
    "dependencies",
];

/// One loaded document.
pub(crate) struct Doc {
    /// Reference name ("" for the root, the URI for a bundled meta-schema).
    pub name: String,
    pub value: Value,
    /// A bundled meta-schema (not reported as unenforced).
    pub bundled: bool,
}

/// A schema resource: a document root or a subschema with an `$id`.
#[derive(Debug, Clone)]
pub(crate) struct Resource {
    /// Absolute URI, without fragment.
    pub uri: String,
    pub doc: usize,
    /// JSON pointer of the resource root in its document.
    pub ptr: String,
    pub draft: Draft,
    pub vocab: Vocab,
    /// 2019-09 `$recursiveAnchor: true` at the resource root.
    pub recursive_anchor: bool,
}

/// A plain-name fragment: `$anchor`, `$dynamicAnchor`, or a draft 4-7
/// `$id`/`id` of the form `#name`.
#[derive(Debug, Clone)]
pub(crate) struct Anchor {
    pub ptr: String,
    pub dynamic: bool,
}

pub(crate) struct Index {
    pub docs: Vec<Doc>,
    pub resources: Vec<Resource>,
    pub by_uri: HashMap<String, usize>,
    /// (resource, name) -> anchor.
    pub anchors: HashMap<(usize, String), Anchor>,
    /// Dynamic anchor name -> every (resource, pointer) declaring it.
    pub dynamic: HashMap<String, Vec<(usize, String)>>,
    /// (document, pointer) of every indexed subschema -> its resource.
    pub locs: HashMap<(usize, String), usize>,
    /// Reference names as written, for Confluent-style `$ref`s that name a
    /// reference literally.
    pub names: HashMap<String, usize>,
    /// Dialects of custom meta-schemas, by URI.
    dialects: HashMap<String, (Draft, Vocab)>,
    /// URIs (without fragment) that `$ref`s and `$schema`s asked for,
    /// with the reference as written.
    wanted: Vec<(String, String)>,
}

fn fail(what: impl std::fmt::Display) -> CompileError {
    CompileError(what.to_string())
}

/// Escapes a JSON pointer token (RFC 6901).
pub(crate) fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

fn parse(name: &str, text: &str) -> Result<Value, CompileError> {
    let what = if name.is_empty() {
        "schema".to_string()
    } else {
        format!("referenced schema {name:?}")
    };
    if text.len() > SCHEMA_BYTES_MAX {
        return Err(fail(format!(
            "{what} of {} bytes exceeds SCHEMA_BYTES_MAX ({SCHEMA_BYTES_MAX})",
            text.len()
        )));
    }
    serde_json::from_str(text).map_err(|e| fail(format!("{what} is not valid JSON: {e}")))
}

/// Every `$schema` string in `v` at an object that may carry one.
fn schema_uris<'v>(v: &'v Value, out: &mut Vec<&'v str>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(s)) = m.get("$schema") {
                out.push(s);
            }
            for x in m.values() {
                schema_uris(x, out);
            }
        }
        Value::Array(a) => {
            for x in a {
                schema_uris(x, out);
            }
        }
        _ => {}
    }
}

impl Index {
    pub(crate) fn build(
        text: &str,
        refs: &[Reference<'_>],
        options: &CompileOptions,
    ) -> Result<Index, CompileError> {
        let root = parse("", text)?;
        let mut ix = Index {
            docs: Vec::new(),
            resources: Vec::new(),
            by_uri: HashMap::new(),
            anchors: HashMap::new(),
            dynamic: HashMap::new(),
            locs: HashMap::new(),
            names: HashMap::new(),
            dialects: HashMap::new(),
            wanted: Vec::new(),
        };
        let mut loaded: Vec<Option<usize>> = vec![None; refs.len()];
        ix.load(root, String::new(), false, DEFAULT_BASE, refs, options)?;
        let root_uri = ix.resources[0].uri.clone();
        let mut everything = false;
        loop {
            let mut progress = false;
            let mut unresolved = false;
            let wanted = std::mem::take(&mut ix.wanted);
            for (u, raw) in &wanted {
                if ix.by_uri.contains_key(u) {
                    continue;
                }
                let raw = uri::split_fragment(raw).0;
                if let Some(&(b, t)) = draft::BUNDLED.iter().find(|(b, _)| b == u) {
                    let v = parse(b, t)?;
                    ix.load(v, b.to_string(), true, b, refs, options)?;
                    progress = true;
                    continue;
                }
                let hit = refs.iter().position(|r| {
                    r.name == u
                        || (!raw.is_empty() && r.name == raw)
                        || uri::resolve(DEFAULT_BASE, r.name) == *u
                        || uri::resolve(&root_uri, r.name) == *u
                });
                match hit {
                    Some(k) => {
                        match loaded[k] {
                            Some(root_res) => {
                                ix.by_uri.insert(u.clone(), root_res);
                            }
                            None => {
                                let r = &refs[k];
                                let v = parse(r.name, r.schema)?;
                                loaded[k] = Some(ix.load(
                                    v,
                                    r.name.to_string(),
                                    false,
                                    u,
                                    refs,
                                    options,
                                )?);
                            }
                        }
                        progress = true;
                    }
                    None => unresolved = true,
                }
            }
            if progress {
                continue;
            }
            if unresolved && !everything {
                // A reference may be known only by the `$id` inside it.
                everything = true;
                for (k, r) in refs.iter().enumerate() {
                    if loaded[k].is_none() {
                        let v = parse(r.name, r.schema)?;
                        let at = uri::resolve(DEFAULT_BASE, r.name);
                        loaded[k] =
                            Some(ix.load(v, r.name.to_string(), false, &at, refs, options)?);
                    }
                }
                ix.wanted = wanted;
                continue;
            }
            break;
        }
        Ok(ix)
    }

    /// Adds a document retrieved as `at` and indexes it; returns its root
    /// resource.
    fn load(
        &mut self,
        value: Value,
        name: String,
        bundled: bool,
        at: &str,
        refs: &[Reference<'_>],
        options: &CompileOptions,
    ) -> Result<usize, CompileError> {
        if self.docs.len() >= DOCUMENTS_MAX {
            return Err(fail(format!(
                "more than DOCUMENTS_MAX ({DOCUMENTS_MAX}) schema documents"
            )));
        }
        let mut metas = Vec::new();
        schema_uris(&value, &mut metas);
        let metas: Vec<String> = metas.into_iter().map(str::to_string).collect();
        for m in &metas {
            self.dialect(m, refs, 0)?;
        }
        let doc = self.docs.len();
        if !name.is_empty() {
            self.names.entry(name.clone()).or_insert(doc);
        }
        self.docs.push(Doc {
            name,
            value,
            bundled,
        });
        let (draft, vocab) = match self.docs[doc].value.get("$schema").and_then(Value::as_str) {
            Some(s) => self.known_dialect(s)?,
            None => (options.default_draft, Vocab::STANDARD),
        };
        let root = self.resources.len();
        self.resources.push(Resource {
            uri: at.to_string(),
            doc,
            ptr: String::new(),
            draft,
            vocab,
            recursive_anchor: false,
        });
        self.by_uri.insert(at.to_string(), root);
        let docs = std::mem::take(&mut self.docs);
        let r = self.walk(doc, &docs[doc].value, String::new(), root, true);
        self.docs = docs;
        r?;
        Ok(root)
    }

    /// The dialect a `$schema` value names (already computed).
    fn known_dialect(&self, s: &str) -> Result<(Draft, Vocab), CompileError> {
        if let Some(d) = draft::standard(s) {
            return Ok((d, Vocab::STANDARD));
        }
        let key = uri::split_fragment(s).0;
        self.dialects
            .get(key)
            .copied()
            .ok_or_else(|| fail(format!("unknown meta-schema {s:?} in $schema")))
    }

    /// Computes the dialect of a custom meta-schema: the draft its own
    /// `$schema` names and the vocabularies its `$vocabulary` declares.
    fn dialect(
        &mut self,
        s: &str,
        refs: &[Reference<'_>],
        depth: usize,
    ) -> Result<(Draft, Vocab), CompileError> {
        if let Some(d) = draft::standard(s) {
            return Ok((d, Vocab::STANDARD));
        }
        let key = uri::split_fragment(s).0.to_string();
        if let Some(&d) = self.dialects.get(&key) {
            return Ok(d);
        }
        if depth >= META_CHAIN_MAX {
            return Err(fail(format!(
                "meta-schema chain longer than {META_CHAIN_MAX} at $schema {s:?}"
            )));
        }
        let Some(r) = refs
            .iter()
            .find(|r| r.name == key || uri::resolve(DEFAULT_BASE, r.name) == key)
        else {
            return Err(fail(format!(
                "$schema {s:?} is neither a known draft nor a pushed reference"
            )));
        };
        let v = parse(r.name, r.schema)?;
        let base = match v.get("$schema").and_then(Value::as_str) {
            Some(m) if m != s => self.dialect(m, refs, depth + 1)?.0,
            _ => {
                return Err(fail(format!(
                    "meta-schema {s:?} does not name the draft it extends in its own $schema"
                )));
            }
        };
        let vocab = match v.get("$vocabulary") {
            Some(Value::Object(decl)) if base >= Draft::Draft2019_09 => {
                Vocab::declared(base, decl).map_err(|e| fail(format!("$schema {s:?}: {e}")))?
            }
            _ => Vocab::STANDARD,
        };
        self.dialects.insert(key, (base, vocab));
        Ok((base, vocab))
    }

    fn want(&mut self, base: usize, r: &str) {
        let abs = uri::resolve(&self.resources[base].uri, r);
        let u = uri::split_fragment(&abs).0.to_string();
        self.wanted.push((u, r.to_string()));
    }

    /// Indexes the subschema `v` at `ptr` of `doc`, inside resource `res`.
    fn walk(
        &mut self,
        doc: usize,
        v: &Value,
        ptr: String,
        res: usize,
        doc_root: bool,
    ) -> Result<(), CompileError> {
        let Value::Object(m) = v else {
            if v.is_boolean() {
                self.locs.insert((doc, ptr), res);
            }
            return Ok(());
        };
        let parent = &self.resources[res];
        let (mut draft, mut vocab) = (parent.draft, parent.vocab);
        let legacy_ref = draft <= Draft::Draft7 && m.contains_key("$ref");
        let id_kw = if draft == Draft::Draft4 { "id" } else { "$id" };
        let mut res = res;
        if let (false, Some(Value::String(id))) = (legacy_ref, m.get(id_kw)) {
            if let Some(s) = m.get("$schema").and_then(Value::as_str) {
                (draft, vocab) = self.known_dialect(s)?;
            }
            let abs = uri::resolve(&self.resources[res].uri, id);
            let (u, frag) = uri::split_fragment(&abs);
            if u != self.resources[res].uri {
                if doc_root {
                    // The root's $id names the resource retrieved as `at`.
                    self.resources[res].uri = u.to_string();
                    self.resources[res].draft = draft;
                    self.resources[res].vocab = vocab;
                } else {
                    res = self.resources.len();
                    self.resources.push(Resource {
                        uri: u.to_string(),
                        doc,
                        ptr: ptr.clone(),
                        draft,
                        vocab,
                        recursive_anchor: false,
                    });
                }
                self.by_uri.entry(u.to_string()).or_insert(res);
            }
            if !frag.is_empty() && !frag.starts_with('/') && draft <= Draft::Draft7 {
                self.anchors.insert(
                    (res, frag.to_string()),
                    Anchor {
                        ptr: ptr.clone(),
                        dynamic: false,
                    },
                );
            }
        }
        self.locs.insert((doc, ptr.clone()), res);
        let is_root = self.resources[res].ptr == ptr && self.resources[res].doc == doc;
        if draft >= Draft::Draft2019_09 {
            if let Some(Value::String(a)) = m.get("$anchor") {
                self.anchors.insert(
                    (res, a.clone()),
                    Anchor {
                        ptr: ptr.clone(),
                        dynamic: false,
                    },
                );
            }
            if draft == Draft::Draft2020_12
                && let Some(Value::String(a)) = m.get("$dynamicAnchor")
            {
                self.anchors.insert(
                    (res, a.clone()),
                    Anchor {
                        ptr: ptr.clone(),
                        dynamic: true,
                    },
                );
                self.dynamic
                    .entry(a.clone())
                    .or_default()
                    .push((res, ptr.clone()));
            }
            if draft == Draft::Draft2019_09
                && is_root
                && m.get("$recursiveAnchor") == Some(&Value::Bool(true))
            {
                self.resources[res].recursive_anchor = true;
            }
        }
        for kw in ["$ref", "$dynamicRef", "$recursiveRef"] {
            if let Some(Value::String(r)) = m.get(kw) {
                self.want(res, r);
            }
        }
        if let Some(Value::String(s)) = m.get("$schema")
            && draft::standard(s).is_none()
        {
            self.want(res, s);
        }
        self.children(doc, m, &ptr, res)
    }

    fn children(
        &mut self,
        doc: usize,
        m: &Map<String, Value>,
        ptr: &str,
        res: usize,
    ) -> Result<(), CompileError> {
        for kw in SINGLE {
            if let Some(s) = m.get(*kw)
                && (s.is_object() || s.is_boolean())
            {
                self.walk(doc, s, format!("{ptr}/{kw}"), res, false)?;
            }
        }
        for kw in ARRAYS {
            if let Some(Value::Array(a)) = m.get(*kw) {
                for (k, s) in a.iter().enumerate() {
                    self.walk(doc, s, format!("{ptr}/{kw}/{k}"), res, false)?;
                }
            }
        }
        for kw in MAPS {
            if let Some(Value::Object(p)) = m.get(*kw) {
                for (name, s) in p {
                    let sub = format!("{ptr}/{kw}/{}", escape(name));
                    self.walk(doc, s, sub, res, false)?;
                }
            }
        }
        Ok(())
    }

    /// The resource of the subschema at `ptr` in `doc`: indexed, or else
    /// that of its nearest indexed ancestor (a pointer into a keyword the
    /// index does not know).
    pub(crate) fn resource_of(&self, doc: usize, ptr: &str) -> usize {
        let mut p = ptr;
        loop {
            if let Some(&r) = self.locs.get(&(doc, p.to_string())) {
                return r;
            }
            match p.rfind('/') {
                Some(k) => p = &p[..k],
                None => {
                    return self
                        .resources
                        .iter()
                        .position(|r| r.doc == doc && r.ptr.is_empty())
                        .unwrap_or(0);
                }
            }
        }
    }
}
