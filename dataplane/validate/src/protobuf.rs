//! Protobuf wire-format validator.
//!
//! The section holds one serialized message, with no Confluent framing: no
//! magic byte, no schema id, no message-index prefix. The schema id and
//! version travel in the Sluice frame header, and the message type is chosen
//! when the schema is compiled (Confluent's default is the first message of
//! the file, message index `[0]`).
//!
//! [`ProtobufSchema::compile`] compiles the `.proto` text with protox (the
//! schema under [`SCHEMA_FILE_NAME`], each [`Reference`] under its name as the
//! import path, the well-known `google/protobuf/*.proto` files built in) into
//! a `FileDescriptorSet`, then into a flat table of the messages reachable
//! from the top-level one. [`ProtobufSchema::validate`] walks the wire format
//! against it without allocating, as a parser that keeps unknown fields
//! would:
//! - tags: a varint of at most 32 bits, field number ≥ 1, wire type 0..5;
//! - varints: at most 10 bytes, the tenth holding only bit 63;
//! - known fields: the declared wire type; repeated numeric fields accept
//!   both packed (length-delimited) and unpacked encodings, as parsers do;
//!   packed runs must hold whole values;
//! - lengths: within the enclosing message;
//! - nested messages and groups: validated in turn, nesting at most
//!   [`crate::limits::DEPTH_MAX`]; groups (proto2) are supported, including
//!   unknown ones, and must end with the matching end-group tag;
//! - strings: valid UTF-8 in proto3 files (proto2 does not require it);
//! - proto2 `required` fields: present (at most [`REQUIRED_FIELDS_MAX`] per
//!   message);
//! - unknown fields: skipped by their wire type;
//! - the whole section is one message: nothing may follow it.
//!
//! Values are not range-checked: parsers truncate an int32 varint, accept
//! any enum number (open enums, or unknown fields for closed ones) and any
//! nonzero bool. Extensions declared in the schema are validated like
//! fields of the message they extend.

use std::collections::{HashMap, VecDeque};

use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FieldDescriptorProto, FileDescriptorSet};
use protox::file::{File, FileResolver, GoogleFileResolver};

use crate::binary::{TRUNCATED, enter, invalid, varint};
use crate::limits::NODES_MAX;
use crate::{CompileError, Invalid, Reference};

/// File name the schema text is compiled under (imports resolve relative to
/// nothing: references are found by their exact name).
pub const SCHEMA_FILE_NAME: &str = "sluice_section_schema.proto";

/// Most proto2 `required` fields one message may have (presence is tracked
/// in a 64-bit mask).
pub const REQUIRED_FIELDS_MAX: usize = 64;

/// Field numbers up to this get a direct lookup table; larger ones are
/// found by binary search.
const DIRECT_NUMBER_MAX: u32 = 128;

/// A compiled Protobuf schema: a flat table of messages walked by
/// [`ProtobufSchema::validate`].
#[derive(Debug, Clone)]
pub struct ProtobufSchema {
    messages: Vec<Message>,
    /// Fields of all messages; each message's run is sorted by number.
    fields: Vec<Field>,
    /// Direct lookup: `direct[m.direct_first + number]` is a field index + 1,
    /// or 0 for unknown.
    direct: Vec<u32>,
    root_name: String,
}

#[derive(Debug, Clone, Copy)]
struct Message {
    fields_first: u32,
    fields_len: u32,
    /// Index in `direct` of field number 0 of this message.
    direct_first: u32,
    /// Numbers 0..=direct_len-1 are in the direct table.
    direct_len: u32,
    /// Bits of the required fields.
    required_mask: u64,
}

#[derive(Debug, Clone, Copy)]
struct Field {
    number: u32,
    kind: Kind,
    /// Repeated numeric field: packed runs are accepted.
    packable: bool,
    /// Bit in the message's required mask, or none.
    required_bit: Option<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Varint,
    Fixed32,
    Fixed64,
    /// Length-delimited; `utf8` when the syntax requires valid UTF-8.
    String {
        utf8: bool,
    },
    Bytes,
    /// Length-delimited message: index in `messages`.
    Message(u32),
    /// Start-group .. end-group message: index in `messages`.
    Group(u32),
}

const WIRE_VARINT: u64 = 0;
const WIRE_FIXED64: u64 = 1;
const WIRE_LEN: u64 = 2;
const WIRE_START_GROUP: u64 = 3;
const WIRE_END_GROUP: u64 = 4;
const WIRE_FIXED32: u64 = 5;

impl ProtobufSchema {
    /// Compiles `.proto` text (and the files it imports, from `refs` or the
    /// well-known types) and picks the top-level message: `message` by full
    /// name (`pkg.Outer.Inner`, a leading dot allowed), else the first
    /// message declared in the file.
    pub fn compile(
        text: &str,
        refs: &[Reference],
        message: Option<&str>,
    ) -> Result<ProtobufSchema, CompileError> {
        let set = compile_set(text, refs)?;
        Builder::build(&set, message)
    }

    /// Checks that `section` is exactly one encoded message of the
    /// top-level type. Never allocates.
    pub fn validate(&self, section: &[u8]) -> Result<(), Invalid> {
        let end = self.message(section, 0, section.len(), 0, 0, 0)?;
        debug_assert_eq!(end, section.len());
        Ok(())
    }

    /// Full name of the top-level message (without a leading dot).
    pub fn message_name(&self) -> &str {
        &self.root_name
    }

    /// Number of messages in the compiled table.
    pub fn message_count(&self) -> usize {
        self.messages.len()
    }

    #[inline]
    fn field(&self, m: &Message, number: u32) -> Option<&Field> {
        if number < m.direct_len {
            let i = self.direct[(m.direct_first + number) as usize];
            return (i != 0).then(|| &self.fields[i as usize - 1]);
        }
        let run = &self.fields[m.fields_first as usize..(m.fields_first + m.fields_len) as usize];
        run.binary_search_by_key(&number, |f| f.number)
            .ok()
            .map(|i| &run[i])
    }

    /// Validates message `msg` in `s[pos..end]`. With `group == 0` the
    /// message runs to `end` exactly; otherwise it ends at the end-group tag
    /// of field `group`, and the position after that tag is returned.
    fn message(
        &self,
        s: &[u8],
        mut pos: usize,
        end: usize,
        msg: u32,
        group: u32,
        depth: usize,
    ) -> Result<usize, Invalid> {
        let m = self.messages[msg as usize];
        let mut seen: u64 = 0;
        loop {
            if pos == end {
                if group != 0 {
                    return Err(invalid("group has no end-group tag", pos));
                }
                break;
            }
            let tag_at = pos;
            let (number, wire) = tag(s, &mut pos, end)?;
            if wire == WIRE_END_GROUP {
                if group == 0 {
                    return Err(invalid("end-group tag without a start-group", tag_at));
                }
                if number != group {
                    return Err(invalid(
                        "end-group tag does not match the open group",
                        tag_at,
                    ));
                }
                break;
            }
            let Some(f) = self.field(&m, number) else {
                pos = skip(s, pos, end, wire, number, depth)?;
                continue;
            };
            if let Some(bit) = f.required_bit {
                seen |= 1 << bit;
            }
            pos = match (f.kind, wire) {
                (Kind::Varint, WIRE_VARINT) => varint(s, pos, end)?.1,
                (Kind::Fixed32, WIRE_FIXED32) => fixed(s, pos, end, 4)?,
                (Kind::Fixed64, WIRE_FIXED64) => fixed(s, pos, end, 8)?,
                (Kind::Varint, WIRE_LEN) if f.packable => {
                    let (start, stop) = len(s, pos, end)?;
                    packed_varints(s, start, stop)?;
                    stop
                }
                (Kind::Fixed32, WIRE_LEN) if f.packable => packed_fixed(s, pos, end, 4)?,
                (Kind::Fixed64, WIRE_LEN) if f.packable => packed_fixed(s, pos, end, 8)?,
                (Kind::String { utf8 }, WIRE_LEN) => {
                    let (start, stop) = len(s, pos, end)?;
                    let b = &s[start..stop];
                    // Most strings are ASCII, which `is_ascii` checks a word at a time inline.
                    if utf8 && !b.is_ascii() && std::str::from_utf8(b).is_err() {
                        return Err(invalid("string is not valid UTF-8", start));
                    }
                    stop
                }
                (Kind::Bytes, WIRE_LEN) => len(s, pos, end)?.1,
                (Kind::Message(sub), WIRE_LEN) => {
                    let (start, stop) = len(s, pos, end)?;
                    let depth = enter(depth, tag_at)?;
                    self.message(s, start, stop, sub, 0, depth)?
                }
                (Kind::Group(sub), WIRE_START_GROUP) => {
                    let depth = enter(depth, tag_at)?;
                    self.message(s, pos, end, sub, number, depth)?
                }
                _ => return Err(invalid("wrong wire type for the declared field", tag_at)),
            };
        }
        if seen & m.required_mask != m.required_mask {
            return Err(invalid("required field missing", pos));
        }
        Ok(pos)
    }
}

/// A tag: field number and wire type; advances `pos`.
#[inline(always)]
fn tag(s: &[u8], pos: &mut usize, end: usize) -> Result<(u32, u64), Invalid> {
    let at = *pos;
    let (key, next) = varint(s, at, end)?;
    if key > u64::from(u32::MAX) {
        return Err(invalid("tag varint exceeds 32 bits", at));
    }
    let wire = key & 7;
    if wire > WIRE_FIXED32 {
        return Err(invalid("wire type 6 or 7 is invalid", at));
    }
    let number = (key >> 3) as u32;
    if number == 0 {
        return Err(invalid("field number 0 is invalid", at));
    }
    *pos = next;
    Ok((number, wire))
}

#[inline]
fn fixed(s: &[u8], pos: usize, end: usize, n: usize) -> Result<usize, Invalid> {
    let _ = s;
    if end - pos < n {
        return Err(invalid(TRUNCATED, pos));
    }
    Ok(pos + n)
}

/// A length prefix and the bytes it covers: `(start, stop)` of the bytes.
#[inline(always)]
fn len(s: &[u8], pos: usize, end: usize) -> Result<(usize, usize), Invalid> {
    let (n, start) = varint(s, pos, end)?;
    if n > (end - start) as u64 {
        return Err(invalid(
            "length runs past the end of the enclosing message",
            pos,
        ));
    }
    Ok((start, start + n as usize))
}

/// A packed run of varints: each at most 10 bytes (the tenth holding only
/// bit 63), the last one ending exactly at `stop`. Only the continuation
/// bits matter, so no value is assembled.
fn packed_varints(s: &[u8], start: usize, stop: usize) -> Result<(), Invalid> {
    let mut value_at = start;
    for (i, &b) in s[start..stop].iter().enumerate() {
        let p = start + i;
        if b < 0x80 {
            if p - value_at == 9 && b > 1 {
                return Err(invalid("varint overflows 64 bits", value_at));
            }
            value_at = p + 1;
        } else if p - value_at == 9 {
            return Err(invalid("varint longer than 10 bytes", value_at));
        }
    }
    if value_at != stop {
        return Err(invalid("packed varint runs past its length", value_at));
    }
    Ok(())
}

fn packed_fixed(s: &[u8], pos: usize, end: usize, width: usize) -> Result<usize, Invalid> {
    let (start, stop) = len(s, pos, end)?;
    if (stop - start) % width != 0 {
        return Err(invalid(
            "packed fixed-width run is not a whole number of values",
            pos,
        ));
    }
    Ok(stop)
}

/// Skips an unknown field's value; returns the position after it.
fn skip(
    s: &[u8],
    pos: usize,
    end: usize,
    wire: u64,
    number: u32,
    depth: usize,
) -> Result<usize, Invalid> {
    match wire {
        WIRE_VARINT => Ok(varint(s, pos, end)?.1),
        WIRE_FIXED64 => fixed(s, pos, end, 8),
        WIRE_LEN => Ok(len(s, pos, end)?.1),
        WIRE_FIXED32 => fixed(s, pos, end, 4),
        WIRE_START_GROUP => {
            let depth = enter(depth, pos)?;
            let mut p = pos;
            loop {
                if p == end {
                    return Err(invalid("group has no end-group tag", p));
                }
                let tag_at = p;
                let (inner, w) = tag(s, &mut p, end)?;
                if w == WIRE_END_GROUP {
                    if inner != number {
                        return Err(invalid(
                            "end-group tag does not match the open group",
                            tag_at,
                        ));
                    }
                    return Ok(p);
                }
                p = skip(s, p, end, w, inner, depth)?;
            }
        }
        // An end-group tag is handled by the caller.
        _ => Err(invalid("end-group tag without a start-group", pos)),
    }
}

/// The in-memory file resolver: the schema under [`SCHEMA_FILE_NAME`], each
/// reference under its name, then protox's well-known types.
struct Resolver {
    files: HashMap<String, String>,
    google: GoogleFileResolver,
}

impl FileResolver for Resolver {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        match self.files.get(name) {
            Some(text) => File::from_source(name, text),
            None => self.google.open_file(name),
        }
    }
}

fn compile_set(text: &str, refs: &[Reference]) -> Result<FileDescriptorSet, CompileError> {
    let mut files = HashMap::new();
    files.insert(SCHEMA_FILE_NAME.to_owned(), text.to_owned());
    for r in refs {
        if r.name == SCHEMA_FILE_NAME {
            return Err(CompileError(format!(
                "protobuf reference name {SCHEMA_FILE_NAME:?} is reserved for the schema itself"
            )));
        }
        if files
            .insert(r.name.to_owned(), r.schema.to_owned())
            .is_some()
        {
            return Err(CompileError(format!(
                "protobuf reference {:?} is given twice",
                r.name
            )));
        }
    }
    let resolver = Resolver {
        files,
        google: GoogleFileResolver::new(),
    };
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.include_imports(true);
    compiler
        .open_file(SCHEMA_FILE_NAME)
        .map_err(|e| CompileError(format!("protobuf schema: {e}")))?;
    Ok(compiler.file_descriptor_set())
}

/// Where a message type is declared, and what its file requires.
struct Declared<'a> {
    proto: &'a DescriptorProto,
    proto3: bool,
}

struct Builder<'a> {
    /// Fully-qualified name (leading dot) -> declaration.
    declared: HashMap<String, Declared<'a>>,
    /// Extensions by extendee (leading dot).
    extensions: HashMap<String, Vec<(&'a FieldDescriptorProto, bool)>>,
    /// Name -> index in the table, for messages already queued.
    index: HashMap<String, u32>,
    queue: VecDeque<String>,
    out: ProtobufSchema,
}

impl<'a> Builder<'a> {
    fn build(
        set: &'a FileDescriptorSet,
        message: Option<&str>,
    ) -> Result<ProtobufSchema, CompileError> {
        let mut b = Builder {
            declared: HashMap::new(),
            extensions: HashMap::new(),
            index: HashMap::new(),
            queue: VecDeque::new(),
            out: ProtobufSchema {
                messages: Vec::new(),
                fields: Vec::new(),
                direct: Vec::new(),
                root_name: String::new(),
            },
        };
        let mut first_in_schema = None;
        for file in &set.file {
            let proto3 = match file.syntax() {
                "" | "proto2" => false,
                "proto3" => true,
                other => {
                    return Err(CompileError(format!(
                        "protobuf file {:?}: syntax {other:?} is not supported",
                        file.name()
                    )));
                }
            };
            let package = file.package();
            let prefix = if package.is_empty() {
                String::new()
            } else {
                format!(".{package}")
            };
            if file.name() == SCHEMA_FILE_NAME {
                first_in_schema = file
                    .message_type
                    .first()
                    .map(|m| format!("{prefix}.{}", m.name()));
            }
            for ext in &file.extension {
                b.extensions
                    .entry(ext.extendee().to_owned())
                    .or_default()
                    .push((ext, proto3));
            }
            for m in &file.message_type {
                b.declare(&prefix, m, proto3);
            }
        }
        let root = match message {
            Some(name) => {
                let full = if name.starts_with('.') {
                    name.to_owned()
                } else {
                    format!(".{name}")
                };
                if !b.declared.contains_key(&full) {
                    return Err(CompileError(format!(
                        "protobuf schema declares no message {name:?}"
                    )));
                }
                full
            }
            None => first_in_schema
                .ok_or_else(|| CompileError("protobuf schema declares no message".to_owned()))?,
        };
        b.out.root_name = root[1..].to_owned();
        b.queued(&root)?;
        while let Some(name) = b.queue.pop_front() {
            b.lay_out(&name)?;
        }
        Ok(b.out)
    }

    fn declare(&mut self, prefix: &str, m: &'a DescriptorProto, proto3: bool) {
        let full = format!("{prefix}.{}", m.name());
        for ext in &m.extension {
            self.extensions
                .entry(ext.extendee().to_owned())
                .or_default()
                .push((ext, proto3));
        }
        for nested in &m.nested_type {
            self.declare(&full, nested, proto3);
        }
        self.declared.insert(full, Declared { proto: m, proto3 });
    }

    /// Index of a message in the table, queuing its layout the first time.
    fn queued(&mut self, name: &str) -> Result<u32, CompileError> {
        if let Some(&i) = self.index.get(name) {
            return Ok(i);
        }
        if !self.declared.contains_key(name) {
            return Err(CompileError(format!(
                "protobuf schema refers to unknown message {name:?}"
            )));
        }
        if self.index.len() >= NODES_MAX {
            return Err(CompileError(format!(
                "protobuf schema reaches more than {NODES_MAX} messages (limits::NODES_MAX)"
            )));
        }
        let i = self.index.len() as u32;
        self.index.insert(name.to_owned(), i);
        self.queue.push_back(name.to_owned());
        self.out.messages.push(Message {
            fields_first: 0,
            fields_len: 0,
            direct_first: 0,
            direct_len: 0,
            required_mask: 0,
        });
        Ok(i)
    }

    fn lay_out(&mut self, name: &str) -> Result<(), CompileError> {
        let d = &self.declared[name];
        let (proto, proto3) = (d.proto, d.proto3);
        let mut all: Vec<(&FieldDescriptorProto, bool)> =
            proto.field.iter().map(|f| (f, proto3)).collect();
        if let Some(exts) = self.extensions.get(name) {
            all.extend(exts.iter().copied());
        }
        let mut fields = Vec::with_capacity(all.len());
        let mut required_mask = 0u64;
        let mut required = 0usize;
        for (f, proto3) in all {
            let at = || format!("protobuf field {name}.{}", f.name());
            let number = u32::try_from(f.number())
                .ok()
                .filter(|n| (1..1 << 29).contains(n))
                .ok_or_else(|| CompileError(format!("{}: number out of range", at())))?;
            let repeated = f.label() == Label::Repeated;
            let kind = match f.r#type() {
                Type::Int32
                | Type::Int64
                | Type::Uint32
                | Type::Uint64
                | Type::Sint32
                | Type::Sint64
                | Type::Bool
                | Type::Enum => Kind::Varint,
                Type::Fixed32 | Type::Sfixed32 | Type::Float => Kind::Fixed32,
                Type::Fixed64 | Type::Sfixed64 | Type::Double => Kind::Fixed64,
                Type::String => Kind::String { utf8: proto3 },
                Type::Bytes => Kind::Bytes,
                Type::Message => Kind::Message(self.queued(f.type_name())?),
                Type::Group => Kind::Group(self.queued(f.type_name())?),
            };
            let required_bit = if f.label() == Label::Required {
                if required == REQUIRED_FIELDS_MAX {
                    return Err(CompileError(format!(
                        "{}: more than REQUIRED_FIELDS_MAX ({REQUIRED_FIELDS_MAX}) required fields in one message",
                        at()
                    )));
                }
                required_mask |= 1 << required;
                required += 1;
                Some((required - 1) as u8)
            } else {
                None
            };
            let packable = repeated && matches!(kind, Kind::Varint | Kind::Fixed32 | Kind::Fixed64);
            fields.push(Field {
                number,
                kind,
                packable,
                required_bit,
            });
        }
        fields.sort_by_key(|f| f.number);
        if let Some(w) = fields.windows(2).find(|w| w[0].number == w[1].number) {
            return Err(CompileError(format!(
                "protobuf message {name}: field number {} is used twice",
                w[0].number
            )));
        }
        let i = self.index[name] as usize;
        let fields_first = self.out.fields.len() as u32;
        let direct_len = fields
            .iter()
            .map(|f| f.number)
            .filter(|&n| n <= DIRECT_NUMBER_MAX)
            .max()
            .map_or(0, |n| n + 1);
        let direct_first = self.out.direct.len() as u32;
        self.out
            .direct
            .resize((direct_first + direct_len) as usize, 0);
        for (k, f) in fields.iter().enumerate() {
            if f.number < direct_len {
                self.out.direct[(direct_first + f.number) as usize] = fields_first + k as u32 + 1;
            }
        }
        self.out.messages[i] = Message {
            fields_first,
            fields_len: fields.len() as u32,
            direct_first,
            direct_len,
            required_mask,
        };
        self.out.fields.extend(fields);
        if self.out.messages.len() + self.out.fields.len() > NODES_MAX {
            return Err(CompileError(format!(
                "protobuf schema reaches more than {NODES_MAX} messages and fields (limits::NODES_MAX)"
            )));
        }
        Ok(())
    }
}
