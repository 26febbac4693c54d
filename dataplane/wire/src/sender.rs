//! The sender header: the extension header `sluice-sender` that names the
//! sender of a signed frame, so that its `request_id` can serve as a
//! counter for replay protection (docs/wire.md, "Replay windows").
//!
//! A receiver that does not know the key ignores it (version 1 grows
//! through extension headers); a receiver that does keeps one sliding
//! window of request ids per (tenant, sender) instead of one entry per
//! frame.

use crate::field::u64_at;

/// Key of the sender extension header.
pub const SENDER_EXT_KEY: &str = "sluice-sender";
/// Length of its value, in bytes: the sender id, a u64.
pub const SENDER_EXT_LEN: usize = 8;

/// The value bytes of a sender header for `sender_id` (not 0).
pub const fn sender_value(sender_id: u64) -> [u8; SENDER_EXT_LEN] {
    sender_id.to_le_bytes()
}

/// Decodes a sender header's value: `None` unless it is exactly 8 bytes
/// and not 0 (such a header names no sender; the frame is handled as one
/// without).
pub fn sender_of(value: &[u8]) -> Option<u64> {
    if value.len() != SENDER_EXT_LEN {
        return None;
    }
    Some(u64_at(value, 0)).filter(|&id| id != 0)
}
