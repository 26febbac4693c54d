//! The stream header: the extension header `sluice-stream` that makes a
//! request, response or error frame part of a stream (docs/wire.md,
//! "Streams").
//!
//! Version 1 grows through extension headers, so a stream frame is a
//! version-1 frame with one more extension: a receiver that does not know
//! streams ignores the key and answers the frame as a plain request, which
//! a client sees because the answer carries no stream header.

use crate::field::{put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use crate::{Error, Kind};

/// Key of the stream extension header.
pub const STREAM_EXT_KEY: &str = "sluice-stream";
/// Length of its value, in bytes.
pub const STREAM_EXT_LEN: usize = 24;

/// Stream flag bits (the value's byte 12). Bits 4 to 7 are reserved.
pub mod stream_flags {
    /// The first frame of a stream: the appliance makes its state.
    pub const OPEN: u8 = 1 << 0;
    /// A later frame of an open stream.
    pub const CONTINUE: u8 = 1 << 1;
    /// The last frame: the stream ends after it (with OPEN: a one-step stream).
    pub const END: u8 = 1 << 2;
    /// The client abandons the stream; the appliance frees it at once.
    pub const CANCEL: u8 = 1 << 3;
    /// Every defined bit.
    pub const ALL: u8 = OPEN | CONTINUE | END | CANCEL;
}

/// Why a stream ended: the value's byte 13, non-zero only with END.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EndReason {
    /// Not ended (or a request, which never carries a reason).
    None = 0,
    /// The model produced its end-of-sequence token.
    Eos = 1,
    /// `max_tokens` tokens were generated.
    MaxTokens = 2,
    /// The stream's deadline passed.
    Deadline = 3,
    /// The client cancelled the stream.
    Cancelled = 4,
    /// The client's frame carried END.
    Client = 5,
    /// The appliance ended the stream with an error (the error frame says which).
    Error = 6,
}

impl EndReason {
    /// Decodes the byte; unknown values yield `None`.
    pub const fn from_u8(v: u8) -> Option<EndReason> {
        Some(match v {
            0 => EndReason::None,
            1 => EndReason::Eos,
            2 => EndReason::MaxTokens,
            3 => EndReason::Deadline,
            4 => EndReason::Cancelled,
            5 => EndReason::Client,
            6 => EndReason::Error,
            _ => return None,
        })
    }

    /// Stable snake_case name (metrics labels, client APIs).
    pub const fn as_str(self) -> &'static str {
        match self {
            EndReason::None => "none",
            EndReason::Eos => "eos",
            EndReason::MaxTokens => "max_tokens",
            EndReason::Deadline => "deadline",
            EndReason::Cancelled => "cancelled",
            EndReason::Client => "client",
            EndReason::Error => "error",
        }
    }
}

/// The decoded value of a `sluice-stream` extension header.
///
/// | offset | size | field |
/// | ---: | ---: | --- |
/// | 0 | 8 | `stream_id` (u64, not 0) |
/// | 8 | 4 | `seq` (u32) |
/// | 12 | 1 | `flags` ([`stream_flags`]) |
/// | 13 | 1 | `end_reason` ([`EndReason`]) |
/// | 14 | 2 | `tokens_per_frame` (u16; 0 means 1) |
/// | 16 | 4 | `max_tokens` (u32; 0 means the model's default) |
/// | 20 | 4 | reserved, 0 |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct StreamHeader {
    /// Chosen by the client; unique among the open streams of its tenant.
    pub stream_id: u64,
    /// Sequence number of this frame within its direction of the stream.
    pub seq: u32,
    /// Flag bits.
    pub flags: u8,
    /// Why the stream ended (answers with END only).
    pub end_reason: u8,
    /// Tokens per response frame of a token stream (OPEN requests).
    pub tokens_per_frame: u16,
    /// Most tokens a token stream generates (OPEN requests).
    pub max_tokens: u32,
}

impl StreamHeader {
    /// Decodes and checks a value for a frame of `kind`.
    pub fn parse(value: &[u8], kind: Kind) -> Result<StreamHeader, Error> {
        if value.len() != STREAM_EXT_LEN {
            return Err(Error::BadStream);
        }
        if u32_at(value, 20) != 0 {
            return Err(Error::BadStream);
        }
        let h = StreamHeader {
            stream_id: u64_at(value, 0),
            seq: u32_at(value, 8),
            flags: value[12],
            end_reason: value[13],
            tokens_per_frame: u16_at(value, 14),
            max_tokens: u32_at(value, 16),
        };
        h.check(kind)?;
        Ok(h)
    }

    /// The rules of docs/wire.md ("Stream header"), for a frame of `kind`.
    pub fn check(&self, kind: Kind) -> Result<(), Error> {
        use stream_flags::*;
        if !matches!(kind, Kind::Request | Kind::Response | Kind::Error) || self.stream_id == 0 {
            return Err(Error::BadStream);
        }
        let f = self.flags;
        // Exactly one of OPEN, CONTINUE, CANCEL; END joins OPEN or CONTINUE.
        if f & !ALL != 0 || (f & (OPEN | CONTINUE | CANCEL)).count_ones() != 1 {
            return Err(Error::BadStream);
        }
        if f & CANCEL != 0 && f & END != 0 {
            return Err(Error::BadStream);
        }
        let reason = EndReason::from_u8(self.end_reason).ok_or(Error::BadStream)?;
        let may_end = f & END != 0 && kind != Kind::Request;
        if reason != EndReason::None && !may_end {
            return Err(Error::BadStream);
        }
        Ok(())
    }

    /// The value bytes.
    pub fn to_bytes(&self) -> [u8; STREAM_EXT_LEN] {
        let mut b = [0u8; STREAM_EXT_LEN];
        put_u64(&mut b, 0, self.stream_id);
        put_u32(&mut b, 8, self.seq);
        b[12] = self.flags;
        b[13] = self.end_reason;
        put_u16(&mut b, 14, self.tokens_per_frame);
        put_u32(&mut b, 16, self.max_tokens);
        b
    }

    /// Whether `flag` is set.
    pub const fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// The end reason, decoded (a checked header always has one).
    pub fn reason(&self) -> EndReason {
        EndReason::from_u8(self.end_reason).unwrap_or(EndReason::Error)
    }

    /// Tokens per frame with 0 read as 1.
    pub fn tokens_per_frame_or_1(&self) -> u16 {
        self.tokens_per_frame.max(1)
    }
}
