//! Bodies of the frame kinds that carry no tensors.

use crate::field::{is_token, u16_at, u32_at};
use crate::limits::{ERROR_MESSAGE_LEN_MAX, SCHEMA_LEN_MAX, SUBJECT_LEN_MAX};
use crate::{Error, ErrorCode, Frame, Kind};

/// Error body: code u16, message_len u16, message (UTF-8).
pub(crate) const ERROR_FIXED_LEN: usize = 4;
/// Negotiate request body: version_hint u32, subject_len u8, reserved [3], subject.
pub(crate) const NEGOTIATE_REQ_FIXED_LEN: usize = 8;
/// Negotiate response body: schema_id u32, version u32, ttl_ms u32,
/// schema_type u8, reserved [3], schema_len u32, schema.
pub(crate) const NEGOTIATE_RESP_FIXED_LEN: usize = 20;

/// Schema formats known to the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SchemaType {
    /// Apache Avro.
    Avro = 1,
    /// Protocol Buffers.
    Protobuf = 2,
    /// JSON Schema.
    Json = 3,
    /// Sluice tensor signature.
    Tensor = 4,
}

impl SchemaType {
    /// Decodes the wire byte.
    pub const fn from_u8(v: u8) -> Option<SchemaType> {
        Some(match v {
            1 => SchemaType::Avro,
            2 => SchemaType::Protobuf,
            3 => SchemaType::Json,
            4 => SchemaType::Tensor,
            _ => return None,
        })
    }
}

pub(crate) fn check(kind: Kind, body: &[u8]) -> Result<(), Error> {
    match kind {
        Kind::Request | Kind::Response => Ok(()),
        Kind::Ping | Kind::Pong => {
            if body.is_empty() {
                Ok(())
            } else {
                Err(Error::BadBody)
            }
        }
        Kind::Error => {
            let fixed = body.get(..ERROR_FIXED_LEN).ok_or(Error::BadBody)?;
            let len = u16_at(fixed, 2) as usize;
            if len > ERROR_MESSAGE_LEN_MAX || body.len() != ERROR_FIXED_LEN + len {
                return Err(Error::BadBody);
            }
            core::str::from_utf8(&body[ERROR_FIXED_LEN..]).map_err(|_| Error::BadString)?;
            Ok(())
        }
        Kind::NegotiateRequest => {
            let fixed = body.get(..NEGOTIATE_REQ_FIXED_LEN).ok_or(Error::BadBody)?;
            let len = fixed[4] as usize;
            if fixed[5..8] != [0, 0, 0] {
                return Err(Error::Reserved);
            }
            if len == 0 || len > SUBJECT_LEN_MAX || body.len() != NEGOTIATE_REQ_FIXED_LEN + len {
                return Err(Error::BadBody);
            }
            if !is_token(&body[NEGOTIATE_REQ_FIXED_LEN..]) {
                return Err(Error::BadString);
            }
            Ok(())
        }
        Kind::NegotiateResponse => {
            let fixed = body.get(..NEGOTIATE_RESP_FIXED_LEN).ok_or(Error::BadBody)?;
            SchemaType::from_u8(fixed[12]).ok_or(Error::BadBody)?;
            if fixed[13..16] != [0, 0, 0] {
                return Err(Error::Reserved);
            }
            let len = u32_at(fixed, 16) as usize;
            if len > SCHEMA_LEN_MAX || body.len() != NEGOTIATE_RESP_FIXED_LEN + len {
                return Err(Error::BadBody);
            }
            Ok(())
        }
    }
}

/// The body of an error frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorBody<'a> {
    /// Raw code; see [`ErrorCode`]. Unknown codes come from newer peers.
    pub code_raw: u16,
    /// Human-readable message.
    pub message: &'a str,
}

impl ErrorBody<'_> {
    /// The decoded code, if known.
    pub fn code(&self) -> Option<ErrorCode> {
        ErrorCode::from_u16(self.code_raw)
    }
}

/// The body of a schema negotiation request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NegotiateRequest<'a> {
    /// Registry subject.
    pub subject: &'a str,
    /// Wanted version; 0 asks for the latest.
    pub version_hint: u32,
}

/// The body of a schema negotiation response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NegotiateResponse<'a> {
    /// Global schema id.
    pub schema_id: u32,
    /// Version within the subject.
    pub version: u32,
    /// How long the client may cache the answer.
    pub ttl_ms: u32,
    /// Schema format.
    pub schema_type: SchemaType,
    /// Schema text or descriptor bytes.
    pub schema: &'a [u8],
}

impl<B: AsRef<[u8]>> Frame<B> {
    /// The error body, when this is a (checked) error frame.
    pub fn error_body(&self) -> Option<ErrorBody<'_>> {
        if self.kind() != Kind::Error {
            return None;
        }
        let body = self.payload();
        let fixed = body.get(..ERROR_FIXED_LEN)?;
        Some(ErrorBody {
            code_raw: u16_at(fixed, 0),
            message: core::str::from_utf8(body.get(ERROR_FIXED_LEN..)?).ok()?,
        })
    }

    /// The negotiation request body, when this is one.
    pub fn negotiate_request(&self) -> Option<NegotiateRequest<'_>> {
        if self.kind() != Kind::NegotiateRequest {
            return None;
        }
        let body = self.payload();
        let fixed = body.get(..NEGOTIATE_REQ_FIXED_LEN)?;
        Some(NegotiateRequest {
            version_hint: u32_at(fixed, 0),
            subject: core::str::from_utf8(body.get(NEGOTIATE_REQ_FIXED_LEN..)?).ok()?,
        })
    }

    /// The negotiation response body, when this is one.
    pub fn negotiate_response(&self) -> Option<NegotiateResponse<'_>> {
        if self.kind() != Kind::NegotiateResponse {
            return None;
        }
        let body = self.payload();
        let fixed = body.get(..NEGOTIATE_RESP_FIXED_LEN)?;
        Some(NegotiateResponse {
            schema_id: u32_at(fixed, 0),
            version: u32_at(fixed, 4),
            ttl_ms: u32_at(fixed, 8),
            schema_type: SchemaType::from_u8(fixed[12])?,
            schema: body.get(NEGOTIATE_RESP_FIXED_LEN..)?,
        })
    }
}
