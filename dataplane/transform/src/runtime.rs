//! One wasmtime engine per process: Cranelift, the Component Model, epoch
//! interruption, a pooling allocator sized from the limits, and the thread
//! that advances the epoch. Modules are checked and compiled here, off the
//! hot path; each becomes an `InstancePre` that workers instantiate from.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::component::{Component, ComponentExportIndex, InstancePre, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::abi;
use crate::check::{self, LoadError};
use crate::host::{self, HostState};
use crate::instance::Instance;
use crate::limits::{EPOCH_TICK_US, Limits, WASM_STACK_BYTES_MAX};
use crate::types::digest;

/// The wasmtime engine, its linker and its epoch thread.
pub struct Runtime {
    engine: Engine,
    linker: Linker<HostState>,
    limits: Limits,
    stop: Arc<AtomicBool>,
    // Dropped last: joined in `Drop` after `stop` is set.
    ticker: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("limits", &self.limits)
            .finish()
    }
}

/// A module that passed every check, compiled and linked: what a worker
/// instantiates from (cheap, from the pool).
pub struct Module {
    pre: InstancePre<HostState>,
    func: ComponentExportIndex,
    engine: Engine,
    limits: Limits,
    /// Length of the module's binary.
    pub len: usize,
    /// FNV-1a of the module's binary: which build this is, for status.
    pub digest: u64,
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("len", &self.len)
            .field("digest", &format_args!("{:016x}", self.digest))
            .finish()
    }
}

impl Runtime {
    /// Builds the engine. Fails when the limits are unusable or the pool
    /// cannot be reserved.
    pub fn new(limits: Limits) -> Result<Runtime, String> {
        limits.check()?;
        let mut cfg = Config::new();
        cfg.wasm_component_model(true);
        cfg.epoch_interruption(true);
        cfg.max_wasm_stack(WASM_STACK_BYTES_MAX);
        cfg.wasm_backtrace_max_frames(None);
        let n = limits.instances_max;
        let mut pool = PoolingAllocationConfig::default();
        // A component of a Rust transform holds a few core instances (the
        // module and the adapter shims wit-component adds).
        pool.total_component_instances(n);
        pool.total_core_instances(n * 8);
        pool.max_core_instances_per_component(16);
        pool.total_memories(n * 2);
        pool.max_memories_per_component(2);
        pool.total_tables(n * 4);
        pool.max_tables_per_component(4);
        pool.max_memory_size(limits.memory_bytes_max);
        cfg.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&cfg).map_err(|e| format!("wasm engine: {e:#}"))?;
        let mut linker = Linker::new(&engine);
        host::define(&mut linker).map_err(|e| format!("wasm host functions: {e:#}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let ticker = {
            let engine = engine.clone();
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("sluice-wasm-epoch".into())
                .spawn(move || {
                    while !stop.load(Ordering::Acquire) {
                        std::thread::sleep(Duration::from_micros(EPOCH_TICK_US));
                        engine.increment_epoch();
                    }
                })
                .map_err(|e| format!("wasm epoch thread: {e}"))?
        };
        Ok(Runtime {
            engine,
            linker,
            limits,
            stop,
            ticker: Some(ticker),
        })
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Checks, compiles and links a module, then instantiates it once to
    /// check its export's signature. Off the hot path (milliseconds: the
    /// Cranelift compile).
    pub fn load(&self, bytes: &[u8]) -> Result<Arc<Module>, LoadError> {
        if bytes.len() > self.limits.module_bytes_max {
            return Err(LoadError::TooLarge {
                len: bytes.len(),
                max: self.limits.module_bytes_max,
            });
        }
        check::preamble(bytes)?;
        let component = Component::new(&self.engine, bytes)
            .map_err(|e| LoadError::Compile(format!("{e:#}")))?;
        let ty = component.component_type();
        check::imports(ty.imports(&self.engine).map(|(n, _)| n))?;
        let names: Vec<&str> = ty.exports(&self.engine).map(|(n, _)| n).collect();
        let export = check::export(names.iter().copied())?;
        let iface =
            component
                .get_export_index(None, export)
                .ok_or_else(|| LoadError::MissingExport {
                    found: names.join(", "),
                })?;
        let func = component
            .get_export_index(Some(&iface), abi::EXPORT_FUNC)
            .ok_or_else(|| {
                LoadError::WrongSignature(format!(
                    "{export} does not export a function {:?}",
                    abi::EXPORT_FUNC
                ))
            })?;
        let pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| LoadError::WrongSignature(format!("{e:#}")))?;
        let module = Arc::new(Module {
            pre,
            func,
            engine: self.engine.clone(),
            limits: self.limits,
            len: bytes.len(),
            digest: digest(bytes),
        });
        // One instance, dropped at once: the export's type is checked and
        // the start function run before anything depends on the module.
        module.instantiate()?;
        Ok(module)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
    }
}

impl Module {
    /// A new instance from the pool, with its own store, limits and output
    /// buffer. Off the hot path, except when a worker recycles an instance
    /// after a fault.
    pub fn instantiate(self: &Arc<Self>) -> Result<Instance, LoadError> {
        Instance::new(self.clone())
    }

    /// The limits its instances run under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub(crate) fn parts(
        &self,
    ) -> (
        &InstancePre<HostState>,
        &ComponentExportIndex,
        &Engine,
        &Limits,
    ) {
        (&self.pre, &self.func, &self.engine, &self.limits)
    }
}
