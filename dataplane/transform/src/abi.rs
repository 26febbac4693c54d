//! The `sluice:transform@1.0.0` world as host types (`wit/transform.wit`).
//! Written by hand rather than generated so that nothing on the call path
//! allocates: inputs are lowered from borrowed slices, and what a module
//! hands back through `emit-*` is read in place from its memory
//! (`WasmList`, `WasmStr`) and copied once into the output buffer.

#[cfg(feature = "runtime")]
use wasmtime::component::{ComponentType, Lift, Lower, WasmList, WasmStr};

/// The world's package and version, as import and export names carry them.
pub const PACKAGE: &str = "sluice:transform";
/// The world's version. Modules of another major version are refused.
pub const VERSION: (u64, u64, u64) = (1, 0, 0);
/// The interface a module imports to reach the host.
pub const HOST_INTERFACE: &str = "host";
/// The types-only interface a module imports with it.
pub const TYPES_INTERFACE: &str = "types";
/// The interface a module exports.
pub const EXPORT_INTERFACE: &str = "transformer";
/// The function it exports.
pub const EXPORT_FUNC: &str = "transform";

/// The full name of an interface of the world at this host's version.
pub fn interface_name(iface: &str) -> String {
    let (a, b, c) = VERSION;
    format!("{PACKAGE}/{iface}@{a}.{b}.{c}")
}

#[cfg(feature = "runtime")]
/// `types.tensor`, lowered from the request in place.
#[derive(ComponentType, Lower, Clone, Copy)]
#[component(record)]
pub struct TensorIn<'a> {
    /// Name.
    pub name: &'a str,
    /// Wire dtype byte.
    pub dtype: u8,
    /// Shape.
    pub shape: &'a [u64],
    /// Data.
    pub data: &'a [u8],
}

#[cfg(feature = "runtime")]
/// `types.payload`, lowered from the request in place.
#[derive(ComponentType, Lower, Clone, Copy)]
#[component(variant)]
pub enum PayloadIn<'a> {
    /// The structured section's bytes.
    #[component(name = "section")]
    Section(&'a [u8]),
    /// The model input tensors.
    #[component(name = "tensors")]
    Tensors(&'a [TensorIn<'a>]),
}

#[cfg(feature = "runtime")]
/// `types.tensor` as a module hands it back: views into its memory.
#[derive(ComponentType, Lift)]
#[component(record)]
pub struct TensorView {
    /// Name.
    pub name: WasmStr,
    /// Wire dtype byte.
    pub dtype: u8,
    /// Shape.
    pub shape: WasmList<u64>,
    /// Data.
    pub data: WasmList<u8>,
}

/// `types.error-code`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "runtime", derive(ComponentType, Lift, Lower))]
#[cfg_attr(feature = "runtime", component(enum))]
#[repr(u8)]
pub enum ErrorCode {
    /// The input is not what the from-version says.
    #[cfg_attr(feature = "runtime", component(name = "invalid-input"))]
    InvalidInput,
    /// The module does not transform between these versions.
    #[cfg_attr(feature = "runtime", component(name = "unsupported-versions"))]
    UnsupportedVersions,
    /// The output would exceed `output-bytes-max`.
    #[cfg_attr(feature = "runtime", component(name = "output-too-large"))]
    OutputTooLarge,
    /// Anything else.
    #[cfg_attr(feature = "runtime", component(name = "internal"))]
    Internal,
}

impl ErrorCode {
    /// Stable name, for status and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidInput => "invalid-input",
            ErrorCode::UnsupportedVersions => "unsupported-versions",
            ErrorCode::OutputTooLarge => "output-too-large",
            ErrorCode::Internal => "internal",
        }
    }
}

#[cfg(feature = "runtime")]
/// `host.level`.
#[derive(ComponentType, Lift, Clone, Copy, Debug)]
#[component(enum)]
#[repr(u8)]
pub enum Level {
    /// Error.
    #[component(name = "error")]
    Error,
    /// Warning.
    #[component(name = "warn")]
    Warn,
    /// Information.
    #[component(name = "info")]
    Info,
    /// Debugging.
    #[component(name = "debug")]
    Debug,
}

#[cfg(feature = "runtime")]
/// The exported function's parameters.
pub type Params<'a> = (PayloadIn<'a>, u32, u32);
#[cfg(feature = "runtime")]
/// The exported function's result.
pub type Results = (Result<(), ErrorCode>,);
