//! The words of a batched run, shared by the engine's handlers and the
//! ONNX runtime crate so that neither translates the other's.

use crate::Reject;

/// Where requests may be stacked: the rows a request adds along dimension 0
/// and a key over everything else that must match (other dimensions, input
/// names, the adapter). Equal keys are necessary, not sufficient: a batched
/// run checks the shapes again and leaves a request out when they differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchKey {
    /// Size of dimension 0 in this request.
    pub rows: u32,
    /// Requests stack only with equal keys (never 0).
    pub key: u64,
}

/// What became of one request of a batched run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchSlot {
    /// Not taken into this run (other shapes than the first request, or the
    /// batch buffers or the row limit were full): run it on its own or in a
    /// later batch.
    Left,
    /// Refused before the run, as a run on its own would refuse it: answer
    /// with this error.
    Refused(Reject),
    /// Stacked at `row`, `rows` rows: answer from the batch output.
    Stacked {
        /// First row of this request in the batch.
        row: u32,
        /// Rows it holds.
        rows: u32,
    },
}
