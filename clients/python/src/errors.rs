//! Rust errors to the Python exceptions of `sluice._errors`.
//!
//! The exception classes live in Python (one per error-code family, with
//! `code`, `code_name`, `message` and `retryable`); this module only says
//! which kind of failure happened and lets `sluice._errors.from_native`
//! pick the class.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyTuple;
use sluice_client::ClientError;

static FROM_NATIVE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Builds the exception for `kind` through `sluice._errors.from_native`.
/// `detail` is the wire error name, the errno or the raw code, by kind.
pub fn make(
    py: Python<'_>,
    kind: &str,
    code: Option<u16>,
    message: &str,
    retryable: bool,
    detail: Option<Py<PyAny>>,
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let f = FROM_NATIVE.get_or_try_init(py, || {
            Ok::<_, PyErr>(
                py.import("sluice._errors")?
                    .getattr("from_native")?
                    .unbind(),
            )
        })?;
        let args = PyTuple::new(
            py,
            [
                kind.into_pyobject(py)?.into_any(),
                code.into_pyobject(py)?.into_any(),
                message.into_pyobject(py)?.into_any(),
                retryable.into_pyobject(py)?.to_owned().into_any(),
                detail.into_pyobject(py)?.into_any(),
            ],
        )?;
        let exc = f.bind(py).call1(args)?;
        Ok(PyErr::from_value(exc))
    };
    // If the error module itself fails, that failure is the clearer message.
    build().unwrap_or_else(|e| e)
}

/// The Python exception for a client failure.
pub fn client_error(py: Python<'_>, e: ClientError) -> PyErr {
    match e {
        ClientError::Server {
            code,
            message,
            retryable,
        } => make(py, "server", Some(code as u16), &message, retryable, None),
        ClientError::ServerUnknownCode { code_raw, message } => {
            make(py, "server", Some(code_raw), &message, false, None)
        }
        ClientError::Timeout => make(
            py,
            "timeout",
            None,
            "timed out waiting for the answer",
            false,
            None,
        ),
        ClientError::Io(io) => {
            let errno = io
                .raw_os_error()
                .and_then(|n| n.into_pyobject(py).ok())
                .map(|n| n.into_any().unbind());
            make(py, "io", None, &format!("socket error: {io}"), false, errno)
        }
        ClientError::Malformed(why) => make(py, "malformed", None, why, false, None),
        ClientError::InvalidRequest(w) => invalid(py, w),
        ClientError::NothingPending => make(
            py,
            "nothing_pending",
            None,
            "no request is outstanding",
            false,
            None,
        ),
        ClientError::ConnectionLost => make(
            py,
            "connection_lost",
            None,
            "the TCP connection was lost with this request outstanding (the next request reconnects)",
            true,
            None,
        ),
        ClientError::TooManyOutstanding => make(
            py,
            "too_many_outstanding",
            None,
            "too many requests outstanding; receive answers first",
            false,
            None,
        ),
    }
}

/// A request the builder refused, named by the `sluice_wire::Error` variant.
pub fn invalid(py: Python<'_>, w: sluice_wire::Error) -> PyErr {
    let name = format!("{w:?}")
        .into_pyobject(py)
        .ok()
        .map(|s| s.into_any().unbind());
    make(
        py,
        "invalid",
        None,
        &format!("invalid request: {w}"),
        false,
        name,
    )
}

/// A request the binding refused before the builder saw it (wrong Python
/// type, unknown dtype, bad trace string): `sluice.InvalidRequestError`.
pub fn invalid_msg(py: Python<'_>, message: &str) -> PyErr {
    make(py, "invalid", None, message, false, None)
}

/// A frame `sluice.wire.parse` or `build` refused: `sluice.WireError`.
pub fn wire(py: Python<'_>, w: sluice_wire::Error) -> PyErr {
    let name = format!("{w:?}")
        .into_pyobject(py)
        .ok()
        .map(|s| s.into_any().unbind());
    make(py, "wire", None, w.as_str(), false, name)
}
