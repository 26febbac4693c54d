//! A model's declared inputs and outputs, compiled at load into the rules a
//! request is checked against and the plan of where each output goes.

use std::ffi::CString;

use ort::value::{Outlet, TensorElementType, ValueType};
use sluice_wire::DType;
use sluice_wire::limits::{RANK_MAX, TENSOR_COUNT_MAX};

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

/// A model's inputs and outputs, read from the model itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Signature {
    /// Inputs a request must send, in model order.
    pub inputs: Vec<TensorSig>,
    /// Inputs with a default (initializers that are also graph inputs, such
    /// as LoRA parameters): a request may send them to override the default.
    pub optional_inputs: Vec<TensorSig>,
    /// Outputs, in model order.
    pub outputs: Vec<TensorSig>,
}

/// Where an output's bytes come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Its shape follows from the request before the run: ORT writes into a
    /// tensor made over the reply buffer.
    Preallocated,
    /// Its shape is known only after the run: ORT allocates it through the
    /// reply allocator, in the reply buffer's free tail. It stays in place
    /// when it lands where the frame wants it; otherwise it is moved once
    /// (counted).
    Allocator,
}

impl Placement {
    /// Lower-case name, as `sluicectl models` shows it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Placement::Preallocated => "in-place-preallocated",
            Placement::Allocator => "allocator-placed",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DimRule {
    /// Must equal this size.
    Fixed(u64),
    /// Bound to symbol number `n`: equal across the request.
    Sym(u8),
    /// Any size.
    Any,
}

#[derive(Debug)]
pub(crate) struct Port {
    pub(crate) name: String,
    pub(crate) c_name: CString,
    pub(crate) dtype: DType,
    pub(crate) rank: usize,
    pub(crate) dims: [DimRule; RANK_MAX],
    /// Inputs: may be left out. Outputs: unused.
    pub(crate) optional: bool,
    /// Outputs: how it is placed.
    pub(crate) placement: Placement,
}

pub(crate) struct Compiled {
    /// Required inputs, then optional ones.
    pub(crate) inputs: Vec<Port>,
    pub(crate) required: usize,
    pub(crate) outputs: Vec<Port>,
    pub(crate) symbols: usize,
}

pub(crate) fn dtype_of(t: TensorElementType) -> Option<DType> {
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

pub(crate) fn sig_of_type(name: &str, t: &ValueType) -> Result<TensorSig, String> {
    match t {
        ValueType::Tensor {
            ty,
            shape,
            dimension_symbols,
        } => {
            let dtype = dtype_of(*ty)
                .ok_or_else(|| format!("tensor {name:?} has unsupported element type {ty:?}"))?;
            let dims: Vec<i64> = shape.iter().copied().collect();
            // "?" is how some exporters (paddle2onnx) spell "no name".
            let dim_names = (0..dims.len())
                .map(|i| {
                    dimension_symbols
                        .get(i)
                        .filter(|s| s.as_str() != "?")
                        .cloned()
                        .unwrap_or_default()
                })
                .collect();
            Ok(TensorSig {
                name: name.to_string(),
                dtype,
                dims,
                dim_names,
            })
        }
        other => Err(format!("{name:?} is not a tensor ({other:?})")),
    }
}

pub(crate) fn sig_of(o: &Outlet) -> Result<TensorSig, String> {
    sig_of_type(o.name(), o.dtype())
}

fn check_name(t: &TensorSig) -> Result<CString, String> {
    if t.name.is_empty()
        || t.name.len() > sluice_wire::limits::TENSOR_NAME_LEN_MAX
        || !t.name.bytes().all(|c| (0x21..=0x7e).contains(&c))
    {
        return Err(format!(
            "tensor name {:?} cannot be carried in a frame",
            t.name
        ));
    }
    CString::new(t.name.as_str()).map_err(|_| format!("tensor name {:?} has a NUL byte", t.name))
}

/// Compiles the signature. Symbols are numbered in first-seen order over
/// the required inputs. An output dimension that is fixed, or a symbol a
/// required input binds, is known before the run; an output with any other
/// dimension (unnamed, or named only by the output, or data-dependent) is
/// allocator-placed.
pub(crate) fn compile(sig: &Signature) -> Result<Compiled, String> {
    let n_in = sig.inputs.len() + sig.optional_inputs.len();
    if n_in > TENSOR_COUNT_MAX || sig.outputs.len() > TENSOR_COUNT_MAX {
        return Err(format!("more than {TENSOR_COUNT_MAX} inputs or outputs"));
    }
    if sig.outputs.is_empty() {
        return Err("the model has no outputs".into());
    }
    for t in sig
        .inputs
        .iter()
        .chain(&sig.optional_inputs)
        .chain(&sig.outputs)
    {
        if t.dims.len() > RANK_MAX {
            return Err(format!(
                "{:?} has rank {} (limit {RANK_MAX})",
                t.name,
                t.dims.len()
            ));
        }
    }
    let mut symbols: Vec<&str> = Vec::new();
    let mut inputs = Vec::with_capacity(n_in);
    for (t, optional) in sig
        .inputs
        .iter()
        .map(|t| (t, false))
        .chain(sig.optional_inputs.iter().map(|t| (t, true)))
    {
        let mut dims = [DimRule::Any; RANK_MAX];
        for (k, (&d, sym)) in t.dims.iter().zip(&t.dim_names).enumerate() {
            dims[k] = if d >= 0 {
                DimRule::Fixed(d as u64)
            } else if sym.is_empty() {
                DimRule::Any
            } else if let Some(i) = symbols.iter().position(|s| *s == sym.as_str()) {
                DimRule::Sym(i as u8)
            } else if optional {
                // An optional input may be absent: it cannot bind a symbol.
                DimRule::Any
            } else {
                symbols.push(sym);
                DimRule::Sym((symbols.len() - 1) as u8)
            };
        }
        inputs.push(Port {
            name: t.name.clone(),
            c_name: check_name(t)?,
            dtype: t.dtype,
            rank: t.dims.len(),
            dims,
            optional,
            placement: Placement::Preallocated,
        });
    }
    let mut outputs = Vec::with_capacity(sig.outputs.len());
    for t in &sig.outputs {
        let mut dims = [DimRule::Any; RANK_MAX];
        let mut known = true;
        for (k, (&d, sym)) in t.dims.iter().zip(&t.dim_names).enumerate() {
            dims[k] = if d >= 0 {
                DimRule::Fixed(d as u64)
            } else if let Some(i) = symbols
                .iter()
                .position(|s| *s == sym.as_str() && !sym.is_empty())
            {
                DimRule::Sym(i as u8)
            } else {
                known = false;
                DimRule::Any
            };
        }
        outputs.push(Port {
            name: t.name.clone(),
            c_name: check_name(t)?,
            dtype: t.dtype,
            rank: t.dims.len(),
            dims,
            optional: false,
            placement: if known {
                Placement::Preallocated
            } else {
                Placement::Allocator
            },
        });
    }
    Ok(Compiled {
        required: sig.inputs.len(),
        inputs,
        outputs,
        symbols: symbols.len(),
    })
}
