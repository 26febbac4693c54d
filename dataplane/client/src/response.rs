use sluice_wire::{DType, Frame, SchemaType, TensorDesc, TraceContext};

use crate::ClientError;

/// A successful inference answer. Owns a copy of the received frame.
#[derive(Debug, Clone)]
pub struct Response {
    frame: Frame<Vec<u8>>,
}

/// One output tensor, borrowed from a [`Response`].
#[derive(Debug, Clone, Copy)]
pub struct TensorView<'a> {
    /// Tensor name.
    pub name: &'a str,
    /// Element type.
    pub dtype: DType,
    desc: TensorDesc<'a>,
    /// The little-endian data bytes.
    pub data: &'a [u8],
}

impl<'a> TensorView<'a> {
    /// The shape.
    pub fn dims(&self) -> &[u64] {
        self.desc.dims()
    }

    /// Number of elements.
    pub fn elem_count(&self) -> usize {
        self.data.len() / self.dtype.size_bytes()
    }

    /// A copy of the data as f32; fails unless the dtype is f32.
    pub fn to_f32_vec(&self) -> Result<Vec<f32>, ClientError> {
        if self.dtype != DType::F32 {
            return Err(ClientError::Malformed("tensor dtype is not f32"));
        }
        Ok(self
            .data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// A copy of the data as i64; fails unless the dtype is i64.
    pub fn to_i64_vec(&self) -> Result<Vec<i64>, ClientError> {
        if self.dtype != DType::I64 {
            return Err(ClientError::Malformed("tensor dtype is not i64"));
        }
        Ok(self
            .data
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect())
    }
}

impl Response {
    /// Wraps a checked response frame.
    pub(crate) fn new(frame: Frame<Vec<u8>>) -> Response {
        Response { frame }
    }

    /// The request id this answers.
    pub fn request_id(&self) -> u64 {
        self.frame.request_id()
    }

    /// Model name as echoed by the server.
    pub fn model(&self) -> &str {
        self.frame.model()
    }

    /// Model version that served the request.
    pub fn model_version(&self) -> &str {
        self.frame.model_version()
    }

    /// Adapter that served the request.
    pub fn adapter(&self) -> &str {
        self.frame.adapter()
    }

    /// Token count reported by the server.
    pub fn token_count(&self) -> u32 {
        self.frame.token_count()
    }

    /// Schema id and version of the answer.
    pub fn schema(&self) -> (u32, u32) {
        (self.frame.schema_id(), self.frame.schema_version())
    }

    /// Trace context of the answer.
    pub fn trace(&self) -> TraceContext {
        self.frame.trace()
    }

    /// Value of the first extension header with `key`.
    pub fn extension(&self, key: &str) -> Option<&[u8]> {
        self.frame.extension(key)
    }

    /// Output tensors in wire order.
    pub fn tensors(&self) -> impl Iterator<Item = TensorView<'_>> {
        self.frame.tensors().map(|d| TensorView {
            name: d.name,
            dtype: d.dtype,
            desc: d,
            data: &self.frame.as_bytes()[d.data_range()],
        })
    }

    /// The output tensor called `name`.
    pub fn tensor(&self, name: &str) -> Option<TensorView<'_>> {
        self.tensors().find(|t| t.name == name)
    }

    /// The whole frame, for callers that want the raw view.
    pub fn frame(&self) -> &Frame<Vec<u8>> {
        &self.frame
    }

    /// The frame, by value: bindings hand its buffer to another owner (the
    /// Python package lends it to numpy) without copying it.
    pub fn into_frame(self) -> Frame<Vec<u8>> {
        self.frame
    }
}

/// A schema obtained by in-band negotiation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NegotiatedSchema {
    /// Global schema id, to put in requests.
    pub schema_id: u32,
    /// Version within the subject.
    pub version: u32,
    /// How long the answer may be cached.
    pub ttl: std::time::Duration,
    /// Format.
    pub schema_type: SchemaType,
    /// Schema text or descriptor bytes.
    pub bytes: Vec<u8>,
}
