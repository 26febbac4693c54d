//! numpy arrays in and out, through numpy's array interface (no numpy C
//! API, no buffer protocol: neither is in CPython's limited API before 3.11,
//! and the wheel is abi3 for 3.9+).
//!
//! In: `__array_struct__` hands over a capsule with numpy's
//! `PyArrayInterface`: data pointer, shape, flags. A C-contiguous array in
//! native byte order is read in place by the frame builder; anything else is
//! first made so by `numpy.ascontiguousarray` (one copy, counted).
//!
//! Out: each output tensor becomes an [`OutputArray`] exposing
//! `__array_interface__` over the answer's frame, which `numpy.asarray` turns
//! into a view whose base keeps the frame alive.
//!
//! This is the crate's backend module: the only place with `unsafe`.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyDict, PyTuple};
use sluice_wire::DType;
use sluice_wire::limits::RANK_MAX;

use crate::errors;

/// numpy's `PyArrayInterface` (numpy docs, "The array interface protocol",
/// C-struct access). Field order and types are part of numpy's ABI.
#[repr(C)]
struct ArrayInterface {
    two: i32,
    nd: i32,
    typekind: u8,
    itemsize: i32,
    flags: i32,
    shape: *const isize,
    strides: *const isize,
    data: *mut c_void,
    descr: *mut c_void,
}

/// `NPY_ARRAY_C_CONTIGUOUS`.
const FLAG_C_CONTIGUOUS: i32 = 0x0001;
/// `NPY_ARRAY_NOTSWAPPED`: native byte order.
const FLAG_NOTSWAPPED: i32 = 0x0200;

static NUMPY_ASARRAY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static NUMPY_CONTIGUOUS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static BFLOAT16: PyOnceLock<Option<Py<PyAny>>> = PyOnceLock::new();

/// Copies made on the way in and out, for `Client.stats()`.
#[derive(Debug, Default)]
pub struct CopyStats {
    /// Inputs that were not C-contiguous native-order numpy arrays and were
    /// converted first.
    pub inputs_copied: AtomicU64,
    /// Their bytes.
    pub input_bytes_copied: AtomicU64,
    /// Output tensors handed out as views over the answer's frame.
    pub outputs_viewed: AtomicU64,
    /// Output tensors converted instead (bf16 without ml_dtypes: float32).
    pub outputs_copied: AtomicU64,
    /// Their bytes.
    pub output_bytes_copied: AtomicU64,
}

impl CopyStats {
    fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// The counters as `(name, value)` pairs.
    pub fn pairs(&self) -> [(&'static str, u64); 5] {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        [
            ("inputs_copied", g(&self.inputs_copied)),
            ("input_bytes_copied", g(&self.input_bytes_copied)),
            ("outputs_viewed", g(&self.outputs_viewed)),
            ("outputs_copied", g(&self.outputs_copied)),
            ("output_bytes_copied", g(&self.output_bytes_copied)),
        ]
    }

    /// Counts one output viewed in place.
    pub fn viewed(&self) {
        Self::add(&self.outputs_viewed, 1);
    }

    /// Counts one output converted (a copy).
    pub fn converted(&self, len: usize) {
        Self::add(&self.outputs_copied, 1);
        Self::add(&self.output_bytes_copied, len as u64);
    }
}

/// ml_dtypes' bfloat16 dtype, when ml_dtypes is installed.
fn bfloat16(py: Python<'_>) -> Option<&Bound<'_, PyAny>> {
    BFLOAT16
        .get_or_init(py, || {
            py.import("ml_dtypes")
                .and_then(|m| m.getattr("bfloat16"))
                .and_then(|t| py.import("numpy")?.getattr("dtype")?.call1((t,)))
                .ok()
                .map(Bound::unbind)
        })
        .as_ref()
        .map(|t| t.bind(py))
}

fn numpy_fn<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyAny>>,
    name: &str,
) -> PyResult<&'py Bound<'py, PyAny>> {
    cell.get_or_try_init(py, || {
        Ok::<_, PyErr>(py.import("numpy")?.getattr(name)?.unbind())
    })
    .map(|f| f.bind(py))
}

/// One input tensor, read in place from the numpy array it came from.
pub struct Input<'py> {
    /// Tensor name.
    pub name: String,
    /// Wire dtype.
    pub dtype: DType,
    dims: [u64; RANK_MAX],
    rank: usize,
    // The capsule holds a reference to the array (numpy's own), and the
    // array its data: `data` stays valid while `_keep` lives.
    _keep: Bound<'py, PyAny>,
    data: *const u8,
    len: usize,
}

impl Input<'_> {
    /// The shape.
    pub fn dims(&self) -> &[u64] {
        &self.dims[..self.rank]
    }

    /// The tensor's bytes, in place in the array.
    pub fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `data` and `len` describe the array's buffer as numpy
        // reported it in its `PyArrayInterface` (C-contiguous, so exactly
        // `len` bytes from `data`). `_keep` is the capsule that owns a
        // reference to the array, and it lives as long as `self`, which the
        // returned slice borrows; numpy frees an array's data only with the
        // array. The slice is read while the caller is attached to the
        // interpreter (the frame builder runs before any detach).
        unsafe { std::slice::from_raw_parts(self.data, self.len) }
    }
}

/// A tensor whose wire dtype the caller names (`sluice.Raw`): the array's
/// bytes are sent as they are.
fn raw_dtype<'py>(value: &Bound<'py, PyAny>) -> PyResult<Option<(Bound<'py, PyAny>, DType)>> {
    let py = value.py();
    let Ok(code) = value.getattr(pyo3::intern!(py, "_sluice_wire_dtype")) else {
        return Ok(None);
    };
    let code: u8 = code.extract()?;
    let dtype = DType::from_u8(code).ok_or_else(|| {
        errors::invalid_msg(py, &format!("dtype code {code} is not in the wire table"))
    })?;
    Ok(Some((value.getattr(pyo3::intern!(py, "array"))?, dtype)))
}

fn dtype_of(py: Python<'_>, arr: &Bound<'_, PyAny>, kind: u8, itemsize: i32) -> PyResult<DType> {
    let d = match (kind, itemsize) {
        (b'f', 4) => Some(DType::F32),
        (b'f', 8) => Some(DType::F64),
        (b'f', 2) => Some(DType::F16),
        (b'i', 1) => Some(DType::I8),
        (b'i', 2) => Some(DType::I16),
        (b'i', 4) => Some(DType::I32),
        (b'i', 8) => Some(DType::I64),
        (b'u', 1) => Some(DType::U8),
        (b'u', 2) => Some(DType::U16),
        (b'u', 4) => Some(DType::U32),
        (b'u', 8) => Some(DType::U64),
        (b'b', 1) => Some(DType::Bool),
        (b'V', 2) => {
            let dt = arr.getattr(pyo3::intern!(py, "dtype"))?;
            match bfloat16(py) {
                Some(bf) if dt.eq(bf)? => Some(DType::BF16),
                _ => None,
            }
        }
        _ => None,
    };
    match d {
        Some(d) => Ok(d),
        None => {
            let name = arr
                .getattr(pyo3::intern!(py, "dtype"))
                .and_then(|d| d.str())
                .map(|s| s.to_string())
                .unwrap_or_else(|_| format!("kind {:?} size {itemsize}", kind as char));
            Err(errors::invalid_msg(
                py,
                &format!(
                    "dtype {name} is not in the wire table (f32 u8 i8 u16 i16 i32 i64 bool f16 f64 u32 u64 bf16)"
                ),
            ))
        }
    }
}

/// Reads one input value: a numpy array (or numpy scalar), a `sluice.Raw`,
/// or anything `numpy.asarray` takes (converted: one copy, counted).
pub fn input<'py>(
    name: String,
    value: &Bound<'py, PyAny>,
    copies: &CopyStats,
) -> PyResult<Input<'py>> {
    let py = value.py();
    let (value, forced) = match raw_dtype(value)? {
        Some((arr, d)) => (arr, Some(d)),
        None => (value.clone(), None),
    };
    let attr = pyo3::intern!(py, "__array_struct__");
    let mut arr = value;
    let mut capsule = match arr.getattr(attr) {
        Ok(c) => c,
        Err(_) => {
            arr = numpy_fn(py, &NUMPY_ASARRAY, "asarray")?.call1((&arr,))?;
            CopyStats::add(&copies.inputs_copied, 1);
            let c = arr.getattr(attr)?;
            if let Ok(n) = arr
                .getattr(pyo3::intern!(py, "nbytes"))
                .and_then(|n| n.extract::<u64>())
            {
                CopyStats::add(&copies.input_bytes_copied, n);
            }
            c
        }
    };
    let mut iface = interface(py, &capsule)?;
    if iface.flags & (FLAG_C_CONTIGUOUS | FLAG_NOTSWAPPED) != (FLAG_C_CONTIGUOUS | FLAG_NOTSWAPPED)
    {
        let kw = PyDict::new(py);
        let dt = arr.getattr(pyo3::intern!(py, "dtype"))?;
        kw.set_item("dtype", dt.call_method1("newbyteorder", ("=",))?)?;
        arr = numpy_fn(py, &NUMPY_CONTIGUOUS, "ascontiguousarray")?.call((&arr,), Some(&kw))?;
        capsule = arr.getattr(attr)?;
        iface = interface(py, &capsule)?;
        CopyStats::add(&copies.inputs_copied, 1);
        CopyStats::add(&copies.input_bytes_copied, iface.len as u64);
    }
    let dtype = match forced {
        Some(d) => {
            if d.size_bytes() != iface.itemsize {
                return Err(errors::invalid_msg(
                    py,
                    &format!(
                        "input {name}: sluice.Raw dtype {} needs {}-byte elements, the array has {}",
                        d.as_str(),
                        d.size_bytes(),
                        iface.itemsize
                    ),
                ));
            }
            d
        }
        None => dtype_of(py, &arr, iface.kind, iface.itemsize as i32)
            .map_err(|e| prefix(py, e, &name))?,
    };
    Ok(Input {
        name,
        dtype,
        dims: iface.dims,
        rank: iface.rank,
        _keep: capsule,
        data: iface.data,
        len: iface.len,
    })
}

fn prefix(py: Python<'_>, e: PyErr, name: &str) -> PyErr {
    let msg = e.value(py).str().map(|s| s.to_string()).unwrap_or_default();
    errors::invalid_msg(py, &format!("input {name}: {msg}"))
}

struct Iface {
    kind: u8,
    itemsize: usize,
    flags: i32,
    dims: [u64; RANK_MAX],
    rank: usize,
    data: *const u8,
    len: usize,
}

/// Decodes numpy's `PyArrayInterface` from an `__array_struct__` capsule.
fn interface(py: Python<'_>, capsule: &Bound<'_, PyAny>) -> PyResult<Iface> {
    let capsule = capsule.cast::<PyCapsule>()?;
    let p = capsule.pointer_checked(None)?.cast::<ArrayInterface>();
    // SAFETY: numpy's `__array_struct__` returns an unnamed capsule whose
    // pointer is a `PyArrayInterface`, valid while the capsule lives; we
    // borrow the capsule for this whole function and read the struct only.
    let a = unsafe { p.as_ref() };
    if a.two != 2 || a.nd < 0 || a.itemsize <= 0 {
        return Err(errors::invalid_msg(py, "not a numpy array interface"));
    }
    let rank = a.nd as usize;
    if rank > RANK_MAX {
        return Err(errors::invalid(py, sluice_wire::Error::BadRank));
    }
    let mut dims = [0u64; RANK_MAX];
    let mut elems: u64 = 1;
    if rank > 0 {
        // SAFETY: `shape` points at `nd` dimensions (numpy's array interface
        // contract), alive with the capsule, as above.
        let shape = unsafe { std::slice::from_raw_parts(a.shape, rank) };
        for (d, &s) in dims.iter_mut().zip(shape) {
            *d = s as u64;
            elems = elems.saturating_mul(s as u64);
        }
    }
    let len = elems.saturating_mul(a.itemsize as u64);
    let len =
        usize::try_from(len).map_err(|_| errors::invalid(py, sluice_wire::Error::SizeOverflow))?;
    Ok(Iface {
        kind: a.typekind,
        itemsize: a.itemsize as usize,
        flags: a.flags,
        dims,
        rank,
        data: a.data.cast::<u8>().cast_const(),
        len,
    })
}

/// A received frame's bytes, lent to numpy. Once built, Rust never reads or
/// writes them again (numpy may write: outputs are writable arrays), so the
/// buffer is held as a raw allocation rather than behind a reference.
pub struct FrameMemory {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: FrameMemory uniquely owns a plain byte allocation; moving or
// sharing the owner between threads is as safe as for a Box<[u8]>. Access
// to the bytes happens only through numpy, which the GIL serialises.
unsafe impl Send for FrameMemory {}
// SAFETY: as above; `&FrameMemory` gives no access to the bytes in Rust.
unsafe impl Sync for FrameMemory {}

impl FrameMemory {
    /// Takes ownership of `bytes` without copying them.
    pub fn new(bytes: Vec<u8>) -> FrameMemory {
        let boxed = bytes.into_boxed_slice();
        let len = boxed.len();
        let ptr = NonNull::from(Box::leak(boxed)).cast::<u8>();
        FrameMemory { ptr, len }
    }

    fn addr(&self, offset: usize) -> usize {
        self.ptr.as_ptr() as usize + offset
    }
}

impl Drop for FrameMemory {
    fn drop(&mut self) {
        let slice = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
        // SAFETY: `ptr`/`len` came from `Box::leak` of a `Box<[u8]>` in
        // `new` and are freed only here, once.
        drop(unsafe { Box::from_raw(slice) });
    }
}

/// One output tensor's place in a frame, as numpy's `__array_interface__`.
#[pyclass(frozen, module = "sluice._native", name = "OutputArray")]
pub struct OutputArray {
    mem: Arc<FrameMemory>,
    offset: usize,
    dims: Vec<u64>,
    typestr: &'static str,
}

#[pymethods]
impl OutputArray {
    /// numpy's array interface (version 3) over the frame's bytes.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item(pyo3::intern!(py, "shape"), PyTuple::new(py, &self.dims)?)?;
        d.set_item(pyo3::intern!(py, "typestr"), self.typestr)?;
        d.set_item(
            pyo3::intern!(py, "data"),
            (self.mem.addr(self.offset), false),
        )?;
        d.set_item(pyo3::intern!(py, "version"), 3)?;
        Ok(d)
    }
}

fn typestr(d: DType) -> &'static str {
    match d {
        DType::F32 => "<f4",
        DType::U8 => "|u1",
        DType::I8 => "|i1",
        DType::U16 => "<u2",
        DType::I16 => "<i2",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::Bool => "|b1",
        DType::F16 => "<f2",
        DType::F64 => "<f8",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
        DType::BF16 => "<u2",
    }
}

/// Whether bf16 outputs can be viewed (ml_dtypes installed).
pub fn bf16_viewable(py: Python<'_>) -> bool {
    bfloat16(py).is_some()
}

/// bf16 elements widened to f32 (bf16 is the top half of an f32), for
/// callers without ml_dtypes.
pub fn widen_bf16(bytes: &[u8]) -> Vec<u8> {
    let mut wide = Vec::with_capacity(bytes.len() * 2);
    for c in bytes.chunks_exact(2) {
        let b = u16::from_le_bytes([c[0], c[1]]);
        wide.extend_from_slice(&f32::from_bits(u32::from(b) << 16).to_le_bytes());
    }
    wide
}

/// An output tensor as a numpy array viewing `len` bytes at `offset` of
/// `mem`; bf16 as ml_dtypes.bfloat16 (the caller converts when ml_dtypes
/// is missing, see [`widen_bf16`]).
pub fn view<'py>(
    py: Python<'py>,
    mem: &Arc<FrameMemory>,
    dtype: DType,
    dims: &[u64],
    offset: usize,
    len: usize,
) -> PyResult<Bound<'py, PyAny>> {
    if offset.checked_add(len).is_none_or(|end| end > mem.len) {
        return Err(errors::invalid_msg(
            py,
            "output tensor lies outside its frame",
        ));
    }
    let holder = OutputArray {
        mem: mem.clone(),
        offset,
        dims: dims.to_vec(),
        typestr: typestr(dtype),
    };
    let arr = numpy_fn(py, &NUMPY_ASARRAY, "asarray")?.call1((Py::new(py, holder)?,))?;
    match (dtype, bfloat16(py)) {
        (DType::BF16, Some(bf)) => arr.call_method1(pyo3::intern!(py, "view"), (bf,)),
        _ => Ok(arr),
    }
}

/// An owned buffer (a converted tensor) as a numpy array of `dtype`.
pub fn owned<'py>(
    py: Python<'py>,
    bytes: Vec<u8>,
    dtype: DType,
    dims: &[u64],
) -> PyResult<Bound<'py, PyAny>> {
    let len = bytes.len();
    let mem = Arc::new(FrameMemory::new(bytes));
    view(py, &mem, dtype, dims, 0, len)
}
