//! `sluice.wire`: frames as Python dicts, parsed and built by `sluice-wire`
//! itself (the conformance vectors go through these), and the wire tables.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use sluice_wire::{
    BodyRepr, DType, ErrorCode, ExtRepr, Frame, FrameRepr, Kind, SchemaType, StreamHeader,
    TenantKey, TensorRepr, TraceContext,
};

use crate::errors;

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Request => "request",
        Kind::Response => "response",
        Kind::Error => "error",
        Kind::NegotiateRequest => "negotiate_request",
        Kind::NegotiateResponse => "negotiate_response",
        Kind::Ping => "ping",
        Kind::Pong => "pong",
    }
}

fn kind_from_name(s: &str) -> Option<Kind> {
    (1..=7)
        .filter_map(Kind::from_u8)
        .find(|k| kind_name(*k) == s)
}

/// Parses one frame (`Frame::new_checked`); a bad frame raises
/// `sluice.WireError` whose `name` is the `sluice_wire::Error` variant.
#[pyfunction]
pub fn parse<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyDict>> {
    let f = Frame::new_checked(data).map_err(|e| errors::wire(py, e))?;
    let d = PyDict::new(py);
    d.set_item("kind", kind_name(f.kind()))?;
    d.set_item("version", f.version())?;
    d.set_item("flags", f.flags())?;
    d.set_item("tenant_id", f.tenant_id())?;
    d.set_item("request_id", f.request_id())?;
    d.set_item("deadline_us", f.deadline_us())?;
    d.set_item("schema_id", f.schema_id())?;
    d.set_item("schema_version", f.schema_version())?;
    d.set_item("token_count", f.token_count())?;
    let t = f.trace();
    let trace = PyDict::new(py);
    trace.set_item("trace_id", PyBytes::new(py, &t.trace_id))?;
    trace.set_item("span_id", PyBytes::new(py, &t.parent_id))?;
    trace.set_item("flags", t.flags)?;
    d.set_item("trace", trace)?;
    d.set_item("model", f.model())?;
    d.set_item("model_version", f.model_version())?;
    d.set_item("adapter", f.adapter())?;
    d.set_item("intent", f.intent())?;
    let exts = PyList::empty(py);
    for e in f.extensions() {
        let x = PyDict::new(py);
        x.set_item("key", e.key)?;
        x.set_item("value", PyBytes::new(py, e.value))?;
        exts.append(x)?;
    }
    d.set_item("extensions", exts)?;
    let tensors = PyList::empty(py);
    for t in f.tensors() {
        let x = PyDict::new(py);
        x.set_item("name", t.name)?;
        x.set_item("dtype", t.dtype as u8)?;
        x.set_item("dtype_name", t.dtype.as_str())?;
        x.set_item("dims", t.dims().to_vec())?;
        x.set_item("data_offset", t.data_offset)?;
        x.set_item("data_len", t.data_len)?;
        x.set_item("data", PyBytes::new(py, f.tensor_data(&t)))?;
        tensors.append(x)?;
    }
    d.set_item("tensors", tensors)?;
    let body = PyDict::new(py);
    if let Some(e) = f.error_body() {
        let x = PyDict::new(py);
        x.set_item("code", e.code_raw)?;
        x.set_item("code_name", e.code().map(ErrorCode::as_str))?;
        x.set_item("message", e.message)?;
        body.set_item("error", x)?;
    } else if let Some(n) = f.negotiate_request() {
        let x = PyDict::new(py);
        x.set_item("subject", n.subject)?;
        x.set_item("version_hint", n.version_hint)?;
        body.set_item("negotiate_request", x)?;
    } else if let Some(n) = f.negotiate_response() {
        let x = PyDict::new(py);
        x.set_item("schema_id", n.schema_id)?;
        x.set_item("version", n.version)?;
        x.set_item("ttl_ms", n.ttl_ms)?;
        x.set_item("schema_type", n.schema_type as u8)?;
        x.set_item("schema", PyBytes::new(py, n.schema))?;
        body.set_item("negotiate_response", x)?;
    }
    if body.is_empty() {
        d.set_item("body", py.None())?;
    } else {
        d.set_item("body", body)?;
    }
    d.set_item("auth_tag", PyBytes::new(py, f.auth_tag()))?;
    match f.stream() {
        Some(h) => d.set_item("stream", stream_dict(py, &h)?)?,
        None => d.set_item("stream", py.None())?,
    }
    // docs/wire.md, "Replay windows": None when the frame names no sender.
    d.set_item("sender_id", f.sender_id())?;
    Ok(d)
}

/// A stream header as `parse` returns it (docs/wire.md, "Stream header").
pub fn stream_dict<'py>(py: Python<'py>, h: &StreamHeader) -> PyResult<Bound<'py, PyDict>> {
    let x = PyDict::new(py);
    x.set_item("stream_id", h.stream_id)?;
    x.set_item("seq", h.seq)?;
    x.set_item("flags", h.flags)?;
    x.set_item("end_reason", h.end_reason)?;
    x.set_item("tokens_per_frame", h.tokens_per_frame)?;
    x.set_item("max_tokens", h.max_tokens)?;
    Ok(x)
}

/// The 24-byte value of a stream header given as a dict shaped like
/// `parse`'s `stream` (missing keys are 0); checked for a frame of `kind`.
#[pyfunction]
#[pyo3(signature = (stream, kind="request"))]
pub fn stream_header<'py>(
    py: Python<'py>,
    stream: &Bound<'py, PyDict>,
    kind: &str,
) -> PyResult<Bound<'py, PyBytes>> {
    let k = kind_from_name(kind)
        .ok_or_else(|| errors::invalid_msg(py, &format!("unknown frame kind {kind:?}")))?;
    let h = StreamHeader {
        stream_id: get(stream, "stream_id", 0u64)?,
        seq: get(stream, "seq", 0u32)?,
        flags: get(stream, "flags", 0u8)?,
        end_reason: get(stream, "end_reason", 0u8)?,
        tokens_per_frame: get(stream, "tokens_per_frame", 0u16)?,
        max_tokens: get(stream, "max_tokens", 0u32)?,
    };
    h.check(k).map_err(|e| errors::wire(py, e))?;
    Ok(PyBytes::new(py, &h.to_bytes()))
}

fn get<'py, T>(d: &Bound<'py, PyDict>, key: &str, default: T) -> PyResult<T>
where
    T: for<'a> FromPyObject<'a, 'py, Error = PyErr>,
{
    match d.get_item(key)? {
        Some(v) if !v.is_none() => v.extract(),
        _ => Ok(default),
    }
}

fn fixed<const N: usize>(py: Python<'_>, what: &str, v: Vec<u8>) -> PyResult<[u8; N]> {
    v.try_into()
        .map_err(|_| errors::invalid_msg(py, &format!("{what} must be {N} bytes")))
}

struct Owned {
    strings: [String; 4],
    exts: Vec<(String, Vec<u8>)>,
    tensors: Vec<(String, DType, Vec<u64>, Vec<u8>)>,
    body_text: String,
    body_bytes: Vec<u8>,
}

/// Builds a frame from a dict shaped like `parse`'s result with
/// `FrameRepr::emit` (tensors at the next multiple of 64), signing it when
/// `key` is given. Missing keys take their zero value.
#[pyfunction]
#[pyo3(signature = (frame, key=None))]
pub fn build<'py>(
    py: Python<'py>,
    frame: &Bound<'py, PyDict>,
    key: Option<Vec<u8>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let kind_s: String = get(frame, "kind", "request".to_owned())?;
    let kind = kind_from_name(&kind_s)
        .ok_or_else(|| errors::invalid_msg(py, &format!("unknown frame kind {kind_s:?}")))?;
    let mut trace = TraceContext::default();
    if let Some(t) = frame.get_item("trace")?.filter(|t| !t.is_none()) {
        let t = t.cast::<PyDict>()?;
        trace.trace_id = fixed(py, "trace_id", get(t, "trace_id", vec![0; 16])?)?;
        trace.parent_id = fixed(py, "span_id", get(t, "span_id", vec![0; 8])?)?;
        trace.flags = get(t, "flags", 0u8)?;
    }
    let mut o = Owned {
        strings: [
            get(frame, "model", String::new())?,
            get(frame, "model_version", String::new())?,
            get(frame, "adapter", String::new())?,
            get(frame, "intent", String::new())?,
        ],
        exts: Vec::new(),
        tensors: Vec::new(),
        body_text: String::new(),
        body_bytes: Vec::new(),
    };
    if let Some(list) = frame.get_item("extensions")?.filter(|v| !v.is_none()) {
        for e in list.try_iter()? {
            let e = e?;
            let e = e.cast::<PyDict>()?;
            o.exts
                .push((get(e, "key", String::new())?, get(e, "value", Vec::new())?));
        }
    }
    if let Some(list) = frame.get_item("tensors")?.filter(|v| !v.is_none()) {
        for t in list.try_iter()? {
            let t = t?;
            let t = t.cast::<PyDict>()?;
            let code: u8 = get(t, "dtype", 0u8)?;
            let dtype = DType::from_u8(code)
                .ok_or_else(|| errors::wire(py, sluice_wire::Error::BadDType))?;
            o.tensors.push((
                get(t, "name", String::new())?,
                dtype,
                get(t, "dims", Vec::new())?,
                get(t, "data", Vec::new())?,
            ));
        }
    }
    #[derive(Clone, Copy)]
    enum B {
        None,
        Error(u16),
        NegReq(u32),
        NegResp(u32, u32, u32, u8),
    }
    let mut b = B::None;
    if let Some(body) = frame.get_item("body")?.filter(|v| !v.is_none()) {
        let body = body.cast::<PyDict>()?;
        if let Some(e) = body.get_item("error")? {
            let e = e.cast::<PyDict>()?;
            o.body_text = get(e, "message", String::new())?;
            b = B::Error(get(e, "code", 0u16)?);
        } else if let Some(n) = body.get_item("negotiate_request")? {
            let n = n.cast::<PyDict>()?;
            o.body_text = get(n, "subject", String::new())?;
            b = B::NegReq(get(n, "version_hint", 0u32)?);
        } else if let Some(n) = body.get_item("negotiate_response")? {
            let n = n.cast::<PyDict>()?;
            o.body_bytes = get(n, "schema", Vec::new())?;
            b = B::NegResp(
                get(n, "schema_id", 0u32)?,
                get(n, "version", 0u32)?,
                get(n, "ttl_ms", 0u32)?,
                get(n, "schema_type", 0u8)?,
            );
        }
    }
    let body = match b {
        B::None => BodyRepr::None,
        // A code this build does not know (a newer peer's) is written raw
        // over a known one after emitting: the layout is the same.
        B::Error(code) => BodyRepr::Error {
            code: ErrorCode::from_u16(code).unwrap_or(ErrorCode::Internal),
            message: &o.body_text,
        },
        B::NegReq(version_hint) => BodyRepr::NegotiateRequest {
            subject: &o.body_text,
            version_hint,
        },
        B::NegResp(schema_id, version, ttl_ms, st) => BodyRepr::NegotiateResponse {
            schema_id,
            version,
            ttl_ms,
            schema_type: SchemaType::from_u8(st)
                .ok_or_else(|| errors::wire(py, sluice_wire::Error::BadBody))?,
            schema: &o.body_bytes,
        },
    };
    let exts: Vec<ExtRepr<'_>> = o
        .exts
        .iter()
        .map(|(k, v)| ExtRepr { key: k, value: v })
        .collect();
    let tensors: Vec<TensorRepr<'_>> = o
        .tensors
        .iter()
        .map(|(name, dtype, dims, data)| TensorRepr {
            name,
            dtype: *dtype,
            dims,
            data: Some(data),
        })
        .collect();
    let repr = FrameRepr {
        kind,
        flags: get(frame, "flags", 0u16)?,
        request_id: get(frame, "request_id", 0u64)?,
        tenant_id: get(frame, "tenant_id", 0u32)?,
        deadline_us: get(frame, "deadline_us", 0u64)?,
        schema_id: get(frame, "schema_id", 0u32)?,
        schema_version: get(frame, "schema_version", 0u32)?,
        token_count: get(frame, "token_count", 0u32)?,
        trace,
        model: &o.strings[0],
        model_version: &o.strings[1],
        adapter: &o.strings[2],
        intent: &o.strings[3],
        extensions: &exts,
        tensors: &tensors,
        body,
    };
    let layout = repr.layout().map_err(|e| errors::wire(py, e))?;
    let mut buf = vec![0u8; layout.frame_len];
    repr.emit(&mut buf).map_err(|e| errors::wire(py, e))?;
    if let B::Error(code) = b
        && let Some(dst) = buf.get_mut(layout.header_len..layout.header_len + 2)
    {
        // The error body starts at header_len with the u16 code.
        dst.copy_from_slice(&code.to_le_bytes());
    }
    if let Some(k) = key {
        TenantKey::new(&k).sign(&mut Frame::new_unchecked(&mut buf[..]));
    }
    Ok(PyBytes::new(py, &buf))
}

/// The frame signed with `key`: AUTHENTICATED set and the tag written.
#[pyfunction]
pub fn sign<'py>(py: Python<'py>, data: &[u8], key: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
    let mut buf = data.to_vec();
    let mut f = Frame::new_checked(&mut buf[..]).map_err(|e| errors::wire(py, e))?;
    TenantKey::new(key).sign(&mut f);
    Ok(PyBytes::new(py, &buf))
}

/// Whether the frame's tag verifies with `key` (the frame must parse).
#[pyfunction]
pub fn verify(py: Python<'_>, data: &[u8], key: &[u8]) -> PyResult<bool> {
    let f = Frame::new_checked(data).map_err(|e| errors::wire(py, e))?;
    Ok(TenantKey::new(key).verify(&f))
}

/// The error-code table: `(code, name, retryable)` for every code.
#[pyfunction]
pub fn error_codes() -> Vec<(u16, &'static str, bool)> {
    ErrorCode::ALL
        .iter()
        .map(|c| (*c as u16, c.as_str(), c.retryable()))
        .collect()
}

/// The dtype table: `(code, name, bytes per element)` for every dtype.
#[pyfunction]
pub fn dtypes() -> Vec<(u8, &'static str, usize)> {
    DType::ALL
        .iter()
        .map(|d| (*d as u8, d.as_str(), d.size_bytes()))
        .collect()
}
