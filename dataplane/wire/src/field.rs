//! Byte offsets of the fixed header and little-endian accessors.
//! The layout is specified in `docs/wire.md`; keep both in step.

use core::ops::Range;

pub type Field = Range<usize>;

pub const MAGIC: Field = 0..4;
pub const VERSION: usize = 4;
pub const KIND: usize = 5;
pub const FLAGS: Field = 6..8;
pub const HEADER_LEN: Field = 8..10;
pub const RESERVED0: Field = 10..12;
pub const TENANT_ID: Field = 12..16;
pub const REQUEST_ID: Field = 16..24;
pub const DEADLINE_US: Field = 24..32;
pub const PAYLOAD_LEN: Field = 32..36;
pub const SCHEMA_ID: Field = 36..40;
pub const SCHEMA_VERSION: Field = 40..44;
pub const TOKEN_COUNT: Field = 44..48;
pub const TRACE_ID: Field = 48..64;
pub const SPAN_ID: Field = 64..72;
pub const TRACE_FLAGS: usize = 72;
pub const MODEL_LEN: usize = 73;
pub const MODEL_VERSION_LEN: usize = 74;
pub const ADAPTER_LEN: usize = 75;
pub const INTENT_LEN: usize = 76;
pub const EXT_COUNT: usize = 77;
pub const TENSOR_COUNT: usize = 78;
pub const RESERVED1: usize = 79;
pub const AUTH_TAG: Field = 80..96;

/// Tensor table entry: dtype u8, rank u8, name_len u8, reserved u8,
/// data_offset u32, data_len u32, then rank × u64 dims, then the name.
pub const TENSOR_ENTRY_FIXED_LEN: usize = 12;

#[inline]
pub fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

#[inline]
pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
pub fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

#[inline]
pub fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

#[inline]
pub fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

#[inline]
pub fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Routing strings and extension keys are printable ASCII without spaces.
#[inline]
pub fn is_token(s: &[u8]) -> bool {
    s.iter().all(|&c| (0x21..=0x7e).contains(&c))
}

/// Rounds `n` up to the tensor alignment; `None` on overflow.
#[inline]
pub fn align_up(n: usize) -> Option<usize> {
    n.checked_add(crate::TENSOR_ALIGN - 1)
        .map(|v| v & !(crate::TENSOR_ALIGN - 1))
}
