//! One ONNX Runtime session per worker per model version, run in place.

use std::ffi::CString;
use std::path::{Path, PathBuf};

use ort::logging::LogLevel;
use ort::memory::{AllocationDevice, AllocatorType, MemoryInfo, MemoryType};
use ort::session::builder::GraphOptimizationLevel;
use ort::session::{Adapter, RunOptions, Session};
use ort::value::{Outlet, TensorElementType, ValueType};
use sluice_wire::limits::{RANK_MAX, TENSOR_COUNT_MAX};
use sluice_wire::{DType, ErrorCode, Frame, FrameRepr, Kind, TensorRepr};

mod run;

use crate::InferError;

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

/// One input or output as the model declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSig {
    /// Name.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Shape; -1 for a dynamic dimension.
    pub dims: Vec<i64>,
    /// Symbolic name of each dimension ("batch"); empty when none. Equal
    /// names must have equal sizes in one request.
    pub dim_names: Vec<String>,
}

/// A model's inputs and outputs, read from the model itself. Inputs that
/// have initializers (LoRA parameters) are not listed: requests do not send
/// them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Signature {
    /// Inputs, in model order.
    pub inputs: Vec<TensorSig>,
    /// Outputs, in model order; responses carry them in this order.
    pub outputs: Vec<TensorSig>,
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
    /// Input or output bytes that did not stay in place. This crate never
    /// copies (misaligned data is rejected), so this stays 0; it is measured,
    /// not assumed: a tensor whose ORT data pointer is not the buffer's is
    /// counted here.
    pub payload_bytes_copied: u64,
    /// Output bytes ONNX Runtime wrote in place into the reply buffer.
    pub output_bytes_in_place: u64,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DimRule {
    /// Must equal this size.
    Fixed(u64),
    /// Bound to symbol number `n`: equal across the request.
    Sym(u8),
    /// Any size.
    Any,
}

#[derive(Debug)]
struct Port {
    name: String,
    c_name: CString,
    dtype: DType,
    rank: usize,
    dims: [DimRule; RANK_MAX],
}

struct LoadedAdapter {
    id: String,
    options: RunOptions,
}

/// Messages of request rejections.
mod msg {
    pub const NOT_REQUEST: &str = "only request frames can be run";
    pub const UNKNOWN_ADAPTER: &str = "LoRA adapter not loaded for this model";
    pub const UNEXPECTED_INPUT: &str = "tensor is not an input of the model";
    pub const DUPLICATE_INPUT: &str = "input tensor sent twice";
    pub const MISSING_INPUT: &str = "a model input is missing";
    pub const WRONG_DTYPE: &str = "input dtype does not match the model";
    pub const WRONG_RANK: &str = "input rank does not match the model";
    pub const WRONG_DIM: &str = "input dimension does not match the model";
    pub const INCONSISTENT_DIM: &str = "inputs disagree on a shared dimension (e.g. batch)";
    pub const DIM_TOO_LARGE: &str = "input dimension too large";
    pub const MISALIGNED: &str = "input data not aligned for its dtype";
    pub const BAD_BOOL: &str = "bool tensor holds a byte other than 0 or 1";
    pub const SHORT_PAYLOAD: &str = "input data shorter than its shape";
    pub const RESPONSE_TOO_LARGE: &str = "response does not fit the reply buffer";
    pub const RESPONSE_HEADER: &str = "cannot build the response header";
    pub const TX_MISALIGNED: &str = "reply buffer not aligned for the output dtype";
    pub const ORT_FAILED: &str = "ONNX Runtime run failed";
}

/// A loaded model version: one ONNX Runtime session, its signature, and one
/// prebuilt `RunOptions` per LoRA adapter.
///
/// Each worker loads its own (`Send`, not `Sync`, never shared), so a run
/// takes no lock. Sessions use one intra-op thread: the worker's core runs
/// the model.
///
/// # Allocation on the hot path
///
/// [`OrtModel::run_into`] allocates nothing on the Rust side: names are
/// prebuilt C strings, shapes and values live in fixed arrays, the response
/// header is emitted into the caller's buffer. ONNX Runtime itself allocates
/// per run: one small `OrtValue` per input and output (the tensor header,
/// not the data), and its arena serves intermediate tensors (reused after the
/// first run; the load-time warm-up takes that first hit).
pub struct OrtModel {
    name: String,
    version: String,
    path: PathBuf,
    session: Session,
    memory: MemoryInfo<'static>,
    signature: Signature,
    inputs: Vec<Port>,
    outputs: Vec<Port>,
    symbols: usize,
    default_options: RunOptions,
    adapters: Vec<LoadedAdapter>,
    last_error: String,
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

fn dtype_of(t: TensorElementType) -> Option<DType> {
    Some(match t {
        TensorElementType::Float32 => DType::F32,
        TensorElementType::Uint8 => DType::U8,
        TensorElementType::Int8 => DType::I8,
        TensorElementType::Uint16 => DType::U16,
        TensorElementType::Int16 => DType::I16,
        TensorElementType::Int32 => DType::I32,
        TensorElementType::Int64 => DType::I64,
        TensorElementType::Bool => DType::Bool,
        TensorElementType::Float16 => DType::F16,
        TensorElementType::Float64 => DType::F64,
        TensorElementType::Uint32 => DType::U32,
        TensorElementType::Uint64 => DType::U64,
        TensorElementType::Bfloat16 => DType::BF16,
        _ => return None,
    })
}

fn sig_of(o: &Outlet) -> Result<TensorSig, String> {
    match o.dtype() {
        ValueType::Tensor {
            ty,
            shape,
            dimension_symbols,
        } => {
            let dtype = dtype_of(*ty).ok_or_else(|| {
                format!("tensor {:?} has unsupported element type {ty:?}", o.name())
            })?;
            let dims: Vec<i64> = shape.iter().copied().collect();
            let dim_names = (0..dims.len())
                .map(|i| dimension_symbols.get(i).cloned().unwrap_or_default())
                .collect();
            Ok(TensorSig {
                name: o.name().to_string(),
                dtype,
                dims,
                dim_names,
            })
        }
        other => Err(format!("{:?} is not a tensor ({other:?})", o.name())),
    }
}

impl OrtModel {
    /// Loads a model version and its adapters, then runs it once per adapter
    /// (and once without) on zeros with every dynamic dimension 1, so that a
    /// bad adapter fails here rather than on a request, and the first request
    /// does not pay ONNX Runtime's first-run allocations.
    pub fn load(spec: &ModelSpec) -> Result<OrtModel, InferError> {
        let env = crate::env::environment()?;
        if !spec.path.is_file() {
            return Err(InferError::ModelNotFound {
                path: spec.path.clone(),
            });
        }
        let session_err = |reason: String| InferError::Session {
            path: spec.path.clone(),
            reason,
        };
        let unsupported = |reason: String| InferError::UnsupportedModel {
            path: spec.path.clone(),
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
        // Loading warns that LoRA parameters are overridable initializers;
        // that is the point, so only errors are logged.
        builder = builder
            .with_log_level(LogLevel::Error)
            .map_err(|e| session_err(e.to_string()))?;
        let session = builder
            .commit_from_file(&spec.path)
            .map_err(|e| session_err(e.to_string()))?;

        let sigs = |outlets: &[Outlet]| outlets.iter().map(sig_of).collect::<Result<Vec<_>, _>>();
        let signature = Signature {
            inputs: sigs(session.inputs()).map_err(unsupported)?,
            outputs: sigs(session.outputs()).map_err(unsupported)?,
        };
        let (inputs, outputs, symbols) = compile(&signature).map_err(unsupported)?;

        let memory = MemoryInfo::new(
            AllocationDevice::CPU,
            0,
            AllocatorType::Device,
            MemoryType::Default,
        )
        .map_err(|e| InferError::Environment(e.to_string()))?;
        let default_options = run_options().map_err(InferError::Environment)?;

        let mut adapters: Vec<LoadedAdapter> = Vec::with_capacity(spec.adapters.len());
        for a in &spec.adapters {
            if adapters.iter().any(|l| l.id == a.id) {
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
            let adapter =
                Adapter::from_file(&a.path, None).map_err(|e| adapter_err(e.to_string()))?;
            let mut options = run_options().map_err(adapter_err)?;
            // The options keep the adapter alive; it is activated on every run
            // that uses these options.
            options
                .add_adapter(&adapter)
                .map_err(|e| adapter_err(e.to_string()))?;
            adapters.push(LoadedAdapter {
                id: a.id.clone(),
                options,
            });
        }

        let mut model = OrtModel {
            name: spec.name.clone(),
            version: spec.version.clone(),
            path: spec.path.clone(),
            session,
            memory,
            signature,
            inputs,
            outputs,
            symbols,
            default_options,
            adapters,
            last_error: String::new(),
        };
        let ids: Vec<Option<String>> = std::iter::once(None)
            .chain(model.adapters.iter().map(|a| Some(a.id.clone())))
            .collect();
        for id in ids {
            model.warm_up(id.as_deref()).map_err(|reason| match &id {
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
            })?;
        }
        Ok(model)
    }

    /// The model's inputs and outputs.
    pub fn signature(&self) -> &Signature {
        &self.signature
    }

    /// Model name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Model version.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Ids of the loaded adapters.
    pub fn adapter_ids(&self) -> impl Iterator<Item = &str> {
        self.adapters.iter().map(|a| a.id.as_str())
    }

    /// ONNX Runtime's message for the last failed run (empty if none).
    pub fn last_error(&self) -> &str {
        &self.last_error
    }

    /// One run on zeros (dynamic dimensions 1) through the normal path.
    fn warm_up(&mut self, adapter: Option<&str>) -> Result<(), String> {
        let mut dims: Vec<Vec<u64>> = Vec::with_capacity(self.inputs.len());
        for p in &self.inputs {
            dims.push(
                p.dims[..p.rank]
                    .iter()
                    .map(|r| match r {
                        DimRule::Fixed(v) => *v,
                        _ => 1,
                    })
                    .collect(),
            );
        }
        let data: Vec<Vec<u8>> = self
            .inputs
            .iter()
            .zip(&dims)
            .map(|(p, d)| vec![0u8; p.dtype.byte_len(d).unwrap_or(0)])
            .collect();
        let tensors: Vec<TensorRepr<'_>> = self
            .inputs
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
        // Outputs of the warm-up shapes: fixed sizes and 1s; generous header room.
        let mut out_len = sluice_wire::limits::HEADER_LEN_MAX;
        for p in &self.outputs {
            let d: Vec<u64> = p.dims[..p.rank]
                .iter()
                .map(|r| if let DimRule::Fixed(v) = r { *v } else { 1 })
                .collect();
            out_len += p.dtype.byte_len(&d).ok_or("output too large")? + sluice_wire::TENSOR_ALIGN;
        }
        let mut tx = crate::AlignedBuf::new(out_len);
        let mut stats = RunStats::default();
        match self.run_into(&req, adapter, tx.as_mut_slice(), &mut stats) {
            Ok(_) => Ok(()),
            Err(r) if r.code == ErrorCode::InferenceFailed => Err(self.last_error.clone()),
            Err(r) => Err(r.to_string()),
        }
    }
}

/// Run options as every run uses them. A failing request must not write to
/// stderr from the hot path (a client could flood the log), so ORT's per-run
/// logging is limited to fatal errors; the engine counts failures and
/// [`OrtModel::last_error`] keeps the message.
fn run_options() -> Result<RunOptions, String> {
    let mut o = RunOptions::new().map_err(|e| e.to_string())?;
    o.set_log_level(LogLevel::Fatal)
        .map_err(|e| e.to_string())?;
    Ok(o)
}

/// Checks that the signature can be served in place and compiles it to
/// per-port rules. Symbols are numbered in first-seen order over the inputs;
/// every dynamic output dimension must be a symbol an input binds.
fn compile(sig: &Signature) -> Result<(Vec<Port>, Vec<Port>, usize), String> {
    if sig.inputs.len() > TENSOR_COUNT_MAX || sig.outputs.len() > TENSOR_COUNT_MAX {
        return Err(format!("more than {TENSOR_COUNT_MAX} inputs or outputs"));
    }
    if sig.outputs.is_empty() {
        return Err("the model has no outputs".into());
    }
    let mut symbols: Vec<String> = Vec::new();
    let mut port = |t: &TensorSig, is_input: bool| -> Result<Port, String> {
        if t.dims.len() > RANK_MAX {
            return Err(format!(
                "{:?} has rank {} (limit {RANK_MAX})",
                t.name,
                t.dims.len()
            ));
        }
        if t.name.is_empty()
            || t.name.len() > sluice_wire::limits::TENSOR_NAME_LEN_MAX
            || !t.name.bytes().all(|c| (0x21..=0x7e).contains(&c))
        {
            return Err(format!(
                "tensor name {:?} cannot be carried in a frame",
                t.name
            ));
        }
        let mut dims = [DimRule::Any; RANK_MAX];
        for (k, (&d, sym)) in t.dims.iter().zip(&t.dim_names).enumerate() {
            dims[k] = if d >= 0 {
                DimRule::Fixed(d as u64)
            } else if !sym.is_empty() {
                let idx = match symbols.iter().position(|s| *s == sym.as_str()) {
                    Some(i) => i,
                    None if is_input => {
                        symbols.push(sym.clone());
                        symbols.len() - 1
                    }
                    None => {
                        return Err(format!(
                            "output {:?} dimension {k} ({sym:?}) is not set by any input, so its size is unknown before the run",
                            t.name
                        ));
                    }
                };
                DimRule::Sym(idx as u8)
            } else if is_input {
                DimRule::Any
            } else {
                return Err(format!(
                    "output {:?} dimension {k} is dynamic and unnamed, so its size is unknown before the run",
                    t.name
                ));
            };
        }
        Ok(Port {
            name: t.name.clone(),
            c_name: CString::new(t.name.as_str())
                .map_err(|_| format!("tensor name {:?} has a NUL byte", t.name))?,
            dtype: t.dtype,
            rank: t.dims.len(),
            dims,
        })
    };
    let inputs = sig
        .inputs
        .iter()
        .map(|t| port(t, true))
        .collect::<Result<Vec<_>, _>>()?;
    let outputs = sig
        .outputs
        .iter()
        .map(|t| port(t, false))
        .collect::<Result<Vec<_>, _>>()?;
    let n = symbols.len();
    Ok((inputs, outputs, n))
}

impl OrtModel {
    /// The model file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of distinct symbolic dimensions among the inputs.
    pub fn symbol_count(&self) -> usize {
        self.symbols
    }
}
