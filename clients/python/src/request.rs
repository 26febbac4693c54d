//! A request's Python arguments, checked and held for the frame builder.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple};
use sluice_client::{Deadline, Request, TraceContext};

use crate::array::{self, CopyStats, Input};
use crate::errors;

static JSON_DUMPS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Options every request takes (the keyword arguments of `infer`).
#[derive(Default)]
pub struct Options<'py> {
    pub adapter: Option<String>,
    pub intent: Option<String>,
    pub deadline: Option<Bound<'py, PyAny>>,
    pub trace: Option<Bound<'py, PyAny>>,
    pub schema: Option<Bound<'py, PyAny>>,
    pub section: Option<Bound<'py, PyAny>>,
    pub extensions: Option<Bound<'py, PyAny>>,
    pub token_count: u32,
}

/// Section bytes: borrowed from a `bytes` object or owned (encoded JSON,
/// copied bytearray).
enum Section<'py> {
    Borrowed(Bound<'py, PyBytes>),
    Owned(Vec<u8>),
}

impl Section<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Section::Borrowed(b) => b.as_bytes(),
            Section::Owned(v) => v,
        }
    }
}

/// Everything a frame needs, owned or kept alive, so a [`Request`] can
/// borrow from it.
pub struct Prepared<'py> {
    model: String,
    version: String,
    adapter: String,
    intent: String,
    deadline: Deadline,
    trace: TraceContext,
    schema: (u32, u32),
    token_count: u32,
    extensions: Vec<(String, Vec<u8>)>,
    section: Option<Section<'py>>,
    inputs: Vec<Input<'py>>,
}

impl<'py> Prepared<'py> {
    /// Reads the arguments of one request.
    pub fn new(
        py: Python<'py>,
        model: String,
        version: String,
        inputs: &Bound<'py, PyAny>,
        opts: Options<'py>,
        copies: &CopyStats,
    ) -> PyResult<Prepared<'py>> {
        let mut ins = Vec::new();
        if let Ok(d) = inputs.cast::<PyDict>() {
            for (k, v) in d.iter() {
                let name: String = k
                    .extract()
                    .map_err(|_| errors::invalid_msg(py, "input names must be str"))?;
                ins.push(array::input(name, &v, copies)?);
            }
        } else if !inputs.is_none() {
            return Err(errors::invalid_msg(
                py,
                "inputs must be a dict of name to numpy array",
            ));
        }
        Ok(Prepared {
            model,
            version,
            adapter: opts.adapter.unwrap_or_default(),
            intent: opts.intent.unwrap_or_default(),
            deadline: deadline(py, opts.deadline.as_ref())?,
            trace: trace(py, opts.trace.as_ref())?,
            schema: schema(py, opts.schema.as_ref())?,
            token_count: opts.token_count,
            extensions: extensions(py, opts.extensions.as_ref())?,
            section: section(py, opts.section.as_ref())?,
            inputs: ins,
        })
    }

    /// The request, borrowing from `self`.
    pub fn request(&self) -> Request<'_> {
        let mut r = Request::new(&self.model, &self.version)
            .adapter(&self.adapter)
            .intent(&self.intent)
            .deadline(self.deadline)
            .trace(self.trace)
            .schema(self.schema.0, self.schema.1)
            .token_count(self.token_count);
        for (k, v) in &self.extensions {
            r = r.extension(k, v);
        }
        for t in &self.inputs {
            r = r.tensor_raw(&t.name, t.dtype, t.dims(), t.bytes());
        }
        if let Some(s) = &self.section {
            r = r.section(s.bytes());
        }
        r
    }
}

/// `None`; seconds (int/float) or a `timedelta` from the send; or an
/// aware `datetime`, absolute.
fn deadline(py: Python<'_>, d: Option<&Bound<'_, PyAny>>) -> PyResult<Deadline> {
    let Some(d) = d.filter(|d| !d.is_none()) else {
        return Ok(Deadline::None);
    };
    if d.hasattr(pyo3::intern!(py, "timestamp"))? {
        let ts: f64 = d.call_method0(pyo3::intern!(py, "timestamp"))?.extract()?;
        if !ts.is_finite() || ts <= 0.0 {
            return Err(errors::invalid_msg(py, "deadline datetime is before 1970"));
        }
        // At least 1 µs: 0 would mean "no deadline".
        return Ok(Deadline::AtUnixUs(((ts * 1e6) as u64).max(1)));
    }
    let secs: f64 = if d.hasattr(pyo3::intern!(py, "total_seconds"))? {
        d.call_method0(pyo3::intern!(py, "total_seconds"))?
            .extract()?
    } else {
        d.extract().map_err(|_| {
            errors::invalid_msg(py, "deadline must be seconds, a timedelta or a datetime")
        })?
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(errors::invalid_msg(
            py,
            "a relative deadline must be finite and not negative",
        ));
    }
    Ok(Deadline::After(Duration::from_secs_f64(secs)))
}

fn hex_exact<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Parses a W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`).
pub fn parse_traceparent(s: &str) -> Option<TraceContext> {
    let mut parts = s.split('-');
    let (v, t, p, f) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || v != "00" {
        return None;
    }
    Some(TraceContext {
        trace_id: hex_exact::<16>(t)?,
        parent_id: hex_exact::<8>(p)?,
        flags: hex_exact::<1>(f)?[0],
    })
}

/// Formats a trace context as a `traceparent`; `None` when unset.
pub fn format_traceparent(t: &TraceContext) -> Option<String> {
    if !t.is_set() {
        return None;
    }
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    Some(format!(
        "00-{}-{}-{:02x}",
        hex(&t.trace_id),
        hex(&t.parent_id),
        t.flags
    ))
}

fn trace(py: Python<'_>, t: Option<&Bound<'_, PyAny>>) -> PyResult<TraceContext> {
    let Some(t) = t.filter(|t| !t.is_none()) else {
        return Ok(TraceContext::default());
    };
    let s: String = t
        .extract()
        .map_err(|_| errors::invalid_msg(py, "trace must be a W3C traceparent string"))?;
    parse_traceparent(&s).ok_or_else(|| {
        errors::invalid_msg(
            py,
            &format!("trace {s:?} is not a traceparent (00-<32 hex>-<16 hex>-<2 hex>)"),
        )
    })
}

/// `None`, `(schema_id, version)`, or a `NegotiatedSchema`.
fn schema(py: Python<'_>, s: Option<&Bound<'_, PyAny>>) -> PyResult<(u32, u32)> {
    let Some(s) = s.filter(|s| !s.is_none()) else {
        return Ok((0, 0));
    };
    if let Ok(id) = s.getattr(pyo3::intern!(py, "schema_id")) {
        return Ok((
            id.extract()?,
            s.getattr(pyo3::intern!(py, "version"))?.extract()?,
        ));
    }
    s.extract::<(u32, u32)>().map_err(|_| {
        errors::invalid_msg(
            py,
            "schema must be (schema_id, version) or a NegotiatedSchema",
        )
    })
}

fn extensions(py: Python<'_>, e: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<(String, Vec<u8>)>> {
    let Some(e) = e.filter(|e| !e.is_none()) else {
        return Ok(Vec::new());
    };
    let items: Vec<(String, Bound<'_, PyAny>)> = match e.cast::<PyDict>() {
        Ok(d) => d
            .iter()
            .map(|(k, v)| Ok((k.extract()?, v)))
            .collect::<PyResult<_>>()?,
        Err(_) => e.extract().map_err(|_| {
            errors::invalid_msg(py, "extensions must be a dict of str to bytes or str")
        })?,
    };
    items
        .into_iter()
        .map(|(k, v)| {
            let bytes = if let Ok(s) = v.cast::<PyString>() {
                s.to_cow()?.as_bytes().to_vec()
            } else {
                v.extract::<Vec<u8>>().map_err(|_| {
                    errors::invalid_msg(py, &format!("extension {k}: value must be bytes or str"))
                })?
            };
            Ok((k, bytes))
        })
        .collect()
}

/// `bytes` (borrowed), `str` (UTF-8), `bytearray`/`memoryview` (copied),
/// or a JSON value (dict, list, ...: encoded compactly).
fn section<'py>(py: Python<'py>, s: Option<&Bound<'py, PyAny>>) -> PyResult<Option<Section<'py>>> {
    let Some(s) = s.filter(|s| !s.is_none()) else {
        return Ok(None);
    };
    if let Ok(b) = s.cast::<PyBytes>() {
        return Ok(Some(Section::Borrowed(b.clone())));
    }
    if let Ok(st) = s.cast::<PyString>() {
        return Ok(Some(Section::Owned(st.to_cow()?.as_bytes().to_vec())));
    }
    if is_buffer_type(py, s)? {
        let b = py.import("builtins")?.getattr("bytes")?.call1((s,))?;
        return Ok(Some(Section::Owned(
            b.cast::<PyBytes>()?.as_bytes().to_vec(),
        )));
    }
    let dumps = JSON_DUMPS.get_or_try_init(py, || {
        Ok::<_, PyErr>(py.import("json")?.getattr("dumps")?.unbind())
    })?;
    let kw = PyDict::new(py);
    kw.set_item("separators", PyTuple::new(py, [",", ":"])?)?;
    let text = dumps.bind(py).call((s,), Some(&kw)).map_err(|e| {
        errors::invalid_msg(
            py,
            &format!("section is neither bytes nor JSON-encodable: {e}"),
        )
    })?;
    let text = text.cast::<PyString>()?.to_cow()?.into_owned();
    Ok(Some(Section::Owned(text.into_bytes())))
}

fn is_buffer_type(py: Python<'_>, s: &Bound<'_, PyAny>) -> PyResult<bool> {
    let b = py.import("builtins")?;
    Ok(s.is_instance(&b.getattr("bytearray")?)? || s.is_instance(&b.getattr("memoryview")?)?)
}
