//! The immutable snapshot workers read: shards, routes, tenants, models, peers.
//! The control side builds a new one and publishes it (see `rcu.rs`); a worker
//! picks it up at a burst boundary and never sees a half-applied change.

use std::collections::BTreeMap;

use rustc_hash::{FxHashMap, FxHashSet};
use std::net::SocketAddr;

use sluice_wire::TenantKey;

use crate::auth::policy::AuthPolicy;
use crate::config::{self, Config, ModelCfg, ModelKind, PeerCfg, RouteCfg, ShardCfg, TenantCfg};
use crate::route::RouteTable;
use crate::route::set::PatternSet;
use crate::schema::SchemaTable;
use crate::transform::TransformTable;

/// A queue shard as the workers see it.
#[derive(Debug, Clone)]
pub struct Shard {
    /// Name.
    pub name: String,
    /// Affinity labels.
    pub labels: BTreeMap<String, String>,
    /// Requests run per scheduling round on a worker.
    pub max_concurrency: u32,
    /// Requests a worker holds before answering busy.
    pub queue_depth: u32,
    /// Bit i set: worker i serves this shard.
    pub worker_mask: u64,
    /// Whether this host carries every label of the shard.
    pub local: bool,
    /// Most rows one batched run stacks (1: no batching).
    pub batch_max: u32,
    /// How long a batch's first request may wait for more, µs.
    pub batch_delay_us: u32,
}

/// A tenant.
#[derive(Debug, Clone)]
pub struct Tenant {
    /// Wire id.
    pub id: u32,
    /// Name.
    pub name: String,
    /// MAC key.
    pub key: TenantKey,
    /// SHA-256 digests of the bearer tokens the front door accepts.
    pub token_digests: Vec<[u8; 32]>,
    models: PatternSet,
    adapters: PatternSet,
    routes: PatternSet,
    subjects: PatternSet,
}

impl Tenant {
    /// May this tenant use the model?
    pub fn allows_model(&self, m: &str) -> bool {
        self.models.matches(m)
    }
    /// May this tenant use the adapter?
    pub fn allows_adapter(&self, a: &str) -> bool {
        self.adapters.matches(a)
    }
    /// May this tenant use the route?
    pub fn allows_route(&self, r: &str) -> bool {
        self.routes.matches(r)
    }
    /// May this tenant see the schema subject?
    pub fn allows_subject(&self, s: &str) -> bool {
        self.subjects.matches(s)
    }
}

/// One loaded model version.
#[derive(Debug, Clone)]
pub struct ModelEntry {
    /// Name.
    pub name: String,
    /// Full version.
    pub version: String,
    /// Backend.
    pub kind: ModelKind,
    /// The name backends serve a `kind = "backend"` model as.
    pub upstream: String,
    /// Handler slot on every worker.
    pub slot: usize,
    /// Adapter ids.
    pub adapters: Vec<String>,
    /// `batch_max` of the model, overriding its shard's.
    pub batch_max: Option<u32>,
    /// `batch_delay_us` of the model, overriding its shard's.
    pub batch_delay_us: Option<u32>,
    adapter_set: FxHashSet<Box<str>>,
}

impl ModelEntry {
    /// Whether the version carries the adapter (a hash lookup).
    pub fn has_adapter(&self, id: &str) -> bool {
        self.adapter_set.contains(id)
    }
}

/// How requests of one model version in one shard batch: the model's own
/// settings, else the shard's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchPolicy {
    /// Most rows per run (1: no batching).
    pub max: u32,
    /// Longest wait of a batch's first request, µs.
    pub delay_us: u32,
}

impl BatchPolicy {
    /// The policy of `model` running in `shard`.
    pub fn of(model: &ModelEntry, shard: &Shard) -> BatchPolicy {
        match model.batch_max {
            Some(max) => BatchPolicy {
                max,
                delay_us: model.batch_delay_us.unwrap_or(0),
            },
            None => BatchPolicy {
                max: shard.batch_max,
                delay_us: shard.batch_delay_us,
            },
        }
    }
}

/// Models by name, version and alias.
#[derive(Debug, Clone, Default)]
pub struct ModelTable {
    entries: Vec<ModelEntry>,
    /// name -> version or alias -> entry index.
    by_name: FxHashMap<Box<str>, FxHashMap<Box<str>, usize>>,
}

impl ModelTable {
    /// Builds the table; `slots[i]` is the handler slot of `models[i]`.
    pub fn build(models: &[ModelCfg], slots: &[usize]) -> ModelTable {
        let mut t = ModelTable::default();
        for (i, m) in models.iter().enumerate() {
            t.entries.push(ModelEntry {
                name: m.name.clone(),
                version: m.version.clone(),
                kind: m.kind,
                upstream: m.upstream.clone().unwrap_or_else(|| m.name.clone()),
                slot: slots[i],
                adapters: m.adapters.iter().map(|a| a.id.clone()).collect(),
                batch_max: m.batch_max,
                batch_delay_us: m.batch_delay_us,
                adapter_set: m.adapters.iter().map(|a| a.id.as_str().into()).collect(),
            });
            // Validation refused clashes; were one left, the first would win
            // as the list scan did.
            let names = t.by_name.entry(m.name.as_str().into()).or_default();
            names.entry(m.version.as_str().into()).or_insert(i);
            for a in &m.aliases {
                names.entry(a.as_str().into()).or_insert(i);
            }
        }
        t
    }

    /// Resolves a name and a version or alias.
    pub fn resolve(&self, name: &str, version: &str) -> Option<&ModelEntry> {
        let i = *self.by_name.get(name)?.get(version)?;
        self.entries.get(i)
    }

    /// Every entry.
    pub fn entries(&self) -> &[ModelEntry] {
        &self.entries
    }
}

/// A peer appliance.
#[derive(Debug, Clone)]
pub struct Peer {
    /// Name.
    pub name: String,
    /// Data-plane address.
    pub addr: SocketAddr,
    /// TCP address, for frames a datagram cannot carry.
    pub tcp_addr: Option<SocketAddr>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
}

/// Everything a worker reads per request.
#[derive(Debug, Clone, Default)]
pub struct Tables {
    /// Publication counter.
    pub epoch: u64,
    /// Shards.
    pub shards: Vec<Shard>,
    /// Routes.
    pub routes: RouteTable,
    /// Tenants sorted by id.
    pub tenants: Vec<Tenant>,
    /// Models.
    pub models: ModelTable,
    /// Peers.
    pub peers: Vec<Peer>,
    /// Schemas for validation and negotiation.
    pub schemas: SchemaTable,
    /// Host labels.
    pub host_labels: BTreeMap<String, String>,
    /// What `accepts` asks of each route and model: schema transforms.
    pub transforms: TransformTable,
    /// `[auth]`: fixed at start, carried here so that workers read it with
    /// the tenants it applies to.
    pub auth: AuthPolicy,
}

/// The start-time settings a snapshot is compiled against.
#[derive(Debug, Clone, Copy)]
pub struct HostView<'a> {
    /// This host's labels.
    pub labels: &'a BTreeMap<String, String>,
    /// Workers.
    pub worker_count: usize,
    /// `[auth]`.
    pub auth: &'a config::AuthCfg,
}

impl<'a> HostView<'a> {
    /// The start-time settings of a config.
    pub fn of(cfg: &'a Config) -> HostView<'a> {
        HostView {
            labels: &cfg.host.labels,
            worker_count: cfg.engine.workers.len(),
            auth: &cfg.auth,
        }
    }
}

/// The live parts of the config, as the control plane replaces them.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct LiveConfig {
    /// Shards.
    pub shards: Vec<ShardCfg>,
    /// Routes.
    pub routes: Vec<RouteCfg>,
    /// Models.
    pub models: Vec<ModelCfg>,
    /// Tenants.
    pub tenants: Vec<TenantCfg>,
    /// Peers.
    pub peers: Vec<PeerCfg>,
}

impl LiveConfig {
    /// The live parts of a full config.
    pub fn of(cfg: &Config) -> LiveConfig {
        LiveConfig {
            shards: cfg.shards.clone(),
            routes: cfg.routes.clone(),
            models: cfg.models.clone(),
            tenants: cfg.tenants.clone(),
            peers: cfg.peers.clone(),
        }
    }
}

impl Tables {
    /// Compiles a snapshot. `slots[i]` is the handler slot of model i.
    pub fn build(
        live: &LiveConfig,
        host: &HostView<'_>,
        slots: &[usize],
        schemas: SchemaTable,
    ) -> Result<Tables, config::ConfigError> {
        config::validate_tables(
            &live.shards,
            &live.routes,
            &live.models,
            &live.tenants,
            &live.peers,
            host.worker_count,
        )?;
        config::auth_allows_tenants(host.auth.mode, &live.tenants)?;
        Tables::compile(live, host, slots, schemas)
    }

    /// [`Tables::build`] for a set the validation already passed.
    pub(crate) fn compile(
        live: &LiveConfig,
        host: &HostView<'_>,
        slots: &[usize],
        schemas: SchemaTable,
    ) -> Result<Tables, config::ConfigError> {
        let (host_labels, worker_count) = (host.labels, host.worker_count);
        let all_workers = if worker_count >= 64 {
            u64::MAX
        } else {
            (1u64 << worker_count) - 1
        };
        let shards: Vec<Shard> = live
            .shards
            .iter()
            .map(|s| Shard {
                name: s.name.clone(),
                labels: s.labels.clone(),
                max_concurrency: s.max_concurrency,
                queue_depth: s.queue_depth,
                worker_mask: s
                    .workers
                    .as_ref()
                    .map_or(all_workers, |w| w.iter().fold(0u64, |m, &i| m | (1 << i))),
                local: s.labels.iter().all(|(k, v)| host_labels.get(k) == Some(v)),
                batch_max: s.batch_max,
                batch_delay_us: s.batch_delay_us,
            })
            .collect();
        let names: Vec<&str> = shards.iter().map(|s| s.name.as_str()).collect();
        let routes = RouteTable::compile(&live.routes, &names)
            .map_err(|m| config::ConfigError::at("routes", m))?;
        let mut tenants = Vec::with_capacity(live.tenants.len());
        for (i, t) in live.tenants.iter().enumerate() {
            let key = config::decode_key(&t.key)
                .map_err(|m| config::ConfigError::at(format!("tenants[{i}].key"), m))?;
            let pats = |v: &[String]| PatternSet::new(v);
            let mut token_digests = Vec::with_capacity(t.tokens.len());
            for (j, spec) in t.tokens.iter().enumerate() {
                token_digests.push(config::decode_token(spec).map_err(|m| {
                    config::ConfigError::at(format!("tenants[{i}].tokens[{j}]"), m)
                })?);
            }
            tenants.push(Tenant {
                id: t.id,
                name: t.name.clone(),
                key: TenantKey::new(&key),
                token_digests,
                models: pats(&t.models),
                adapters: pats(&t.adapters),
                routes: pats(&t.routes),
                subjects: pats(&t.subjects),
            });
        }
        tenants.sort_by_key(|t| t.id);
        let peers = live
            .peers
            .iter()
            .filter_map(|p| {
                Some(Peer {
                    name: p.name.clone(),
                    addr: p.address.parse().ok()?,
                    tcp_addr: p.tcp_address.as_deref().and_then(|a| a.parse().ok()),
                    labels: p.labels.clone(),
                })
            })
            .collect();
        Ok(Tables {
            epoch: 0,
            shards,
            routes,
            tenants,
            models: ModelTable::build(&live.models, slots),
            peers,
            schemas,
            host_labels: host_labels.clone(),
            transforms: TransformTable::default(),
            auth: AuthPolicy::of(host.auth),
        })
    }

    /// The tenant with a wire id.
    pub fn tenant(&self, id: u32) -> Option<&Tenant> {
        self.tenants
            .binary_search_by_key(&id, |t| t.id)
            .ok()
            .map(|i| &self.tenants[i])
    }

    /// The tenant a bearer token's digest belongs to.
    pub fn tenant_by_token(&self, digest: &[u8; 32]) -> Option<&Tenant> {
        self.tenants
            .iter()
            .find(|t| t.token_digests.iter().any(|d| d == digest))
    }

    /// The first up peer carrying every label of a shard.
    pub fn peer_for(&self, shard: &Shard) -> Option<(usize, &Peer)> {
        self.peers
            .iter()
            .enumerate()
            .find(|(_, p)| shard.labels.iter().all(|(k, v)| p.labels.get(k) == Some(v)))
    }
}
