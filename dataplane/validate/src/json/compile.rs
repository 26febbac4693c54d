//! Control path, second phase: the indexed documents to the flat node
//! table. References resolve against the base URI of the schema resource
//! they sit in (`$id`), anchors against that resource's anchors; keywords
//! apply only in the drafts (and vocabularies) that define them. The
//! per-keyword part is in keywords.rs.

use std::collections::HashMap;
use std::fmt::Display;

use serde_json::Value;

use super::index::{Index, escape};
use super::regex::Regex;
use super::uri;
use super::*;
use crate::limits::NODES_MAX;

/// Most schema resources (`$id`s and documents) one compile may index.
const RESOURCES_MAX: usize = u16::MAX as usize;

pub(super) struct Compiler<'v> {
    pub ix: &'v Index,
    pub options: &'v CompileOptions,
    pub out: JsonSchema,
    /// Location of each node, for messages.
    pub locs: Vec<String>,
    memo: HashMap<(usize, String), u32>,
    queue: Vec<(u32, usize, &'v Value, String)>,
    /// Compiled patterns by source, shared by identical patterns.
    pub regex_memo: HashMap<String, u32>,
    /// Bytes of DFA tables so far (limited by REGEX_TOTAL_BYTES_MAX).
    pub regex_bytes: usize,
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

pub(crate) fn compile(
    text: &str,
    refs: &[Reference<'_>],
    options: &CompileOptions,
) -> Result<JsonSchema, CompileError> {
    let ix = Index::build(text, refs, options)?;
    if ix.resources.len() > RESOURCES_MAX {
        return Err(CompileError(format!(
            "more than {RESOURCES_MAX} schema resources"
        )));
    }
    let mut c = Compiler {
        ix: &ix,
        options,
        out: JsonSchema {
            nodes: Vec::new(),
            edges: Vec::new(),
            props: Vec::new(),
            consts: Vec::new(),
            const_bytes: Vec::new(),
            regexes: Vec::new(),
            pattern_props: Vec::new(),
            dep_required: Vec::new(),
            dep_schemas: Vec::new(),
            dyn_refs: Vec::new(),
            dyn_targets: Vec::new(),
            dynamic: false,
            root: 0,
            unenforced: Vec::new(),
        },
        locs: Vec::new(),
        memo: HashMap::new(),
        queue: Vec::new(),
        regex_memo: HashMap::new(),
        regex_bytes: 0,
    };
    c.out.root = c.node_for(0, String::new(), &ix.docs[0].value)?;
    while let Some((id, doc, v, ptr)) = c.queue.pop() {
        c.compile_node(id, doc, v, &ptr)?;
    }
    c.check_chains()?;
    c.out.dynamic = c.out.dyn_refs.iter().any(|d| !d.candidates.is_empty());
    c.out.unenforced.sort();
    c.out.unenforced.dedup();
    Ok(c.out)
}

impl<'v> Compiler<'v> {
    pub fn loc(&self, doc: usize, ptr: &str) -> String {
        format!("{}#{ptr}", self.ix.docs[doc].name)
    }

    pub fn fail(&self, doc: usize, ptr: &str, what: impl Display) -> CompileError {
        CompileError(format!("{what} at {}", self.loc(doc, ptr)))
    }

    /// Notes something the hot path does not enforce (not for the bundled
    /// meta-schemas, which nobody wrote by hand).
    pub fn unenforced(&mut self, doc: usize, ptr: &str, what: impl Display) {
        if !self.ix.docs[doc].bundled {
            let loc = self.loc(doc, ptr);
            self.out.unenforced.push(format!("{what} at {loc}"));
        }
    }

    /// The node for the schema `v` at `ptr` in `doc`, allocated and queued
    /// for compilation on first sight (refs to it then share it).
    pub fn node_for(&mut self, doc: usize, ptr: String, v: &'v Value) -> Result<u32, CompileError> {
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

    pub fn sub(&mut self, doc: usize, ptr: &str, v: &'v Value) -> Result<u32, CompileError> {
        self.node_for(doc, ptr.to_string(), v)
    }

    /// The value at the JSON pointer `ptr` (already decoded into tokens
    /// joined by '/', escaped) from the root of `doc`.
    fn at_pointer(&self, doc: usize, ptr: &str) -> Option<&'v Value> {
        let mut v = &self.ix.docs[doc].value;
        for tok in ptr.split('/').skip(1) {
            let t = tok.replace("~1", "/").replace("~0", "~");
            v = match v {
                Value::Object(m) => m.get(&t)?,
                Value::Array(a) => a.get(t.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        Some(v)
    }

    /// Resolves the reference `r` written at `at` (a keyword of the schema
    /// at `ptr` in `doc`) to the resource it names and the pointer of its
    /// target in that resource's document, and whether the fragment named
    /// a dynamic anchor.
    pub fn locate(
        &self,
        doc: usize,
        ptr: &str,
        at: &str,
        r: &str,
    ) -> Result<(usize, String, Option<String>), CompileError> {
        let ix = self.ix;
        let res = ix.resource_of(doc, ptr);
        let abs = uri::resolve(&ix.resources[res].uri, r);
        let (u, frag) = uri::split_fragment(&abs);
        let raw = uri::split_fragment(r).0;
        let target = ix.by_uri.get(u).copied().or_else(|| {
            let d = *ix.names.get(raw)?;
            ix.resources
                .iter()
                .position(|x| x.doc == d && x.ptr.is_empty())
        });
        let Some(target) = target else {
            return Err(self.fail(
                doc,
                at,
                format!("unresolvable $ref {r:?} (resolved to {u:?}: no pushed reference or $id has that URI)"),
            ));
        };
        let Some(frag) = percent_decode(frag) else {
            return Err(self.fail(doc, at, format!("bad percent-encoding in $ref {r:?}")));
        };
        let t = &ix.resources[target];
        if frag.is_empty() {
            return Ok((t.doc, t.ptr.clone(), None));
        }
        if frag.starts_with('/') {
            let mut p = t.ptr.clone();
            for tok in frag.split('/').skip(1) {
                p.push('/');
                p.push_str(&escape(&tok.replace("~1", "/").replace("~0", "~")));
            }
            return Ok((t.doc, p, None));
        }
        match ix.anchors.get(&(target, frag.clone())) {
            Some(a) => Ok((t.doc, a.ptr.clone(), a.dynamic.then_some(frag))),
            None => Err(self.fail(
                doc,
                at,
                format!("$ref {r:?}: no anchor {frag:?} in {:?}", t.uri),
            )),
        }
    }

    /// The node a `$ref` names.
    pub fn resolve(
        &mut self,
        doc: usize,
        ptr: &str,
        at: &str,
        r: &str,
    ) -> Result<u32, CompileError> {
        let (d, p, _) = self.locate(doc, ptr, at, r)?;
        let Some(v) = self.at_pointer(d, &p) else {
            return Err(self.fail(doc, at, format!("$ref {r:?} points to nothing")));
        };
        self.node_for(d, p, v)
    }

    /// A `$dynamicRef` (2020-12) or `$recursiveRef` (2019-09): its static
    /// target and, when that target opts in (a `$dynamicAnchor` of the
    /// fragment's name, a resource with `$recursiveAnchor: true`), every
    /// resource's alternative, chosen on the hot path by the dynamic scope.
    pub fn dynamic_ref(
        &mut self,
        doc: usize,
        ptr: &str,
        at: &str,
        r: &str,
        recursive: bool,
    ) -> Result<u32, CompileError> {
        let (d, p, anchor) = self.locate(doc, ptr, at, r)?;
        let Some(v) = self.at_pointer(d, &p) else {
            return Err(self.fail(doc, at, format!("$ref {r:?} points to nothing")));
        };
        let target = self.node_for(d, p.clone(), v)?;
        let ix = self.ix;
        let mut cands: Vec<(usize, usize, String)> = Vec::new();
        if recursive {
            let res = ix.resource_of(d, &p);
            let root = &ix.resources[res];
            if root.recursive_anchor && root.doc == d && root.ptr == p {
                for (k, x) in ix.resources.iter().enumerate() {
                    if x.recursive_anchor {
                        cands.push((k, x.doc, x.ptr.clone()));
                    }
                }
            }
        } else if let Some(name) = anchor
            && let Some(list) = ix.dynamic.get(&name)
        {
            for (res, p) in list {
                cands.push((*res, ix.resources[*res].doc, p.clone()));
            }
        }
        cands.sort_by_key(|c| c.0);
        cands.dedup_by_key(|c| c.0);
        let start = self.out.dyn_targets.len() as u32;
        for (res, d, p) in cands {
            let Some(v) = self.at_pointer(d, &p) else {
                continue;
            };
            let node = self.node_for(d, p, v)?;
            self.out.dyn_targets.push((res as u16, node));
        }
        self.out.dyn_refs.push(DynRef {
            target,
            candidates: Span {
                start,
                end: self.out.dyn_targets.len() as u32,
            },
        });
        Ok((self.out.dyn_refs.len() - 1) as u32)
    }

    pub fn push_const(&mut self, v: &Value) -> u32 {
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

    /// Compiles an ECMA-262 pattern (shared when repeated).
    pub fn regex(&mut self, doc: usize, at: &str, src: &str) -> Result<u32, CompileError> {
        if let Some(&k) = self.regex_memo.get(src) {
            return Ok(k);
        }
        let re =
            Regex::new(src).map_err(|e| self.fail(doc, at, format!("pattern {src:?}: {e}")))?;
        self.regex_bytes += re.memory_bytes();
        if self.regex_bytes > REGEX_TOTAL_BYTES_MAX {
            return Err(self.fail(
                doc,
                at,
                format!("patterns need more than REGEX_TOTAL_BYTES_MAX ({REGEX_TOTAL_BYTES_MAX}) bytes of DFA tables"),
            ));
        }
        self.out.regexes.push(re);
        let k = (self.out.regexes.len() - 1) as u32;
        self.regex_memo.insert(src.to_string(), k);
        Ok(k)
    }

    fn compile_node(
        &mut self,
        id: u32,
        doc: usize,
        v: &'v Value,
        ptr: &str,
    ) -> Result<(), CompileError> {
        let mut n = Node::any();
        n.resource = self.ix.resource_of(doc, ptr) as u16;
        match v {
            Value::Bool(true) => {}
            Value::Bool(false) => {
                n.falsy = true;
                n.checks = true;
            }
            Value::Object(m) => self.object(&mut n, doc, m, ptr)?,
            _ => return Err(self.fail(doc, ptr, "a schema must be an object or a boolean")),
        }
        self.out.nodes[id as usize] = n;
        Ok(())
    }

    /// Nodes applied to the same value as `n` (no descent into it).
    fn same_span(&self, n: &Node) -> Vec<u32> {
        let o = &self.out;
        let e = &o.edges;
        let mut v: Vec<u32> = vec![n.ref_, n.not, n.if_, n.then_, n.else_];
        v.extend(&e[n.all_of.range()]);
        v.extend(&e[n.any_of.range()]);
        v.extend(&e[n.one_of.range()]);
        v.extend(o.dep_schemas[n.dep_schemas.range()].iter().map(|d| d.1));
        if n.dyn_ref != NONE {
            let d = &o.dyn_refs[n.dyn_ref as usize];
            v.push(d.target);
            v.extend(o.dyn_targets[d.candidates.range()].iter().map(|t| t.1));
        }
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
