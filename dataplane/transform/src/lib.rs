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

pub mod abi;
mod buf;
pub mod check;
mod host;
mod instance;
pub mod limits;
mod runtime;

pub use buf::{ALIGN, AlignedBuf};
pub use check::LoadError;
pub use instance::{Cost, Fault, Input, Instance, Stats, Target};
pub use limits::Limits;
pub use runtime::{Module, Runtime, digest};
