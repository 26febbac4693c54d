//! Answers to numpy: output tensors as views over the answer's frame.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};
use sluice_client::{DType, Response};

use crate::array::{self, CopyStats, FrameMemory};
use crate::request::format_traceparent;

/// The outputs of an answer, by name, in wire order. The frame's buffer
/// moves (no copy) into shared memory that every output array views; it is
/// freed with the last of them.
pub fn outputs<'py>(
    py: Python<'py>,
    resp: Response,
    copies: &CopyStats,
) -> PyResult<Bound<'py, PyDict>> {
    let frame = resp.into_frame();
    let widen = !array::bf16_viewable(py);
    // (name, dtype, dims, data range, converted bytes)
    let mut descs = Vec::with_capacity(frame.tensor_count());
    for t in frame.tensors() {
        let range = t.data_range();
        let converted = (widen && t.dtype == DType::BF16)
            .then(|| array::widen_bf16(&frame.as_bytes()[range.clone()]));
        descs.push((
            t.name.to_owned(),
            t.dtype,
            t.dims().to_vec(),
            range,
            converted,
        ));
    }
    let mem = Arc::new(FrameMemory::new(frame.into_inner()));
    let out = PyDict::new(py);
    for (name, dtype, dims, range, converted) in descs {
        let arr = match converted {
            None => {
                copies.viewed();
                array::view(py, &mem, dtype, &dims, range.start, range.len())?
            }
            Some(wide) => {
                copies.converted(wide.len());
                array::owned(py, wide, DType::F32, &dims)?
            }
        };
        // First of a name wins, as the wire lookup by name does.
        if !out.contains(&name)? {
            out.set_item(name, arr)?;
        }
    }
    Ok(out)
}

/// An answer with its metadata (`Client.infer_response`).
#[pyclass(frozen, module = "sluice._native", name = "Response")]
pub struct ResponseObj {
    /// Output arrays by name.
    #[pyo3(get)]
    outputs: Py<PyDict>,
    /// Request id this answers.
    #[pyo3(get)]
    request_id: u64,
    /// Model name as the appliance echoed it.
    #[pyo3(get)]
    model: String,
    /// Model version that served the request.
    #[pyo3(get)]
    model_version: String,
    /// Adapter that served the request ("" for none).
    #[pyo3(get)]
    adapter: String,
    /// Token count the appliance reported.
    #[pyo3(get)]
    token_count: u32,
    /// `(schema_id, schema_version)` of the answer.
    #[pyo3(get)]
    schema: (u32, u32),
    /// W3C traceparent of the answer, or None.
    #[pyo3(get)]
    trace: Option<String>,
    /// Extension headers, in wire order, as `(key, value)`.
    #[pyo3(get)]
    extensions: Py<PyList>,
}

#[pymethods]
impl ResponseObj {
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let r = |s: &str| -> PyResult<String> { Ok(PyString::new(py, s).repr()?.to_string()) };
        Ok(format!(
            "Response(model={}, model_version={}, adapter={}, outputs={})",
            r(&self.model)?,
            r(&self.model_version)?,
            r(&self.adapter)?,
            self.outputs.bind(py).keys().repr()?
        ))
    }
}

/// Metadata and outputs of an answer.
pub fn response_obj(py: Python<'_>, resp: Response, copies: &CopyStats) -> PyResult<ResponseObj> {
    let exts = PyList::empty(py);
    for e in resp.frame().extensions() {
        exts.append((e.key, PyBytes::new(py, e.value)))?;
    }
    let meta = (
        resp.request_id(),
        resp.model().to_owned(),
        resp.model_version().to_owned(),
        resp.adapter().to_owned(),
        resp.token_count(),
        resp.schema(),
        format_traceparent(&resp.trace()),
    );
    let outputs = outputs(py, resp, copies)?.unbind();
    Ok(ResponseObj {
        outputs,
        request_id: meta.0,
        model: meta.1,
        model_version: meta.2,
        adapter: meta.3,
        token_count: meta.4,
        schema: meta.5,
        trace: meta.6,
        extensions: exts.unbind(),
    })
}
