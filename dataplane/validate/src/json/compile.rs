//! Control path: JSON Schema text to the flat node table.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Display;

use serde_json::{Map, Value};

use super::*;
use crate::limits::NODES_MAX;

/// Keywords accepted but not enforced on the hot path (they need a regex
/// engine, allocation, or evaluation tracking). `format` is an annotation
/// by default from 2019-09 on, and optional in earlier drafts, but listed so
/// that nobody mistakes it for a check.
const UNENFORCED: &[&str] = &[
    "pattern",
    "patternProperties",
    "format",
    "dependencies",
    "dependentRequired",
    "dependentSchemas",
    "unevaluatedProperties",
    "unevaluatedItems",
    "$recursiveRef",
    "$dynamicRef",
];

/// Keywords that make a node more than a syntax check.
const CHECKS: &[&str] = &[
    "type",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "items",
    "prefixItems",
    "additionalItems",
    "minItems",
    "maxItems",
    "uniqueItems",
    "contains",
    "properties",
    "required",
    "additionalProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "enum",
    "const",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
];

struct Doc<'v> {
    /// Reference name ("" for the root schema).
    name: &'v str,
    value: &'v Value,
    /// Drafts 4 to 7: `$ref` overrides its siblings.
    legacy_ref: bool,
    /// Draft 4: `1.0` is not an integer (it is from draft 6 on).
    draft4: bool,
    id: Option<&'v str>,
}

struct Compiler<'v> {
    docs: Vec<Doc<'v>>,
    out: JsonSchema,
    /// Location of each node, for messages.
    locs: Vec<String>,
    memo: HashMap<(usize, String), u32>,
    queue: Vec<(u32, usize, &'v Value, String)>,
}

/// Escapes a JSON pointer token (RFC 6901).
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let h = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(h, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn type_bit(name: &str) -> Option<u8> {
    Some(match name {
        "null" => T_NULL,
        "boolean" => T_BOOL,
        "object" => T_OBJ,
        "array" => T_ARR,
        "number" => T_NUM | T_INT,
        "integer" => T_INT,
        "string" => T_STR,
        _ => return None,
    })
}

fn type_msg(types: u8) -> &'static str {
    match types {
        T_NULL => "type mismatch: expected null",
        T_BOOL => "type mismatch: expected boolean",
        T_OBJ => "type mismatch: expected object",
        T_ARR => "type mismatch: expected array",
        T_INT => "type mismatch: expected integer",
        x if x == T_NUM | T_INT => "type mismatch: expected number",
        T_STR => "type mismatch: expected string",
        _ => "type mismatch: value type not allowed",
    }
}

pub(crate) fn compile(text: &str, refs: &[Reference<'_>]) -> Result<JsonSchema, CompileError> {
    if text.len() > SCHEMA_BYTES_MAX {
        return Err(CompileError(format!(
            "schema of {} bytes exceeds SCHEMA_BYTES_MAX ({SCHEMA_BYTES_MAX})",
            text.len()
        )));
    }
    let root: Value = serde_json::from_str(text)
        .map_err(|e| CompileError(format!("schema is not valid JSON: {e}")))?;
    let mut values = Vec::with_capacity(refs.len());
    for r in refs {
        if r.schema.len() > SCHEMA_BYTES_MAX {
            return Err(CompileError(format!(
                "referenced schema {:?} exceeds SCHEMA_BYTES_MAX ({SCHEMA_BYTES_MAX})",
                r.name
            )));
        }
        let v: Value = serde_json::from_str(r.schema).map_err(|e| {
            CompileError(format!(
                "referenced schema {:?} is not valid JSON: {e}",
                r.name
            ))
        })?;
        values.push(v);
    }
    fn doc<'v>(name: &'v str, value: &'v Value) -> Doc<'v> {
        let dialect = value.get("$schema").and_then(Value::as_str).unwrap_or("");
        let legacy_ref = ["draft-04", "draft-06", "draft-07"]
            .iter()
            .any(|d| dialect.contains(d));
        let draft4 = dialect.contains("draft-04");
        let id = value
            .get("$id")
            .or_else(|| value.get("id"))
            .and_then(Value::as_str)
            .map(|s| s.trim_end_matches('#'));
        Doc {
            name,
            value,
            legacy_ref,
            draft4,
            id,
        }
    }
    let mut docs = vec![doc("", &root)];
    for (r, v) in refs.iter().zip(&values) {
        docs.push(doc(r.name, v));
    }
    let mut c = Compiler {
        docs,
        out: JsonSchema {
            nodes: Vec::new(),
            edges: Vec::new(),
            props: Vec::new(),
            consts: Vec::new(),
            const_bytes: Vec::new(),
            root: 0,
            unenforced: Vec::new(),
        },
        locs: Vec::new(),
        memo: HashMap::new(),
        queue: Vec::new(),
    };
    c.out.root = c.node_for(0, "#".to_string(), &root)?;
    while let Some((id, doc, v, ptr)) = c.queue.pop() {
        c.compile_node(id, doc, v, &ptr)?;
    }
    c.check_chains()?;
    c.out.unenforced.sort();
    Ok(c.out)
}

impl<'v> Compiler<'v> {
    fn loc(&self, doc: usize, ptr: &str) -> String {
        format!("{}{ptr}", self.docs[doc].name)
    }

    fn fail(&self, doc: usize, ptr: &str, what: impl Display) -> CompileError {
        CompileError(format!("{what} at {}", self.loc(doc, ptr)))
    }

    /// The node for the schema `v` at `ptr` in `doc`, allocated and queued
    /// for compilation on first sight (refs to it then share it).
    fn node_for(&mut self, doc: usize, ptr: String, v: &'v Value) -> Result<u32, CompileError> {
        if let Some(&id) = self.memo.get(&(doc, ptr.clone())) {
            return Ok(id);
        }
        if self.out.nodes.len() >= NODES_MAX {
            return Err(self.fail(
                doc,
                &ptr,
                format!("more than NODES_MAX ({NODES_MAX}) schema nodes"),
            ));
        }
        let id = self.out.nodes.len() as u32;
        self.out.nodes.push(Node::any());
        self.locs.push(self.loc(doc, &ptr));
        self.memo.insert((doc, ptr.clone()), id);
        self.queue.push((id, doc, v, ptr));
        Ok(id)
    }

    fn sub(&mut self, doc: usize, ptr: &str, v: &'v Value) -> Result<u32, CompileError> {
        self.node_for(doc, ptr.to_string(), v)
    }

    fn resolve(&mut self, doc: usize, at: &str, r: &str) -> Result<u32, CompileError> {
        let (base, frag) = r.split_once('#').unwrap_or((r, ""));
        let target = if base.is_empty() {
            Some(doc)
        } else {
            self.docs
                .iter()
                .position(|d| d.name == base)
                .or_else(|| self.docs.iter().position(|d| d.id == Some(base)))
        };
        let Some(target) = target else {
            return Err(self.fail(
                doc,
                at,
                format!("unresolvable $ref {r:?} (not local, not a reference name)"),
            ));
        };
        let Some(frag) = percent_decode(frag) else {
            return Err(self.fail(doc, at, format!("bad percent-encoding in $ref {r:?}")));
        };
        if !frag.is_empty() && !frag.starts_with('/') {
            return Err(self.fail(
                doc,
                at,
                format!("$ref {r:?} names an anchor: not supported"),
            ));
        }
        let mut v = self.docs[target].value;
        let mut canon = String::from("#");
        for tok in frag.split('/').skip(1) {
            let t = tok.replace("~1", "/").replace("~0", "~");
            let next = match v {
                Value::Object(m) => m.get(&t),
                Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get(i)),
                _ => None,
            };
            let Some(next) = next else {
                return Err(self.fail(doc, at, format!("$ref {r:?} points to nothing")));
            };
            v = next;
            canon.push('/');
            canon.push_str(&escape(&t));
        }
        self.node_for(target, canon, v)
    }

    fn number(
        &self,
        doc: usize,
        ptr: &str,
        m: &Map<String, Value>,
        kw: &str,
    ) -> Result<Option<f64>, CompileError> {
        match m.get(kw) {
            None => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| {
                self.fail(
                    doc,
                    &format!("{ptr}/{kw}"),
                    format!("{kw} must be a number"),
                )
            }),
        }
    }

    fn count(
        &self,
        doc: usize,
        ptr: &str,
        m: &Map<String, Value>,
        kw: &str,
    ) -> Result<Option<usize>, CompileError> {
        match self.number(doc, ptr, m, kw)? {
            None => Ok(None),
            Some(x) if x >= 0.0 && x.fract() == 0.0 => Ok(Some(x as usize)),
            Some(_) => Err(self.fail(
                doc,
                &format!("{ptr}/{kw}"),
                format!("{kw} must be a non-negative integer"),
            )),
        }
    }

    /// Compiles the members of a schema array (`allOf`, `prefixItems`...)
    /// into consecutive edges.
    fn list(
        &mut self,
        doc: usize,
        ptr: &str,
        kw: &str,
        v: &'v Value,
        max: usize,
        max_name: &str,
    ) -> Result<Span, CompileError> {
        let at = format!("{ptr}/{kw}");
        let Value::Array(a) = v else {
            return Err(self.fail(doc, &at, format!("{kw} must be an array of schemas")));
        };
        if a.len() > max {
            return Err(self.fail(
                doc,
                &at,
                format!("{kw} has more than {max_name} ({max}) entries"),
            ));
        }
        let mut ids = Vec::with_capacity(a.len());
        for (k, s) in a.iter().enumerate() {
            ids.push(self.sub(doc, &format!("{at}/{k}"), s)?);
        }
        let start = self.out.edges.len() as u32;
        self.out.edges.extend(ids);
        Ok(Span {
            start,
            end: self.out.edges.len() as u32,
        })
    }

    fn push_const(&mut self, v: &Value) -> u32 {
        let start = self.out.const_bytes.len() as u32;
        // Serializing a Value cannot fail (string keys only).
        let bytes = serde_json::to_vec(v).unwrap_or_default();
        let plain_string = v.is_string() && !bytes.contains(&b'\\');
        self.out.const_bytes.extend(bytes);
        self.out
            .consts
            .push((start, self.out.const_bytes.len() as u32, plain_string));
        (self.out.consts.len() - 1) as u32
    }

    fn compile_node(
        &mut self,
        id: u32,
        doc: usize,
        v: &'v Value,
        ptr: &str,
    ) -> Result<(), CompileError> {
        let mut n = Node::any();
        match v {
            Value::Bool(true) => {}
            Value::Bool(false) => n.falsy = true,
            Value::Object(m) => self.object(&mut n, doc, m, ptr)?,
            _ => return Err(self.fail(doc, ptr, "a schema must be an object or a boolean")),
        }
        self.out.nodes[id as usize] = n;
        Ok(())
    }

    fn object(
        &mut self,
        n: &mut Node,
        doc: usize,
        m: &'v Map<String, Value>,
        ptr: &str,
    ) -> Result<(), CompileError> {
        let at = |kw: &str| format!("{ptr}/{kw}");
        // Drafts 4-7 ignore the siblings of $ref, so they are not reported.
        if !(self.docs[doc].legacy_ref && m.contains_key("$ref")) {
            for kw in UNENFORCED {
                if m.contains_key(*kw) {
                    let loc = self.loc(doc, ptr);
                    self.out.unenforced.push(format!("{kw} at {loc}"));
                }
            }
        }
        if let Some(r) = m.get("$ref") {
            let Some(r) = r.as_str() else {
                return Err(self.fail(doc, &at("$ref"), "$ref must be a string"));
            };
            n.ref_ = self.resolve(doc, &at("$ref"), r)?;
            let alone = !CHECKS.iter().any(|k| m.contains_key(*k));
            if self.docs[doc].legacy_ref || alone {
                n.pure_ref = true;
                return Ok(());
            }
        }
        n.checks = CHECKS.iter().any(|k| m.contains_key(*k));

        if let Some(t) = m.get("type") {
            let bad = || {
                self.fail(
                    doc,
                    &at("type"),
                    "type must be a type name or an array of them",
                )
            };
            n.types = match t {
                Value::String(s) => type_bit(s).ok_or_else(bad)?,
                Value::Array(a) => {
                    let mut bits = 0;
                    for x in a {
                        bits |= x.as_str().and_then(type_bit).ok_or_else(bad)?;
                    }
                    bits
                }
                _ => return Err(bad()),
            };
            n.type_msg = type_msg(n.types);
            n.integer_literal_only = self.docs[doc].draft4;
        }

        self.numbers(n, doc, m, ptr)?;
        // Strings.
        n.min_length = self.count(doc, ptr, m, "minLength")?.unwrap_or(0);
        n.max_length = self.count(doc, ptr, m, "maxLength")?.unwrap_or(usize::MAX);

        self.arrays(n, doc, m, ptr)?;
        self.objects(n, doc, m, ptr)?;
        self.enums(n, doc, m, ptr)?;
        self.applicators(n, doc, m, ptr)?;
        n.applicators = n.ref_ != NONE
            || !n.all_of.is_empty()
            || !n.any_of.is_empty()
            || !n.one_of.is_empty()
            || n.not != NONE
            || n.if_ != NONE;
        n.own = CHECKS
            .iter()
            .filter(|k| !matches!(**k, "allOf" | "anyOf" | "oneOf" | "not" | "if"))
            .any(|k| m.contains_key(*k));
        n.checks |= n.applicators;
        Ok(())
    }

    /// Numbers. exclusiveMinimum/Maximum: boolean modifier in draft 4, a number
    /// of its own from draft 6.
    fn numbers(
        &mut self,
        n: &mut Node,
        doc: usize,
        m: &'v Map<String, Value>,
        ptr: &str,
    ) -> Result<(), CompileError> {
        let at = |kw: &str| format!("{ptr}/{kw}");
        if let Some(x) = self.number(doc, ptr, m, "minimum")? {
            n.minimum = x;
        }
        if let Some(x) = self.number(doc, ptr, m, "maximum")? {
            n.maximum = x;
        }
        for (kw, is_min) in [("exclusiveMinimum", true), ("exclusiveMaximum", false)] {
            match m.get(kw) {
                None | Some(Value::Bool(false)) => {}
                Some(Value::Bool(true)) => {
                    if is_min {
                        n.ex_minimum = n.minimum;
                        n.minimum = f64::NEG_INFINITY;
                    } else {
                        n.ex_maximum = n.maximum;
                        n.maximum = f64::INFINITY;
                    }
                }
                Some(Value::Number(x)) => {
                    let x = x.as_f64().unwrap_or(f64::NAN);
                    if is_min {
                        n.ex_minimum = x;
                    } else {
                        n.ex_maximum = x;
                    }
                }
                Some(_) => {
                    return Err(self.fail(
                        doc,
                        &at(kw),
                        format!("{kw} must be a number or a boolean"),
                    ));
                }
            }
        }
        if let Some(x) = self.number(doc, ptr, m, "multipleOf")? {
            if !(x > 0.0 && x.is_finite()) {
                return Err(self.fail(
                    doc,
                    &at("multipleOf"),
                    "multipleOf must be a number above 0",
                ));
            }
            n.multiple_of = x;
        }
        n.numeric = n.minimum > f64::NEG_INFINITY
            || n.ex_minimum > f64::NEG_INFINITY
            || n.maximum < f64::INFINITY
            || n.ex_maximum < f64::INFINITY
            || n.multiple_of > 0.0;
        Ok(())
    }

    /// Arrays: item counts, uniqueness, tuple and list items, contains.
    fn arrays(
        &mut self,
        n: &mut Node,
        doc: usize,
        m: &'v Map<String, Value>,
        ptr: &str,
    ) -> Result<(), CompileError> {
        let at = |kw: &str| format!("{ptr}/{kw}");
        n.min_items = self.count(doc, ptr, m, "minItems")?.unwrap_or(0);
        n.max_items = self.count(doc, ptr, m, "maxItems")?.unwrap_or(usize::MAX);
        match m.get("uniqueItems") {
            None => {}
            Some(Value::Bool(b)) => n.unique_items = *b,
            Some(_) => {
                return Err(self.fail(doc, &at("uniqueItems"), "uniqueItems must be a boolean"));
            }
        }
        match (m.get("prefixItems"), m.get("items")) {
            (_, Some(items @ Value::Array(_))) => {
                // Tuple form (drafts 4 to 2019-09): the rest is additionalItems.
                n.prefix = self.list(
                    doc,
                    ptr,
                    "items",
                    items,
                    PREFIX_ITEMS_MAX,
                    "PREFIX_ITEMS_MAX",
                )?;
                if let Some(rest) = m.get("additionalItems") {
                    n.items = self.sub(doc, &at("additionalItems"), rest)?;
                }
            }
            (prefix, items) => {
                if let Some(p) = prefix {
                    n.prefix = self.list(
                        doc,
                        ptr,
                        "prefixItems",
                        p,
                        PREFIX_ITEMS_MAX,
                        "PREFIX_ITEMS_MAX",
                    )?;
                }
                if let Some(items) = items {
                    n.items = self.sub(doc, &at("items"), items)?;
                }
            }
        }
        if let Some(c) = m.get("contains") {
            n.contains = self.sub(doc, &at("contains"), c)?;
            n.min_contains = self.count(doc, ptr, m, "minContains")?.unwrap_or(1);
            n.max_contains = self
                .count(doc, ptr, m, "maxContains")?
                .unwrap_or(usize::MAX);
        }
        Ok(())
    }

    /// Objects: property counts, properties, required names, additional
    /// properties and property names.
    fn objects(
        &mut self,
        n: &mut Node,
        doc: usize,
        m: &'v Map<String, Value>,
        ptr: &str,
    ) -> Result<(), CompileError> {
        let at = |kw: &str| format!("{ptr}/{kw}");
        n.min_properties = self.count(doc, ptr, m, "minProperties")?.unwrap_or(0);
        n.max_properties = self
            .count(doc, ptr, m, "maxProperties")?
            .unwrap_or(usize::MAX);
        // name -> (schema, required bit, declared)
        let mut table: BTreeMap<&[u8], (u32, u8, bool)> = BTreeMap::new();
        if let Some(p) = m.get("properties") {
            let Value::Object(p) = p else {
                return Err(self.fail(doc, &at("properties"), "properties must be an object"));
            };
            for (name, s) in p {
                let sub_ptr = format!("{ptr}/properties/{}", escape(name));
                if name.len() > PROPERTY_NAME_BYTES_MAX {
                    return Err(self.fail(doc, &sub_ptr, format!("property name longer than PROPERTY_NAME_BYTES_MAX ({PROPERTY_NAME_BYTES_MAX})")));
                }
                let id = self.node_for(doc, sub_ptr, s)?;
                table.insert(name.as_bytes(), (id, u8::MAX, true));
            }
        }
        if let Some(r) = m.get("required") {
            let bad = || self.fail(doc, &at("required"), "required must be an array of strings");
            let Value::Array(r) = r else {
                return Err(bad());
            };
            let mut bit = 0u8;
            for name in r {
                let name = name.as_str().ok_or_else(bad)?;
                if name.len() > PROPERTY_NAME_BYTES_MAX {
                    return Err(self.fail(doc, &at("required"), format!("required name longer than PROPERTY_NAME_BYTES_MAX ({PROPERTY_NAME_BYTES_MAX})")));
                }
                let e = table
                    .entry(name.as_bytes())
                    .or_insert((NONE, u8::MAX, false));
                if e.1 != u8::MAX {
                    continue; // listed twice
                }
                if usize::from(bit) >= REQUIRED_MAX {
                    return Err(self.fail(
                        doc,
                        &at("required"),
                        format!("more than REQUIRED_MAX ({REQUIRED_MAX}) required names"),
                    ));
                }
                e.1 = bit;
                n.required_mask |= 1u64 << bit;
                bit += 1;
            }
        }
        if table.len() > PROPERTIES_MAX {
            return Err(self.fail(
                doc,
                ptr,
                format!("more than PROPERTIES_MAX ({PROPERTIES_MAX}) properties"),
            ));
        }
        let start = self.out.props.len() as u32;
        let mut entries: Vec<_> = table.into_iter().collect();
        entries.sort_by(|a, b| name_order(a.0, name_head(a.0), b.0, name_head(b.0)));
        for (name, (node, bit, declared)) in entries {
            self.out.props.push(Prop {
                name: name.into(),
                head: name_head(name),
                node,
                bit,
                declared,
            });
        }
        n.props = Span {
            start,
            end: self.out.props.len() as u32,
        };
        if let Some(a) = m.get("additionalProperties") {
            n.additional = self.sub(doc, &at("additionalProperties"), a)?;
        }
        if let Some(a) = m.get("propertyNames") {
            n.property_names = self.sub(doc, &at("propertyNames"), a)?;
        }
        Ok(())
    }

    /// enum and const.
    fn enums(
        &mut self,
        n: &mut Node,
        doc: usize,
        m: &'v Map<String, Value>,
        ptr: &str,
    ) -> Result<(), CompileError> {
        let at = |kw: &str| format!("{ptr}/{kw}");
        if let Some(e) = m.get("enum") {
            let Value::Array(e) = e else {
                return Err(self.fail(doc, &at("enum"), "enum must be an array"));
            };
            if e.is_empty() || e.len() > ENUM_VALUES_MAX {
                return Err(self.fail(
                    doc,
                    &at("enum"),
                    format!("enum must have 1 to ENUM_VALUES_MAX ({ENUM_VALUES_MAX}) values"),
                ));
            }
            let start = self.out.consts.len() as u32;
            for x in e {
                self.push_const(x);
            }
            n.enum_values = Span {
                start,
                end: self.out.consts.len() as u32,
            };
        }
        if let Some(c) = m.get("const") {
            n.konst = self.push_const(c);
        }
        Ok(())
    }

    /// Applicators: allOf, anyOf, oneOf, not, if/then/else.
    fn applicators(
        &mut self,
        n: &mut Node,
        doc: usize,
        m: &'v Map<String, Value>,
        ptr: &str,
    ) -> Result<(), CompileError> {
        let at = |kw: &str| format!("{ptr}/{kw}");
        if let Some(a) = m.get("allOf") {
            n.all_of = self.list(doc, ptr, "allOf", a, SUBSCHEMAS_MAX, "SUBSCHEMAS_MAX")?;
        }
        if let Some(a) = m.get("anyOf") {
            n.any_of = self.list(doc, ptr, "anyOf", a, SUBSCHEMAS_MAX, "SUBSCHEMAS_MAX")?;
        }
        if let Some(a) = m.get("oneOf") {
            n.one_of = self.list(doc, ptr, "oneOf", a, SUBSCHEMAS_MAX, "SUBSCHEMAS_MAX")?;
        }
        for (kw, span) in [
            ("allOf", n.all_of),
            ("anyOf", n.any_of),
            ("oneOf", n.one_of),
        ] {
            if m.contains_key(kw) && span.is_empty() {
                return Err(self.fail(doc, &at(kw), format!("{kw} must not be empty")));
            }
        }
        if let Some(x) = m.get("not") {
            n.not = self.sub(doc, &at("not"), x)?;
        }
        if let Some(x) = m.get("if") {
            n.if_ = self.sub(doc, &at("if"), x)?;
            if let Some(t) = m.get("then") {
                n.then_ = self.sub(doc, &at("then"), t)?;
            }
            if let Some(e) = m.get("else") {
                n.else_ = self.sub(doc, &at("else"), e)?;
            }
        }
        Ok(())
    }

    /// Nodes applied to the same value as `n` (no descent into it).
    fn same_span(&self, n: &Node) -> Vec<u32> {
        let e = &self.out.edges;
        let mut v: Vec<u32> = [n.ref_, n.not, n.if_, n.then_, n.else_]
            .into_iter()
            .collect();
        v.extend(&e[n.all_of.range()]);
        v.extend(&e[n.any_of.range()]);
        v.extend(&e[n.one_of.range()]);
        v.retain(|&x| x != NONE);
        v
    }

    /// Refuses applicator cycles (they would recurse without consuming
    /// input) and chains longer than APPLICATOR_DEPTH_MAX. Iterative, so a
    /// hostile schema cannot overflow the control plane's stack either.
    fn check_chains(&self) -> Result<(), CompileError> {
        let count = self.out.nodes.len();
        let adj: Vec<Vec<u32>> = self.out.nodes.iter().map(|n| self.same_span(n)).collect();
        let mut state = vec![0u8; count]; // 0 new, 1 on the stack, 2 done
        let mut chain = vec![0usize; count];
        for start in 0..count {
            if state[start] != 0 {
                continue;
            }
            state[start] = 1;
            let mut stack = vec![(start, 0usize)];
            while let Some(top) = stack.last_mut() {
                let (v, k) = *top;
                if let Some(&c) = adj[v].get(k) {
                    top.1 += 1;
                    let c = c as usize;
                    match state[c] {
                        0 => {
                            state[c] = 1;
                            stack.push((c, 0));
                        }
                        1 => {
                            return Err(CompileError(format!(
                                "$ref or applicator cycle that consumes no input at {}",
                                self.locs[c]
                            )));
                        }
                        _ => {}
                    }
                } else {
                    chain[v] = adj[v]
                        .iter()
                        .map(|&c| chain[c as usize] + 1)
                        .max()
                        .unwrap_or(0);
                    if chain[v] > APPLICATOR_DEPTH_MAX {
                        return Err(CompileError(format!(
                            "applicators nested deeper than APPLICATOR_DEPTH_MAX ({APPLICATOR_DEPTH_MAX}) at {}",
                            self.locs[v]
                        )));
                    }
                    state[v] = 2;
                    stack.pop();
                }
            }
        }
        Ok(())
    }
}
