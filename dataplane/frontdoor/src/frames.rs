//! Request frames built in a slot and answers read from one: the path
//! and headers become the routing fields, the tensors are laid out at
//! 64-byte aligned offsets for their data to be written in place.

use std::ops::Range;
use std::sync::Arc;

use sluice_engine::transport::ingress::{Done, Filling};
use sluice_wire::{
    DType, Error, ErrorCode, ExtRepr, Frame, FrameRepr, Kind, Layout, TensorRepr, limits,
};

use crate::errors::Refusal;
use crate::semantic::Semantic;

/// An input tensor as the request describes it.
#[derive(Debug, Clone)]
pub struct Input {
    /// Name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub dims: Vec<u64>,
}

impl Input {
    /// Byte length, checked.
    pub fn byte_len(&self) -> Result<usize, Refusal> {
        if self.dims.len() > limits::RANK_MAX {
            return Err(Refusal::bad(format!(
                "input {}: rank above {}",
                self.name,
                limits::RANK_MAX
            )));
        }
        self.dtype.byte_len(&self.dims).ok_or_else(|| {
            Refusal::code(
                ErrorCode::BadTensor,
                format!("input {}: shape too large", self.name),
            )
        })
    }
}

/// Checks a request's shape as KServe writes it (`int64`, no negatives).
pub fn dims_of(name: &str, shape: &[i64]) -> Result<Vec<u64>, Refusal> {
    shape
        .iter()
        .map(|&d| {
            u64::try_from(d)
                .map_err(|_| Refusal::bad(format!("input {name}: shape has a negative dimension")))
        })
        .collect()
}

fn emit_error(e: Error) -> Refusal {
    match e {
        Error::BufferTooSmall | Error::TooLarge => Refusal::code(
            ErrorCode::FrameTooLarge,
            "request larger than the front door's slots (frontdoor.body_bytes_max)",
        ),
        Error::TooManyTensors => Refusal::bad(format!(
            "more than {} input tensors",
            limits::TENSOR_COUNT_MAX
        )),
        Error::FieldTooLong | Error::BadString => {
            Refusal::bad("a tensor name is empty, too long or not visible ASCII")
        }
        e => Refusal::code(e.code(), e.as_str()),
    }
}

/// Writes the request frame's header into the slot; tensor regions are
/// left for the caller (`Layout::tensor_offsets`). Signs it with the
/// tenant's key: the tag covers the header only, so data may follow.
pub fn emit(
    f: &mut Filling,
    sem: &Semantic,
    request_id: u64,
    inputs: &[Input],
) -> Result<Layout, Refusal> {
    emit_with(f, sem, request_id, inputs, &[])
}

/// [`emit`] with extension headers (a token stream's `sluice-stream`).
pub fn emit_with(
    f: &mut Filling,
    sem: &Semantic,
    request_id: u64,
    inputs: &[Input],
    extensions: &[ExtRepr<'_>],
) -> Result<Layout, Refusal> {
    if inputs.len() > limits::TENSOR_COUNT_MAX {
        return Err(emit_error(Error::TooManyTensors));
    }
    let empty = TensorRepr {
        name: "_",
        dtype: DType::U8,
        dims: &[],
        data: None,
    };
    let mut reprs = [empty; limits::TENSOR_COUNT_MAX];
    for (r, i) in reprs.iter_mut().zip(inputs) {
        i.byte_len()?;
        *r = TensorRepr {
            name: &i.name,
            dtype: i.dtype,
            dims: &i.dims,
            data: None,
        };
    }
    // A signed frame names this thread as its sender, after the caller's
    // extensions: the engine then keeps one replay window for the thread
    // instead of one entry per frame.
    let sender = crate::dispatch::sender_id()
        .filter(|_| sem.tenant.key.is_some())
        .map(sluice_wire::sender_value);
    let mut exts = [ExtRepr::sender(&[1; sluice_wire::SENDER_EXT_LEN]); limits::EXT_COUNT_MAX];
    let n = extensions.len().min(limits::EXT_COUNT_MAX);
    exts[..n].copy_from_slice(&extensions[..n]);
    let mut count = extensions.len();
    if let Some(v) = &sender
        && n < limits::EXT_COUNT_MAX
    {
        exts[n] = ExtRepr::sender(v);
        count = n + 1;
    }
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id,
        tenant_id: sem.tenant.id,
        deadline_us: sem.deadline_us,
        trace: sem.trace,
        model: &sem.model,
        model_version: &sem.version,
        adapter: &sem.adapter,
        intent: &sem.intent,
        tensors: &reprs[..inputs.len()],
        extensions: if count > n {
            &exts[..count]
        } else {
            extensions
        },
        ..FrameRepr::default()
    };
    let buf = f.request_mut();
    // The builder zeroes the padding; the data regions are the caller's to
    // fill, and every input is filled (binary copy or JSON conversion).
    let layout = repr.emit(buf).map_err(emit_error)?;
    if let Some(key) = &sem.tenant.key {
        let mut frame = Frame::new_unchecked(&mut buf[..layout.frame_len]);
        key.sign(&mut frame);
    }
    Ok(layout)
}

/// An output tensor of an answer.
#[derive(Debug, Clone)]
pub struct Output {
    /// Name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape.
    pub dims: Vec<u64>,
    /// Where its data lies in the reply frame.
    pub range: Range<usize>,
}

/// A worker's answer.
#[derive(Debug)]
pub struct Answer {
    /// The reply slot (the outputs' bytes).
    pub done: Arc<Done>,
    /// The model name and version the answer carries.
    pub model: String,
    /// Version.
    pub version: String,
    /// Outputs in model order.
    pub outputs: Vec<Output>,
}

/// Reads a worker's answer: a response, or its error frame as a refusal.
pub fn answer(done: Done) -> Result<Answer, Refusal> {
    let frame = match Frame::new_checked(done.reply()) {
        Ok(f) => f,
        Err(_) if done.reply().is_empty() => {
            return Err(Refusal::code(
                ErrorCode::Internal,
                "the worker gave no answer",
            ));
        }
        Err(e) => {
            return Err(Refusal::code(
                ErrorCode::Internal,
                format!("bad answer frame: {e}"),
            ));
        }
    };
    match frame.kind() {
        Kind::Response => {}
        Kind::Error => {
            let b = frame.error_body();
            let code = b.and_then(|b| b.code()).unwrap_or(ErrorCode::Internal);
            let msg = b.map_or("error", |b| b.message).to_string();
            return Err(Refusal::code(code, msg));
        }
        k => {
            return Err(Refusal::code(
                ErrorCode::Internal,
                format!("unexpected answer kind {k:?}"),
            ));
        }
    }
    let outputs = frame
        .tensors()
        .map(|d| Output {
            name: d.name.to_string(),
            dtype: d.dtype,
            dims: d.dims().to_vec(),
            range: d.data_range(),
        })
        .collect();
    let model = frame.model().to_string();
    let version = frame.model_version().to_string();
    Ok(Answer {
        model,
        version,
        outputs,
        done: Arc::new(done),
    })
}

/// A view of part of a reply slot that `bytes::Bytes` can own: outputs go
/// to the socket from where the worker wrote them.
#[derive(Debug)]
pub struct ReplySlice {
    /// The slot.
    pub done: Arc<Done>,
    /// The bytes.
    pub range: Range<usize>,
}

impl AsRef<[u8]> for ReplySlice {
    fn as_ref(&self) -> &[u8] {
        &self.done.reply()[self.range.clone()]
    }
}

impl Answer {
    /// An output's bytes without a copy.
    pub fn bytes_of(&self, o: &Output) -> bytes::Bytes {
        bytes::Bytes::from_owner(ReplySlice {
            done: Arc::clone(&self.done),
            range: o.range.clone(),
        })
    }

    /// An output's bytes, borrowed.
    pub fn slice(&self, o: &Output) -> &[u8] {
        &self.done.reply()[o.range.clone()]
    }
}
