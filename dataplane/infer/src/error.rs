use std::fmt;
use std::path::PathBuf;

use sluice_wire::ErrorCode;

/// Why the runtime or a model could not be set up. Setup path only; never
/// returned per request.
#[derive(Debug)]
pub enum InferError {
    /// No file at the ONNX Runtime library path.
    LibraryNotFound {
        /// The path tried.
        path: PathBuf,
    },
    /// The file exists but is not a usable ONNX Runtime library (not a shared
    /// object, no `OrtGetApiBase`, or older than API 31).
    LibraryLoad {
        /// The path tried.
        path: PathBuf,
        /// The loader's reason.
        reason: String,
    },
    /// `init` was already called with another library; one per process.
    AlreadyInitialized {
        /// The library in use.
        loaded: PathBuf,
        /// The one asked for now.
        requested: PathBuf,
    },
    /// The ONNX Runtime environment could not be created.
    Environment(String),
    /// A model was loaded before [`crate::init`] succeeded.
    NotInitialized,
    /// No file at the model path.
    ModelNotFound {
        /// The path tried.
        path: PathBuf,
    },
    /// ONNX Runtime rejected the model file.
    Session {
        /// Model path.
        path: PathBuf,
        /// ORT's message.
        reason: String,
    },
    /// The model loads but cannot be served in place (non-tensor or string
    /// inputs, too many tensors, an output shape not derivable from inputs).
    UnsupportedModel {
        /// Model path.
        path: PathBuf,
        /// What is unsupported.
        reason: String,
    },
    /// A LoRA adapter file could not be loaded or does not fit the model.
    Adapter {
        /// Adapter id.
        id: String,
        /// Adapter path.
        path: PathBuf,
        /// ORT's message.
        reason: String,
    },
    /// Two adapters of one model share an id.
    DuplicateAdapter {
        /// The id.
        id: String,
    },
    /// The warm-up run at load failed.
    Warmup {
        /// Adapter used, if any.
        adapter: Option<String>,
        /// Why.
        reason: String,
    },
}

impl fmt::Display for InferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InferError::LibraryNotFound { path } => write!(
                f,
                "ONNX Runtime library not found at {}; run scripts/setup-onnxruntime.sh or set {} / [onnxruntime] library",
                path.display(),
                crate::LIBRARY_ENV
            ),
            InferError::LibraryLoad { path, reason } => {
                write!(
                    f,
                    "cannot load ONNX Runtime from {}: {reason}",
                    path.display()
                )
            }
            InferError::AlreadyInitialized { loaded, requested } => write!(
                f,
                "ONNX Runtime is already loaded from {}; cannot switch to {} in the same process",
                loaded.display(),
                requested.display()
            ),
            InferError::Environment(r) => {
                write!(f, "cannot create the ONNX Runtime environment: {r}")
            }
            InferError::NotInitialized => {
                f.write_str("ONNX Runtime is not initialized; call sluice_infer::init first")
            }
            InferError::ModelNotFound { path } => {
                write!(f, "model file not found: {}", path.display())
            }
            InferError::Session { path, reason } => {
                write!(
                    f,
                    "ONNX Runtime cannot load model {}: {reason}",
                    path.display()
                )
            }
            InferError::UnsupportedModel { path, reason } => {
                write!(f, "model {} cannot be served: {reason}", path.display())
            }
            InferError::Adapter { id, path, reason } => {
                write!(f, "LoRA adapter {id:?} ({}): {reason}", path.display())
            }
            InferError::DuplicateAdapter { id } => {
                write!(f, "LoRA adapter id {id:?} is listed twice")
            }
            InferError::Warmup {
                adapter: Some(a),
                reason,
            } => {
                write!(f, "warm-up run with adapter {a:?} failed: {reason}")
            }
            InferError::Warmup {
                adapter: None,
                reason,
            } => write!(f, "warm-up run failed: {reason}"),
        }
    }
}

impl std::error::Error for InferError {}

/// Why one request was not run: the wire crate's refusal type. The engine
/// answers with an error frame carrying `code` and `message`.
/// Allocation-free: the message is static; ONNX Runtime's own text for
/// `InferenceFailed` is in [`crate::OrtModel::last_error`].
pub use sluice_wire::Reject;

/// A `bad_tensor` refusal.
pub(crate) const fn bad_tensor(message: &'static str) -> Reject {
    Reject::new(ErrorCode::BadTensor, message)
}
