//! Schema transforms in WebAssembly (issue 21, docs/transforms.md).
//!
//! A transform is a component of the `sluice:transform@1.0.0` world
//! (`wit/transform.wit`): a function from a request's validated section or
//! tensors at one registered schema version to the same payload at another.
//! The [`Runtime`] checks and compiles a module off the hot path (imports
//! outside the world, the wrong export signature or another major version
//! are refused, naming what is wrong) into a [`Module`]; each worker holds
//! its own [`Instance`] of it, from a pooling allocator, and calls it under
//! an epoch deadline and a memory limit. The output is copied once, out of
//! the module's memory straight into the rebuilt request, 64-byte aligned.
//!
//! Without the `runtime` feature (default on) wasmtime is not built: the
//! same types exist but cannot be made, and [`Runtime::new`] refuses,
//! naming the engine's `wasm` feature.

pub mod abi;
mod buf;
pub mod check;
#[cfg(feature = "runtime")]
mod host;
#[cfg(feature = "runtime")]
mod instance;
pub mod limits;
#[cfg(not(feature = "runtime"))]
mod off;
#[cfg(feature = "runtime")]
mod runtime;
mod types;

pub use buf::{ALIGN, AlignedBuf};
pub use check::LoadError;
#[cfg(feature = "runtime")]
pub use instance::{BACKOFF_RESET_OK_CALLS, Instance};
pub use limits::Limits;
#[cfg(not(feature = "runtime"))]
pub use off::{Instance, Module, Runtime};
#[cfg(feature = "runtime")]
pub use runtime::{Module, Runtime};
pub use types::{Cost, Fault, Input, Stats, Target, digest};

/// Whether this build has the WebAssembly runtime (feature `runtime`).
pub const RUNTIME: bool = cfg!(feature = "runtime");

/// What a request for a transform is told when [`RUNTIME`] is false.
pub const UNAVAILABLE: &str = "schema transforms are not in this build: the engine was \
     built without its `wasm` feature (cargo feature `wasm` of sluice-engine)";
