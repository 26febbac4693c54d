//! The Sluice wire format, version 1.
//!
//! A frame is a fixed 96-byte header, a variable header (routing strings,
//! extension headers, tensor table) and a body. Tensor data lives in the body,
//! 64-byte aligned relative to the frame start, so a receiver whose buffer is
//! 64-byte aligned can hand the bytes to a SIMD kernel or ONNX Runtime in place.
//!
//! [`Frame`] is a view over any `AsRef<[u8]>`; [`Frame::new_checked`] proves
//! every bound once, after which the getters cannot read out of bounds.
//! [`FrameRepr`] describes a frame and emits it into a caller buffer without
//! allocating. `docs/wire.md` is the byte-exact specification; its hex examples
//! are parsed by this crate's tests.
#![no_std]
#![deny(unsafe_code)]
#![warn(missing_docs)]
// The wire format is where a silent truncation would corrupt a frame: every
// narrowing conversion is checked.
#![deny(clippy::cast_possible_truncation)]

#[cfg(test)]
extern crate std;

mod auth;
mod batch;
mod body;
mod dtype;
mod error;
mod field;
mod frame;
mod repr;
mod sender;
mod stream;

pub use auth::{AUTH_TAG_LEN, TenantKey};
pub use batch::{BatchKey, BatchSlot};
pub use body::{ErrorBody, NegotiateRequest, NegotiateResponse, SchemaType};
pub use dtype::DType;
pub use error::{Error, ErrorCode, Reject};
pub use frame::{Extension, Frame, Kind, TensorDesc, TraceContext, flags};
pub use repr::{BodyRepr, ExtRepr, FrameRepr, Layout, TensorRepr};
pub use sender::{SENDER_EXT_KEY, SENDER_EXT_LEN, sender_of, sender_value};
pub use stream::{EndReason, STREAM_EXT_KEY, STREAM_EXT_LEN, StreamHeader, stream_flags};

/// Wire format version this crate reads and writes.
pub const VERSION: u8 = 1;
/// The four magic bytes that open every frame: "SLCE".
pub const MAGIC: [u8; 4] = *b"SLCE";
/// Length of the fixed header.
pub const FIXED_HEADER_LEN: usize = 96;
/// Alignment of tensor data, relative to the frame start.
pub const TENSOR_ALIGN: usize = 64;
/// Name of the tensor-table entry that carries a request's structured
/// section (JSON, Avro or Protobuf bytes, checked against the schema the
/// header names). It is a rank-1 `UINT8` tensor; models never see it unless
/// they declare an input of this name.
pub const SECTION_TENSOR_NAME: &str = "$section";

/// Explicit limits. Every one is checked on parse and on build.
pub mod limits {
    /// Longest model name, in bytes.
    pub const MODEL_NAME_LEN_MAX: usize = 64;
    /// Longest model version, in bytes.
    pub const MODEL_VERSION_LEN_MAX: usize = 32;
    /// Longest LoRA adapter id, in bytes.
    pub const ADAPTER_LEN_MAX: usize = 64;
    /// Longest intent, in bytes.
    pub const INTENT_LEN_MAX: usize = 32;
    /// Most extension headers in one frame.
    pub const EXT_COUNT_MAX: usize = 16;
    /// Longest extension key, in bytes.
    pub const EXT_KEY_LEN_MAX: usize = 32;
    /// Longest extension value, in bytes.
    pub const EXT_VALUE_LEN_MAX: usize = 255;
    /// Most tensors in one frame.
    pub const TENSOR_COUNT_MAX: usize = 16;
    /// Longest tensor name, in bytes.
    pub const TENSOR_NAME_LEN_MAX: usize = 64;
    /// Highest tensor rank.
    pub const RANK_MAX: usize = 8;
    /// Longest header (fixed + variable), in bytes.
    pub const HEADER_LEN_MAX: usize = 4096;
    /// Longest frame, in bytes (256 MiB).
    pub const FRAME_LEN_MAX: usize = 256 << 20;
    /// Longest error message, in bytes.
    pub const ERROR_MESSAGE_LEN_MAX: usize = 256;
    /// Longest schema subject, in bytes.
    pub const SUBJECT_LEN_MAX: usize = 255;
    /// Largest schema carried in a negotiation response (48 KiB: fits one datagram).
    pub const SCHEMA_LEN_MAX: usize = 48 << 10;
}
