//! The engine: starts pinned workers, owns the control side of every shared
//! structure, applies live changes, and reads statistics.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU8;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use crate::config::{Config, ConfigError, ModelCfg, ModelKind};
use crate::handler::{EchoHandler, Handler, NullHandler};
use crate::rcu::Rcu;
use crate::schema::{SchemaCfg, SchemaTable};
use crate::stats::{HistExchange, WorkerCounters};
use crate::tables::{HostView, LiveConfig, Tables};
use crate::worker::{Returned, Shared, WorkerMsg, state};

mod apply;
mod frontdoor;
mod lifecycle;
mod status;
mod tcp;
mod transforms;

pub use frontdoor::{FrontdoorCtx, FrontdoorHandle, FrontdoorStart};
pub use status::{FrontdoorStatus, ModelStatus, Status, WorkerStatus};
pub use transforms::{TransformPut, TransformStatus};

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
    /// A wait passed its deadline (a worker did not start, or did not pick
    /// up a change, in time).
    Timeout(String),
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
            EngineError::Timeout(m) => write!(f, "timeout: {m}"),
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
    /// Starts the front door when `[frontdoor]` is on
    /// (`sluice_frontdoor::start`; the engine cannot depend on it).
    pub frontdoor: Option<FrontdoorStart>,
    /// Publishes without poking sleeping workers (they pick a change up at
    /// the end of their sleep): the baseline of perf/scaling's apply curve.
    pub no_wake: bool,
}

struct WorkerHandle {
    core: usize,
    thread: Option<JoinHandle<()>>,
    ctrl: Sender<WorkerMsg>,
    returned: Receiver<Returned>,
    counters: Arc<WorkerCounters>,
    hist: Arc<HistExchange>,
    spans: Arc<crate::trace::SpanRing>,
    load: Arc<crate::load::LoadRing>,
    /// Written after a publish or a control message so that a sleeping
    /// adaptive worker picks the change up at once (see `Engine::poke`).
    wake: Option<Arc<crate::transport::ingress::Wake>>,
}

/// Control-side state, behind one mutex: control calls are serialized.
pub(crate) struct Control {
    pub(crate) live: LiveConfig,
    schemas: Vec<SchemaCfg>,
    schema_ttl_ms: u32,
    /// (name, version) -> handler slot.
    slots: HashMap<(String, String), usize>,
    /// Schema transforms.
    transforms: transforms::TransformControl,
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
    pub(crate) control: Arc<Mutex<Control>>,
    listen: Option<SocketAddr>,
    hugepages: bool,
    running: bool,
    /// Each worker's TCP side (io_uring with `tcp_listen`): connections,
    /// totals, close requests. Kept after stop for the final counts.
    tcp: Vec<Arc<crate::transport::tcp::TcpShared>>,
    factory: HandlerFactory,
    /// Process-wide DPDK state; dropped (port closed, EAL cleaned) at stop.
    #[cfg(feature = "dpdk")]
    dpdk: Option<crate::transport::dpdk::DpdkRuntime>,
    /// Each worker's side of the front-door rings, taken as it starts.
    ingress_workers: Vec<Option<crate::transport::ingress::IngressWorker>>,
    /// The front door's side, until it starts.
    ingress_ports: Vec<crate::transport::ingress::IngressPort>,
    /// The running front door.
    frontdoor: Option<Box<dyn FrontdoorHandle>>,
    /// Span records of the front door's backend hops (kind BACKEND).
    frontdoor_spans: Arc<crate::trace::SpanRing>,
}

/// The default handler factory: null, echo and (with feature `onnx`) ONNX Runtime.
pub fn default_factory(m: &ModelCfg, cfg: &Config) -> Result<Box<dyn Handler>, String> {
    match m.kind {
        ModelKind::Null => Ok(Box::new(NullHandler)),
        ModelKind::Echo => Ok(Box::new(EchoHandler)),
        ModelKind::Backend => Ok(Box::new(crate::handler::BackendOnlyHandler)),
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
            &HostView::of(&cfg),
            &slot_list,
            SchemaTable::default(),
        )?;
        Ok(Engine {
            shared: Arc::new(Shared {
                tables: Rcu::new(tables),
                state: AtomicU8::new(state::STOPPED),
            }),
            workers: Vec::new(),
            control: Arc::new(Mutex::new(Control {
                live,
                schemas: Vec::new(),
                schema_ttl_ms: cfg.engine.negotiation_ttl_ms,
                slots,
                transforms: Default::default(),
            })),
            listen: None,
            hugepages: false,
            running: false,
            tcp: Vec::new(),
            #[cfg(feature = "dpdk")]
            dpdk: None,
            ingress_workers: Vec::new(),
            ingress_ports: Vec::new(),
            frontdoor: None,
            frontdoor_spans: Arc::new(crate::trace::SpanRing::new(cfg.tracing.ring_spans)),
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
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop(Duration::ZERO);
    }
}
