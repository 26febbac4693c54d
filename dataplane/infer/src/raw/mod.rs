//! The only module with `unsafe`: tensor values over caller memory and the
//! raw `OrtApi::Run` that writes outputs into them.
//!
//! `ort`'s safe `Session::run` allocates its outputs; writing in place needs
//! pre-made output values passed to the C `Run`. Values here borrow the
//! caller's bytes for `'buf`, so they cannot outlive the receive or reply
//! buffer, and they are released on drop on every path.
#![allow(unsafe_code)]

pub(crate) mod alloc;

use core::ffi::{c_char, c_void};
use core::marker::PhantomData;
use core::ptr;

use ort::AsPointer;
use ort::memory::MemoryInfo;
use ort::session::{RunOptions, Session};
use ort::sys::{
    ONNXTensorElementDataType as Onnx, OrtStatusPtr, OrtTensorTypeAndShapeInfo, OrtValue,
};
use sluice_wire::DType;
use sluice_wire::limits::{RANK_MAX, TENSOR_COUNT_MAX};

/// An ONNX Runtime call failed; the message is ORT's own.
#[derive(Debug)]
pub(crate) struct OrtFailure(pub String);

/// Turns a status into a result, copying ORT's message and releasing the
/// status. Only failures allocate.
fn check(status: OrtStatusPtr) -> Result<(), OrtFailure> {
    let st = status.0;
    if st.is_null() {
        return Ok(());
    }
    let api = ort::api();
    // SAFETY: `st` is a non-null status just returned by ORT and owned by us;
    // GetErrorMessage returns a NUL-terminated string valid until the status
    // is released, and we copy it before releasing.
    let msg = unsafe {
        let m = (api.GetErrorMessage)(st);
        let s = if m.is_null() {
            String::from("unknown ONNX Runtime error")
        } else {
            core::ffi::CStr::from_ptr(m).to_string_lossy().into_owned()
        };
        (api.ReleaseStatus)(st);
        s
    };
    Err(OrtFailure(msg))
}

pub(crate) fn onnx_type(d: DType) -> Onnx {
    match d {
        DType::F32 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT,
        DType::U8 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8,
        DType::I8 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8,
        DType::U16 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16,
        DType::I16 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16,
        DType::I32 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32,
        DType::I64 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64,
        DType::Bool => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL,
        DType::F16 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16,
        DType::F64 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE,
        DType::U32 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32,
        DType::U64 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64,
        DType::BF16 => Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16,
    }
}

/// Up to [`TENSOR_COUNT_MAX`] tensor values over memory borrowed for `'buf`.
/// A fixed array: building a run's values allocates nothing on the Rust side
/// (ORT allocates each `OrtValue` header internally).
pub(crate) struct Values<'buf> {
    ptrs: [*mut OrtValue; TENSOR_COUNT_MAX],
    len: usize,
    _buf: PhantomData<&'buf mut [u8]>,
}

impl<'buf> Values<'buf> {
    pub(crate) fn new() -> Values<'buf> {
        Values {
            ptrs: [ptr::null_mut(); TENSOR_COUNT_MAX],
            len: 0,
            _buf: PhantomData,
        }
    }

    /// Wraps `data` as a tensor without copying and returns the data pointer
    /// ORT reports for the new value (equal to `data`'s when zero-copy held).
    ///
    /// The caller has checked that `data.len()` equals the element count of
    /// `shape` times the dtype size, that `data` is aligned for the dtype, and
    /// that there is room (at most [`TENSOR_COUNT_MAX`] values).
    fn push(
        &mut self,
        mem: &MemoryInfo<'static>,
        data: *mut u8,
        len: usize,
        shape: &[i64],
        dtype: DType,
    ) -> Result<*const u8, OrtFailure> {
        if self.len == TENSOR_COUNT_MAX {
            return Err(OrtFailure(
                "more tensors than the frame format allows".into(),
            ));
        }
        let api = ort::api();
        let mut value: *mut OrtValue = ptr::null_mut();
        // SAFETY: `data` points to `len` bytes that live for 'buf (the lifetime
        // ties this value to the borrow), `len` matches `shape` and `dtype`
        // (checked by the caller; ORT checks it again and fails otherwise),
        // `shape` is read only during the call, and `mem` describes CPU memory.
        // ORT does not take ownership of `data` and never frees it.
        check(unsafe {
            (api.CreateTensorWithDataAsOrtValue)(
                mem.ptr(),
                data.cast::<c_void>(),
                len,
                shape.as_ptr(),
                shape.len(),
                onnx_type(dtype),
                &mut value,
            )
        })?;
        if value.is_null() {
            return Err(OrtFailure(
                "CreateTensorWithDataAsOrtValue returned no value".into(),
            ));
        }
        self.ptrs[self.len] = value;
        self.len += 1;
        tensor_data(value)
    }

    /// An input tensor over request bytes. ORT only reads inputs.
    pub(crate) fn push_input(
        &mut self,
        mem: &MemoryInfo<'static>,
        data: &'buf [u8],
        shape: &[i64],
        dtype: DType,
    ) -> Result<*const u8, OrtFailure> {
        // The C API takes `void*` for inputs and outputs alike; inputs are
        // never written (ORT treats feeds as const), so the shared borrow holds.
        self.push(mem, data.as_ptr().cast_mut(), data.len(), shape, dtype)
    }

    /// An output tensor over reply bytes that ORT will write.
    pub(crate) fn push_output(
        &mut self,
        mem: &MemoryInfo<'static>,
        data: &'buf mut [u8],
        shape: &[i64],
        dtype: DType,
    ) -> Result<*const u8, OrtFailure> {
        self.push(mem, data.as_mut_ptr(), data.len(), shape, dtype)
    }

    /// An empty output slot: ORT allocates the value during the run
    /// (through the reply allocator) and this set releases it on drop.
    pub(crate) fn push_empty(&mut self) -> Result<(), OrtFailure> {
        if self.len == TENSOR_COUNT_MAX {
            return Err(OrtFailure(
                "more tensors than the frame format allows".into(),
            ));
        }
        self.ptrs[self.len] = ptr::null_mut();
        self.len += 1;
        Ok(())
    }

    /// ORT's data pointer of value `i` now (after a run: where it wrote).
    pub(crate) fn data_ptr(&self, i: usize) -> Result<*const u8, OrtFailure> {
        let v = self.ptrs[..self.len][i];
        if v.is_null() {
            return Err(OrtFailure("output value missing".into()));
        }
        tensor_data(v)
    }

    /// Element type and shape of value `i` (after a run). Writes the dims
    /// into `dims` and returns the rank; fails past [`RANK_MAX`].
    pub(crate) fn shape(
        &self,
        i: usize,
        dims: &mut [i64; RANK_MAX],
    ) -> Result<(Onnx, usize), OrtFailure> {
        let v = self.ptrs[..self.len][i];
        if v.is_null() {
            return Err(OrtFailure("output value missing".into()));
        }
        let api = ort::api();
        let mut info: *mut OrtTensorTypeAndShapeInfo = ptr::null_mut();
        // SAFETY: `v` is a live value owned by this set; `info` is released
        // below on every path.
        check(unsafe { (api.GetTensorTypeAndShape)(v, &mut info) })?;
        let mut rank = 0usize;
        let mut ty = Onnx::ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
        // SAFETY: `info` is live until released; the dims buffer holds
        // RANK_MAX entries and is only written for rank <= RANK_MAX.
        let r = unsafe {
            check((api.GetDimensionsCount)(info, &mut rank))
                .and_then(|()| check((api.GetTensorElementType)(info, &mut ty)))
                .and_then(|()| {
                    if rank > RANK_MAX {
                        Err(OrtFailure(format!(
                            "output rank {rank} is above {RANK_MAX}"
                        )))
                    } else {
                        check((api.GetDimensions)(info, dims.as_mut_ptr(), rank))
                    }
                })
        };
        // SAFETY: released exactly once.
        unsafe { (api.ReleaseTensorTypeAndShapeInfo)(info) };
        r.map(|()| (ty, rank))
    }

    /// Copies value `i`'s bytes into `dst`, which must be exactly its size.
    pub(crate) fn copy_to(&self, i: usize, dst: &mut [u8]) -> Result<(), OrtFailure> {
        let v = self.ptrs[..self.len][i];
        if v.is_null() {
            return Err(OrtFailure("output value missing".into()));
        }
        let mut size = 0usize;
        // SAFETY: `v` is a live tensor value owned by this set.
        check(unsafe { (ort::api().GetTensorSizeInBytes)(v, &mut size) })?;
        if size != dst.len() {
            return Err(OrtFailure(format!(
                "output holds {size} bytes, its shape says {}",
                dst.len()
            )));
        }
        if size == 0 {
            return Ok(());
        }
        let src = tensor_data(v)?;
        // SAFETY: ORT reports `size` bytes at `src`, live while the value is;
        // `dst` is a distinct caller buffer of the same length (the caller
        // copies only values that lie outside it).
        unsafe { ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), size) };
        Ok(())
    }

    /// Releases the values now (before the reply allocator is disarmed).
    pub(crate) fn release(&mut self) {
        let api = ort::api();
        for v in &mut self.ptrs[..self.len] {
            if !v.is_null() {
                // SAFETY: a live value owned by this set, released once.
                unsafe { (api.ReleaseValue)(*v) };
                *v = ptr::null_mut();
            }
        }
        self.len = 0;
    }
}

fn tensor_data(value: *mut OrtValue) -> Result<*const u8, OrtFailure> {
    let mut out: *mut c_void = ptr::null_mut();
    // SAFETY: `value` is a live tensor value created by ORT and owned by a
    // `Values`; the call only reads its data pointer.
    check(unsafe { (ort::api().GetTensorMutableData)(value, &mut out) })?;
    Ok(out.cast_const().cast::<u8>())
}

impl Drop for Values<'_> {
    fn drop(&mut self) {
        let api = ort::api();
        for &v in &self.ptrs[..self.len] {
            if !v.is_null() {
                // SAFETY: each pointer was returned by ORT (made over caller
                // memory, or allocated by a run into an empty slot) and is
                // released exactly once; releasing does not free caller data.
                unsafe { (api.ReleaseValue)(v) };
            }
        }
    }
}

/// Runs `session` with pre-made outputs, so ORT writes into the caller's
/// reply bytes. Names are NUL-terminated C strings owned by the model.
pub(crate) fn run(
    session: &mut Session,
    options: &RunOptions,
    input_names: &[*const c_char],
    inputs: &Values<'_>,
    output_names: &[*const c_char],
    outputs: &mut Values<'_>,
) -> Result<(), OrtFailure> {
    if input_names.len() != inputs.len || output_names.len() != outputs.len {
        return Err(OrtFailure("tensor name and value counts differ".into()));
    }
    let before = outputs.ptrs;
    // SAFETY: the session and run options are live (borrowed); every name
    // pointer is a NUL-terminated string owned by the caller for the call;
    // the input and output arrays hold `len` live values whose memory is
    // borrowed for the call; ORT writes only into the non-null output values'
    // data, whose sizes match their shapes. `&mut Session` guarantees no
    // concurrent run on this session.
    check(unsafe {
        (ort::api().Run)(
            session.ptr_mut(),
            options.ptr(),
            input_names.as_ptr(),
            inputs.ptrs.as_ptr().cast::<*const OrtValue>(),
            inputs.len,
            output_names.as_ptr(),
            outputs.len,
            outputs.ptrs.as_mut_ptr(),
        )
    })?;
    // ORT fills only null output slots. Should it ever replace one, the new
    // value is not in the reply buffer: release it, keep ours for the drop,
    // and report the run as failed.
    let mut replaced = false;
    for (slot, &ours) in outputs.ptrs.iter_mut().zip(&before).take(outputs.len) {
        if ours.is_null() {
            if slot.is_null() {
                replaced = true;
            }
            continue;
        }
        if *slot != ours {
            if !slot.is_null() {
                // SAFETY: a value ORT just returned to us, released once.
                unsafe { (ort::api().ReleaseValue)(*slot) };
            }
            *slot = ours;
            replaced = true;
        }
    }
    if replaced {
        return Err(OrtFailure(
            "ONNX Runtime replaced a pre-allocated output or left one empty".into(),
        ));
    }
    Ok(())
}
