//! The only module with `unsafe`: tensor values over caller memory and the
//! raw `OrtApi::Run` that writes outputs into them.
//!
//! `ort`'s safe `Session::run` allocates its outputs; writing in place needs
//! pre-made output values passed to the C `Run`. Values here borrow the
//! caller's bytes for `'buf`, so they cannot outlive the receive or reply
//! buffer, and they are released on drop on every path.
#![allow(unsafe_code)]

use core::ffi::{c_char, c_void};
use core::marker::PhantomData;
use core::ptr;

use ort::AsPointer;
use ort::memory::MemoryInfo;
use ort::session::{RunOptions, Session};
use ort::sys::{ONNXTensorElementDataType as Onnx, OrtStatusPtr, OrtValue};
use sluice_wire::DType;
use sluice_wire::limits::TENSOR_COUNT_MAX;

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

fn onnx_type(d: DType) -> Onnx {
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

    /// ORT's data pointer of value `i` now (after a run: where it wrote).
    pub(crate) fn data_ptr(&self, i: usize) -> Result<*const u8, OrtFailure> {
        tensor_data(self.ptrs[..self.len][i])
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
            // SAFETY: each pointer was returned by CreateTensorWithDataAsOrtValue
            // and is released exactly once; releasing does not free the
            // caller's data.
            unsafe { (api.ReleaseValue)(v) };
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
            "ONNX Runtime replaced a pre-allocated output".into(),
        ));
    }
    Ok(())
}
