//! The TOML configuration. `cfg/sluice.toml` documents every key.
//!
//! Unknown keys are errors; every error names the file, the line and the key.
//! The same structures deserialize from JSON, which is how the control plane
//! replaces one section at run time.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::auth::config::{AuthCfg, AuthMode, auth_allows_tenants};

pub mod backends;
pub mod limits;
mod streams;
mod trace;
mod uring;
pub use backends::{BackendCfg, BackendProtocol, OpenaiCfg};
pub use streams::{GenerateCfg, ModelStreamCfg, StatePairCfg, StreamsCfg};
pub use trace::TracingCfg;
pub use uring::{TcpSlotCfg, UringCfg, ZcMode};

/// The whole configuration file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Workers, transport choice and poll mode.
    #[serde(default)]
    pub engine: EngineCfg,
    /// io_uring UDP transport.
    #[serde(default)]
    pub io_uring: UringCfg,
    /// DPDK transport (feature `dpdk`); kept opaque here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dpdk: Option<toml::Table>,
    /// RDMA transport (feature `rdma`); kept opaque here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma: Option<toml::Table>,
    /// This host.
    #[serde(default)]
    pub host: HostCfg,
    /// ONNX Runtime library.
    #[serde(default)]
    pub onnxruntime: OrtCfg,
    /// Queue shards.
    #[serde(default)]
    pub shards: Vec<ShardCfg>,
    /// Routes; first match wins.
    #[serde(default)]
    pub routes: Vec<RouteCfg>,
    /// Models.
    #[serde(default)]
    pub models: Vec<ModelCfg>,
    /// Authentication of frames (docs/wire.md, "Authentication").
    #[serde(default)]
    pub auth: AuthCfg,
    /// Tenants: who may send, with which key, and what they may use.
    #[serde(default)]
    pub tenants: Vec<TenantCfg>,
    /// Peer appliances.
    #[serde(default)]
    pub peers: Vec<PeerCfg>,
    /// KServe v2 / Triton-compatible HTTP and gRPC front door (off unless
    /// a listen address is set).
    #[serde(default)]
    pub frontdoor: FrontdoorCfg,
    /// Pools of model servers shards dispatch to (docs/backends.md).
    #[serde(default)]
    pub backends: Vec<BackendCfg>,
    /// The OpenAI API on the front door's HTTP listener.
    #[serde(default)]
    pub openai: OpenaiCfg,
    /// Control plane (read by the Go daemon; opaque to the engine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<toml::Table>,
    /// Fleet mode (read by the Go daemon; opaque to the engine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<toml::Table>,
    /// JetStream ingress (read by the Go daemon; opaque to the engine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<toml::Table>,
    /// Limits of schema transforms.
    #[serde(default)]
    pub transforms: TransformsCfg,
    /// Request tracing (docs/observability.md).
    #[serde(default)]
    pub tracing: TracingCfg,
    /// Stream limits (`[streams]`, docs/wire.md "Limits and errors of
    /// streams").
    #[serde(default)]
    pub streams: StreamsCfg,
    /// Directory of the config file; relative paths resolve against it.
    #[serde(skip)]
    pub base_dir: PathBuf,
}

/// Which transport carries frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportKind {
    /// io_uring UDP sockets.
    #[default]
    IoUring,
    /// DPDK poll-mode drivers.
    Dpdk,
    /// RDMA verbs.
    Rdma,
}

/// Hugepage policy for buffer pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HugepageMode {
    /// Try hugepages, fall back to normal pages.
    #[default]
    Auto,
    /// Refuse to start without hugepages.
    Required,
    /// Normal pages only.
    Off,
}

/// Worker poll mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PollMode {
    /// Spin forever; the worker owns its core.
    Busy,
    /// Spin for `spin_us`, then sleep on the transport.
    #[default]
    Adaptive,
}

/// What JSON Schema `format` does on the data plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JsonSchemaFormat {
    /// An annotation, except in schemas whose dialect opts in to the
    /// 2020-12 format-assertion vocabulary (the specification's default).
    #[default]
    Annotation,
    /// An assertion for every format the validator knows, in every schema.
    Assertion,
}

/// `[engine]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineCfg {
    /// Cores to pin workers to.
    pub workers: Vec<usize>,
    /// Transport.
    pub transport: TransportKind,
    /// Frames per receive burst.
    pub rx_burst_max: u32,
    /// Hugepage policy.
    pub hugepages: HugepageMode,
    /// Poll mode.
    pub poll: PollMode,
    /// Spin time before sleeping, adaptive mode.
    pub spin_us: u32,
    /// How long a request forwarded to a peer waits for its answer before
    /// the client gets a retryable `peer_down` and the peer is avoided.
    pub forward_timeout_ms: u32,
    /// How long a client may cache a negotiated schema: the `ttl_ms` of
    /// every negotiate response.
    pub negotiation_ttl_ms: u32,
    /// `format` in JSON schemas: "annotation" (default) or "assertion".
    pub json_schema_format: JsonSchemaFormat,
}

impl Default for EngineCfg {
    fn default() -> Self {
        EngineCfg {
            workers: vec![0],
            transport: TransportKind::IoUring,
            rx_burst_max: 32,
            hugepages: HugepageMode::Auto,
            poll: PollMode::Adaptive,
            spin_us: 200,
            forward_timeout_ms: 200,
            negotiation_ttl_ms: 60_000,
            json_schema_format: JsonSchemaFormat::Annotation,
        }
    }
}

/// `[host]`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostCfg {
    /// Affinity labels of this host.
    pub labels: BTreeMap<String, String>,
}

/// `[onnxruntime]`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OrtCfg {
    /// Path of libonnxruntime.so.
    pub library: Option<PathBuf>,
}

/// `[[shards]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardCfg {
    /// Unique name.
    pub name: String,
    /// Labels a host must carry to serve this shard.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Requests of this shard run per scheduling round on a worker.
    #[serde(default = "default_concurrency")]
    pub max_concurrency: u32,
    /// Requests a worker holds for this shard before answering busy.
    #[serde(default = "default_queue_depth")]
    pub queue_depth: u32,
    /// Indices of the workers serving it; all when omitted.
    #[serde(default)]
    pub workers: Option<Vec<usize>>,
    /// Dynamic batching: most rows (dimension 0) one run stacks from
    /// requests waiting in this shard's queue for the same model version.
    /// 1 (the default) runs every request on its own.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub batch_max: u32,
    /// How long the first request of a batch may wait for more, in µs.
    /// 0: only requests of the same receive burst are stacked.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub batch_delay_us: u32,
}

fn default_concurrency() -> u32 {
    8
}
fn one() -> u32 {
    1
}
fn is_one(v: &u32) -> bool {
    *v == 1
}
fn is_zero(v: &u32) -> bool {
    *v == 0
}
fn default_queue_depth() -> u32 {
    64
}

/// `[[routes]]`. Omitted matchers match anything.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteCfg {
    /// Unique name.
    pub name: String,
    /// Model name, exact or glob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Model version: exact, glob, or semver range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// LoRA adapter id, exact or glob ("" matches requests without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
    /// Intent, exact or glob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent: Option<String>,
    /// Tenant name, exact or glob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Conditions on the request's validated JSON section, all of which
    /// must hold: `$.intent == "reasoning"`, `$.meta.tier != 3`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<String>,
    /// Target shard.
    pub shard: String,
    /// The schema version the route's model takes: requests of another
    /// registered version of the subject go through the registered
    /// transform first (docs/transforms.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepts: Option<AcceptsCfg>,
}

/// `accepts = { subject = "chat", version = 2 }`: the schema version a
/// route or a model takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcceptsCfg {
    /// Schema subject.
    pub subject: String,
    /// Version within the subject.
    pub version: u32,
}

/// `[transforms]`: limits every schema transform runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransformsCfg {
    /// Wall time one call may take (epoch deadline, 1 ms granularity).
    pub deadline_us: u64,
    /// Linear memory an instance may grow to.
    pub memory_bytes_max: usize,
    /// Bytes a call may hand back.
    pub output_bytes_max: u32,
    /// Largest module accepted.
    pub module_bytes_max: usize,
    /// Instances the pool holds (workers x transforms x 2, for swaps).
    pub instances_max: u32,
    /// Faults in a row that quarantine a worker's instance.
    pub faults_before_quarantine: u32,
    /// First quarantine; doubles while the module keeps failing.
    pub quarantine_ms: u64,
    /// Longest quarantine.
    pub quarantine_max_ms: u64,
}

impl Default for TransformsCfg {
    fn default() -> Self {
        let l = sluice_transform::Limits::default();
        TransformsCfg {
            deadline_us: l.deadline_us,
            memory_bytes_max: l.memory_bytes_max,
            output_bytes_max: l.output_bytes_max,
            module_bytes_max: l.module_bytes_max,
            instances_max: l.instances_max,
            faults_before_quarantine: l.faults_before_quarantine,
            quarantine_ms: l.quarantine_us / 1000,
            quarantine_max_ms: l.quarantine_max_us / 1000,
        }
    }
}

impl TransformsCfg {
    /// The runtime's limits; rebuilt frames fit the transport's buffers.
    pub fn limits(&self, frame_bytes_max: usize) -> sluice_transform::Limits {
        sluice_transform::Limits {
            deadline_us: self.deadline_us,
            memory_bytes_max: self.memory_bytes_max,
            output_bytes_max: self.output_bytes_max,
            frame_bytes_max,
            module_bytes_max: self.module_bytes_max,
            instances_max: self.instances_max,
            faults_before_quarantine: self.faults_before_quarantine,
            quarantine_us: self.quarantine_ms.saturating_mul(1000),
            quarantine_max_us: self.quarantine_max_ms.saturating_mul(1000),
            ..sluice_transform::Limits::default()
        }
    }
}

/// Model backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    /// ONNX Runtime.
    #[default]
    Onnx,
    /// Zeros shaped like the input: the engine measured alone.
    Null,
    /// The input returned.
    Echo,
    /// Served by model servers (`[[backends]]`), never on a worker core.
    Backend,
}

/// `[[models]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelCfg {
    /// Model name.
    pub name: String,
    /// Full version.
    pub version: String,
    /// Backend.
    #[serde(default)]
    pub kind: ModelKind,
    /// Model file (onnx).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
    /// The name backends serve a `kind = "backend"` model as (default:
    /// `name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// Short names that resolve to this version.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// LoRA adapters.
    #[serde(default)]
    pub adapters: Vec<AdapterCfg>,
    /// The schema version the model takes (a route's `accepts` wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepts: Option<AcceptsCfg>,
    /// Dynamic batching for this model version, whatever shard it runs in
    /// (overrides the shard's `batch_max`). The model must be able to batch
    /// (dimension 0 of every input and output declared with one symbol), or
    /// loading it fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_max: Option<u32>,
    /// Overrides the shard's `batch_delay_us` for this model version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_delay_us: Option<u32>,
    /// A stateful stream model: which outputs feed which inputs at the
    /// next step (docs/wire.md "Streams").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<ModelStreamCfg>,
}

/// A LoRA adapter of a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdapterCfg {
    /// Adapter id as sent in requests.
    pub id: String,
    /// Adapter file (ONNX Runtime adapter format).
    pub path: PathBuf,
}

/// `[[tenants]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantCfg {
    /// Name, used by routes and logs.
    pub name: String,
    /// Id on the wire (non-zero).
    pub id: u32,
    /// MAC key: "hex:..." or "env:VAR" (hex in the variable).
    pub key: String,
    /// Model name patterns this tenant may use.
    #[serde(default = "star")]
    pub models: Vec<String>,
    /// Adapter id patterns this tenant may use.
    #[serde(default = "star")]
    pub adapters: Vec<String>,
    /// Route name patterns this tenant may use.
    #[serde(default = "star")]
    pub routes: Vec<String>,
    /// Bearer tokens the front door accepts for this tenant:
    /// `sha256:<hex digest>` or `env:VAR` (the variable holds the token).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<String>,
    /// Schema subject patterns this tenant may negotiate and name in
    /// requests.
    #[serde(default = "star")]
    pub subjects: Vec<String>,
}

fn star() -> Vec<String> {
    vec!["*".into()]
}

/// `[[peers]]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerCfg {
    /// Unique name.
    pub name: String,
    /// Address of the peer's data plane: its UDP service address, or for
    /// `transport = "rdma"` its `rdma.listen` address.
    pub address: String,
    /// The peer's `io_uring.tcp_listen` address: frames too large for a
    /// datagram are forwarded over a TCP connection to it (io_uring
    /// appliances). Without it such frames get `frame_too_large`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_address: Option<String>,
    /// Labels the peer carries.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// How forwards reach it: "udp" (default) or "rdma" (an RC connection
    /// per worker, opened by an appliance whose own transport is rdma).
    #[serde(default, skip_serializing_if = "PeerTransport::is_udp")]
    pub transport: PeerTransport,
}

/// How a peer is reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeerTransport {
    /// Datagrams from the worker's forwarding port.
    #[default]
    Udp,
    /// SEND on a reliable-connected queue pair to the peer's `rdma.listen`.
    Rdma,
}

impl PeerTransport {
    /// Whether this is the default (kept out of serialized configs).
    pub fn is_udp(&self) -> bool {
        *self == PeerTransport::Udp
    }
}

/// A configuration error, located when possible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// File, when read from one.
    pub file: Option<PathBuf>,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// Dotted key path, e.g. `shards[1].queue_depth`.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.file, self.line) {
            (Some(p), Some(l)) => write!(f, "{}:{}: ", p.display(), l)?,
            (Some(p), None) => write!(f, "{}: ", p.display())?,
            (None, Some(l)) => write!(f, "line {l}: ")?,
            (None, None) => {}
        }
        if !self.key.is_empty() {
            write!(f, "{}: ", self.key)?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    /// An error at a key path, to be located later.
    pub fn at(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            file: None,
            line: None,
            key: key.into(),
            message: message.into(),
        }
    }
}

impl Config {
    /// Reads, parses and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: Some(path.to_owned()),
            line: None,
            key: String::new(),
            message: format!("cannot read: {e}"),
        })?;
        let base = path.parent().map(Path::to_owned).unwrap_or_default();
        Config::parse(&text, base).map_err(|mut e| {
            e.file = Some(path.to_owned());
            e
        })
    }

    /// Parses and validates TOML text; `base_dir` anchors relative paths.
    pub fn parse(text: &str, base_dir: PathBuf) -> Result<Config, ConfigError> {
        let mut cfg: Config = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_of(text, s.start));
            ConfigError {
                file: None,
                line,
                key: String::new(),
                message: e.message().trim().to_string(),
            }
        })?;
        cfg.base_dir = base_dir;
        cfg.validate().map_err(|mut e| {
            e.line = locate(text, &e.key);
            e
        })?;
        Ok(cfg)
    }

    /// Resolves a config-relative path.
    pub fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_owned()
        } else {
            self.base_dir.join(p)
        }
    }

    /// The listen address of the io_uring transport.
    pub fn listen_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.io_uring
            .listen
            .parse()
            .map_err(|_| ConfigError::at("io_uring.listen", "not an IP:port address"))
    }

    /// The TCP listen address of the io_uring transport, if TCP is served.
    pub fn tcp_listen_addr(&self) -> Result<Option<SocketAddr>, ConfigError> {
        if !self.io_uring.tcp_enabled() {
            return Ok(None);
        }
        self.io_uring
            .tcp_listen
            .parse()
            .map(Some)
            .map_err(|_| ConfigError::at("io_uring.tcp_listen", "not an IP:port address"))
    }
}

mod frontdoor;
mod validate;
pub use frontdoor::{FrontdoorCfg, decode_token, token_digest};
pub use validate::{decode_key, validate_tables};
pub(crate) use validate::{range, wire_token};

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())]
        .bytes()
        .filter(|&b| b == b'\n')
        .count()
        + 1
}

/// Finds the line of a key path like `shards[1].queue_depth` in the TOML text:
/// the key itself when present, else the nearest enclosing table or element.
pub fn locate(text: &str, path: &str) -> Option<usize> {
    use toml_edit::{Item, Table, Value};
    #[derive(Clone, Copy)]
    enum Node<'a> {
        Item(&'a Item),
        Table(&'a Table),
        Value(&'a Value),
    }
    let doc = toml_edit::ImDocument::parse(text).ok()?;
    let mut node = Node::Table(doc.as_table());
    let mut best = None;
    for part in path.split('.') {
        let (name, index) = match part.find('[') {
            Some(b) => (
                &part[..b],
                part[b + 1..part.len().saturating_sub(1)]
                    .parse::<usize>()
                    .ok(),
            ),
            None => (part, None),
        };
        let table = match node {
            Node::Table(t) | Node::Item(Item::Table(t)) => Some(t),
            _ => None,
        };
        let next = if let Some(t) = table {
            if let Some(s) = t.key(name).and_then(|k| k.span()) {
                best = Some(s.start);
            }
            t.get(name).map(Node::Item)
        } else if let Node::Item(Item::Value(Value::InlineTable(t)))
        | Node::Value(Value::InlineTable(t)) = node
        {
            if let Some(s) = t.key(name).and_then(|k| k.span()) {
                best = Some(s.start);
            }
            t.get(name).map(Node::Value)
        } else {
            None
        };
        let Some(mut next) = next else { break };
        if let Some(i) = index {
            next = match next {
                Node::Item(Item::ArrayOfTables(a)) => match a.get(i) {
                    Some(t) => {
                        if let Some(s) = t.span() {
                            best = Some(s.start);
                        }
                        Node::Table(t)
                    }
                    None => break,
                },
                Node::Item(Item::Value(Value::Array(a))) | Node::Value(Value::Array(a)) => {
                    match a.get(i) {
                        Some(v) => {
                            if let Some(s) = v.span() {
                                best = Some(s.start);
                            }
                            Node::Value(v)
                        }
                        None => break,
                    }
                }
                _ => break,
            };
        }
        node = next;
    }
    best.map(|o| line_of(text, o))
}

#[cfg(test)]
mod tests;
