//! The inference stage: ONNX Runtime run in place, zero copy both ways.
//!
//! ONNX Runtime's input tensors point into the request's receive buffer and
//! its outputs are written into the reply buffer, after a response header
//! emitted there first. No payload byte is copied; [`RunStats`] measures it.
//!
//! ```text
//! sluice_infer::init(&lib_path)?;                         // once per process
//! let mut model = OrtModel::load(&spec)?;                 // once per worker
//! let len = model.run_into(&req, adapter, tx, &mut stats)?;   // per request
//! ```
//!
//! The library comes from `scripts/setup-onnxruntime.sh` (ONNX Runtime
//! 1.31.1, loaded at run time; nothing is linked at build time).
//!
//! `unsafe` lives only in `raw`: tensor values over borrowed memory, the
//! raw `Run` call, and the reply allocator (`raw::alloc`) through which ORT
//! places outputs whose shape is known only after the run.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod adapters;
mod batch;
mod env;
mod error;
mod meta;
mod model;
mod ports;
mod raw;
mod run;
mod weights;

pub use adapters::{ADAPTER_CACHE_MAX, AdapterCacheTotals, adapter_cache_totals};
pub use batch::{BatchKey, BatchSlot};
pub use env::{
    LIBRARY_ENV, init, is_initialized, library_path, loaded_library, set_weight_sharing,
    weight_sharing,
};
pub use error::{InferError, Reject};
pub use meta::ModelInfo;
pub use model::{
    AdapterSpec, InputBinding, ModelDescription, ModelSpec, OrtModel, OutputStats, RunStats,
    describe,
};
pub use ports::{Placement, Signature, TensorSig};
pub use raw::alloc::{heap_live as allocator_heap_blocks, stray_frees as allocator_stray_frees};
pub use run::{StatePair, StateSpec, TokenBatch, TokenSpec};
pub use weights::{SHARE_BYTES_MIN, SHARED_INITIALIZERS_MAX, shared_weight_bytes};

/// Most rows one batched run stacks along dimension 0 (the engine's
/// `batch_max` limit).
pub const BATCH_ROWS_MAX: usize = 256;

/// A zeroed byte buffer whose start is 64-byte aligned, like the engine's
/// pool buffers. For tests, benchmarks and the load-time warm-up.
#[derive(Debug, Clone)]
pub struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// Alignment of the start, in bytes.
    pub const ALIGN: usize = sluice_wire::TENSOR_ALIGN;

    /// `len` zero bytes starting at a 64-byte boundary.
    pub fn new(len: usize) -> AlignedBuf {
        let storage = vec![0u8; len + Self::ALIGN];
        let start = storage.as_ptr().align_offset(Self::ALIGN);
        AlignedBuf {
            storage,
            start,
            len,
        }
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}
