//! Validators for the structured payload section of a request (docs/wire.md,
//! "Structured section"). Each schema is compiled once, on the control path,
//! into a flat node table; `validate` walks the bytes against it without
//! allocating, with explicit depth and size limits, so it can run on a worker.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod avro;
mod binary;
pub mod json;
pub mod protobuf;

/// Limits shared by every format.
pub mod limits {
    /// Deepest nesting a section may have (objects, arrays, records,
    /// messages). Deeper input is refused, never recursed into.
    pub const DEPTH_MAX: usize = 64;
    /// Most nodes a compiled schema may have.
    pub const NODES_MAX: usize = 16_384;
}

/// Why a section does not match its schema. Messages are static so the
/// hot path never formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalid {
    /// What is wrong, for the error frame.
    pub message: &'static str,
    /// Byte offset in the section where it was found.
    pub offset: usize,
}

/// Why a schema could not be compiled for the data plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileError(pub String);

impl std::fmt::Display for CompileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CompileError {}

/// A schema referenced by name from another (Confluent `references`): the
/// name the referring schema uses, and the referenced schema's text.
#[derive(Debug, Clone, Copy)]
pub struct Reference<'a> {
    /// Name used by the referring schema (an import path, a `$ref` URL, an
    /// Avro full name's schema).
    pub name: &'a str,
    /// The referenced schema text.
    pub schema: &'a str,
}
