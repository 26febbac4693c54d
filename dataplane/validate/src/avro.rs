//! Avro binary-encoding validator.
//!
//! The section holds one Avro datum in the binary encoding, with no
//! Confluent framing: no magic byte, no schema id, no message-index prefix.
//! The schema id and version travel in the Sluice frame header, so the
//! caller has already picked the schema.
//!
//! [`AvroSchema::compile`] parses the schema JSON once (control path) into a
//! flat node table; [`AvroSchema::validate`] walks the bytes against it
//! without allocating. What is checked:
//! - varints: at most 10 bytes for a long (the tenth byte carries one bit),
//!   at most 5 bytes and within the i32 range for an int;
//! - lengths of bytes and strings: non-negative and within the section;
//! - strings and map keys: valid UTF-8;
//! - booleans: the byte is 0 or 1;
//! - enum symbol and union branch indices: in range;
//! - array and map blocks: a negative count is followed by the block's byte
//!   size, which must match the bytes its items take;
//! - nesting of records, arrays and maps: at most [`crate::limits::DEPTH_MAX`];
//! - items: at most [`ITEMS_MAX`] array and map items in one section, so a
//!   tiny input cannot declare 2^62 items of a zero-byte type (null, an empty
//!   record) and keep a worker busy or a downstream decoder allocating;
//! - the whole section is one datum: trailing bytes are refused.
//!
//! Logical types (decimal, uuid, date, timestamps, duration, ...) are
//! validated as their underlying type: a `uuid` string is checked as a
//! UTF-8 string, not as a UUID. Defaults, aliases and `order` do not affect
//! the binary encoding and are not checked.
//!
//! Names follow the Avro specification: a name with a dot is a full name,
//! otherwise the namespace is the `namespace` attribute or the enclosing
//! named type's namespace. A reference without a dot is looked up in the
//! enclosing namespace first, then in the null namespace (as Java's parser
//! does). A named type is usable inside its own definition (recursive types).
//! Each [`Reference`] schema is parsed first, in the order given
//! (dependencies first, as Confluent resolves them), and defines named types
//! that the schema can use by name.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use crate::binary::{TRUNCATED, enter, invalid, varint_long};
use crate::limits::NODES_MAX;
use crate::{CompileError, Invalid, Reference};

/// Most array and map items (summed over all blocks) one section may
/// declare. Items of zero-byte types cost no input, so the input length
/// alone does not bound them.
pub const ITEMS_MAX: u64 = 1 << 20;

/// Largest `fixed` size a schema may declare, in bytes.
pub const FIXED_SIZE_MAX_BYTES: u64 = 1 << 30;

/// A compiled Avro schema: a flat node table walked by [`AvroSchema::validate`].
#[derive(Debug, Clone)]
pub struct AvroSchema {
    nodes: Vec<Node>,
    /// Children of records (fields that take bytes, in order) and unions
    /// (branches, in order).
    edges: Vec<u32>,
    root: u32,
}

/// One type in the validator's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    /// Always encodes to no bytes: null, fixed of size 0, and records whose
    /// fields are all of this kind.
    Zero,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    /// Only the fields that take bytes, in order.
    Record {
        first: u32,
        len: u32,
    },
    Enum {
        symbols: u32,
    },
    Array {
        items: u32,
    },
    Map {
        values: u32,
    },
    Union {
        first: u32,
        len: u32,
    },
    /// Size > 0.
    Fixed {
        size: u32,
    },
}

impl AvroSchema {
    /// Compiles an Avro schema (JSON text) and the schemas it references.
    ///
    /// Errors name where the problem is: the reference (if any) and a JSON
    /// pointer into its schema.
    pub fn compile(text: &str, refs: &[Reference]) -> Result<AvroSchema, CompileError> {
        let mut c = Compiler::new();
        for r in refs {
            let json: Value = serde_json::from_str(r.schema).map_err(|e| {
                CompileError(format!(
                    "avro reference {:?}: schema is not valid JSON: {e}",
                    r.name
                ))
            })?;
            c.parse(&json, "", &mut String::new())
                .map_err(|e| CompileError(format!("avro reference {:?}: {}", r.name, e.0)))?;
        }
        let json: Value = serde_json::from_str(text)
            .map_err(|e| CompileError(format!("avro schema is not valid JSON: {e}")))?;
        let root = c
            .parse(&json, "", &mut String::new())
            .map_err(|e| CompileError(format!("avro schema: {}", e.0)))?;
        Ok(c.finish(root))
    }

    /// Checks that `section` is exactly one datum of this schema in the Avro
    /// binary encoding. Never allocates.
    pub fn validate(&self, section: &[u8]) -> Result<(), Invalid> {
        let mut c = Cursor {
            s: section,
            pos: 0,
            items: 0,
        };
        self.value(&mut c, self.root, 0)?;
        if c.pos != section.len() {
            return Err(invalid("trailing bytes after the value", c.pos));
        }
        Ok(())
    }

    /// Number of nodes in the compiled table.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    fn value(&self, c: &mut Cursor<'_>, mut node: u32, depth: usize) -> Result<(), Invalid> {
        // Loops only through union branches (a union never holds a union).
        loop {
            match self.nodes[node as usize] {
                Node::Zero => {}
                Node::Boolean => c.boolean()?,
                Node::Int => {
                    c.int()?;
                }
                Node::Long => {
                    c.long()?;
                }
                Node::Float => c.skip(4)?,
                Node::Double => c.skip(8)?,
                Node::Fixed { size } => c.skip(size as usize)?,
                Node::Bytes => {
                    c.len_prefixed()?;
                }
                Node::String => c.string("string is not valid UTF-8")?,
                Node::Enum { symbols } => {
                    let at = c.pos;
                    let i = c.int()?;
                    if i < 0 || i as u32 >= symbols {
                        return Err(invalid("enum symbol index out of range", at));
                    }
                }
                Node::Union { first, len } => {
                    let at = c.pos;
                    let i = c.int()?;
                    if i < 0 || i as u32 >= len {
                        return Err(invalid("union branch index out of range", at));
                    }
                    node = self.edges[(first + i as u32) as usize];
                    continue;
                }
                Node::Record { first, len } => {
                    let depth = enter(depth, c.pos)?;
                    for &field in &self.edges[first as usize..(first + len) as usize] {
                        self.value(c, field, depth)?;
                    }
                }
                Node::Array { items } => {
                    let depth = enter(depth, c.pos)?;
                    self.blocks(c, items, false, depth)?;
                }
                Node::Map { values } => {
                    let depth = enter(depth, c.pos)?;
                    self.blocks(c, values, true, depth)?;
                }
            }
            return Ok(());
        }
    }

    /// The blocks of an array or a map, up to and including the zero count.
    fn blocks(
        &self,
        c: &mut Cursor<'_>,
        item: u32,
        is_map: bool,
        depth: usize,
    ) -> Result<(), Invalid> {
        loop {
            let at = c.pos;
            let count = c.long()?;
            if count == 0 {
                return Ok(());
            }
            let mut block_end = None;
            let count = if count < 0 {
                let size_at = c.pos;
                let size = c.long()?;
                if size < 0 {
                    return Err(invalid("block byte size is negative", size_at));
                }
                if size as u64 > c.remaining() as u64 {
                    return Err(invalid(
                        "block byte size runs past the end of the section",
                        size_at,
                    ));
                }
                block_end = Some(c.pos + size as usize);
                count.unsigned_abs()
            } else {
                count as u64
            };
            c.items += count;
            if c.items > ITEMS_MAX {
                return Err(invalid("more than ITEMS_MAX array or map items", at));
            }
            let node = self.nodes[item as usize];
            match (is_map, node) {
                // Fixed-width items: one bounds check for the whole block.
                (false, Node::Zero) => {}
                (false, Node::Float) => c.skip_items(count, 4)?,
                (false, Node::Double) => c.skip_items(count, 8)?,
                (false, Node::Fixed { size }) => c.skip_items(count, u64::from(size))?,
                (false, Node::Long) => {
                    for _ in 0..count {
                        c.long()?;
                    }
                }
                (false, Node::Int) => {
                    for _ in 0..count {
                        c.int()?;
                    }
                }
                _ => {
                    for _ in 0..count {
                        if is_map {
                            c.string("map key is not valid UTF-8")?;
                        }
                        self.value(c, item, depth)?;
                    }
                }
            }
            if block_end.is_some_and(|end| c.pos != end) {
                return Err(invalid("block byte size does not match its items", at));
            }
        }
    }
}

/// Most strings are ASCII, which `is_ascii` checks a word at a time inline.
#[inline]
fn is_utf8(b: &[u8]) -> bool {
    b.is_ascii() || std::str::from_utf8(b).is_ok()
}

struct Cursor<'a> {
    s: &'a [u8],
    pos: usize,
    items: u64,
}

impl Cursor<'_> {
    #[inline]
    fn remaining(&self) -> usize {
        self.s.len() - self.pos
    }

    #[inline]
    fn skip(&mut self, n: usize) -> Result<(), Invalid> {
        if n > self.remaining() {
            return Err(invalid(TRUNCATED, self.pos));
        }
        self.pos += n;
        Ok(())
    }

    /// `count` items of `width` bytes each.
    #[inline]
    fn skip_items(&mut self, count: u64, width: u64) -> Result<(), Invalid> {
        match count.checked_mul(width) {
            Some(n) if n <= self.remaining() as u64 => {
                self.pos += n as usize;
                Ok(())
            }
            _ => Err(invalid(TRUNCATED, self.pos)),
        }
    }

    #[inline]
    fn boolean(&mut self) -> Result<(), Invalid> {
        match self.s.get(self.pos) {
            Some(0 | 1) => {
                self.pos += 1;
                Ok(())
            }
            Some(_) => Err(invalid("boolean byte is neither 0 nor 1", self.pos)),
            None => Err(invalid(TRUNCATED, self.pos)),
        }
    }

    /// A zigzag long: at most 10 bytes, the tenth holding only bit 63.
    #[inline]
    fn long(&mut self) -> Result<i64, Invalid> {
        let start = self.pos;
        // One-byte values are the common case.
        if let Some(&b) = self.s.get(start)
            && b < 0x80
        {
            self.pos = start + 1;
            return Ok(i64::from(b >> 1) ^ -i64::from(b & 1));
        }
        let (v, next) = varint_long(self.s, start, self.s.len())?;
        self.pos = next;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    /// A zigzag int: at most 5 bytes, within the i32 range.
    #[inline]
    fn int(&mut self) -> Result<i32, Invalid> {
        let start = self.pos;
        if let Some(&b) = self.s.get(start)
            && b < 0x80
        {
            self.pos = start + 1;
            return Ok(i32::from(b >> 1) ^ -i32::from(b & 1));
        }
        let mut v: u64 = 0;
        for i in 0..5 {
            let Some(&b) = self.s.get(start + i) else {
                return Err(invalid(TRUNCATED, start));
            };
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                self.pos = start + i + 1;
                let n = ((v >> 1) as i64) ^ -((v & 1) as i64);
                return i32::try_from(n).map_err(|_| invalid("int out of 32-bit range", start));
            }
        }
        Err(invalid("int varint longer than 5 bytes", start))
    }

    /// A long length, then that many bytes; returns the start of the bytes.
    #[inline]
    fn len_prefixed(&mut self) -> Result<usize, Invalid> {
        let at = self.pos;
        let n = self.long()?;
        if n < 0 {
            return Err(invalid("negative length", at));
        }
        if n as u64 > self.remaining() as u64 {
            return Err(invalid("length runs past the end of the section", at));
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(start)
    }

    #[inline]
    fn string(&mut self, message: &'static str) -> Result<(), Invalid> {
        let start = self.len_prefixed()?;
        if !is_utf8(&self.s[start..self.pos]) {
            return Err(invalid(message, start));
        }
        Ok(())
    }
}

/// Node as parsed, before zero-byte types are folded away.
#[derive(Debug, Clone)]
enum Draft {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    String,
    /// A named type whose definition is being parsed.
    Pending,
    Record(Vec<u32>),
    Enum(u32),
    Array(u32),
    Map(u32),
    Union(Vec<u32>),
    Fixed(u32),
}

const PRIMITIVES: [(&str, Draft); 8] = [
    ("null", Draft::Null),
    ("boolean", Draft::Boolean),
    ("int", Draft::Int),
    ("long", Draft::Long),
    ("float", Draft::Float),
    ("double", Draft::Double),
    ("bytes", Draft::Bytes),
    ("string", Draft::String),
];

struct Compiler {
    drafts: Vec<Draft>,
    /// Full name -> node of every named type defined so far.
    names: HashMap<String, u32>,
}

impl Compiler {
    fn new() -> Compiler {
        // Primitives share nodes 0..8.
        Compiler {
            drafts: PRIMITIVES.iter().map(|(_, d)| d.clone()).collect(),
            names: HashMap::new(),
        }
    }

    fn push(&mut self, d: Draft, path: &str) -> Result<u32, CompileError> {
        if self.drafts.len() >= NODES_MAX {
            return Err(err(
                path,
                format!("more than {NODES_MAX} nodes (limits::NODES_MAX)"),
            ));
        }
        self.drafts.push(d);
        Ok((self.drafts.len() - 1) as u32)
    }

    /// Parses one schema value; `ns` is the enclosing namespace ("" = null);
    /// `path` is a JSON pointer to it, for errors.
    fn parse(&mut self, v: &Value, ns: &str, path: &mut String) -> Result<u32, CompileError> {
        match v {
            Value::String(name) => self.lookup(name, ns, path),
            Value::Array(branches) => self.union(branches, ns, path),
            Value::Object(obj) => self.complex(obj, ns, path),
            _ => Err(err(
                path,
                "a type must be a string, an array (union) or an object",
            )),
        }
    }

    fn lookup(&self, name: &str, ns: &str, path: &str) -> Result<u32, CompileError> {
        if let Some(i) = PRIMITIVES.iter().position(|(p, _)| *p == name) {
            return Ok(i as u32);
        }
        let found = if name.contains('.') || ns.is_empty() {
            self.names.get(name)
        } else {
            self.names
                .get(&format!("{ns}.{name}"))
                .or_else(|| self.names.get(name))
        };
        found
            .copied()
            .ok_or_else(|| err(path, format!("unknown type name {name:?}")))
    }

    fn union(
        &mut self,
        branches: &[Value],
        ns: &str,
        path: &mut String,
    ) -> Result<u32, CompileError> {
        let mut kids = Vec::with_capacity(branches.len());
        // Avro allows one branch per unnamed kind, one per named full name.
        let mut seen: HashSet<String> = HashSet::new();
        for (i, b) in branches.iter().enumerate() {
            let len = path.len();
            path.push_str(&format!("/{i}"));
            let kid = self.parse(b, ns, path)?;
            let key = match &self.drafts[kid as usize] {
                Draft::Union(_) => {
                    return Err(err(path, "a union may not directly contain a union"));
                }
                Draft::Record(_) | Draft::Enum(_) | Draft::Fixed(_) | Draft::Pending => self
                    .names
                    .iter()
                    .find(|(_, n)| **n == kid)
                    .map(|(name, _)| name.clone())
                    .unwrap_or_default(),
                Draft::Array(_) => "array".into(),
                Draft::Map(_) => "map".into(),
                d => PRIMITIVES
                    .iter()
                    .find(|(_, p)| std::mem::discriminant(p) == std::mem::discriminant(d))
                    .map(|(n, _)| (*n).to_owned())
                    .unwrap_or_default(),
            };
            if !seen.insert(key.clone()) {
                return Err(err(path, format!("union has two branches of type {key:?}")));
            }
            path.truncate(len);
            kids.push(kid);
        }
        self.push(Draft::Union(kids), path)
    }

    fn complex(
        &mut self,
        obj: &Map<String, Value>,
        ns: &str,
        path: &mut String,
    ) -> Result<u32, CompileError> {
        let ty = obj
            .get("type")
            .ok_or_else(|| err(path, "object has no \"type\""))?;
        let ty = match ty {
            Value::String(t) => t.as_str(),
            // {"type": {...}} and {"type": [...]} name the inner schema.
            other => {
                let len = path.len();
                path.push_str("/type");
                let n = self.parse(other, ns, path)?;
                path.truncate(len);
                return Ok(n);
            }
        };
        match ty {
            "record" | "error" => self.record(obj, ns, path),
            "enum" => {
                let (full, _) = self.define(obj, ns, path)?;
                let symbols = match obj.get("symbols") {
                    Some(Value::Array(s)) => s,
                    _ => return Err(err(path, "enum has no \"symbols\" array")),
                };
                let mut seen = HashSet::new();
                for (i, s) in symbols.iter().enumerate() {
                    let Some(s) = s.as_str().filter(|s| valid_name(s)) else {
                        return Err(err(path, format!("enum symbol {i} is not a valid name")));
                    };
                    if !seen.insert(s) {
                        return Err(err(path, format!("enum symbol {s:?} appears twice")));
                    }
                }
                let n =
                    u32::try_from(symbols.len()).map_err(|_| err(path, "too many enum symbols"))?;
                self.finish_named(&full, Draft::Enum(n))
            }
            "fixed" => {
                let (full, _) = self.define(obj, ns, path)?;
                let size = obj
                    .get("size")
                    .and_then(Value::as_u64)
                    .ok_or_else(|| err(path, "fixed has no non-negative integer \"size\""))?;
                if size > FIXED_SIZE_MAX_BYTES {
                    return Err(err(
                        path,
                        format!("fixed size {size} exceeds FIXED_SIZE_MAX_BYTES"),
                    ));
                }
                self.finish_named(&full, Draft::Fixed(size as u32))
            }
            "array" => {
                let items = obj
                    .get("items")
                    .ok_or_else(|| err(path, "array has no \"items\""))?;
                let len = path.len();
                path.push_str("/items");
                let items = self.parse(items, ns, path)?;
                path.truncate(len);
                self.push(Draft::Array(items), path)
            }
            "map" => {
                let values = obj
                    .get("values")
                    .ok_or_else(|| err(path, "map has no \"values\""))?;
                let len = path.len();
                path.push_str("/values");
                let values = self.parse(values, ns, path)?;
                path.truncate(len);
                self.push(Draft::Map(values), path)
            }
            // A primitive written as an object, e.g. with a logicalType, or a
            // reference to a named type.
            name => {
                let len = path.len();
                path.push_str("/type");
                let n = self.lookup(name, ns, path)?;
                path.truncate(len);
                Ok(n)
            }
        }
    }

    fn record(
        &mut self,
        obj: &Map<String, Value>,
        ns: &str,
        path: &mut String,
    ) -> Result<u32, CompileError> {
        let (full, slot) = self.define(obj, ns, path)?;
        let inner_ns = namespace_of(&full).to_owned();
        let fields = match obj.get("fields") {
            Some(Value::Array(f)) => f,
            _ => return Err(err(path, "record has no \"fields\" array")),
        };
        let mut kids = Vec::with_capacity(fields.len());
        let mut seen = HashSet::new();
        for (i, f) in fields.iter().enumerate() {
            let len = path.len();
            path.push_str(&format!("/fields/{i}"));
            let Value::Object(f) = f else {
                return Err(err(path, "a field must be an object"));
            };
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| valid_name(n))
                .ok_or_else(|| err(path, "field has no valid \"name\""))?;
            if !seen.insert(name) {
                return Err(err(path, format!("field {name:?} appears twice")));
            }
            let ty = f
                .get("type")
                .ok_or_else(|| err(path, format!("field {name:?} has no \"type\"")))?;
            path.push_str("/type");
            let kid = self.parse(ty, &inner_ns, path)?;
            path.truncate(len);
            kids.push(kid);
        }
        self.drafts[slot as usize] = Draft::Record(kids);
        Ok(slot)
    }

    /// Registers a named type's full name, pointing at a pending slot, so
    /// that its own definition can refer to it.
    fn define(
        &mut self,
        obj: &Map<String, Value>,
        ns: &str,
        path: &str,
    ) -> Result<(String, u32), CompileError> {
        let name = obj
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| err(path, "named type has no \"name\""))?;
        let full = if name.contains('.') {
            name.to_owned()
        } else {
            let own_ns = match obj.get("namespace") {
                Some(Value::String(s)) => s.as_str(),
                Some(Value::Null) | None => ns,
                Some(_) => return Err(err(path, "\"namespace\" must be a string")),
            };
            if own_ns.is_empty() {
                name.to_owned()
            } else {
                format!("{own_ns}.{name}")
            }
        };
        if !full.split('.').all(valid_name) {
            return Err(err(path, format!("{full:?} is not a valid full name")));
        }
        let simple = full.rsplit('.').next().unwrap_or(&full);
        if PRIMITIVES.iter().any(|(p, _)| *p == simple) {
            return Err(err(path, format!("{full:?} redefines a primitive type")));
        }
        if self.names.contains_key(&full) {
            return Err(err(path, format!("named type {full:?} is defined twice")));
        }
        let slot = self.push(Draft::Pending, path)?;
        self.names.insert(full.clone(), slot);
        Ok((full, slot))
    }

    fn finish_named(&mut self, full: &str, d: Draft) -> Result<u32, CompileError> {
        let slot = self.names[full];
        self.drafts[slot as usize] = d;
        Ok(slot)
    }

    /// Folds zero-byte types into `Node::Zero` and lays out the final table.
    fn finish(self, root: u32) -> AvroSchema {
        let n = self.drafts.len();
        // Least fixpoint: a record takes no bytes if all its fields take
        // none. A record that contains itself unconditionally has no finite
        // value and stays non-zero (validation then hits DEPTH_MAX).
        let mut zero: Vec<bool> = self
            .drafts
            .iter()
            .map(|d| matches!(d, Draft::Null | Draft::Fixed(0)))
            .collect();
        loop {
            let mut changed = false;
            for i in 0..n {
                if let Draft::Record(fields) = &self.drafts[i]
                    && !zero[i]
                    && fields.iter().all(|&f| zero[f as usize])
                {
                    zero[i] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let mut edges = Vec::new();
        let nodes = self
            .drafts
            .iter()
            .enumerate()
            .map(|(i, d)| {
                if zero[i] {
                    return Node::Zero;
                }
                match d {
                    Draft::Null => Node::Zero,
                    Draft::Boolean => Node::Boolean,
                    Draft::Int => Node::Int,
                    Draft::Long => Node::Long,
                    Draft::Float => Node::Float,
                    Draft::Double => Node::Double,
                    Draft::Bytes => Node::Bytes,
                    Draft::String => Node::String,
                    // Every pending slot is filled once its definition parses.
                    Draft::Pending => Node::Zero,
                    Draft::Record(fields) => {
                        let first = edges.len() as u32;
                        edges.extend(fields.iter().copied().filter(|&f| !zero[f as usize]));
                        Node::Record {
                            first,
                            len: edges.len() as u32 - first,
                        }
                    }
                    Draft::Enum(symbols) => Node::Enum { symbols: *symbols },
                    Draft::Array(items) => Node::Array { items: *items },
                    Draft::Map(values) => Node::Map { values: *values },
                    Draft::Union(branches) => {
                        let first = edges.len() as u32;
                        edges.extend_from_slice(branches);
                        Node::Union {
                            first,
                            len: branches.len() as u32,
                        }
                    }
                    Draft::Fixed(size) => Node::Fixed { size: *size },
                }
            })
            .collect();
        AvroSchema { nodes, edges, root }
    }
}

fn namespace_of(full: &str) -> &str {
    full.rfind('.').map_or("", |i| &full[..i])
}

/// `[A-Za-z_][A-Za-z0-9_]*`, per the Avro specification.
fn valid_name(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

fn err(path: &str, what: impl std::fmt::Display) -> CompileError {
    let at = if path.is_empty() { "/" } else { path };
    CompileError(format!("at {at}: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zigzag_long_round_trips_extremes() {
        let s = AvroSchema::compile("\"long\"", &[]).unwrap();
        // i64::MIN zigzags to u64::MAX: ten bytes, the last 0x01.
        let mut max = [0xffu8; 10];
        max[9] = 0x01;
        assert_eq!(s.validate(&max), Ok(()));
        max[9] = 0x02;
        assert_eq!(
            s.validate(&max).unwrap_err().message,
            "varint overflows 64 bits"
        );
    }
}
