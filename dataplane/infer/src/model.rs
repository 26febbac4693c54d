//! One ONNX Runtime session per worker per model version: loading, the
//! warm-up, and what the model tells about itself.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ort::logging::LogLevel;
use ort::memory::{AllocationDevice, AllocatorType, MemoryInfo, MemoryType};
use ort::session::builder::GraphOptimizationLevel;
use ort::session::{RunOptions, Session};
use ort::value::Outlet;
use sluice_wire::{ErrorCode, Frame, FrameRepr, Kind, TensorRepr};

use crate::adapters::{ADAPTER_CACHE_MAX, AdapterCache};
use crate::meta::ModelInfo;
use crate::ports::{self, DimRule, Placement, Port, Signature, TensorSig};
use crate::raw::alloc::Arena;
use crate::{InferError, Reject};

/// Scratch the reply allocator starts with per model (ORT's intermediate
/// tensors during a run, when they do not fit the reply's free tail).
const SCRATCH_LEN_DEFAULT: usize = 1 << 20;
/// Largest scratch a model may grow to at load.
const SCRATCH_LEN_MAX: usize = 256 << 20;
/// Sizes tried for dynamic input dimensions in the load-time warm-up, in
/// order: (the leading dimension of inputs of rank 2 or more, the others).
/// Unnamed dimensions that must agree (Silero's batch in `input` and
/// `state`) need equal sizes, so equal pairs are tried too.
const WARM_UP_DIMS: [(u64, u64); 5] = [(1, 1), (1, 64), (64, 64), (1, 512), (512, 512)];
/// Requests run on the heap before the arena is tried, when no warm-up
/// size fitted the model.
pub(crate) const ARENA_COUNTDOWN: u32 = 2;

/// A LoRA adapter of a model: an ONNX Runtime adapter file (`.onnx_adapter`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdapterSpec {
    /// Id requests select it by (the frame's adapter field).
    pub id: String,
    /// Adapter file.
    pub path: PathBuf,
}

/// What to load: a model version and its adapters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSpec {
    /// Model name, written into responses.
    pub name: String,
    /// Exact version, written into responses.
    pub version: String,
    /// `.onnx` file.
    pub path: PathBuf,
    /// LoRA adapters, selectable per request.
    pub adapters: Vec<AdapterSpec>,
}

/// Counters a worker keeps per model; plain integers, no atomics (one owner).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunStats {
    /// Successful runs.
    pub runs: u64,
    /// Requests rejected before running (bad tensors, unknown adapter,
    /// response too large).
    pub rejects: u64,
    /// Runs ONNX Runtime failed.
    pub failures: u64,
    /// Input bytes ONNX Runtime read in place from the request buffer
    /// (its tensor's data pointer was the request's, checked each run).
    pub payload_bytes_in_place: u64,
    /// Bytes that did not stay in place: allocator-placed outputs that ORT
    /// put elsewhere than where the frame wants them and that were moved or
    /// copied into place (once each). Measured, not assumed.
    pub payload_bytes_copied: u64,
    /// Output bytes ONNX Runtime wrote in place into the reply buffer
    /// (preallocated, or allocator-placed where the frame wants them).
    pub output_bytes_in_place: u64,
    /// Allocations ORT made during runs that fit neither the reply's free
    /// tail nor the model's scratch and came from the heap.
    pub heap_allocs: u64,
    /// Batched runs ([`OrtModel::run_batch`] with at least one row); the
    /// requests they answered count in `runs`.
    pub batch_runs: u64,
    /// Input bytes gathered into batch buffers (the copy batching costs on
    /// the way in; also in `payload_bytes_copied`).
    pub batch_input_bytes_copied: u64,
    /// Output bytes split from batch buffers into replies (the copy on the
    /// way out; also in `payload_bytes_copied`).
    pub batch_output_bytes_copied: u64,
}

/// Per output, where its bytes went over all runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OutputStats {
    /// Bytes ORT wrote where the reply wants them.
    pub bytes_in_place: u64,
    /// Bytes moved within the reply or copied in from scratch (one copy).
    pub bytes_copied: u64,
}

/// A request tensor bound for ONNX Runtime, as reported by
/// [`OrtModel::probe_inputs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputBinding {
    /// Address of the tensor's bytes in the request buffer.
    pub buffer_ptr: usize,
    /// Address ONNX Runtime's tensor value reads from.
    pub ort_ptr: usize,
    /// Bytes.
    pub len: usize,
}

/// A loaded model version: one ONNX Runtime session, its signature, and one
/// prebuilt `RunOptions` per LoRA adapter.
///
/// Each worker loads its own (`Send`, not `Sync`, never shared), so a run
/// takes no lock. Sessions use one intra-op thread: the worker's core runs
/// the model.
///
/// # Memory on the hot path
///
/// [`OrtModel::run_into`] allocates nothing on the Rust side: names are
/// prebuilt C strings, shapes and values live in fixed arrays, the response
/// header is emitted into the caller's buffer. ONNX Runtime's own tensor
/// memory comes from the reply allocator (`raw::alloc`): the reply's free
/// tail, then this model's scratch, both reset per request. ORT still
/// allocates small bookkeeping on its heap per run (one `OrtValue` header per
/// tensor, the feed/fetch lists of `Run`).
pub struct OrtModel {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) path: PathBuf,
    pub(crate) session: Session,
    /// Initializers shared with every other session of this model file
    /// (kept alive while this session is; `None`: sharing off or nothing
    /// large enough).
    pub(crate) shared_weights: Shared,
    pub(crate) memory: MemoryInfo<'static>,
    pub(crate) signature: Signature,
    /// Required inputs, then optional ones.
    pub(crate) inputs: Vec<Port>,
    pub(crate) required: usize,
    pub(crate) outputs: Vec<Port>,
    pub(crate) symbols: usize,
    pub(crate) default_options: RunOptions,
    pub(crate) adapters: AdapterCache,
    pub(crate) last_error: String,
    pub(crate) info: ModelInfo,
    pub(crate) arena: Arena,
    /// Whether runs use the arena (false: a run kept arena memory after it
    /// ended, so ORT's memory comes from the heap instead).
    pub(crate) arena_on: bool,
    /// Successful heap runs still to go before the arena is tried (when the
    /// warm-up could not run the model).
    pub(crate) arena_countdown: u32,
    /// Size of dynamic dimensions the warm-up runs with.
    pub(crate) warm_dim: (u64, u64),
    /// During the warm-up: allocator-placed outputs take the rank ORT
    /// really returns when it differs from the declared one.
    pub(crate) learning: bool,
    pub(crate) output_stats: Vec<OutputStats>,
    /// Whether and how requests stack (decided at load), and the layout of
    /// the last batch run.
    pub(crate) batch: crate::batch::BatchState,
}

impl std::fmt::Debug for OrtModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrtModel")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("path", &self.path)
            .field("signature", &self.signature)
            .field("adapters", &self.adapter_ids().collect::<Vec<_>>())
            .finish()
    }
}

const _: () = {
    const fn assert_send<T: Send>() {}
    assert_send::<OrtModel>();
};

// SAFETY-free note: `Arena` holds raw pointers that are only dereferenced
// while armed on the thread that owns the model, so moving the model
// between threads (load on a control thread, run on a worker) is sound.
// The marker lives in `raw::alloc`.

impl OrtModel {
    /// Loads a model version and its adapters, then runs it on zeros with
    /// every dynamic dimension 1: once without the reply allocator's arena
    /// (ORT's first-run caches land on the heap), then twice with it per
    /// adapter (and without one), so a bad adapter fails here and the first
    /// request does not pay ORT's first-run costs.
    pub fn load(spec: &ModelSpec) -> Result<OrtModel, InferError> {
        let (session, signature, shared_weights) = open(&spec.path)?;
        let unsupported = |reason: String| InferError::UnsupportedModel {
            path: spec.path.clone(),
            reason,
        };
        let compiled = ports::compile(&signature).map_err(unsupported)?;
        let info = ModelInfo::read(&session);

        let memory = MemoryInfo::new(
            AllocationDevice::CPU,
            0,
            AllocatorType::Device,
            MemoryType::Default,
        )
        .map_err(|e| InferError::Environment(e.to_string()))?;
        let default_options = run_options().map_err(InferError::Environment)?;
        let adapters = load_adapters(spec)?;
        let n_out = compiled.outputs.len();
        let batch =
            crate::batch::BatchState::of(&compiled.inputs, compiled.required, &compiled.outputs);
        let mut model = OrtModel {
            name: spec.name.clone(),
            version: spec.version.clone(),
            path: spec.path.clone(),
            session,
            shared_weights,
            memory,
            signature,
            inputs: compiled.inputs,
            required: compiled.required,
            outputs: compiled.outputs,
            symbols: compiled.symbols,
            default_options,
            adapters,
            last_error: String::new(),
            info,
            arena: Arena::new(SCRATCH_LEN_DEFAULT),
            arena_on: false,
            arena_countdown: 0,
            warm_dim: (1, 1),
            learning: false,
            output_stats: vec![OutputStats::default(); n_out],
            batch,
        };
        model.learning = true;
        let warm = model.warm_up_all(spec);
        model.learning = false;
        warm?;
        model.output_stats.fill(OutputStats::default());
        Ok(model)
    }

    fn warm_up_all(&mut self, spec: &ModelSpec) -> Result<(), InferError> {
        // The adapters loaded at load (the first ADAPTER_CACHE_MAX); the
        // others are checked when first used.
        let ids: Vec<Option<String>> = std::iter::once(None)
            .chain(self.adapters.loaded.iter().map(|a| Some(a.id.clone())))
            .collect();
        let fail = |id: &Option<String>, reason: String| match id {
            Some(id) => InferError::Adapter {
                id: id.clone(),
                path: spec
                    .adapters
                    .iter()
                    .find(|a| &a.id == id)
                    .map(|a| a.path.clone())
                    .unwrap_or_default(),
                reason: format!("does not fit the model: {reason}"),
            },
            None => InferError::Warmup {
                adapter: None,
                reason,
            },
        };
        // First runs on the heap: whatever ORT caches on a first run must
        // not live in a region that is reset per request. Dynamic input
        // dimensions get one size for all (a model rarely accepts any size:
        // audio and image models need some length), the first that runs.
        let dynamic = self.inputs[..self.required].iter().any(|p| {
            p.dims[..p.rank]
                .iter()
                .any(|d| !matches!(d, DimRule::Fixed(_)))
        });
        let mut last = String::new();
        let mut found = None;
        for v in WARM_UP_DIMS {
            // A second try when the first one corrected an output's rank.
            let r = self.warm_up(None, v).or_else(|_| self.warm_up(None, v));
            match r {
                Ok(()) => {
                    found = Some(v);
                    break;
                }
                Err(r) => last = r,
            }
            if !dynamic {
                break;
            }
        }
        let Some(v) = found else {
            if dynamic && self.adapters.is_empty() {
                // No size tried fits the model: it is served, and the arena
                // is tried after the first requests have run on the heap.
                self.arena_countdown = ARENA_COUNTDOWN;
                return Ok(());
            }
            return Err(fail(&None, last));
        };
        self.warm_dim = v;
        for id in ids.iter().skip(1) {
            self.warm_up(id.as_deref(), v).map_err(|r| fail(id, r))?;
        }
        self.arena_on = true;
        for _attempt in 0..4 {
            let mut leaked = false;
            let mut overflow = false;
            for id in &ids {
                for _ in 0..2 {
                    let before = self.arena.heap_allocs;
                    self.warm_up(id.as_deref(), self.warm_dim)
                        .map_err(|r| fail(id, r))?;
                    overflow |= self.arena.heap_allocs != before;
                    leaked |= !self.arena_on;
                }
            }
            if leaked {
                // warm_up turned the arena off: runs keep memory.
                break;
            }
            if !overflow {
                break;
            }
            // Scratch too small for the warm-up: grow it, up to the limit.
            let next = (self.arena.scratch_len() * 4).min(SCRATCH_LEN_MAX);
            if next == self.arena.scratch_len() {
                break;
            }
            self.arena = Arena::new(next);
        }
        self.arena.heap_allocs = 0;
        Ok(())
    }

    /// The model's inputs and outputs.
    pub fn signature(&self) -> &Signature {
        &self.signature
    }

    /// What the model file says about itself (producer, graph, version, ...).
    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// Model name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Model version.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Ids of the configured adapters (loaded or not).
    pub fn adapter_ids(&self) -> impl Iterator<Item = &str> {
        self.adapters.ids()
    }

    /// This session's adapter cache: (loaded now, loaded on demand since
    /// load, evicted since load). At most [`ADAPTER_CACHE_MAX`] are loaded.
    pub fn adapter_cache(&self) -> (usize, u64, u64) {
        (
            self.adapters.loaded_count(),
            self.adapters.loads,
            self.adapters.evictions,
        )
    }

    /// ONNX Runtime's message for the last failed run (empty if none).
    pub fn last_error(&self) -> &str {
        &self.last_error
    }

    /// How each output (in model order) is placed.
    pub fn placements(&self) -> impl Iterator<Item = (&str, Placement)> {
        self.outputs.iter().map(|p| (p.name.as_str(), p.placement))
    }

    /// Per output (model order), where its bytes went since load.
    pub fn output_stats(&self) -> &[OutputStats] {
        &self.output_stats
    }

    /// Whether runs take ORT's memory from the reply allocator's arena
    /// (false when the model keeps memory across runs; then the heap).
    pub fn arena_enabled(&self) -> bool {
        self.arena_on
    }

    /// Bytes of scratch the reply allocator has for this model, and the most
    /// used so far.
    pub fn scratch_bytes(&self) -> (usize, usize) {
        (self.arena.scratch_len(), self.arena.scratch_peak())
    }

    /// Bytes of this model's initializers shared with the process's other
    /// sessions of the same file (0: not shared).
    pub fn shared_weight_bytes(&self) -> usize {
        self.shared_weights.as_ref().map_or(0, |s| s.bytes)
    }

    /// The model file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of distinct symbolic dimensions among the inputs.
    pub fn symbol_count(&self) -> usize {
        self.symbols
    }

    /// One run on zeros through the normal path; dynamic dimensions are
    /// `lead` (dimension 0 of inputs of rank 2 or more) or `rest`.
    fn warm_up(&mut self, adapter: Option<&str>, (lead, rest): (u64, u64)) -> Result<(), String> {
        let inputs = &self.inputs[..self.required];
        let dims: Vec<Vec<u64>> = inputs
            .iter()
            .map(|p| {
                p.dims[..p.rank]
                    .iter()
                    .enumerate()
                    .map(|(k, r)| match r {
                        DimRule::Fixed(v) => *v,
                        _ if k == 0 && p.rank >= 2 => lead,
                        _ => rest,
                    })
                    .collect()
            })
            .collect();
        let data: Vec<Vec<u8>> = inputs
            .iter()
            .zip(&dims)
            .map(|(p, d)| vec![0u8; p.dtype.byte_len(d).unwrap_or(0)])
            .collect();
        let tensors: Vec<TensorRepr<'_>> = inputs
            .iter()
            .zip(&dims)
            .zip(&data)
            .map(|((p, d), bytes)| TensorRepr {
                name: &p.name,
                dtype: p.dtype,
                dims: d,
                data: Some(bytes),
            })
            .collect();
        let repr = FrameRepr {
            kind: Kind::Request,
            model: &self.name,
            model_version: &self.version,
            tensors: &tensors,
            ..FrameRepr::default()
        };
        let layout = repr
            .layout()
            .map_err(|e| format!("cannot build a warm-up request: {e}"))?;
        let mut rx = crate::AlignedBuf::new(layout.frame_len);
        repr.emit(rx.as_mut_slice()).map_err(|e| e.to_string())?;
        drop(tensors);
        let req = Frame::new_checked(rx.as_slice()).map_err(|e| e.to_string())?;
        // Known outputs of the warm-up shapes, generous header room, and a
        // megabyte for allocator-placed outputs.
        let mut out_len = sluice_wire::limits::HEADER_LEN_MAX + (1 << 20);
        for p in &self.outputs {
            let d: Vec<u64> = p.dims[..p.rank]
                .iter()
                .map(|r| if let DimRule::Fixed(v) = r { *v } else { 1 })
                .collect();
            out_len += p.dtype.byte_len(&d).ok_or("output too large")? + sluice_wire::TENSOR_ALIGN;
        }
        let mut tx = crate::AlignedBuf::new(out_len);
        let mut stats = RunStats::default();
        let r = self.run_into(&req, adapter, tx.as_mut_slice(), &mut stats);
        self.arena.heap_allocs += stats.heap_allocs;
        match r {
            Ok(_) => Ok(()),
            Err(r) if r.code == ErrorCode::InferenceFailed => Err(self.last_error.clone()),
            Err(r) => Err(r.to_string()),
        }
    }
}

/// Opens a session with the options every Sluice session uses and reads
/// its signature.
fn open(path: &Path) -> Result<(Session, Signature, Shared), InferError> {
    let env = crate::env::environment()?;
    if !path.is_file() {
        return Err(InferError::ModelNotFound {
            path: path.to_path_buf(),
        });
    }
    let session_err = |reason: String| InferError::Session {
        path: path.to_path_buf(),
        reason,
    };
    let unsupported = |reason: String| InferError::UnsupportedModel {
        path: path.to_path_buf(),
        reason,
    };
    // Builder errors carry the builder back (large); keep only the text.
    let mut builder = Session::builder(env).map_err(|e| session_err(e.to_string()))?;
    builder = builder
        .with_intra_threads(1)
        .map_err(|e| session_err(e.to_string()))?;
    builder = builder
        .with_inter_threads(1)
        .map_err(|e| session_err(e.to_string()))?;
    builder = builder
        .with_parallel_execution(false)
        .map_err(|e| session_err(e.to_string()))?;
    builder = builder
        .with_optimization_level(GraphOptimizationLevel::All)
        .map_err(|e| session_err(e.to_string()))?;
    // Every CPU allocation of the session goes through the reply
    // allocator registered in the environment (see raw::alloc).
    builder = builder
        .with_config_entry("session.use_env_allocators", "1")
        .map_err(|e| session_err(e.to_string()))?;
    // Loading warns that LoRA parameters are overridable initializers;
    // that is the point, so only errors are logged.
    builder = builder
        .with_log_level(LogLevel::Error)
        .map_err(|e| session_err(e.to_string()))?;
    // One copy of the large initializers and of their pre-packed forms per
    // process, not per worker (see weights.rs).
    let mut shared = None;
    if let Some(container) = crate::env::prepacked_weights() {
        shared = crate::weights::for_model(path).map_err(&session_err)?;
        for (name, value) in shared.iter().flat_map(|s| s.values.iter()) {
            builder = builder
                .with_initializer(name, Arc::clone(value))
                .map_err(|e| session_err(e.to_string()))?;
        }
        builder = builder
            .with_prepacked_weights(container)
            .map_err(|e| session_err(e.to_string()))?;
    }
    let session = builder
        .commit_from_file(path)
        .map_err(|e| session_err(e.to_string()))?;

    let sigs = |outlets: &[Outlet]| {
        outlets
            .iter()
            .map(ports::sig_of)
            .collect::<Result<Vec<_>, _>>()
    };
    let optional_inputs: Vec<TensorSig> = session
        .overridable_initializers()
        .iter()
        .filter_map(|o| ports::sig_of_type(o.name(), o.dtype()).ok())
        .collect();
    let signature = Signature {
        inputs: sigs(session.inputs()).map_err(unsupported)?,
        optional_inputs,
        outputs: sigs(session.outputs()).map_err(unsupported)?,
    };
    Ok((session, signature, shared))
}

type Shared = Option<Arc<crate::weights::SharedWeights>>;

/// What [`describe`] reads from a model file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelDescription {
    /// Inputs and outputs.
    pub signature: Signature,
    /// How each output (model order) would be placed.
    pub placements: Vec<Placement>,
    /// Whether requests can be stacked into one run, or why not.
    pub batchable: Result<(), String>,
    /// The file's metadata.
    pub info: ModelInfo,
}

/// Reads a model's signature, output placements and metadata without
/// serving it (no warm-up). For the control plane; takes a session load.
pub fn describe(path: &Path) -> Result<ModelDescription, InferError> {
    let (session, signature, _shared) = open(path)?;
    let compiled = ports::compile(&signature).map_err(|reason| InferError::UnsupportedModel {
        path: path.to_path_buf(),
        reason,
    })?;
    let batch =
        crate::batch::BatchState::of(&compiled.inputs, compiled.required, &compiled.outputs);
    Ok(ModelDescription {
        placements: compiled.outputs.iter().map(|p| p.placement).collect(),
        batchable: match batch.sym {
            Some(_) => Ok(()),
            None => Err(batch.refusal),
        },
        info: ModelInfo::read(&session),
        signature,
    })
}

fn load_adapters(spec: &ModelSpec) -> Result<AdapterCache, InferError> {
    let mut cache = AdapterCache::new(ADAPTER_CACHE_MAX);
    for a in &spec.adapters {
        if cache.is_known(&a.id) {
            return Err(InferError::DuplicateAdapter { id: a.id.clone() });
        }
        let adapter_err = |reason: String| InferError::Adapter {
            id: a.id.clone(),
            path: a.path.clone(),
            reason,
        };
        if a.id.is_empty() || a.id.len() > sluice_wire::limits::ADAPTER_LEN_MAX {
            return Err(adapter_err("id must be 1 to 64 bytes".into()));
        }
        if !a.path.is_file() {
            return Err(adapter_err("file not found".into()));
        }
        cache.know(&a.id, a.path.clone());
        // The first ADAPTER_CACHE_MAX are loaded (and warmed up) now.
        cache.preload(&a.id).map_err(adapter_err)?;
    }
    Ok(cache)
}

/// Run options as every run uses them. A failing request must not write to
/// stderr from the hot path (a client could flood the log), so ORT's per-run
/// logging is limited to fatal errors; the engine counts failures and
/// [`OrtModel::last_error`] keeps the message.
pub(crate) fn run_options() -> Result<RunOptions, String> {
    let mut o = RunOptions::new().map_err(|e| e.to_string())?;
    o.set_log_level(LogLevel::Fatal)
        .map_err(|e| e.to_string())?;
    Ok(o)
}

/// Records ORT's message and turns a failure into the request's answer.
pub(crate) fn ort_failed(last_error: &mut String, e: crate::raw::OrtFailure) -> Reject {
    *last_error = e.0;
    Reject::new(ErrorCode::InferenceFailed, crate::run::msg::ORT_FAILED)
}
