//! Control path: one schema object's keywords to a node, for the draft and
//! vocabularies of the resource it belongs to. A keyword another draft
//! defines is ignored here (as the specification says) and reported.

use serde_json::{Map, Value};

use super::compile::Compiler;
use super::draft;
use super::format::Format;
use super::*;

mod properties;

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
        let legacy = d <= Draft::Draft7;

        if legacy && let Some(r) = get("$ref") {
            // Drafts 4-7: $ref replaces the whole schema object.
            n.ref_ = self.static_ref(doc, ptr, r)?;
            n.pure_ref = true;
            n.checks = true;
            return Ok(());
        }
        self.report(doc, ptr, m, d, vocab);

        self.references(n, doc, ptr, &get)?;
        self.types(n, doc, ptr, &get, d)?;
        self.numbers(n, doc, ptr, &get)?;
        self.strings(n, doc, ptr, &get, d, vocab)?;
        self.arrays(n, doc, ptr, &get, d)?;
        self.objects(n, doc, ptr, &get)?;
        self.values(n, doc, ptr, &get)?;
        self.applicators(n, doc, ptr, &get)?;
        summarize(n);
        Ok(())
    }

    /// A `$ref`'s target (the keyword must be a string).
    fn static_ref(&mut self, doc: usize, ptr: &str, r: &Value) -> Result<u32, CompileError> {
        let at = format!("{ptr}/$ref");
        let Some(r) = r.as_str() else {
            return Err(self.fail(doc, &at, "$ref must be a string"));
        };
        self.resolve(doc, ptr, &at, r)
    }

    /// `$ref` beside other keywords (2019-09 on), `$dynamicRef`,
    /// `$recursiveRef`.
    fn references(
        &mut self,
        n: &mut Node,
        doc: usize,
        ptr: &str,
        get: &dyn Fn(&str) -> Option<&'v Value>,
    ) -> Result<(), CompileError> {
        if let Some(r) = get("$ref") {
            n.ref_ = self.static_ref(doc, ptr, r)?;
        }
        for (kw, recursive) in [("$dynamicRef", false), ("$recursiveRef", true)] {
            if let Some(r) = get(kw) {
                let at = format!("{ptr}/{kw}");
                let Some(r) = r.as_str() else {
                    return Err(self.fail(doc, &at, format!("{kw} must be a string")));
                };
                n.dyn_ref = self.dynamic_ref(doc, ptr, &at, r, recursive)?;
            }
        }
        Ok(())
    }

    fn types(
        &mut self,
        n: &mut Node,
        doc: usize,
        ptr: &str,
        get: &dyn Fn(&str) -> Option<&'v Value>,
        d: Draft,
    ) -> Result<(), CompileError> {
        let Some(t) = get("type") else {
            return Ok(());
        };
        let bad = || {
            self.fail(
                doc,
                &format!("{ptr}/type"),
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
        Ok(())
    }

    /// `enum` and `const`.
    fn values(
        &mut self,
        n: &mut Node,
        doc: usize,
        ptr: &str,
        get: &dyn Fn(&str) -> Option<&'v Value>,
    ) -> Result<(), CompileError> {
        if let Some(e) = get("enum") {
            let at = format!("{ptr}/enum");
            let Value::Array(e) = e else {
                return Err(self.fail(doc, &at, "enum must be an array"));
            };
            if e.len() > ENUM_VALUES_MAX {
                return Err(self.fail(
                    doc,
                    &at,
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
        Ok(())
    }

    /// Applicators on the same value: `allOf`, `anyOf`, `oneOf`, `not`,
    /// `if`/`then`/`else`, `unevaluated*`.
    fn applicators(
        &mut self,
        n: &mut Node,
        doc: usize,
        ptr: &str,
        get: &dyn Fn(&str) -> Option<&'v Value>,
    ) -> Result<(), CompileError> {
        let at = |kw: &str| format!("{ptr}/{kw}");
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
}

/// The flags validation branches on, from a node's compiled keywords.
fn summarize(n: &mut Node) {
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
}
