use crate::field::{self, u16_at, u32_at, u64_at};
use crate::limits::*;
use crate::{
    DType, Error, FIXED_HEADER_LEN, MAGIC, STREAM_EXT_KEY, StreamHeader, TENSOR_ALIGN, VERSION,
};

/// Frame kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// An inference request carrying input tensors.
    Request = 1,
    /// An inference response carrying output tensors.
    Response = 2,
    /// An error answer: code and message.
    Error = 3,
    /// Schema negotiation: subject and version hint.
    NegotiateRequest = 4,
    /// Schema negotiation answer: schema bytes, version and ttl.
    NegotiateResponse = 5,
    /// Liveness probe.
    Ping = 6,
    /// Answer to a ping.
    Pong = 7,
}

impl Kind {
    /// Decodes the kind byte.
    pub const fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Request,
            2 => Kind::Response,
            3 => Kind::Error,
            4 => Kind::NegotiateRequest,
            5 => Kind::NegotiateResponse,
            6 => Kind::Ping,
            7 => Kind::Pong,
            _ => return None,
        })
    }

    /// Whether frames of this kind carry a tensor table.
    pub const fn has_tensors(self) -> bool {
        matches!(self, Kind::Request | Kind::Response)
    }
}

/// Frame flag bits. All others are reserved and must be zero.
pub mod flags {
    /// The auth tag is set and covers the header.
    pub const AUTHENTICATED: u16 = 1 << 0;
    /// The frame was relayed by a peer appliance.
    pub const FORWARDED: u16 = 1 << 1;
    /// Every defined bit.
    pub const ALL: u16 = AUTHENTICATED | FORWARDED;
}

/// W3C trace context (`traceparent` fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TraceContext {
    /// 16-byte trace id; all zero means no trace.
    pub trace_id: [u8; 16],
    /// 8-byte id of the caller's span.
    pub parent_id: [u8; 8],
    /// Trace flags; bit 0 is "sampled".
    pub flags: u8,
}

impl TraceContext {
    /// Whether a trace is present.
    pub fn is_set(&self) -> bool {
        self.trace_id != [0; 16]
    }
    /// Whether the caller asked for this trace to be sampled.
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }
}

/// One extension header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extension<'a> {
    /// Key: printable ASCII, at most [`EXT_KEY_LEN_MAX`] bytes.
    pub key: &'a str,
    /// Value: opaque bytes, at most [`EXT_VALUE_LEN_MAX`].
    pub value: &'a [u8],
}

/// One entry of the tensor table, decoded. Holds no tensor data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorDesc<'a> {
    /// Tensor name.
    pub name: &'a str,
    /// Element type.
    pub dtype: DType,
    rank: u8,
    dims: [u64; RANK_MAX],
    /// Offset of the data from the frame start; a multiple of 64.
    pub data_offset: usize,
    /// Length of the data in bytes.
    pub data_len: usize,
}

impl TensorDesc<'_> {
    /// The shape.
    pub fn dims(&self) -> &[u64] {
        &self.dims[..self.rank as usize]
    }
    /// Number of elements.
    pub fn elem_count(&self) -> usize {
        self.data_len / self.dtype.size_bytes()
    }
    /// The data range within the frame.
    pub fn data_range(&self) -> core::ops::Range<usize> {
        self.data_offset..self.data_offset + self.data_len
    }
}

/// A view of a frame over a byte buffer.
///
/// Construct with [`Frame::new_checked`] on receive. Getters on a frame made
/// with [`Frame::new_unchecked`] and never checked may panic.
#[derive(Debug, Clone)]
pub struct Frame<B: AsRef<[u8]>> {
    buffer: B,
}

impl<B: AsRef<[u8]>> Frame<B> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: B) -> Frame<B> {
        Frame { buffer }
    }

    /// Wraps a buffer and checks the whole frame: header, strings, extension
    /// headers, tensor table and the body of non-tensor kinds. The cost is
    /// bounded by the header limits and independent of the tensor data size.
    /// The buffer must hold exactly one frame.
    pub fn new_checked(buffer: B) -> Result<Frame<B>, Error> {
        let frame = Frame::new_unchecked(buffer);
        frame.check()?;
        Ok(frame)
    }

    /// Releases the buffer.
    pub fn into_inner(self) -> B {
        self.buffer
    }

    /// The underlying bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Whether the buffer opens with the magic bytes: the cheapest test of
    /// "is this meant as a Sluice frame at all". Safe on any buffer.
    pub fn has_magic(&self) -> bool {
        self.buffer.as_ref().get(field::MAGIC) == Some(&MAGIC[..])
    }

    /// Checks only that the buffer holds the whole fixed header, so that
    /// the getters and setters of its fields stay in bounds.
    pub fn check_len(&self) -> Result<(), Error> {
        if self.buffer.as_ref().len() < FIXED_HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Request id, read from a buffer that may not hold a valid frame:
    /// `None` when the buffer ends before the field does. Answers to
    /// malformed requests echo what they can.
    pub fn try_request_id(&self) -> Option<u64> {
        let b = self.buffer.as_ref().get(field::REQUEST_ID)?;
        Some(u64_at(b, 0))
    }

    /// Tenant id, read from a buffer that may not hold a valid frame.
    pub fn try_tenant_id(&self) -> Option<u32> {
        let b = self.buffer.as_ref().get(field::TENANT_ID)?;
        Some(u32_at(b, 0))
    }

    /// Checks that the buffer holds a valid frame. Never panics, never
    /// allocates, never reads out of bounds, for any input.
    pub fn check(&self) -> Result<(), Error> {
        let b = self.buffer.as_ref();
        if b.len() < FIXED_HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[field::MAGIC] != MAGIC {
            return Err(Error::BadMagic);
        }
        if b[field::VERSION] != VERSION {
            return Err(Error::UnsupportedVersion);
        }
        let kind = Kind::from_u8(b[field::KIND]).ok_or(Error::UnknownKind)?;
        if u16_at(b, field::FLAGS.start) & !flags::ALL != 0
            || u16_at(b, field::RESERVED0.start) != 0
            || b[field::RESERVED1] != 0
        {
            return Err(Error::Reserved);
        }
        let header_len = u16_at(b, field::HEADER_LEN.start) as usize;
        if !(FIXED_HEADER_LEN..=HEADER_LEN_MAX).contains(&header_len) {
            return Err(Error::BadHeaderLen);
        }
        let payload_len = u32_at(b, field::PAYLOAD_LEN.start) as usize;
        let frame_len = header_len + payload_len;
        if frame_len > FRAME_LEN_MAX {
            return Err(Error::TooLarge);
        }
        if b.len() < frame_len {
            return Err(Error::Truncated);
        }
        if b.len() > frame_len {
            return Err(Error::TrailingBytes);
        }
        let header = &b[..header_len];

        let lens = [
            (b[field::MODEL_LEN] as usize, MODEL_NAME_LEN_MAX),
            (b[field::MODEL_VERSION_LEN] as usize, MODEL_VERSION_LEN_MAX),
            (b[field::ADAPTER_LEN] as usize, ADAPTER_LEN_MAX),
            (b[field::INTENT_LEN] as usize, INTENT_LEN_MAX),
        ];
        let mut off = FIXED_HEADER_LEN;
        for (len, max) in lens {
            if len > max {
                return Err(Error::FieldTooLong);
            }
            let s = header.get(off..off + len).ok_or(Error::BadHeaderLen)?;
            if !field::is_token(s) {
                return Err(Error::BadString);
            }
            off += len;
        }

        let ext_count = b[field::EXT_COUNT] as usize;
        if ext_count > EXT_COUNT_MAX {
            return Err(Error::TooManyExtensions);
        }
        let mut streams = 0;
        for _ in 0..ext_count {
            let lens = header.get(off..off + 2).ok_or(Error::BadHeaderLen)?;
            let (key_len, value_len) = (lens[0] as usize, lens[1] as usize);
            if key_len == 0 || key_len > EXT_KEY_LEN_MAX {
                return Err(Error::FieldTooLong);
            }
            let key = header
                .get(off + 2..off + 2 + key_len)
                .ok_or(Error::BadHeaderLen)?;
            if !field::is_token(key) {
                return Err(Error::BadString);
            }
            let value_at = off + 2 + key_len;
            off = value_at + value_len;
            if off > header_len {
                return Err(Error::BadHeaderLen);
            }
            if key == STREAM_EXT_KEY.as_bytes() {
                streams += 1;
                if streams > 1 {
                    return Err(Error::BadStream);
                }
                StreamHeader::parse(&header[value_at..off], kind)?;
            }
        }

        let tensor_count = b[field::TENSOR_COUNT] as usize;
        if tensor_count > TENSOR_COUNT_MAX || (tensor_count > 0 && !kind.has_tensors()) {
            return Err(Error::TooManyTensors);
        }
        let mut prev_end = header_len;
        for _ in 0..tensor_count {
            let (desc, next) = parse_tensor_entry(header, off)?;
            if desc.data_offset % TENSOR_ALIGN != 0 {
                return Err(Error::Misaligned);
            }
            let end = desc
                .data_offset
                .checked_add(desc.data_len)
                .ok_or(Error::OutOfBounds)?;
            if desc.data_offset < header_len || end > frame_len {
                return Err(Error::OutOfBounds);
            }
            if desc.data_offset < prev_end {
                return Err(Error::Overlap);
            }
            prev_end = end;
            off = next;
        }
        if off != header_len {
            return Err(Error::BadHeaderLen);
        }
        crate::body::check(kind, &b[header_len..])
    }

    /// Length of the whole frame.
    pub fn frame_len(&self) -> usize {
        self.header_len() + self.payload_len()
    }

    /// Frame kind byte.
    pub fn kind_raw(&self) -> u8 {
        self.buffer.as_ref()[field::KIND]
    }

    /// Frame kind. A checked frame always has one; `Kind::Error` otherwise.
    pub fn kind(&self) -> Kind {
        Kind::from_u8(self.kind_raw()).unwrap_or(Kind::Error)
    }

    /// Wire version.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }

    /// Flag bits; see [`flags`].
    pub fn flags(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::FLAGS.start)
    }

    /// Length of the fixed and variable header.
    pub fn header_len(&self) -> usize {
        u16_at(self.buffer.as_ref(), field::HEADER_LEN.start) as usize
    }

    /// Length of the body.
    pub fn payload_len(&self) -> usize {
        u32_at(self.buffer.as_ref(), field::PAYLOAD_LEN.start) as usize
    }

    /// Tenant id.
    pub fn tenant_id(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::TENANT_ID.start)
    }

    /// Request id, echoed in the answer.
    pub fn request_id(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::REQUEST_ID.start)
    }

    /// Absolute deadline in microseconds since the Unix epoch; 0 means none.
    pub fn deadline_us(&self) -> u64 {
        u64_at(self.buffer.as_ref(), field::DEADLINE_US.start)
    }

    /// Schema id; 0 means none.
    pub fn schema_id(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::SCHEMA_ID.start)
    }

    /// Schema version.
    pub fn schema_version(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::SCHEMA_VERSION.start)
    }

    /// Token count declared by the client (prompt tokens for LLM traffic).
    pub fn token_count(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::TOKEN_COUNT.start)
    }

    /// W3C trace flags alone (bit 0: sampled): the one byte a receiver
    /// tests before it reads more of the trace context.
    pub fn trace_flags(&self) -> u8 {
        self.buffer.as_ref()[field::TRACE_FLAGS]
    }

    /// W3C trace context.
    pub fn trace(&self) -> TraceContext {
        let b = self.buffer.as_ref();
        let mut t = TraceContext::default();
        t.trace_id.copy_from_slice(&b[field::TRACE_ID]);
        t.parent_id.copy_from_slice(&b[field::SPAN_ID]);
        t.flags = b[field::TRACE_FLAGS];
        t
    }

    /// The 16-byte authentication tag.
    pub fn auth_tag(&self) -> &[u8] {
        &self.buffer.as_ref()[field::AUTH_TAG]
    }

    fn string_at(&self, index: usize) -> &str {
        let b = self.buffer.as_ref();
        let lens = &b[field::MODEL_LEN..field::MODEL_LEN + 4];
        let start = FIXED_HEADER_LEN + lens[..index].iter().map(|&l| l as usize).sum::<usize>();
        let bytes = &b[start..start + lens[index] as usize];
        core::str::from_utf8(bytes).unwrap_or("")
    }

    /// Model name; empty when absent.
    pub fn model(&self) -> &str {
        self.string_at(0)
    }

    /// Model version; empty when absent.
    pub fn model_version(&self) -> &str {
        self.string_at(1)
    }

    /// LoRA adapter id; empty when absent.
    pub fn adapter(&self) -> &str {
        self.string_at(2)
    }

    /// Intent; empty when absent.
    pub fn intent(&self) -> &str {
        self.string_at(3)
    }

    fn extensions_offset(&self) -> usize {
        let b = self.buffer.as_ref();
        FIXED_HEADER_LEN
            + b[field::MODEL_LEN..field::MODEL_LEN + 4]
                .iter()
                .map(|&l| l as usize)
                .sum::<usize>()
    }

    /// Extension headers, in wire order.
    pub fn extensions(&self) -> ExtIter<'_> {
        let b = self.buffer.as_ref();
        ExtIter {
            header: &b[..self.header_len()],
            off: self.extensions_offset(),
            left: b[field::EXT_COUNT] as usize,
        }
    }

    /// The value of the first extension with `key`.
    pub fn extension(&self, key: &str) -> Option<&[u8]> {
        self.extensions().find(|e| e.key == key).map(|e| e.value)
    }

    /// The stream header, when the frame belongs to a stream. On a checked
    /// frame it is valid (the check rejects a bad one with `BadStream`);
    /// on an unchecked one a bad header reads as `None`.
    pub fn stream(&self) -> Option<StreamHeader> {
        let v = self.extension(STREAM_EXT_KEY)?;
        StreamHeader::parse(v, Kind::from_u8(self.kind_raw())?).ok()
    }

    /// The sender id of the first `sluice-sender` header, when it is a
    /// valid one (8 bytes, not 0): the frame's `request_id` is then a
    /// counter of that sender (docs/wire.md, "Replay windows").
    pub fn sender_id(&self) -> Option<u64> {
        crate::sender_of(self.extension(crate::SENDER_EXT_KEY)?)
    }

    /// Number of tensors.
    pub fn tensor_count(&self) -> usize {
        self.buffer.as_ref()[field::TENSOR_COUNT] as usize
    }

    /// The tensor table, in wire order.
    pub fn tensors(&self) -> TensorIter<'_> {
        let mut ext = self.extensions();
        while ext.next().is_some() {}
        TensorIter {
            header: ext.header,
            off: ext.off,
            left: self.tensor_count(),
        }
    }

    /// The tensor with `name`.
    pub fn tensor(&self, name: &str) -> Option<TensorDesc<'_>> {
        self.tensors().find(|t| t.name == name)
    }

    /// The data bytes of a tensor of this frame.
    pub fn tensor_data(&self, desc: &TensorDesc<'_>) -> &[u8] {
        &self.buffer.as_ref()[desc.data_range()]
    }

    /// The header bytes covered by the authentication tag: everything in the
    /// header but the tag itself.
    pub fn auth_covered(&self) -> (&[u8], &[u8]) {
        let b = self.buffer.as_ref();
        (
            &b[..field::AUTH_TAG.start],
            &b[field::AUTH_TAG.end..self.header_len()],
        )
    }

    /// The body.
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        &b[self.header_len()..self.frame_len()]
    }
}

impl<B: AsRef<[u8]> + AsMut<[u8]>> Frame<B> {
    /// Mutable underlying bytes.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets the request id.
    pub fn set_request_id(&mut self, v: u64) {
        field::put_u64(self.buffer.as_mut(), field::REQUEST_ID.start, v)
    }

    /// Sets the tenant id.
    pub fn set_tenant_id(&mut self, v: u32) {
        field::put_u32(self.buffer.as_mut(), field::TENANT_ID.start, v)
    }

    /// Sets the deadline.
    pub fn set_deadline_us(&mut self, v: u64) {
        field::put_u64(self.buffer.as_mut(), field::DEADLINE_US.start, v)
    }

    /// Sets the flag bits.
    pub fn set_flags(&mut self, v: u16) {
        field::put_u16(self.buffer.as_mut(), field::FLAGS.start, v)
    }

    /// Sets the token count.
    pub fn set_token_count(&mut self, v: u32) {
        field::put_u32(self.buffer.as_mut(), field::TOKEN_COUNT.start, v)
    }

    /// Sets the authentication tag.
    pub fn set_auth_tag(&mut self, tag: &[u8; crate::AUTH_TAG_LEN]) {
        self.buffer.as_mut()[field::AUTH_TAG].copy_from_slice(tag)
    }

    /// Mutable data bytes of a tensor. `desc` must come from this frame's
    /// table (the engine obtains it by index before borrowing mutably).
    pub fn tensor_data_mut(&mut self, range: core::ops::Range<usize>) -> &mut [u8] {
        &mut self.buffer.as_mut()[range]
    }
}

/// Iterator over extension headers.
#[derive(Debug, Clone)]
pub struct ExtIter<'a> {
    header: &'a [u8],
    off: usize,
    left: usize,
}

impl<'a> Iterator for ExtIter<'a> {
    type Item = Extension<'a>;
    fn next(&mut self) -> Option<Extension<'a>> {
        if self.left == 0 {
            return None;
        }
        let h = self.header;
        let key_len = *h.get(self.off)? as usize;
        let value_len = *h.get(self.off + 1)? as usize;
        let key_start = self.off + 2;
        let value_start = key_start + key_len;
        let key = core::str::from_utf8(h.get(key_start..value_start)?).ok()?;
        let value = h.get(value_start..value_start + value_len)?;
        self.off = value_start + value_len;
        self.left -= 1;
        Some(Extension { key, value })
    }
}

/// Iterator over the tensor table.
#[derive(Debug, Clone)]
pub struct TensorIter<'a> {
    header: &'a [u8],
    off: usize,
    left: usize,
}

impl<'a> Iterator for TensorIter<'a> {
    type Item = TensorDesc<'a>;
    fn next(&mut self) -> Option<TensorDesc<'a>> {
        if self.left == 0 {
            return None;
        }
        let (desc, next) = parse_tensor_entry(self.header, self.off).ok()?;
        self.off = next;
        self.left -= 1;
        Some(desc)
    }
}

fn parse_tensor_entry(header: &[u8], off: usize) -> Result<(TensorDesc<'_>, usize), Error> {
    let fixed = header
        .get(off..off + field::TENSOR_ENTRY_FIXED_LEN)
        .ok_or(Error::BadHeaderLen)?;
    let dtype = DType::from_u8(fixed[0]).ok_or(Error::BadDType)?;
    let rank = fixed[1] as usize;
    let name_len = fixed[2] as usize;
    if fixed[3] != 0 {
        return Err(Error::Reserved);
    }
    if rank > RANK_MAX {
        return Err(Error::BadRank);
    }
    if name_len == 0 || name_len > TENSOR_NAME_LEN_MAX {
        return Err(Error::FieldTooLong);
    }
    let data_offset = u32_at(fixed, 4) as usize;
    let data_len = u32_at(fixed, 8) as usize;
    let dims_start = off + field::TENSOR_ENTRY_FIXED_LEN;
    let name_start = dims_start + rank * 8;
    let next = name_start + name_len;
    let rest = header.get(dims_start..next).ok_or(Error::BadHeaderLen)?;
    let mut dims = [0u64; RANK_MAX];
    for (i, d) in dims.iter_mut().take(rank).enumerate() {
        *d = u64_at(rest, i * 8);
    }
    let name_bytes = &rest[rank * 8..];
    if !field::is_token(name_bytes) {
        return Err(Error::BadString);
    }
    let name = core::str::from_utf8(name_bytes).map_err(|_| Error::BadString)?;
    let expect = dtype.byte_len(&dims[..rank]).ok_or(Error::SizeOverflow)?;
    if expect != data_len {
        return Err(Error::BadTensorLen);
    }
    Ok((
        TensorDesc {
            name,
            dtype,
            rank: fixed[1],
            dims,
            data_offset,
            data_len,
        },
        next,
    ))
}
