//! Built without the `runtime` feature (the engine without `wasm`): there
//! is no WebAssembly engine, and none of these types can exist. They keep
//! the host's code the same in both builds; [`Runtime::new`] is where a
//! request for a transform ends, with an error naming the feature.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use sluice_wire::Frame;

use crate::UNAVAILABLE;
use crate::check::LoadError;
use crate::limits::Limits;
use crate::types::{Cost, Fault, Input, Stats, Target};

/// The wasmtime engine, absent from this build: [`Runtime::new`] refuses.
#[derive(Debug)]
pub struct Runtime {
    never: Infallible,
}

/// A compiled module; none can exist without a runtime.
#[derive(Debug)]
pub struct Module {
    never: Infallible,
    /// Length of the module's binary.
    pub len: usize,
    /// FNV-1a of the module's binary.
    pub digest: u64,
}

/// A worker's instance of a module; none can exist without a runtime.
#[derive(Debug)]
pub struct Instance {
    never: Infallible,
}

impl Runtime {
    /// Always refuses: this build has no WebAssembly engine.
    pub fn new(_limits: Limits) -> Result<Runtime, String> {
        Err(UNAVAILABLE.to_owned())
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        match self.never {}
    }

    /// Checks, compiles and links a module.
    pub fn load(&self, _bytes: &[u8]) -> Result<Arc<Module>, LoadError> {
        match self.never {}
    }
}

impl Module {
    /// A new instance from the pool.
    pub fn instantiate(self: &Arc<Self>) -> Result<Instance, LoadError> {
        match self.never {}
    }

    /// The limits its instances run under.
    pub fn limits(&self) -> &Limits {
        match self.never {}
    }
}

impl Instance {
    /// The module this is an instance of.
    pub fn module(&self) -> &Arc<Module> {
        match self.never {}
    }

    /// Its counters.
    pub fn stats(&self) -> &Arc<Stats> {
        match self.never {}
    }

    /// Transforms a request.
    pub fn run(
        &mut self,
        _req: &Frame<&[u8]>,
        _input: Input,
        _from: u32,
        _to: u32,
        _target: Target,
        _now: Instant,
    ) -> Result<(&[u8], Cost), Fault> {
        match self.never {}
    }
}
