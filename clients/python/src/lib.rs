//! `sluice._native`: the Rust client (`sluice-client`, `sluice-wire`) for
//! the `sluice` Python package. The Python API, its docs and its exception
//! classes are in `python/sluice/`; this module does the work that must be
//! fast or byte-exact: building frames from numpy arrays in place, waiting
//! for answers outside the GIL, handing outputs to numpy as views.

// The backend module: numpy's array interface in and out, by raw pointer.
#[allow(unsafe_code)]
mod array;
mod client;
mod errors;
mod request;
mod response;
mod wire;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<client::NativeClient>()?;
    m.add_class::<response::ResponseObj>()?;
    m.add_class::<array::OutputArray>()?;
    m.add_function(wrap_pyfunction!(wire::parse, m)?)?;
    m.add_function(wrap_pyfunction!(wire::build, m)?)?;
    m.add_function(wrap_pyfunction!(wire::verify, m)?)?;
    m.add_function(wrap_pyfunction!(wire::sign, m)?)?;
    m.add_function(wrap_pyfunction!(wire::stream_header, m)?)?;
    m.add_function(wrap_pyfunction!(wire::error_codes, m)?)?;
    m.add_function(wrap_pyfunction!(wire::dtypes, m)?)?;
    m.add("DATAGRAM_LEN_MAX", sluice_client::DATAGRAM_LEN_MAX)?;
    Ok(())
}
