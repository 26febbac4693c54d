//! Pieces the binary formats (Avro, Protobuf) share: varints, nesting
//! depth, and the error constructor.

use crate::Invalid;
use crate::limits::DEPTH_MAX;

/// The message for input that ends inside a value.
pub(crate) const TRUNCATED: &str = "section ends inside a value";

pub(crate) fn invalid(message: &'static str, offset: usize) -> Invalid {
    Invalid { message, offset }
}

/// One level deeper, refused past `DEPTH_MAX`.
pub(crate) fn enter(depth: usize, at: usize) -> Result<usize, Invalid> {
    if depth >= DEPTH_MAX {
        return Err(invalid("nesting deeper than limits::DEPTH_MAX", at));
    }
    Ok(depth + 1)
}

/// A varint in `s[pos..end]`: the value and the position after it.
#[inline(always)]
pub(crate) fn varint(s: &[u8], pos: usize, end: usize) -> Result<(u64, usize), Invalid> {
    // One-byte values (small numbers, most tags) are the common case.
    if pos < end && s[pos] < 0x80 {
        return Ok((u64::from(s[pos]), pos + 1));
    }
    varint_long(s, pos, end)
}

/// A varint of two to ten bytes; the tenth may hold only bit 63.
#[inline(never)]
pub(crate) fn varint_long(s: &[u8], pos: usize, end: usize) -> Result<(u64, usize), Invalid> {
    let mut v: u64 = 0;
    for i in 0..10 {
        if pos + i >= end {
            return Err(invalid(TRUNCATED, pos));
        }
        let b = s[pos + i];
        if i == 9 && b > 1 {
            let message = if b & 0x80 != 0 {
                "varint longer than 10 bytes"
            } else {
                "varint overflows 64 bits"
            };
            return Err(invalid(message, pos));
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok((v, pos + i + 1));
        }
    }
    unreachable!("the tenth byte either ends the varint or is refused")
}
