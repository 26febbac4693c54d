//! A checked description of a frame, emitted into a caller buffer.

use crate::body::{ERROR_FIXED_LEN, NEGOTIATE_REQ_FIXED_LEN, NEGOTIATE_RESP_FIXED_LEN};
use crate::field::{self, put_u16, put_u32, put_u64};
use crate::limits::*;
use crate::{
    DType, Error, ErrorCode, FIXED_HEADER_LEN, Frame, Kind, MAGIC, SchemaType, TraceContext,
    VERSION,
};

/// A tensor to be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorRepr<'a> {
    /// Tensor name.
    pub name: &'a str,
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub dims: &'a [u64],
    /// Data to copy in; `None` reserves the region for the caller to fill
    /// (the engine lets ONNX Runtime write outputs there).
    pub data: Option<&'a [u8]>,
}

/// An extension header to be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtRepr<'a> {
    /// Key.
    pub key: &'a str,
    /// Value.
    pub value: &'a [u8],
}

impl<'a> ExtRepr<'a> {
    /// The stream extension header with `value` (from
    /// [`crate::StreamHeader::to_bytes`]).
    pub const fn stream(value: &'a [u8; crate::STREAM_EXT_LEN]) -> ExtRepr<'a> {
        ExtRepr {
            key: crate::STREAM_EXT_KEY,
            value,
        }
    }

    /// The sender extension header with `value` (from
    /// [`crate::sender_value`]).
    pub const fn sender(value: &'a [u8; crate::SENDER_EXT_LEN]) -> ExtRepr<'a> {
        ExtRepr {
            key: crate::SENDER_EXT_KEY,
            value,
        }
    }
}

/// The body of a frame kind without tensors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BodyRepr<'a> {
    /// No body: requests, responses (their body is tensor data), ping, pong.
    #[default]
    None,
    /// Error code and message.
    Error {
        /// Code.
        code: ErrorCode,
        /// Message; truncated to the limit at a character boundary.
        message: &'a str,
    },
    /// Schema negotiation request.
    NegotiateRequest {
        /// Subject.
        subject: &'a str,
        /// Wanted version; 0 for latest.
        version_hint: u32,
    },
    /// Schema negotiation response.
    NegotiateResponse {
        /// Global schema id.
        schema_id: u32,
        /// Version within the subject.
        version: u32,
        /// Cache lifetime.
        ttl_ms: u32,
        /// Format.
        schema_type: SchemaType,
        /// Schema bytes.
        schema: &'a [u8],
    },
}

/// A frame to be emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRepr<'a> {
    /// Kind.
    pub kind: Kind,
    /// Flag bits.
    pub flags: u16,
    /// Request id.
    pub request_id: u64,
    /// Tenant id.
    pub tenant_id: u32,
    /// Absolute deadline, µs since the Unix epoch; 0 for none.
    pub deadline_us: u64,
    /// Schema id; 0 for none.
    pub schema_id: u32,
    /// Schema version.
    pub schema_version: u32,
    /// Token count.
    pub token_count: u32,
    /// Trace context.
    pub trace: TraceContext,
    /// Model name.
    pub model: &'a str,
    /// Model version.
    pub model_version: &'a str,
    /// LoRA adapter id.
    pub adapter: &'a str,
    /// Intent.
    pub intent: &'a str,
    /// Extension headers.
    pub extensions: &'a [ExtRepr<'a>],
    /// Tensors (requests and responses only).
    pub tensors: &'a [TensorRepr<'a>],
    /// Body of the other kinds.
    pub body: BodyRepr<'a>,
}

impl Default for FrameRepr<'_> {
    fn default() -> Self {
        FrameRepr {
            kind: Kind::Request,
            flags: 0,
            request_id: 0,
            tenant_id: 0,
            deadline_us: 0,
            schema_id: 0,
            schema_version: 0,
            token_count: 0,
            trace: TraceContext::default(),
            model: "",
            model_version: "",
            adapter: "",
            intent: "",
            extensions: &[],
            tensors: &[],
            body: BodyRepr::None,
        }
    }
}

/// Where each part of an emitted frame lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Header length.
    pub header_len: usize,
    /// Whole frame length.
    pub frame_len: usize,
    /// Data offset of each tensor, in order.
    pub tensor_offsets: [usize; TENSOR_COUNT_MAX],
}

/// A length `layout` has checked against its limit, in the width of its
/// wire field (u8, u16, u32): never truncated, refused if it would be.
fn len_u8(n: usize) -> Result<u8, Error> {
    u8::try_from(n).map_err(|_| Error::FieldTooLong)
}

fn len_u16(n: usize) -> Result<u16, Error> {
    u16::try_from(n).map_err(|_| Error::FieldTooLong)
}

fn len_u32(n: usize) -> Result<u32, Error> {
    u32::try_from(n).map_err(|_| Error::TooLarge)
}

/// Truncates to at most `max` bytes on a character boundary.
fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl<'a> FrameRepr<'a> {
    /// The header of an answer of `kind`: the one place that sets what
    /// every answer echoes from its request (request id, tenant id, trace
    /// context). The rest is left at its default for the caller to fill.
    pub fn answer(
        kind: Kind,
        request_id: u64,
        tenant_id: u32,
        trace: TraceContext,
    ) -> FrameRepr<'a> {
        FrameRepr {
            kind,
            request_id,
            tenant_id,
            trace,
            ..FrameRepr::default()
        }
    }

    /// The header of a response to `request` (a checked frame): the echoed
    /// fields, its model, version and token count. Tensors are the caller's.
    pub fn response_to<B: AsRef<[u8]>>(request: &'a Frame<B>) -> FrameRepr<'a> {
        FrameRepr {
            model: request.model(),
            model_version: request.model_version(),
            token_count: request.token_count(),
            ..FrameRepr::answer(
                Kind::Response,
                request.request_id(),
                request.tenant_id(),
                request.trace(),
            )
        }
    }

    /// An error answer to `request` (a checked frame), echoing its id,
    /// tenant and trace.
    pub fn error_for<B: AsRef<[u8]>>(
        request: &Frame<B>,
        code: ErrorCode,
        message: &'a str,
    ) -> FrameRepr<'a> {
        FrameRepr {
            body: BodyRepr::Error { code, message },
            ..FrameRepr::answer(
                Kind::Error,
                request.request_id(),
                request.tenant_id(),
                request.trace(),
            )
        }
    }

    /// Checks every limit and computes the layout.
    pub fn layout(&self) -> Result<Layout, Error> {
        let strings = [
            (self.model, MODEL_NAME_LEN_MAX),
            (self.model_version, MODEL_VERSION_LEN_MAX),
            (self.adapter, ADAPTER_LEN_MAX),
            (self.intent, INTENT_LEN_MAX),
        ];
        let mut header_len = FIXED_HEADER_LEN;
        for (s, max) in strings {
            if s.len() > max {
                return Err(Error::FieldTooLong);
            }
            if !field::is_token(s.as_bytes()) {
                return Err(Error::BadString);
            }
            header_len += s.len();
        }
        if self.flags & !crate::flags::ALL != 0 {
            return Err(Error::Reserved);
        }
        if self.extensions.len() > EXT_COUNT_MAX {
            return Err(Error::TooManyExtensions);
        }
        let mut streams = 0;
        for e in self.extensions {
            if e.key == crate::STREAM_EXT_KEY {
                streams += 1;
                if streams > 1 {
                    return Err(Error::BadStream);
                }
                crate::StreamHeader::parse(e.value, self.kind)?;
            }
            if e.key.is_empty()
                || e.key.len() > EXT_KEY_LEN_MAX
                || e.value.len() > EXT_VALUE_LEN_MAX
            {
                return Err(Error::FieldTooLong);
            }
            if !field::is_token(e.key.as_bytes()) {
                return Err(Error::BadString);
            }
            header_len += 2 + e.key.len() + e.value.len();
        }
        if self.tensors.len() > TENSOR_COUNT_MAX
            || (!self.tensors.is_empty() && !self.kind.has_tensors())
        {
            return Err(Error::TooManyTensors);
        }
        for t in self.tensors {
            if t.name.is_empty() || t.name.len() > TENSOR_NAME_LEN_MAX {
                return Err(Error::FieldTooLong);
            }
            if !field::is_token(t.name.as_bytes()) {
                return Err(Error::BadString);
            }
            if t.dims.len() > RANK_MAX {
                return Err(Error::BadRank);
            }
            header_len += field::TENSOR_ENTRY_FIXED_LEN + 8 * t.dims.len() + t.name.len();
        }
        if header_len > HEADER_LEN_MAX {
            return Err(Error::BadHeaderLen);
        }
        let mut tensor_offsets = [0usize; TENSOR_COUNT_MAX];
        let mut end = header_len;
        for (i, t) in self.tensors.iter().enumerate() {
            let len = t.dtype.byte_len(t.dims).ok_or(Error::SizeOverflow)?;
            if t.data.is_some_and(|d| d.len() != len) {
                return Err(Error::BadTensorLen);
            }
            let off = field::align_up(end).ok_or(Error::TooLarge)?;
            tensor_offsets[i] = off;
            end = off.checked_add(len).ok_or(Error::TooLarge)?;
            if end > FRAME_LEN_MAX {
                return Err(Error::TooLarge);
            }
        }
        end += match self.body {
            BodyRepr::None => 0,
            BodyRepr::Error { message, .. } => {
                ERROR_FIXED_LEN + clip(message, ERROR_MESSAGE_LEN_MAX).len()
            }
            BodyRepr::NegotiateRequest { subject, .. } => {
                if subject.is_empty() || subject.len() > SUBJECT_LEN_MAX {
                    return Err(Error::FieldTooLong);
                }
                if !field::is_token(subject.as_bytes()) {
                    return Err(Error::BadString);
                }
                NEGOTIATE_REQ_FIXED_LEN + subject.len()
            }
            BodyRepr::NegotiateResponse { schema, .. } => {
                if schema.len() > SCHEMA_LEN_MAX {
                    return Err(Error::TooLarge);
                }
                NEGOTIATE_RESP_FIXED_LEN + schema.len()
            }
        };
        let body_ok = matches!(
            (self.kind, &self.body),
            (
                Kind::Request | Kind::Response | Kind::Ping | Kind::Pong,
                BodyRepr::None
            ) | (Kind::Error, BodyRepr::Error { .. })
                | (Kind::NegotiateRequest, BodyRepr::NegotiateRequest { .. })
                | (Kind::NegotiateResponse, BodyRepr::NegotiateResponse { .. })
        );
        if !body_ok {
            return Err(Error::BadBody);
        }
        Ok(Layout {
            header_len,
            frame_len: end,
            tensor_offsets,
        })
    }

    /// Writes the frame at the start of `buf` and returns its layout. Tensor
    /// regions whose `data` is `None` are left as they were.
    pub fn emit(&self, buf: &mut [u8]) -> Result<Layout, Error> {
        let layout = self.layout()?;
        let buf = buf
            .get_mut(..layout.frame_len)
            .ok_or(Error::BufferTooSmall)?;
        let h = &mut buf[..layout.header_len];
        h[..FIXED_HEADER_LEN].fill(0);
        h[field::MAGIC].copy_from_slice(&MAGIC);
        h[field::VERSION] = VERSION;
        h[field::KIND] = self.kind as u8;
        put_u16(h, field::FLAGS.start, self.flags);
        put_u16(h, field::HEADER_LEN.start, len_u16(layout.header_len)?);
        put_u32(h, field::TENANT_ID.start, self.tenant_id);
        put_u64(h, field::REQUEST_ID.start, self.request_id);
        put_u64(h, field::DEADLINE_US.start, self.deadline_us);
        put_u32(
            h,
            field::PAYLOAD_LEN.start,
            len_u32(layout.frame_len - layout.header_len)?,
        );
        put_u32(h, field::SCHEMA_ID.start, self.schema_id);
        put_u32(h, field::SCHEMA_VERSION.start, self.schema_version);
        put_u32(h, field::TOKEN_COUNT.start, self.token_count);
        h[field::TRACE_ID].copy_from_slice(&self.trace.trace_id);
        h[field::SPAN_ID].copy_from_slice(&self.trace.parent_id);
        h[field::TRACE_FLAGS] = self.trace.flags;
        h[field::MODEL_LEN] = len_u8(self.model.len())?;
        h[field::MODEL_VERSION_LEN] = len_u8(self.model_version.len())?;
        h[field::ADAPTER_LEN] = len_u8(self.adapter.len())?;
        h[field::INTENT_LEN] = len_u8(self.intent.len())?;
        h[field::EXT_COUNT] = len_u8(self.extensions.len())?;
        h[field::TENSOR_COUNT] = len_u8(self.tensors.len())?;

        let mut off = FIXED_HEADER_LEN;
        for s in [self.model, self.model_version, self.adapter, self.intent] {
            h[off..off + s.len()].copy_from_slice(s.as_bytes());
            off += s.len();
        }
        for e in self.extensions {
            h[off] = len_u8(e.key.len())?;
            h[off + 1] = len_u8(e.value.len())?;
            off += 2;
            h[off..off + e.key.len()].copy_from_slice(e.key.as_bytes());
            off += e.key.len();
            h[off..off + e.value.len()].copy_from_slice(e.value);
            off += e.value.len();
        }
        for (i, t) in self.tensors.iter().enumerate() {
            let len = t.dtype.byte_len(t.dims).unwrap_or(0);
            h[off] = t.dtype as u8;
            h[off + 1] = len_u8(t.dims.len())?;
            h[off + 2] = len_u8(t.name.len())?;
            h[off + 3] = 0;
            put_u32(h, off + 4, len_u32(layout.tensor_offsets[i])?);
            put_u32(h, off + 8, len_u32(len)?);
            off += field::TENSOR_ENTRY_FIXED_LEN;
            for &d in t.dims {
                put_u64(h, off, d);
                off += 8;
            }
            h[off..off + t.name.len()].copy_from_slice(t.name.as_bytes());
            off += t.name.len();
        }
        debug_assert_eq!(off, layout.header_len);

        let mut end = layout.header_len;
        for (i, t) in self.tensors.iter().enumerate() {
            let start = layout.tensor_offsets[i];
            buf[end..start].fill(0);
            let len = t.dtype.byte_len(t.dims).unwrap_or(0);
            if let Some(d) = t.data {
                buf[start..start + len].copy_from_slice(d);
            }
            end = start + len;
        }
        let body = &mut buf[end..];
        match self.body {
            BodyRepr::None => {}
            BodyRepr::Error { code, message } => {
                let m = clip(message, ERROR_MESSAGE_LEN_MAX);
                put_u16(body, 0, code as u16);
                put_u16(body, 2, len_u16(m.len())?);
                body[ERROR_FIXED_LEN..].copy_from_slice(m.as_bytes());
            }
            BodyRepr::NegotiateRequest {
                subject,
                version_hint,
            } => {
                put_u32(body, 0, version_hint);
                body[4] = len_u8(subject.len())?;
                body[5..8].fill(0);
                body[NEGOTIATE_REQ_FIXED_LEN..].copy_from_slice(subject.as_bytes());
            }
            BodyRepr::NegotiateResponse {
                schema_id,
                version,
                ttl_ms,
                schema_type,
                schema,
            } => {
                put_u32(body, 0, schema_id);
                put_u32(body, 4, version);
                put_u32(body, 8, ttl_ms);
                body[12] = schema_type as u8;
                body[13..16].fill(0);
                put_u32(body, 16, len_u32(schema.len())?);
                body[NEGOTIATE_RESP_FIXED_LEN..].copy_from_slice(schema);
            }
        }
        Ok(layout)
    }
}
