//! Object keywords: `properties`, `required`, dependencies (draft 4-7
//! `dependencies`, `dependentRequired`, `dependentSchemas`),
//! `patternProperties`, `additionalProperties`, `propertyNames` and the
//! property-count bounds. The names of the first three share one sorted
//! table with a presence bit per name.

use std::collections::BTreeMap;

use serde_json::Value;

use super::super::compile::Compiler;
use super::super::*;

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

/// An object schema's dependencies, collected aside so that the node's
/// spans stay contiguous (their schemas compile first and push entries of
/// their own).
struct Deps {
    /// (trigger bit, mask of the names it requires).
    required: Vec<(u8, u64)>,
    /// (trigger bit, schema the object must then match).
    schemas: Vec<(u8, u32)>,
}

impl<'v> Compiler<'v> {
    pub(super) fn objects(
        &mut self,
        n: &mut Node,
        doc: usize,
        ptr: &str,
        get: &dyn Fn(&str) -> Option<&'v Value>,
    ) -> Result<(), CompileError> {
        let at = |kw: &str| format!("{ptr}/{kw}");
        n.min_properties = self
            .count(doc, ptr, get("minProperties"), "minProperties")?
            .unwrap_or(0);
        n.max_properties = self
            .count(doc, ptr, get("maxProperties"), "maxProperties")?
            .unwrap_or(usize::MAX);
        let mut table = Table {
            names: BTreeMap::new(),
            bits: 0,
        };
        self.properties(&mut table, doc, ptr, get)?;
        self.required(n, &mut table, doc, ptr, get)?;
        let deps = self.dependencies(&mut table, doc, ptr, get)?;
        self.emit_table(n, table, doc, ptr)?;
        let s = self.out.dep_required.len() as u32;
        self.out.dep_required.extend(deps.required);
        n.dep_required = Span {
            start: s,
            end: self.out.dep_required.len() as u32,
        };
        let s = self.out.dep_schemas.len() as u32;
        self.out.dep_schemas.extend(deps.schemas);
        n.dep_schemas = Span {
            start: s,
            end: self.out.dep_schemas.len() as u32,
        };
        self.pattern_properties(n, doc, ptr, get)?;
        if let Some(a) = get("additionalProperties") {
            n.additional = self.sub(doc, &at("additionalProperties"), a)?;
        }
        if let Some(a) = get("propertyNames") {
            n.property_names = self.sub(doc, &at("propertyNames"), a)?;
        }
        Ok(())
    }

    /// The error for more names than presence bits.
    fn too_many_names(&self, doc: usize, ptr: &str, kw: &str) -> CompileError {
        self.fail(
            doc,
            &format!("{ptr}/{kw}"),
            format!("more than REQUIRED_MAX ({REQUIRED_MAX}) names in required, dependentRequired and dependentSchemas together"),
        )
    }

    /// The error for a property name over the limit.
    fn long_name(&self, doc: usize, ptr: &str, kw: &str) -> CompileError {
        self.fail(
            doc,
            &format!("{ptr}/{kw}"),
            format!(
                "property name longer than PROPERTY_NAME_BYTES_MAX ({PROPERTY_NAME_BYTES_MAX})"
            ),
        )
    }

    /// `properties`: each declared name's schema, into the table.
    fn properties(
        &mut self,
        table: &mut Table<'v>,
        doc: usize,
        ptr: &str,
        get: &dyn Fn(&str) -> Option<&'v Value>,
    ) -> Result<(), CompileError> {
        let Some(p) = get("properties") else {
            return Ok(());
        };
        let Value::Object(p) = p else {
            return Err(self.fail(
                doc,
                &format!("{ptr}/properties"),
                "properties must be an object",
            ));
        };
        for (name, s) in p {
            if name.len() > PROPERTY_NAME_BYTES_MAX {
                return Err(self.long_name(doc, ptr, "properties"));
            }
            let sub_ptr = format!("{ptr}/properties/{}", index::escape(name));
            let id = self.node_for(doc, sub_ptr, s)?;
            table.names.insert(name.as_bytes(), (id, u8::MAX, true));
        }
        Ok(())
    }

    /// `required`: a presence bit per name, set in the node's mask.
    fn required(
        &mut self,
        n: &mut Node,
        table: &mut Table<'v>,
        doc: usize,
        ptr: &str,
        get: &dyn Fn(&str) -> Option<&'v Value>,
    ) -> Result<(), CompileError> {
        let Some(r) = get("required") else {
            return Ok(());
        };
        let bad = || {
            self.fail(
                doc,
                &format!("{ptr}/required"),
                "required must be an array of strings",
            )
        };
        let Value::Array(r) = r else {
            return Err(bad());
        };
        for name in r {
            let name = name.as_str().ok_or_else(bad)?;
            if name.len() > PROPERTY_NAME_BYTES_MAX {
                return Err(self.long_name(doc, ptr, "required"));
            }
            let bit = table
                .bit(name)
                .ok_or_else(|| self.too_many_names(doc, ptr, "required"))?;
            n.required_mask |= 1u64 << bit;
        }
        Ok(())
    }

    /// dependentRequired / dependentSchemas, or draft 4-7 dependencies (an
    /// array is the first, a schema the second).
    fn dependencies(
        &mut self,
        table: &mut Table<'v>,
        doc: usize,
        ptr: &str,
        get: &dyn Fn(&str) -> Option<&'v Value>,
    ) -> Result<Deps, CompileError> {
        let at = |kw: &str| format!("{ptr}/{kw}");
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
                    return Err(self.long_name(doc, ptr, kw));
                }
                let trigger = table
                    .bit(name)
                    .ok_or_else(|| self.too_many_names(doc, ptr, kw))?;
                match (kw, dep) {
                    ("dependentRequired" | "dependencies", Value::Array(list)) => {
                        let mask = self.dependency_mask(table, doc, ptr, kw, list)?;
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
        Ok(Deps {
            required: dep_required,
            schemas: dep_schemas,
        })
    }

    /// The presence mask of a dependency list's names.
    fn dependency_mask(
        &self,
        table: &mut Table<'v>,
        doc: usize,
        ptr: &str,
        kw: &str,
        list: &'v [Value],
    ) -> Result<u64, CompileError> {
        let mut mask = 0u64;
        for x in list {
            let Some(x) = x.as_str() else {
                return Err(self.fail(
                    doc,
                    &format!("{ptr}/{kw}"),
                    format!("{kw}: a dependency list must hold strings"),
                ));
            };
            if x.len() > PROPERTY_NAME_BYTES_MAX {
                return Err(self.long_name(doc, ptr, kw));
            }
            mask |= 1u64
                << table
                    .bit(x)
                    .ok_or_else(|| self.too_many_names(doc, ptr, kw))?;
        }
        Ok(mask)
    }

    /// The finished table into the node's sorted property span.
    fn emit_table(
        &mut self,
        n: &mut Node,
        table: Table<'v>,
        doc: usize,
        ptr: &str,
    ) -> Result<(), CompileError> {
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
        Ok(())
    }

    fn pattern_properties(
        &mut self,
        n: &mut Node,
        doc: usize,
        ptr: &str,
        get: &dyn Fn(&str) -> Option<&'v Value>,
    ) -> Result<(), CompileError> {
        let Some(p) = get("patternProperties") else {
            return Ok(());
        };
        let at = format!("{ptr}/patternProperties");
        let Value::Object(p) = p else {
            return Err(self.fail(doc, &at, "patternProperties must be an object"));
        };
        if p.len() > PATTERNS_MAX {
            return Err(self.fail(
                doc,
                &at,
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
        Ok(())
    }
}
