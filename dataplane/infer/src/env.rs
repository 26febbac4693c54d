//! Loading the ONNX Runtime library and the one process-wide environment.
//!
//! ort rc.15 allows one environment per process, ever, and any ort call made
//! before a library is loaded tries a default path and panics. So the
//! environment lives in a `OnceLock` for the life of the process, and
//! nothing in this crate touches ort until [`init`] has succeeded.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use ort::environment::Environment;
use ort::session::builder::PrepackedWeights;

use crate::InferError;

/// Environment variable that overrides the configured library path.
pub const LIBRARY_ENV: &str = "SLUICE_ORT_LIB";

struct Runtime {
    library: PathBuf,
    env: Environment,
    /// One container of pre-packed weights for every session of the
    /// process: the first session of a model version packs its constant
    /// weights (MatMul's B, ...) into it, later sessions find them there by
    /// content and free their own copy. Lives as long as the process, so it
    /// outlives every session that uses it.
    prepacked: PrepackedWeights,
}

static RUNTIME: OnceLock<Runtime> = OnceLock::new();
static INIT_LOCK: Mutex<()> = Mutex::new(());
/// Whether new sessions share pre-packed weights (on unless turned off).
static SHARE_WEIGHTS: AtomicBool = AtomicBool::new(true);

/// Whether sessions loaded from now on share their pre-packed weights with
/// every other session of the process (the default) or keep their own copy.
/// Off is the baseline the weight-sharing test and benchmark compare with;
/// outputs are the same either way.
pub fn set_weight_sharing(on: bool) {
    SHARE_WEIGHTS.store(on, Ordering::Relaxed);
}

/// See [`set_weight_sharing`].
pub fn weight_sharing() -> bool {
    SHARE_WEIGHTS.load(Ordering::Relaxed)
}

/// The library path to use: `SLUICE_ORT_LIB` when set and not empty, else
/// `configured` (the config's `[onnxruntime] library`).
pub fn library_path(configured: Option<&Path>) -> Option<PathBuf> {
    match std::env::var_os(LIBRARY_ENV) {
        Some(v) if !v.is_empty() => Some(PathBuf::from(v)),
        _ => configured.map(Path::to_path_buf),
    }
}

/// Loads ONNX Runtime from `library_path` and creates the process-wide
/// environment. Idempotent for the same path; a different path after a
/// successful init is an error. A missing, foreign or too-old library is an
/// error, never a panic. Takes about 50 ms and 20 MB once.
pub fn init(library_path: &Path) -> Result<(), InferError> {
    let requested =
        std::path::absolute(library_path).unwrap_or_else(|_| library_path.to_path_buf());
    let _guard = INIT_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(rt) = RUNTIME.get() {
        return if same_file(&rt.library, &requested) {
            Ok(())
        } else {
            Err(InferError::AlreadyInitialized {
                loaded: rt.library.clone(),
                requested,
            })
        };
    }
    if !requested.is_file() {
        return Err(InferError::LibraryNotFound { path: requested });
    }
    let builder = ort::init_from(&requested).map_err(|e| InferError::LibraryLoad {
        path: requested.clone(),
        reason: e.to_string(),
    })?;
    let env = builder
        .with_name("sluice")
        .with_telemetry(false)
        .build()
        .map_err(|e| InferError::Environment(e.to_string()))?;
    crate::raw::alloc::register(&env).map_err(|e| InferError::Environment(e.0))?;
    // ort's constructor panics when ORT refuses; keep that a plain error.
    let prepacked = std::panic::catch_unwind(PrepackedWeights::new).map_err(|_| {
        InferError::Environment("cannot create the pre-packed weights container".into())
    })?;
    let _ = RUNTIME.set(Runtime {
        library: requested,
        env,
        prepacked,
    });
    Ok(())
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// Whether [`init`] has succeeded in this process.
pub fn is_initialized() -> bool {
    RUNTIME.get().is_some()
}

/// The library loaded by [`init`], if any.
pub fn loaded_library() -> Option<&'static Path> {
    RUNTIME.get().map(|r| r.library.as_path())
}

pub(crate) fn environment() -> Result<&'static Environment, InferError> {
    RUNTIME
        .get()
        .map(|r| &r.env)
        .ok_or(InferError::NotInitialized)
}

/// The process-wide pre-packed weights container, when sharing is on.
pub(crate) fn prepacked_weights() -> Option<&'static PrepackedWeights> {
    if !weight_sharing() {
        return None;
    }
    RUNTIME.get().map(|r| &r.prepacked)
}
