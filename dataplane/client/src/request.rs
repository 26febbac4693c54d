use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_wire::limits::{EXT_COUNT_MAX, RANK_MAX, TENSOR_COUNT_MAX};
use sluice_wire::{
    DType, Error, ExtRepr, FrameRepr, Kind, SENDER_EXT_KEY, TenantKey, TensorRepr, TraceContext,
};

/// Tensor data as given by the caller. Typed slices are written little-endian
/// straight into the send buffer, so no byte copy of the caller's data is made
/// beforehand.
#[derive(Debug, Clone, Copy)]
pub enum TensorData<'a> {
    /// 32-bit floats.
    F32(&'a [f32]),
    /// 64-bit signed integers.
    I64(&'a [i64]),
    /// 32-bit signed integers.
    I32(&'a [i32]),
    /// Raw little-endian bytes of the given dtype.
    Raw(DType, &'a [u8]),
}

impl TensorData<'_> {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            TensorData::F32(_) => DType::F32,
            TensorData::I64(_) => DType::I64,
            TensorData::I32(_) => DType::I32,
            TensorData::Raw(d, _) => *d,
        }
    }

    /// Length in bytes on the wire.
    pub fn byte_len(&self) -> usize {
        match self {
            TensorData::F32(v) => v.len() * 4,
            TensorData::I64(v) => v.len() * 8,
            TensorData::I32(v) => v.len() * 4,
            TensorData::Raw(_, b) => b.len(),
        }
    }

    fn write(&self, out: &mut [u8]) {
        match self {
            TensorData::F32(v) => {
                for (o, x) in out.chunks_exact_mut(4).zip(v.iter()) {
                    o.copy_from_slice(&x.to_le_bytes());
                }
            }
            TensorData::I64(v) => {
                for (o, x) in out.chunks_exact_mut(8).zip(v.iter()) {
                    o.copy_from_slice(&x.to_le_bytes());
                }
            }
            TensorData::I32(v) => {
                for (o, x) in out.chunks_exact_mut(4).zip(v.iter()) {
                    o.copy_from_slice(&x.to_le_bytes());
                }
            }
            // Raw data goes through FrameRepr::emit directly.
            TensorData::Raw(..) => {}
        }
    }
}

/// One input tensor of a request.
#[derive(Debug, Clone, Copy)]
pub struct TensorInput<'a> {
    /// Tensor name.
    pub name: &'a str,
    rank: usize,
    dims: [u64; RANK_MAX],
    /// Data.
    pub data: TensorData<'a>,
}

impl TensorInput<'_> {
    /// The shape.
    pub fn dims(&self) -> &[u64] {
        &self.dims[..self.rank]
    }
}

/// When the server should give up on a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Deadline {
    /// No deadline.
    #[default]
    None,
    /// Relative to the moment the request is sent (computed per send, so a
    /// request reused by a load generator gets a fresh deadline each time).
    After(Duration),
    /// Absolute, microseconds since the Unix epoch.
    AtUnixUs(u64),
}

/// An inference request. Borrows its strings and tensor data; build it once
/// and send it as often as needed.
///
/// Builder errors (too many tensors or extensions, rank above the limit) are
/// kept and reported by `Client::send`.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub(crate) model: &'a str,
    pub(crate) model_version: &'a str,
    pub(crate) adapter: &'a str,
    pub(crate) intent: &'a str,
    pub(crate) deadline: Deadline,
    pub(crate) schema_id: u32,
    pub(crate) schema_version: u32,
    pub(crate) token_count: u32,
    pub(crate) trace: TraceContext,
    pub(crate) extensions: Vec<ExtRepr<'a>>,
    pub(crate) tensors: Vec<TensorInput<'a>>,
    pub(crate) tenant: Option<(u32, Option<&'a TenantKey>)>,
    /// Sender id written into a signed frame (0: the caller's, or none).
    pub(crate) sender_id: u64,
    pub(crate) invalid: Option<Error>,
}

impl<'a> Request<'a> {
    /// A request for `model` at `version`. The version is required by the
    /// server; an empty one is sent as is and answered with
    /// `ModelVersionRequired`.
    pub fn new(model: &'a str, version: &'a str) -> Request<'a> {
        Request {
            model,
            model_version: version,
            adapter: "",
            intent: "",
            deadline: Deadline::None,
            schema_id: 0,
            schema_version: 0,
            token_count: 0,
            trace: TraceContext::default(),
            extensions: Vec::new(),
            tensors: Vec::new(),
            tenant: None,
            sender_id: 0,
            invalid: None,
        }
    }

    /// LoRA adapter id.
    pub fn adapter(mut self, adapter: &'a str) -> Self {
        self.adapter = adapter;
        self
    }

    /// Intent ("chat", "embed", "training", ...).
    pub fn intent(mut self, intent: &'a str) -> Self {
        self.intent = intent;
        self
    }

    /// Deadline.
    pub fn deadline(mut self, deadline: Deadline) -> Self {
        self.deadline = deadline;
        self
    }

    /// Deadline relative to each send.
    pub fn deadline_after(self, after: Duration) -> Self {
        self.deadline(Deadline::After(after))
    }

    /// Schema id and version of the payload.
    pub fn schema(mut self, schema_id: u32, schema_version: u32) -> Self {
        self.schema_id = schema_id;
        self.schema_version = schema_version;
        self
    }

    /// Declared token count.
    pub fn token_count(mut self, tokens: u32) -> Self {
        self.token_count = tokens;
        self
    }

    /// W3C trace context.
    pub fn trace(mut self, trace: TraceContext) -> Self {
        self.trace = trace;
        self
    }

    /// Adds an extension header.
    pub fn extension(mut self, key: &'a str, value: &'a [u8]) -> Self {
        if self.extensions.len() >= sluice_wire::limits::EXT_COUNT_MAX {
            self.invalid.get_or_insert(Error::TooManyExtensions);
        } else {
            self.extensions.push(ExtRepr { key, value });
        }
        self
    }

    /// Sends this request as another tenant than the client's (load
    /// generators mixing tenants over one socket). `key` signs it when set.
    pub fn tenant(mut self, tenant_id: u32, key: Option<&'a TenantKey>) -> Self {
        self.tenant = Some((tenant_id, key));
        self
    }

    /// Names the sender of this request when it is signed: a
    /// `sluice-sender` header with `sender_id` (not 0), so that its
    /// request id is that sender's counter (docs/wire.md, "Replay
    /// windows"). The caller then gives every request of this sender a
    /// higher request id than the last. `Client` does this by itself;
    /// this is for tools that call [`Request::encode`].
    pub fn sender(mut self, sender_id: u64) -> Self {
        self.sender_id = sender_id;
        self
    }

    /// Adds an input tensor.
    pub fn tensor(mut self, name: &'a str, dims: &[u64], data: TensorData<'a>) -> Self {
        if self.tensors.len() >= TENSOR_COUNT_MAX {
            self.invalid.get_or_insert(Error::TooManyTensors);
            return self;
        }
        if dims.len() > RANK_MAX {
            self.invalid.get_or_insert(Error::BadRank);
            return self;
        }
        let mut d = [0u64; RANK_MAX];
        d[..dims.len()].copy_from_slice(dims);
        self.tensors.push(TensorInput {
            name,
            rank: dims.len(),
            dims: d,
            data,
        });
        self
    }

    /// Adds an f32 input tensor.
    pub fn tensor_f32(self, name: &'a str, dims: &[u64], data: &'a [f32]) -> Self {
        self.tensor(name, dims, TensorData::F32(data))
    }

    /// Adds an i64 input tensor.
    pub fn tensor_i64(self, name: &'a str, dims: &[u64], data: &'a [i64]) -> Self {
        self.tensor(name, dims, TensorData::I64(data))
    }

    /// Adds an input tensor of any dtype from little-endian bytes.
    pub fn tensor_raw(self, name: &'a str, dtype: DType, dims: &[u64], data: &'a [u8]) -> Self {
        self.tensor(name, dims, TensorData::Raw(dtype, data))
    }

    /// Adds the structured section (JSON, Avro or Protobuf bytes) that the
    /// appliance checks against the schema named by [`Request::schema`], and
    /// that routes may match on (JSON only). It travels as the rank-1 uint8
    /// tensor `$section`; see docs/wire.md, "Structured section".
    pub fn section(self, bytes: &'a [u8]) -> Self {
        let n = bytes.len() as u64;
        self.tensor(
            sluice_wire::SECTION_TENSOR_NAME,
            &[n],
            TensorData::Raw(DType::U8, bytes),
        )
    }

    /// The input tensors.
    pub fn tensors(&self) -> &[TensorInput<'a>] {
        &self.tensors
    }

    /// Writes the frame into `buf` as `request_id` of `tenant_id` (unless
    /// the request names its own tenant), signs it when a key applies, and
    /// returns its length. Allocates nothing. A signed frame gets a fresh
    /// deadline: at most [`SIGNED_DEADLINE_DEFAULT`] ahead (docs/wire.md,
    /// "Clients"). `Client::send` uses [`Request::encode_with`]; this is
    /// public for tools that drive sockets themselves.
    pub fn encode(
        &self,
        buf: &mut [u8],
        request_id: u64,
        tenant_id: u32,
        key: Option<&TenantKey>,
    ) -> Result<usize, Error> {
        self.encode_with(buf, request_id, tenant_id, key, SIGNED_DEADLINE_DEFAULT, 0)
    }

    /// [`Request::encode`] with the furthest deadline a signed frame may
    /// carry: the request's own deadline when it is earlier, else now +
    /// `signed_deadline`. Unsigned frames keep the request's deadline (0
    /// for none). A signed frame names sender `sender_id` unless the
    /// request names its own ([`Request::sender`]); 0 names none.
    pub fn encode_with(
        &self,
        buf: &mut [u8],
        request_id: u64,
        tenant_id: u32,
        key: Option<&TenantKey>,
        signed_deadline: Duration,
        sender_id: u64,
    ) -> Result<usize, Error> {
        let to = (request_id, tenant_id, sender_id);
        self.emit_frame(buf, to, key, signed_deadline, false)
            .map(|l| l.frame_len)
    }

    /// The frame's length, without writing it (with the request's own
    /// sender header when its own key signs it).
    pub fn encoded_len(&self) -> Result<usize, Error> {
        let signed = matches!(self.tenant, Some((_, Some(_))));
        self.encoded_len_as(signed, 0)
    }

    /// The length of the frame `encode_with` writes for a frame signed or
    /// not, naming `sender_id` when signed.
    pub(crate) fn encoded_len_as(&self, signed: bool, sender_id: u64) -> Result<usize, Error> {
        self.with_repr((0, 0, sender_id), signed, false, Duration::ZERO, |r| {
            r.layout()
        })
        .map(|l| l.frame_len)
    }

    /// Like [`Request::encode_with`], but raw tensor data is left out of
    /// `buf` (its place is not written; the tag does not cover tensor
    /// data): a vectored write sends it from the caller's memory, at the
    /// offsets the layout gives.
    pub(crate) fn encode_header_only(
        &self,
        buf: &mut [u8],
        to: (u64, u32, u64),
        key: Option<&TenantKey>,
        signed_deadline: Duration,
    ) -> Result<sluice_wire::Layout, Error> {
        self.emit_frame(buf, to, key, signed_deadline, true)
    }

    /// `to`: request id, tenant id and sender id (see `encode_with`).
    fn emit_frame(
        &self,
        buf: &mut [u8],
        to: (u64, u32, u64),
        key: Option<&TenantKey>,
        signed_deadline: Duration,
        raw_in_place: bool,
    ) -> Result<sluice_wire::Layout, Error> {
        let key = match self.tenant {
            Some((_, k)) => k,
            None => key,
        };
        let layout = self.with_repr(to, key.is_some(), raw_in_place, signed_deadline, |r| {
            r.emit(buf)
        })?;
        for (i, t) in self.tensors.iter().enumerate() {
            let off = layout.tensor_offsets[i];
            t.data.write(&mut buf[off..off + t.data.byte_len()]);
        }
        if let Some(key) = key {
            sign(key, &mut buf[..layout.frame_len]);
        }
        Ok(layout)
    }

    /// Runs `f` on the frame's description (the tensor table lives on the
    /// stack: nothing is allocated). A signed frame's deadline is capped at
    /// now + `signed_deadline`.
    fn with_repr<R>(
        &self,
        (request_id, tenant_id, sender_id): (u64, u32, u64),
        signed: bool,
        raw_in_place: bool,
        signed_deadline: Duration,
        f: impl FnOnce(&FrameRepr<'_>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        if let Some(e) = self.invalid {
            return Err(e);
        }
        let tenant_id = match self.tenant {
            Some((id, _)) => id,
            None => tenant_id,
        };
        let placeholder = TensorRepr {
            name: "",
            dtype: DType::U8,
            dims: &[],
            data: None,
        };
        let mut reprs = [placeholder; TENSOR_COUNT_MAX];
        for (r, t) in reprs.iter_mut().zip(self.tensors.iter()) {
            let want = t
                .data
                .dtype()
                .byte_len(t.dims())
                .ok_or(Error::SizeOverflow)?;
            if want != t.data.byte_len() {
                return Err(Error::BadTensorLen);
            }
            *r = TensorRepr {
                name: t.name,
                dtype: t.data.dtype(),
                dims: t.dims(),
                data: match t.data {
                    TensorData::Raw(_, b) if !raw_in_place => Some(b),
                    _ => None,
                },
            };
        }
        // A signed frame names its sender (after the caller's extensions,
        // when there is room and none of them does already).
        let sender_id = if self.sender_id != 0 {
            self.sender_id
        } else {
            sender_id
        };
        let sender = sluice_wire::sender_value(sender_id);
        let mut exts = [ExtRepr::sender(&sender); EXT_COUNT_MAX];
        let n = self.extensions.len();
        exts[..n].copy_from_slice(&self.extensions);
        let named = signed
            && sender_id != 0
            && n < EXT_COUNT_MAX
            && !self.extensions.iter().any(|e| e.key == SENDER_EXT_KEY);
        f(&FrameRepr {
            kind: Kind::Request,
            request_id,
            tenant_id,
            deadline_us: if signed {
                signed_deadline_us(deadline_us(self.deadline), signed_deadline)
            } else {
                deadline_us(self.deadline)
            },
            schema_id: self.schema_id,
            schema_version: self.schema_version,
            token_count: self.token_count,
            trace: self.trace,
            model: self.model,
            model_version: self.model_version,
            adapter: self.adapter,
            intent: self.intent,
            extensions: &exts[..n + usize::from(named)],
            tensors: &reprs[..self.tensors.len()],
            ..FrameRepr::default()
        })
    }
}

pub(crate) fn sign(key: &TenantKey, frame: &mut [u8]) {
    let mut f = sluice_wire::Frame::new_unchecked(frame);
    key.sign(&mut f);
}

/// How far ahead a signed frame's deadline lies when nothing earlier is
/// asked for: the appliance refuses signed frames without a deadline or
/// with one beyond its freshness window (`auth.freshness_window_ms`,
/// default 10 s) as `stale`.
pub const SIGNED_DEADLINE_DEFAULT: Duration = Duration::from_secs(2);

/// The deadline of a signed frame: `asked` (µs since the epoch, 0 for
/// none) unless it lies later than now + `ahead`.
pub(crate) fn signed_deadline_us(asked: u64, ahead: Duration) -> u64 {
    let cap = deadline_us(Deadline::After(ahead));
    if asked == 0 || asked > cap {
        cap
    } else {
        asked
    }
}

fn deadline_us(d: Deadline) -> u64 {
    match d {
        Deadline::None => 0,
        Deadline::AtUnixUs(us) => us,
        Deadline::After(after) => {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            // Never 0: that would mean "no deadline".
            (now + after).as_micros().clamp(1, u64::MAX as u128) as u64
        }
    }
}
