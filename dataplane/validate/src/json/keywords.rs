//! Control path: one schema object's keywords to a node, for the draft and
//! vocabularies of the resource it belongs to. A keyword another draft
//! defines is ignored here (as the specification says) and reported.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::compile::Compiler;
use super::draft;
use super::format::Format;
use super::*;

/// Keywords of other drafts that change nothing when ignored, so they are
/// not reported (`$defs` and `definitions` are only containers that a
/// pointer `$ref` reaches anyway; `then`/`else` without `if` do nothing).
const QUIET: &[&str] = &["$defs", "definitions", "then", "else", "id", "$id"];

/// Annotation keywords that never assert, reported so nobody mistakes
/// them for checks.
const ANNOTATIONS: &[&str] = &["contentMediaType", "contentEncoding", "contentSchema"];

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

/// An object schema's property table under construction: name ->
/// (schema, presence bit, declared in `properties`).
struct Table<'v> {
    names: BTreeMap<&'v [u8], (u32, u8, bool)>,
    bits: u8,
}

impl<'v> Table<'v> {
    /// The presence bit of `name`, allocated on first use.
    fn bit(&mut self, name: &'v str) -> Option<u8> {
        let e = self
            .names
            .entry(name.as_bytes())
            .or_insert((NONE, u8::MAX, false));
        if e.1 == u8::MAX {
            if usize::from(self.bits) >= REQUIRED_MAX {
                return None;
            }
            e.1 = self.bits;
            self.bits += 1;
        }
        Some(e.1)
    }
}

impl<'v> Compiler<'v> {
    fn number(
        &self,
        doc: usize,
        ptr: &str,
        v: Option<&Value>,
        kw: &str,
    ) -> Result<Option<f64>, CompileError> {
        match v {
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
        v: Option<&Value>,
        kw: &str,
    ) -> Result<Option<usize>, CompileError> {
        match self.number(doc, ptr, v, kw)? {
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

    pub(super) fn object(
        &mut self,
        n: &mut Node,
        doc: usize,
        m: &'v Map<String, Value>,
        ptr: &str,
    ) -> Result<(), CompileError> {
        let res = &self.ix.resources[usize::from(n.resource)];
        let (d, vocab) = (res.draft, res.vocab);
        let get = |kw: &str| m.get(kw).filter(|_| draft::active(d, vocab, kw));
        let at = |kw: &str| format!("{ptr}/{kw}");
        let legacy = d <= Draft::Draft7;

        if legacy && let Some(r) = get("$ref") {
            // Drafts 4-7: $ref replaces the whole schema object.
            let Some(r) = r.as_str() else {
                return Err(self.fail(doc, &at("$ref"), "$ref must be a string"));
            };
            n.ref_ = self.resolve(doc, ptr, &at("$ref"), r)?;
            n.pure_ref = true;
            n.checks = true;
            return Ok(());
        }
        self.report(doc, ptr, m, d, vocab);

        if let Some(r) = get("$ref") {
            let Some(r) = r.as_str() else {
                return Err(self.fail(doc, &at("$ref"), "$ref must be a string"));
            };
            n.ref_ = self.resolve(doc, ptr, &at("$ref"), r)?;
        }
        for (kw, recursive) in [("$dynamicRef", false), ("$recursiveRef", true)] {
            if let Some(r) = get(kw) {
                let Some(r) = r.as_str() else {
                    return Err(self.fail(doc, &at(kw), format!("{kw} must be a string")));
                };
                n.dyn_ref = self.dynamic_ref(doc, ptr, &at(kw), r, recursive)?;
            }
        }

        if let Some(t) = get("type") {
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
            n.integer_literal_only = d == Draft::Draft4;
        }
        self.numbers(n, doc, ptr, &get)?;
        self.strings(n, doc, ptr, &get, d, vocab)?;
        self.arrays(n, doc, ptr, &get, d)?;
        self.objects(n, doc, ptr, &get, d)?;

        if let Some(e) = get("enum") {
            let Value::Array(e) = e else {
                return Err(self.fail(doc, &at("enum"), "enum must be an array"));
            };
            if e.len() > ENUM_VALUES_MAX {
                return Err(self.fail(
                    doc,
                    &at("enum"),
                    format!("enum has more than ENUM_VALUES_MAX ({ENUM_VALUES_MAX}) values"),
                ));
            }
            if e.is_empty() {
                // Nothing is in an empty enum: no type is allowed.
                n.types = 0;
                n.type_msg = "value not in enum (the enum is empty)";
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
        if let Some(c) = get("const") {
            n.konst = self.push_const(c);
        }

        // Applicators on the same value.
        for (kw, span) in [
            ("allOf", &mut n.all_of),
            ("anyOf", &mut n.any_of),
            ("oneOf", &mut n.one_of),
        ] {
            if let Some(a) = get(kw) {
                *span = self.list(doc, ptr, kw, a, SUBSCHEMAS_MAX, "SUBSCHEMAS_MAX")?;
                if span.is_empty() {
                    return Err(self.fail(doc, &at(kw), format!("{kw} must not be empty")));
                }
            }
        }
        if let Some(x) = get("not") {
            n.not = self.sub(doc, &at("not"), x)?;
        }
        if let Some(x) = get("if") {
            n.if_ = self.sub(doc, &at("if"), x)?;
            if let Some(t) = get("then") {
                n.then_ = self.sub(doc, &at("then"), t)?;
            }
            if let Some(e) = get("else") {
                n.else_ = self.sub(doc, &at("else"), e)?;
            }
        }
        if let Some(x) = get("unevaluatedProperties") {
            n.uneval_props = self.sub(doc, &at("unevaluatedProperties"), x)?;
        }
        if let Some(x) = get("unevaluatedItems") {
            n.uneval_items = self.sub(doc, &at("unevaluatedItems"), x)?;
        }

        n.applicators = n.ref_ != NONE
            || n.dyn_ref != NONE
            || !n.all_of.is_empty()
            || !n.any_of.is_empty()
            || !n.one_of.is_empty()
            || n.not != NONE
            || n.if_ != NONE;
        n.own = n.types != T_ANY
            || n.numeric
            || n.min_length > 0
            || n.max_length != usize::MAX
            || n.pattern != NONE
            || n.format != Format::None
            || n.min_items > 0
            || n.max_items != usize::MAX
            || n.unique_items
            || !n.prefix.is_empty()
            || n.items != NONE
            || n.contains != NONE
            || !n.props.is_empty()
            || n.additional != NONE
            || n.property_names != NONE
            || n.min_properties > 0
            || n.max_properties != usize::MAX
            || !n.pattern_props.is_empty()
            || !n.dep_required.is_empty()
            || !n.dep_schemas.is_empty()
            || !n.enum_values.is_empty()
            || n.konst != NONE;
        // unevaluated* are not "own": they run after the node (validate.rs),
        // so a node with only applicators besides them still lets its first
        // applicator be the syntax pass.
        n.checks = n.own || n.applicators;
        n.pure_ref = n.ref_ != NONE
            && !n.own
            && n.uneval_props == NONE
            && n.uneval_items == NONE
            && n.dyn_ref == NONE
            && n.all_of.is_empty()
            && n.any_of.is_empty()
            && n.one_of.is_empty()
            && n.not == NONE
            && n.if_ == NONE;
        Ok(())
    }

    /// Reports keywords this dialect ignores and annotation-only ones.
    fn report(
        &mut self,
        doc: usize,
        ptr: &str,
        m: &Map<String, Value>,
        d: Draft,
        vocab: draft::Vocab,
    ) {
        for k in m.keys() {
            let k = k.as_str();
            if ANNOTATIONS.contains(&k) {
                self.unenforced(doc, ptr, format!("{k} (annotation only)"));
            } else if !QUIET.contains(&k) && draft::known(k) && !draft::active(d, vocab, k) {
                let why = if draft::active(d, draft::Vocab::STANDARD, k) {
                    "not in the vocabularies of this $schema".to_string()
                } else {
                    format!("not a {} keyword", draft::name(d))
                };
                self.unenforced(doc, ptr, format!("{k} ({why}: ignored)"));
            }
        }
    }

    fn numbers(
        &mut self,
        n: &mut Node,
        doc: usize,
        ptr: &str,
        get: &dyn Fn(&str) -> Option<&'v Value>,
    ) -> Result<(), CompileError> {
        let at = |kw: &str| format!("{ptr}/{kw}");
        if let Some(x) = self.number(doc, ptr, get("minimum"), "minimum")? {
            n.minimum = x;
        }
        if let Some(x) = self.number(doc, ptr, get("maximum"), "maximum")? {
            n.maximum = x;
        }
        let d = self.ix.resources[usize::from(n.resource)].draft;
        // exclusiveMinimum/Maximum: a boolean modifier of minimum/maximum in
        // draft 4, a number of its own from draft 6.
        for (kw, is_min) in [("exclusiveMinimum", true), ("exclusiveMaximum", false)] {
            match (get(kw), d == Draft::Draft4) {
                (None, _) | (Some(Value::Bool(false)), true) => {}
                (Some(Value::Bool(true)), true) => {
                    if is_min {
                        n.ex_minimum = n.minimum;
                        n.minimum = f64::NEG_INFINITY;
                    } else {
                        n.ex_maximum = n.maximum;
                        n.maximum = f64::INFINITY;
                    }
                }
                (Some(Value::Number(x)), false) => {
                    let x = x.as_f64().unwrap_or(f64::NAN);
                    if is_min {
                        n.ex_minimum = x;
                    } else {
                        n.ex_maximum = x;
                    }
                }
                (Some(_), true) => {
                    return Err(self.fail(
                        doc,
                        &at(kw),
                        format!("{kw} must be a boolean in draft-04"),
                    ));
                }
                (Some(_), false) => {
                    return Err(self.fail(
                        doc,
                        &at(kw),
                        format!(
                            "{kw} must be a number in {} (a boolean is draft-04)",
                            draft::name(d)
                        ),
                    ));
                }
            }
        }
        if let Some(x) = self.number(doc, ptr, get("multipleOf"), "multipleOf")? {
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

    fn strings(
        &mut self,
        n: &mut Node,
        doc: usize,
        ptr: &str,
        get: &dyn Fn(&str) -> Option<&'v Value>,
        d: Draft,
        vocab: draft::Vocab,
    ) -> Result<(), CompileError> {
        let at = |kw: &str| format!("{ptr}/{kw}");
        n.min_length = self
            .count(doc, ptr, get("minLength"), "minLength")?
            .unwrap_or(0);
        n.max_length = self
            .count(doc, ptr, get("maxLength"), "maxLength")?
            .unwrap_or(usize::MAX);
        if let Some(p) = get("pattern") {
            let Some(p) = p.as_str() else {
                return Err(self.fail(doc, &at("pattern"), "pattern must be a string"));
            };
            n.pattern = self.regex(doc, &at("pattern"), p)?;
        }
        if let Some(f) = get("format") {
            let Some(name) = f.as_str() else {
                return Err(self.fail(doc, &at("format"), "format must be a string"));
            };
            let assert = self.options.format == FormatMode::Assertion || vocab.format_assertion;
            match Format::from_name(name, d) {
                Some(k) if assert => n.format = k,
                Some(_) => self.unenforced(
                    doc,
                    ptr,
                    format!("format {name:?} (annotation only: not asserted)"),
                ),
                None => self.unenforced(
                    doc,
                    ptr,
                    format!("format {name:?} (unknown format: not asserted)"),
                ),
            }
        }
        Ok(())
    }

    fn arrays(
        &mut self,
        n: &mut Node,
        doc: usize,
        ptr: &str,
        get: &dyn Fn(&str) -> Option<&'v Value>,
        d: Draft,
    ) -> Result<(), CompileError> {
        let at = |kw: &str| format!("{ptr}/{kw}");
        n.min_items = self
            .count(doc, ptr, get("minItems"), "minItems")?
            .unwrap_or(0);
        n.max_items = self
            .count(doc, ptr, get("maxItems"), "maxItems")?
            .unwrap_or(usize::MAX);
        match get("uniqueItems") {
            None => {}
            Some(Value::Bool(b)) => n.unique_items = *b,
            Some(_) => {
                return Err(self.fail(doc, &at("uniqueItems"), "uniqueItems must be a boolean"));
            }
        }
        match get("items") {
            Some(items @ Value::Array(_)) => {
                if d >= Draft::Draft2020_12 {
                    return Err(self.fail(
                        doc,
                        &at("items"),
                        "items must be a schema in 2020-12 (the array form is drafts 4 to 2019-09; 2020-12 has prefixItems)",
                    ));
                }
                // Tuple form: the rest is additionalItems.
                n.prefix = self.list(
                    doc,
                    ptr,
                    "items",
                    items,
                    PREFIX_ITEMS_MAX,
                    "PREFIX_ITEMS_MAX",
                )?;
                if let Some(rest) = get("additionalItems") {
                    n.items = self.sub(doc, &at("additionalItems"), rest)?;
                }
            }
            items => {
                if let Some(p) = get("prefixItems") {
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
        if let Some(c) = get("contains") {
            n.contains = self.sub(doc, &at("contains"), c)?;
            n.min_contains = self
                .count(doc, ptr, get("minContains"), "minContains")?
                .unwrap_or(1);
            n.max_contains = self
                .count(doc, ptr, get("maxContains"), "maxContains")?
                .unwrap_or(usize::MAX);
            n.contains_marks = d >= Draft::Draft2020_12;
        }
        Ok(())
    }

    fn objects(
        &mut self,
        n: &mut Node,
        doc: usize,
        ptr: &str,
        get: &dyn Fn(&str) -> Option<&'v Value>,
        d: Draft,
    ) -> Result<(), CompileError> {
        let at = |kw: &str| format!("{ptr}/{kw}");
        n.min_properties = self
            .count(doc, ptr, get("minProperties"), "minProperties")?
            .unwrap_or(0);
        n.max_properties = self
            .count(doc, ptr, get("maxProperties"), "maxProperties")?
            .unwrap_or(usize::MAX);
        let too_many = |c: &Self, kw: &str| {
            c.fail(
                doc,
                &at(kw),
                format!("more than REQUIRED_MAX ({REQUIRED_MAX}) names in required, dependentRequired and dependentSchemas together"),
            )
        };
        let long = |c: &Self, kw: &str| {
            c.fail(
                doc,
                &at(kw),
                format!(
                    "property name longer than PROPERTY_NAME_BYTES_MAX ({PROPERTY_NAME_BYTES_MAX})"
                ),
            )
        };
        let mut table = Table {
            names: BTreeMap::new(),
            bits: 0,
        };
        if let Some(p) = get("properties") {
            let Value::Object(p) = p else {
                return Err(self.fail(doc, &at("properties"), "properties must be an object"));
            };
            for (name, s) in p {
                if name.len() > PROPERTY_NAME_BYTES_MAX {
                    return Err(long(self, "properties"));
                }
                let sub_ptr = format!("{ptr}/properties/{}", index::escape(name));
                let id = self.node_for(doc, sub_ptr, s)?;
                table.names.insert(name.as_bytes(), (id, u8::MAX, true));
            }
        }
        if let Some(r) = get("required") {
            let bad = || self.fail(doc, &at("required"), "required must be an array of strings");
            let Value::Array(r) = r else {
                return Err(bad());
            };
            for name in r {
                let name = name.as_str().ok_or_else(bad)?;
                if name.len() > PROPERTY_NAME_BYTES_MAX {
                    return Err(long(self, "required"));
                }
                let bit = table.bit(name).ok_or_else(|| too_many(self, "required"))?;
                n.required_mask |= 1u64 << bit;
            }
        }
        // dependentRequired / dependentSchemas, or draft 4-7 dependencies
        // (an array is the first, a schema the second).
        let mut dep_required: Vec<(u8, u64)> = Vec::new();
        let mut dep_schemas: Vec<(u8, u32)> = Vec::new();
        for kw in ["dependentRequired", "dependentSchemas", "dependencies"] {
            let Some(deps) = get(kw) else {
                continue;
            };
            let Value::Object(deps) = deps else {
                return Err(self.fail(doc, &at(kw), format!("{kw} must be an object")));
            };
            for (name, dep) in deps {
                if name.len() > PROPERTY_NAME_BYTES_MAX {
                    return Err(long(self, kw));
                }
                let trigger = table.bit(name).ok_or_else(|| too_many(self, kw))?;
                match (kw, dep) {
                    ("dependentRequired" | "dependencies", Value::Array(list)) => {
                        let mut mask = 0u64;
                        for x in list {
                            let Some(x) = x.as_str() else {
                                return Err(self.fail(
                                    doc,
                                    &at(kw),
                                    format!("{kw}: a dependency list must hold strings"),
                                ));
                            };
                            if x.len() > PROPERTY_NAME_BYTES_MAX {
                                return Err(long(self, kw));
                            }
                            mask |= 1u64 << table.bit(x).ok_or_else(|| too_many(self, kw))?;
                        }
                        dep_required.push((trigger, mask));
                    }
                    (
                        "dependentSchemas" | "dependencies",
                        s @ (Value::Object(_) | Value::Bool(_)),
                    ) => {
                        let sub_ptr = format!("{ptr}/{kw}/{}", index::escape(name));
                        let id = self.node_for(doc, sub_ptr, s)?;
                        dep_schemas.push((trigger, id));
                    }
                    _ => {
                        return Err(self.fail(
                            doc,
                            &at(kw),
                            format!(
                                "{kw}: {name:?} must map to {}",
                                if kw == "dependentRequired" {
                                    "an array of names"
                                } else if kw == "dependentSchemas" {
                                    "a schema"
                                } else {
                                    "an array of names or a schema"
                                }
                            ),
                        ));
                    }
                }
            }
        }
        if table.names.len() > PROPERTIES_MAX {
            return Err(self.fail(
                doc,
                ptr,
                format!("more than PROPERTIES_MAX ({PROPERTIES_MAX}) properties"),
            ));
        }
        let start = self.out.props.len() as u32;
        let mut entries: Vec<_> = table.names.into_iter().collect();
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
        let s = self.out.dep_required.len() as u32;
        self.out.dep_required.extend(dep_required);
        n.dep_required = Span {
            start: s,
            end: self.out.dep_required.len() as u32,
        };
        let s = self.out.dep_schemas.len() as u32;
        self.out.dep_schemas.extend(dep_schemas);
        n.dep_schemas = Span {
            start: s,
            end: self.out.dep_schemas.len() as u32,
        };
        if let Some(p) = get("patternProperties") {
            let Value::Object(p) = p else {
                return Err(self.fail(
                    doc,
                    &at("patternProperties"),
                    "patternProperties must be an object",
                ));
            };
            if p.len() > PATTERNS_MAX {
                return Err(self.fail(
                    doc,
                    &at("patternProperties"),
                    format!("more than PATTERNS_MAX ({PATTERNS_MAX}) patterns"),
                ));
            }
            let mut list = Vec::with_capacity(p.len());
            for (src, s) in p {
                let sub_ptr = format!("{ptr}/patternProperties/{}", index::escape(src));
                let re = self.regex(doc, &sub_ptr, src)?;
                let id = self.node_for(doc, sub_ptr, s)?;
                list.push((re, id));
            }
            let s = self.out.pattern_props.len() as u32;
            self.out.pattern_props.extend(list);
            n.pattern_props = Span {
                start: s,
                end: self.out.pattern_props.len() as u32,
            };
        }
        if let Some(a) = get("additionalProperties") {
            n.additional = self.sub(doc, &at("additionalProperties"), a)?;
        }
        if let Some(a) = get("propertyNames") {
            n.property_names = self.sub(doc, &at("propertyNames"), a)?;
        }
        let _ = d;
        Ok(())
    }
}
