//! The engine: starts pinned workers, owns the control side of every shared
//! structure, applies live changes, and reads statistics.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use serde::Serialize;
use sluice_wire::ErrorCode;

use crate::config::{Config, ConfigError, ModelCfg, ModelKind, TransportKind};
use crate::handler::{EchoHandler, Handler, NullHandler};
use crate::rcu::Rcu;
use crate::schema::{SchemaCfg, SchemaTable};
use crate::stats::{
    HistExchange, Percentiles, ShardStats, StatsSnapshot, WorkerCounters, WorkerStats,
};
use crate::tables::{LiveConfig, Tables};
use crate::transport::Transport;
use crate::worker::{Returned, Shared, Worker, WorkerMsg, WorkerParams, state};

/// Why the engine refused something.
#[derive(Debug)]
pub enum EngineError {
    /// Bad configuration, located.
    Config(ConfigError),
    /// A worker could not start (transport, pinning, memory).
    Start(String),
    /// A model could not be loaded.
    Model(String),
    /// The engine is not running.
    NotRunning,
    /// The engine is already running.
    AlreadyRunning,
    /// A requested transport is not built into this binary.
    Unsupported(String),
    /// A named model, version, alias or peer does not exist.
    NotFound(String),
    /// It exists already.
    AlreadyExists(String),
    /// A call argument is malformed.
    InvalidArgument(String),
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineError::Config(e) => write!(f, "config: {e}"),
            EngineError::Start(m) => write!(f, "start: {m}"),
            EngineError::Model(m) => write!(f, "model: {m}"),
            EngineError::NotRunning => f.write_str("engine is not running"),
            EngineError::AlreadyRunning => f.write_str("engine is already running"),
            EngineError::Unsupported(m) => write!(f, "unsupported: {m}"),
            EngineError::NotFound(m) => write!(f, "not found: {m}"),
            EngineError::AlreadyExists(m) => write!(f, "already exists: {m}"),
            EngineError::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
        }
    }
}

impl std::error::Error for EngineError {}

impl From<ConfigError> for EngineError {
    fn from(e: ConfigError) -> Self {
        EngineError::Config(e)
    }
}

/// Options that are not config: hooks for embedding and tests.
#[derive(Debug, Clone, Copy, Default)]
pub struct EngineOptions {
    /// Runs first on each worker thread, after pinning (tests mark threads).
    pub worker_init: Option<fn(usize)>,
    /// Skip pinning (tests on busy CI hosts).
    pub no_pin: bool,
}

/// What `status` reports.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Running or not.
    pub running: bool,
    /// Transport.
    pub transport: String,
    /// Data-plane address.
    pub listen: Option<SocketAddr>,
    /// Workers and their cores.
    pub workers: Vec<WorkerStatus>,
    /// Whether the buffer pools are in hugepages (false = fell back).
    pub hugepages: bool,
    /// A note when the pools fell back to normal pages.
    pub hugepages_note: Option<String>,
    /// Snapshot epoch published.
    pub epoch: u64,
    /// Loaded models.
    pub models: Vec<ModelStatus>,
    /// Schemas held by the data plane.
    pub schemas: usize,
    /// Live schemas the data plane does not fully enforce: "id 7 v2: why".
    /// Requests naming a schema it cannot compile at all are refused.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub schemas_unenforced: Vec<String>,
}

/// One worker in `status`.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerStatus {
    /// Index.
    pub index: usize,
    /// Core.
    pub core: usize,
    /// Epoch it runs on.
    pub epoch: u64,
}

/// One model in `status`.
#[derive(Debug, Clone, Serialize)]
pub struct ModelStatus {
    /// Name.
    pub name: String,
    /// Version.
    pub version: String,
    /// Aliases.
    pub aliases: Vec<String>,
    /// Backend.
    pub kind: ModelKind,
    /// Adapters.
    pub adapters: Vec<String>,
}

struct WorkerHandle {
    core: usize,
    thread: Option<JoinHandle<()>>,
    ctrl: Sender<WorkerMsg>,
    returned: Receiver<Returned>,
    counters: Arc<WorkerCounters>,
    hist: Arc<HistExchange>,
}

/// Control-side state, behind one mutex: control calls are serialized.
struct Control {
    live: LiveConfig,
    schemas: Vec<SchemaCfg>,
    schema_ttl_ms: u32,
    /// (name, version) -> handler slot.
    slots: HashMap<(String, String), usize>,
}

/// Makes handlers for a model, one per worker. Kept as a function so the
/// ONNX backend can be compiled out.
pub type HandlerFactory = fn(&ModelCfg, &Config) -> Result<Box<dyn Handler>, String>;

/// The data-plane engine.
pub struct Engine {
    cfg: Config,
    opts: EngineOptions,
    shared: Arc<Shared>,
    workers: Vec<WorkerHandle>,
    control: Mutex<Control>,
    listen: Option<SocketAddr>,
    hugepages: bool,
    running: bool,
    factory: HandlerFactory,
    /// Process-wide DPDK state; dropped (port closed, EAL cleaned) at stop.
    #[cfg(feature = "dpdk")]
    dpdk: Option<crate::transport::dpdk::DpdkRuntime>,
}

/// The default handler factory: null, echo and (with feature `onnx`) ONNX Runtime.
pub fn default_factory(m: &ModelCfg, cfg: &Config) -> Result<Box<dyn Handler>, String> {
    match m.kind {
        ModelKind::Null => Ok(Box::new(NullHandler)),
        ModelKind::Echo => Ok(Box::new(EchoHandler)),
        ModelKind::Onnx => crate::onnx::make(m, cfg),
    }
}

const SLOT_WAIT: Duration = Duration::from_secs(5);

impl Engine {
    /// Builds an engine from a validated config. Nothing runs until `start`.
    pub fn new(cfg: Config, opts: EngineOptions) -> Result<Engine, EngineError> {
        Engine::with_factory(cfg, opts, default_factory)
    }

    /// Builds an engine with a custom handler factory.
    pub fn with_factory(
        cfg: Config,
        opts: EngineOptions,
        factory: HandlerFactory,
    ) -> Result<Engine, EngineError> {
        cfg.validate()?;
        let live = LiveConfig::of(&cfg);
        let mut slots = HashMap::new();
        let slot_list: Vec<usize> = (0..live.models.len()).collect();
        for (i, m) in live.models.iter().enumerate() {
            slots.insert((m.name.clone(), m.version.clone()), i);
        }
        let tables = Tables::build(
            &live,
            &cfg.host.labels,
            cfg.engine.workers.len(),
            &slot_list,
            SchemaTable::default(),
        )?;
        Ok(Engine {
            shared: Arc::new(Shared {
                tables: Rcu::new(tables),
                state: AtomicU8::new(state::STOPPED),
            }),
            workers: Vec::new(),
            control: Mutex::new(Control {
                live,
                schemas: Vec::new(),
                schema_ttl_ms: 60_000,
                slots,
            }),
            listen: None,
            hugepages: false,
            running: false,
            #[cfg(feature = "dpdk")]
            dpdk: None,
            factory,
            opts,
            cfg,
        })
    }

    /// Loads a config file and builds the engine.
    pub fn from_file(path: &std::path::Path, opts: EngineOptions) -> Result<Engine, EngineError> {
        Engine::new(Config::load(path)?, opts)
    }

    /// The config the engine started from.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Starts the workers: pins each, builds its transport and pools, and
    /// returns once all are serving.
    pub fn start(&mut self) -> Result<(), EngineError> {
        if !self.workers.is_empty() {
            // A stopped engine keeps its workers' counters for reading;
            // starting again takes a new engine.
            return Err(EngineError::AlreadyRunning);
        }
        match self.cfg.engine.transport {
            TransportKind::IoUring => {}
            #[cfg(feature = "dpdk")]
            TransportKind::Dpdk => {}
            #[cfg(not(feature = "dpdk"))]
            TransportKind::Dpdk => {
                return Err(EngineError::Unsupported(
                    "transport \"dpdk\" is not built into this binary (cargo feature `dpdk`)"
                        .into(),
                ));
            }
            #[cfg(feature = "rdma")]
            TransportKind::Rdma => {}
            #[cfg(not(feature = "rdma"))]
            TransportKind::Rdma => {
                return Err(EngineError::Unsupported(
                    "transport \"rdma\" is not built into this binary (cargo feature `rdma`)"
                        .into(),
                ));
            }
        }
        self.shared.state.store(state::RUNNING, Ordering::Release);
        let mut listen = self.cfg.listen_addr()?;
        let models = self.lock_control()?.live.models.clone();
        #[cfg(feature = "dpdk")]
        if self.cfg.engine.transport == TransportKind::Dpdk {
            use crate::transport::dpdk::{DpdkError, DpdkRuntime};
            match DpdkRuntime::start(&self.cfg) {
                Ok(rt) => self.dpdk = Some(rt),
                Err(e) => {
                    self.shared.state.store(state::STOPPED, Ordering::Release);
                    return Err(match e {
                        DpdkError::Config(c) => EngineError::Config(c),
                        e => EngineError::Start(e.to_string()),
                    });
                }
            }
        }
        for (index, &core) in self.cfg.engine.workers.clone().iter().enumerate() {
            let mut handlers: Vec<Option<Box<dyn Handler>>> = Vec::with_capacity(models.len());
            for m in &models {
                let h = (self.factory)(m, &self.cfg)
                    .map_err(|e| EngineError::Model(format!("{} {}: {e}", m.name, m.version)));
                match h {
                    Ok(h) => handlers.push(Some(h)),
                    Err(e) => {
                        self.abort_start();
                        return Err(e);
                    }
                }
            }
            #[cfg(feature = "rdma")]
            if self.cfg.engine.transport == TransportKind::Rdma {
                // Transports are built on the worker thread; the first one
                // starts the process's rdma_cm listener, the others join it.
                let (cfg, workers) = (self.cfg.clone(), self.cfg.engine.workers.len());
                let made = self.spawn_worker(index, core, handlers, move || {
                    crate::transport::rdma::RdmaTransport::new(index, workers, &cfg)
                        .map_err(|e| e.to_string())
                });
                match made {
                    Ok((addr, huge)) => {
                        self.listen = Some(addr);
                        self.hugepages = huge;
                    }
                    Err(e) => {
                        self.abort_start();
                        return Err(e);
                    }
                }
                continue;
            }
            #[cfg(feature = "dpdk")]
            let dpdk_queue = self.dpdk.as_ref().and_then(|rt| rt.queue(index));
            #[cfg(feature = "dpdk")]
            let made = if let Some(q) = dpdk_queue {
                self.spawn_worker(index, core, handlers, move || {
                    crate::transport::dpdk::DpdkTransport::new(q).map_err(|e| e.to_string())
                })
            } else {
                self.spawn_uring(index, core, handlers, listen)
            };
            #[cfg(not(feature = "dpdk"))]
            let made = self.spawn_uring(index, core, handlers, listen);
            match made {
                Ok((addr, huge)) => {
                    // Port 0 binds an ephemeral port; the other workers join it.
                    listen = addr;
                    self.listen = Some(addr);
                    self.hugepages = huge;
                }
                Err(e) => {
                    self.abort_start();
                    return Err(e);
                }
            }
        }
        self.running = true;
        if !self.hugepages {
            log::warn!(
                "buffer pools use normal pages: no 2 MiB hugepages were free (HugePages_Free={:?})",
                crate::sys::hugepages_free()
            );
        }
        Ok(())
    }

    fn spawn_uring(
        &mut self,
        index: usize,
        core: usize,
        handlers: Vec<Option<Box<dyn Handler>>>,
        listen: SocketAddr,
    ) -> Result<(SocketAddr, bool), EngineError> {
        let uring_cfg = self.cfg.io_uring.clone();
        let huge_mode = self.cfg.engine.hugepages;
        self.spawn_worker(index, core, handlers, move || {
            crate::transport::uring::UringTransport::new(listen, &uring_cfg, huge_mode)
                .map_err(|e| e.to_string())
        })
    }

    fn abort_start(&mut self) {
        self.shared.state.store(state::STOPPED, Ordering::Release);
        for w in &mut self.workers {
            if let Some(t) = w.thread.take() {
                let _ = t.join();
            }
        }
        self.workers.clear();
        #[cfg(feature = "dpdk")]
        {
            self.dpdk = None;
        }
    }

    /// Spawns one pinned worker whose transport `make` builds on the worker
    /// thread itself (rings and queues belong to the thread that uses them).
    fn spawn_worker<T, F>(
        &mut self,
        index: usize,
        core: usize,
        handlers: Vec<Option<Box<dyn Handler>>>,
        make: F,
    ) -> Result<(SocketAddr, bool), EngineError>
    where
        T: Transport + 'static,
        F: FnOnce() -> Result<T, String> + Send + 'static,
    {
        let (ctrl_tx, ctrl_rx) = crossbeam_channel::bounded(256);
        let (ret_tx, ret_rx) = crossbeam_channel::bounded(256);
        let counters = Arc::new(WorkerCounters::default());
        let hist = Arc::new(HistExchange::new());
        let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
        let params = WorkerParams {
            index,
            rx_burst_max: self.cfg.engine.rx_burst_max as usize,
            poll: self.cfg.engine.poll,
            spin: Duration::from_micros(self.cfg.engine.spin_us as u64),
            forward_timeout: Duration::from_millis(self.cfg.engine.forward_timeout_ms as u64),
        };
        let shared = Arc::clone(&self.shared);
        let (c2, h2) = (Arc::clone(&counters), Arc::clone(&hist));
        let opts = self.opts;
        let thread = std::thread::Builder::new()
            .name(format!("sluice-w{index}"))
            .spawn(move || {
                if !opts.no_pin {
                    if let Err(e) = crate::sys::pin_to_core(core) {
                        let _ = ready_tx.send(Err(format!(
                            "worker {index}: cannot pin to core {core}: {e}"
                        )));
                        return;
                    }
                }
                if let Some(init) = opts.worker_init {
                    init(index);
                }
                let transport = match make() {
                    Ok(t) => t,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("worker {index}: {e}")));
                        return;
                    }
                };
                let c = transport.counters();
                let _ = ready_tx.send(Ok((transport.local_addr(), c.hugepages)));
                let mut w =
                    Worker::new(params, transport, shared, handlers, ctrl_rx, ret_tx, c2, h2);
                w.run();
            })
            .map_err(|e| EngineError::Start(format!("spawn worker {index}: {e}")))?;
        let res = ready_rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| EngineError::Start(format!("worker {index} did not start")))?;
        self.workers.push(WorkerHandle {
            core,
            thread: Some(thread),
            ctrl: ctrl_tx,
            returned: ret_rx,
            counters,
            hist,
        });
        res.map_err(EngineError::Start)
    }

    /// Number of workers started (running or stopped).
    pub fn status_workers(&self) -> usize {
        self.workers.len()
    }

    /// Whether workers run.
    pub fn is_running(&self) -> bool {
        self.running
    }

    /// The data-plane address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listen
    }

    /// Stops: new requests are answered `shutting_down` for `drain`, then the
    /// workers finish their burst and exit. Every frame received is answered.
    pub fn stop(&mut self, drain: Duration) {
        if !self.running {
            return;
        }
        self.running = false;
        self.shared.state.store(state::DRAINING, Ordering::Release);
        std::thread::sleep(drain);
        self.shared.state.store(state::STOPPED, Ordering::Release);
        for w in &mut self.workers {
            if let Some(t) = w.thread.take() {
                let _ = t.join();
            }
            while w.returned.try_recv().is_ok() {}
        }
        self.workers.clear();
        // Workers are gone: close the port, free the pools, clean EAL up.
        #[cfg(feature = "dpdk")]
        {
            self.dpdk = None;
        }
    }

    fn min_epoch(&self) -> u64 {
        self.workers
            .iter()
            .map(|w| w.counters.epoch.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Waits until every worker runs on `epoch` or later, then frees
    /// snapshots nobody holds. Workers that are idle in adaptive mode wake
    /// within their sleep bound (10 ms).
    fn wait_epoch(&self, epoch: u64) -> Result<(), EngineError> {
        let deadline = Instant::now() + SLOT_WAIT;
        let t0 = Instant::now();
        while self.is_running() && self.min_epoch() < epoch {
            if Instant::now() > deadline {
                return Err(EngineError::Start(
                    "a worker did not pick up the change in time".into(),
                ));
            }
            // Busy workers see the epoch within a burst: yield briefly first;
            // sleeping adaptive workers need up to their sleep bound.
            if t0.elapsed() < Duration::from_micros(500) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        self.shared.tables.reclaim(self.min_epoch());
        self.drain_returned();
        Ok(())
    }

    fn drain_returned(&self) {
        for w in &self.workers {
            while let Ok(h) = w.returned.try_recv() {
                drop(h);
            }
        }
    }

    fn wait_applied(&self, targets: &[u64]) -> Result<(), EngineError> {
        let deadline = Instant::now() + SLOT_WAIT;
        for (w, &t) in self.workers.iter().zip(targets) {
            while w.counters.control_applied.load(Ordering::Acquire) < t {
                if Instant::now() > deadline {
                    return Err(EngineError::Start(
                        "a worker did not apply a control message in time".into(),
                    ));
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        Ok(())
    }

    /// Replaces the live tables. Validated whole first: a bad set changes
    /// nothing. New model versions are loaded off the hot path and installed
    /// on every worker before the tables that name them are published;
    /// versions no longer named are removed after every worker has moved on.
    pub fn apply(&self, live: LiveConfig) -> Result<u64, EngineError> {
        let mut ctl = self.lock_control()?;
        self.apply_locked(&mut ctl, live, None)
    }

    fn lock_control(&self) -> Result<std::sync::MutexGuard<'_, Control>, EngineError> {
        // A panic while holding the lock left no half-applied tables (they
        // are published in one swap), so the state is still usable.
        Ok(self.control.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Replaces any of the sections `shards`, `routes`, `models`, `tenants`,
    /// `peers` and `schemas` given in a JSON object, atomically: the merged
    /// set is validated whole and applied in one publication.
    pub fn apply_json(&self, doc: &[u8]) -> Result<u64, EngineError> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Sections {
            shards: Option<Vec<crate::config::ShardCfg>>,
            routes: Option<Vec<crate::config::RouteCfg>>,
            models: Option<Vec<ModelCfg>>,
            tenants: Option<Vec<crate::config::TenantCfg>>,
            peers: Option<Vec<crate::config::PeerCfg>>,
            schemas: Option<Vec<SchemaCfg>>,
        }
        let s: Sections = serde_json::from_slice(doc)
            .map_err(|e| EngineError::InvalidArgument(format!("sections: {e}")))?;
        let mut ctl = self.lock_control()?;
        let mut live = ctl.live.clone();
        if let Some(v) = s.shards {
            live.shards = v;
        }
        if let Some(v) = s.routes {
            live.routes = v;
        }
        if let Some(v) = s.models {
            live.models = v;
        }
        if let Some(v) = s.tenants {
            live.tenants = v;
        }
        if let Some(v) = s.peers {
            live.peers = v;
        }
        self.apply_locked(&mut ctl, live, s.schemas)
    }

    fn apply_locked(
        &self,
        ctl: &mut Control,
        live: LiveConfig,
        new_schemas: Option<Vec<SchemaCfg>>,
    ) -> Result<u64, EngineError> {
        crate::config::validate_tables(
            &live.shards,
            &live.routes,
            &live.models,
            &live.tenants,
            &live.peers,
            self.cfg.engine.workers.len(),
        )?;
        let schema_list = new_schemas.as_ref().unwrap_or(&ctl.schemas);
        let (_, current) = self.shared.tables.load();
        let schemas = SchemaTable::build_reusing(
            schema_list,
            ctl.schema_ttl_ms,
            &current.schemas,
            self.cfg.engine.json_schema_format,
        )
        .map_err(|m| ConfigError::at("schemas", m))?;
        // Assign slots: keep existing versions, new ones take free slots.
        let mut slots = HashMap::new();
        let mut fresh = Vec::new();
        // A slot is free when no loaded version holds it (versions being
        // removed keep theirs until every worker has moved on).
        let mut free = (0..crate::config::limits::MODEL_SLOT_COUNT_MAX)
            .filter(|s| !ctl.slots.values().any(|v| v == s));
        for m in &live.models {
            let key = (m.name.clone(), m.version.clone());
            let slot = match ctl.slots.get(&key) {
                Some(&s) => s,
                None => {
                    let s = free
                        .next()
                        .ok_or_else(|| EngineError::Model("no free model slot".into()))?;
                    fresh.push((s, m.clone()));
                    s
                }
            };
            slots.insert(key, slot);
        }
        let slot_list: Vec<usize> = live
            .models
            .iter()
            .map(|m| slots[&(m.name.clone(), m.version.clone())])
            .collect();
        // Validated above, before any model was loaded.
        let tables = Tables::compile(
            &live,
            &self.cfg.host.labels,
            self.cfg.engine.workers.len(),
            &slot_list,
            schemas,
        )?;

        // 1. Load new versions for every worker (off the hot path) and install.
        if self.is_running() && !fresh.is_empty() {
            let mut per_worker: Vec<Vec<(usize, Box<dyn Handler>)>> = Vec::new();
            for _ in &self.workers {
                let mut v = Vec::new();
                for (slot, m) in &fresh {
                    let h = (self.factory)(m, &self.cfg).map_err(|e| {
                        EngineError::Model(format!("{} {}: {e}", m.name, m.version))
                    })?;
                    v.push((*slot, h));
                }
                per_worker.push(v);
            }
            let targets: Vec<u64> = self
                .workers
                .iter()
                .map(|w| w.counters.control_applied.load(Ordering::Acquire) + fresh.len() as u64)
                .collect();
            for (w, hs) in self.workers.iter().zip(per_worker) {
                for (slot, handler) in hs {
                    w.ctrl
                        .send(WorkerMsg::Install { slot, handler })
                        .map_err(|_| EngineError::NotRunning)?;
                }
            }
            self.wait_applied(&targets)?;
        }
        // 2. Publish the tables and wait for every worker to run on them.
        let epoch = self.shared.tables.publish(tables);
        if self.is_running() {
            self.wait_epoch(epoch)?;
        }
        // 3. Remove versions nobody names any more.
        let gone: Vec<usize> = ctl
            .slots
            .iter()
            .filter(|(k, _)| !slots.contains_key(*k))
            .map(|(_, &s)| s)
            .collect();
        if self.is_running() && !gone.is_empty() {
            for w in &self.workers {
                for &slot in &gone {
                    let _ = w.ctrl.send(WorkerMsg::Remove { slot });
                }
            }
        }
        ctl.slots = slots;
        ctl.live = live;
        if let Some(v) = new_schemas {
            ctl.schemas = v;
        }
        Ok(epoch)
    }

    /// Replaces the schemas the data plane validates and negotiates with.
    pub fn set_schemas(&self, schemas: Vec<SchemaCfg>, ttl_ms: u32) -> Result<u64, EngineError> {
        let mut ctl = self.lock_control()?;
        ctl.schema_ttl_ms = ttl_ms;
        let live = ctl.live.clone();
        self.apply_locked(&mut ctl, live, Some(schemas))
    }

    /// The live tables now in force.
    pub fn live(&self) -> LiveConfig {
        self.lock_control()
            .map(|c| c.live.clone())
            .unwrap_or_default()
    }

    /// Points an alias of a model at another loaded version.
    pub fn set_alias(&self, model: &str, alias: &str, version: &str) -> Result<u64, EngineError> {
        let mut ctl = self.lock_control()?;
        let mut live = ctl.live.clone();
        if !live
            .models
            .iter()
            .any(|m| m.name == model && m.version == version)
        {
            return Err(EngineError::NotFound(format!(
                "model {model} version {version} is not loaded"
            )));
        }
        for m in &mut live.models {
            if m.name == model {
                m.aliases.retain(|a| a != alias);
                if m.version == version {
                    m.aliases.push(alias.to_string());
                }
            }
        }
        self.apply_locked(&mut ctl, live, None)
    }

    /// Loads one more model version (off the hot path) and publishes it.
    pub fn load_model(&self, m: ModelCfg) -> Result<u64, EngineError> {
        let mut ctl = self.lock_control()?;
        let mut live = ctl.live.clone();
        if live
            .models
            .iter()
            .any(|o| o.name == m.name && o.version == m.version)
        {
            return Err(EngineError::AlreadyExists(format!(
                "model {} version {} is loaded",
                m.name, m.version
            )));
        }
        live.models.push(m);
        self.apply_locked(&mut ctl, live, None)
    }

    /// Adds a peer.
    pub fn add_peer(&self, p: crate::config::PeerCfg) -> Result<u64, EngineError> {
        let mut ctl = self.lock_control()?;
        let mut live = ctl.live.clone();
        if live.peers.iter().any(|o| o.name == p.name) {
            return Err(EngineError::AlreadyExists(format!("peer {}", p.name)));
        }
        live.peers.push(p);
        self.apply_locked(&mut ctl, live, None)
    }

    /// Removes a peer.
    pub fn remove_peer(&self, name: &str) -> Result<u64, EngineError> {
        let mut ctl = self.lock_control()?;
        let mut live = ctl.live.clone();
        let before = live.peers.len();
        live.peers.retain(|p| p.name != name);
        if live.peers.len() == before {
            return Err(EngineError::NotFound(format!("peer {name}")));
        }
        self.apply_locked(&mut ctl, live, None)
    }

    /// A statistics snapshot. Reads per-worker atomics and the latest
    /// published histograms; never touches a worker's hot path.
    pub fn stats(&self) -> StatsSnapshot {
        let (_, tables) = self.shared.tables.load();
        let nshards = tables.shards.len();
        // Merge only what exists: histograms cost a few KiB each to set up.
        let mut merged_total = crate::stats::new_hist();
        let mut merged_queue: Vec<_> = (0..nshards).map(|_| crate::stats::new_hist()).collect();
        let mut merged_service: Vec<_> = (0..nshards).map(|_| crate::stats::new_hist()).collect();
        let mut snap = StatsSnapshot::default();
        for (i, w) in self.workers.iter().enumerate() {
            let c = &w.counters;
            let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            let errors = ErrorCode::ALL
                .iter()
                .map(|&code| (code.as_str().to_string(), ld(&c.errors[code as usize])))
                .filter(|(_, v)| *v > 0)
                .collect();
            let mut ws = WorkerStats {
                index: i,
                core: w.core,
                epoch: ld(&c.epoch),
                ok: ld(&c.ok),
                errors,
                pings: ld(&c.pings),
                negotiations: ld(&c.negotiations),
                not_sluice: ld(&c.not_sluice),
                tx_no_buffers: ld(&c.tx_no_buffers),
                payload_bytes_copied: ld(&c.payload_bytes_copied),
                forwarded: ld(&c.forwarded),
                relayed: ld(&c.relayed),
                forward_timeouts: ld(&c.forward_timeouts),
                forward_stale: ld(&c.forward_stale),
                rx_frames: ld(&c.rx_frames),
                tx_frames: ld(&c.tx_frames),
                rx_no_buffers: ld(&c.rx_no_buffers),
                tx_errors: ld(&c.tx_errors),
                rx_in_use: ld(&c.rx_in_use),
                tx_in_use: ld(&c.tx_in_use),
                buffer_reuses: ld(&c.buffer_reuses),
                sleeps: ld(&c.sleeps),
                ..WorkerStats::default()
            };
            w.hist.read(|h| {
                ws.latency = Percentiles::of(&h.total);
                let _ = merged_total.add(&h.total);
                for s in 0..nshards {
                    let _ = merged_queue[s].add(&h.queue[s]);
                    let _ = merged_service[s].add(&h.service[s]);
                    ws.shards.push(ShardStats {
                        name: tables.shards[s].name.clone(),
                        local: tables.shards[s].local,
                        requests: ld(&c.shard_requests[s]),
                        errors: ld(&c.shard_errors[s]),
                        queue: Percentiles::of(&h.queue[s]),
                        service: Percentiles::of(&h.service[s]),
                    });
                }
            });
            snap.workers.push(ws);
        }
        snap.latency = Percentiles::of(&merged_total);
        for s in 0..nshards {
            snap.shards.push(ShardStats {
                name: tables.shards[s].name.clone(),
                local: tables.shards[s].local,
                requests: self
                    .workers
                    .iter()
                    .map(|w| w.counters.shard_requests[s].load(Ordering::Relaxed))
                    .sum(),
                errors: self
                    .workers
                    .iter()
                    .map(|w| w.counters.shard_errors[s].load(Ordering::Relaxed))
                    .sum(),
                queue: Percentiles::of(&merged_queue[s]),
                service: Percentiles::of(&merged_service[s]),
            });
        }
        snap
    }

    /// Counters summed over workers and the merged latency, without the
    /// per-shard breakdown: the cheapest read.
    pub fn totals(&self) -> (u64, crate::stats::Totals, Percentiles) {
        let mut t = crate::stats::Totals::default();
        let mut merged = crate::stats::new_hist();
        for w in &self.workers {
            let c = &w.counters;
            let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            t.ok += ld(&c.ok);
            t.errors += c.errors.iter().map(ld).sum::<u64>();
            t.pings += ld(&c.pings);
            t.not_sluice += ld(&c.not_sluice);
            t.rx_frames += ld(&c.rx_frames);
            t.tx_frames += ld(&c.tx_frames);
            t.rx_no_buffers += ld(&c.rx_no_buffers);
            t.tx_no_buffers += ld(&c.tx_no_buffers);
            t.payload_bytes_copied += ld(&c.payload_bytes_copied);
            t.buffer_reuses += ld(&c.buffer_reuses);
            w.hist.read(|h| {
                let _ = merged.add(&h.total);
            });
        }
        (self.shared.tables.epoch(), t, Percentiles::of(&merged))
    }

    /// Status for the admin API.
    pub fn status(&self) -> Status {
        let ctl = self.lock_control().ok();
        let models = ctl
            .as_ref()
            .map(|c| {
                c.live
                    .models
                    .iter()
                    .map(|m| ModelStatus {
                        name: m.name.clone(),
                        version: m.version.clone(),
                        aliases: m.aliases.clone(),
                        kind: m.kind,
                        adapters: m.adapters.iter().map(|a| a.id.clone()).collect(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let schemas = ctl.as_ref().map_or(0, |c| c.schemas.len());
        let (_, tables) = self.shared.tables.load();
        let schemas_unenforced = tables
            .schemas
            .unenforced()
            .into_iter()
            .map(|(id, v, why)| format!("id {id} v{v}: {}", why.join("; ")))
            .collect();
        Status {
            running: self.is_running(),
            transport: match self.cfg.engine.transport {
                TransportKind::IoUring => "io_uring",
                TransportKind::Dpdk => "dpdk",
                TransportKind::Rdma => "rdma",
            }
            .to_string(),
            listen: self.listen,
            workers: self
                .workers
                .iter()
                .enumerate()
                .map(|(i, w)| WorkerStatus {
                    index: i,
                    core: w.core,
                    epoch: w.counters.epoch.load(Ordering::Relaxed),
                })
                .collect(),
            hugepages: self.hugepages,
            hugepages_note: (!self.hugepages && self.is_running())
                .then(|| "no 2 MiB hugepages were free: buffer pools use normal pages".to_string()),
            epoch: self.shared.tables.epoch(),
            models,
            schemas,
            schemas_unenforced,
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop(Duration::ZERO);
    }
}
