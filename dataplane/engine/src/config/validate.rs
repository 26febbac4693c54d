//! Validation of a whole config: the engine tables and the transports'
//! limits. Every refusal names the key (and, through `ConfigError`, the
//! line) it is about.

use std::net::SocketAddr;

use super::limits::*;
use super::*;

impl Config {
    /// Checks ranges and cross references.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let e = &self.engine;
        if e.workers.is_empty() || e.workers.len() > WORKER_COUNT_MAX {
            return Err(ConfigError::at(
                "engine.workers",
                format!("1 to {WORKER_COUNT_MAX} cores"),
            ));
        }
        let ncpu = crate::sys::cores_configured();
        for (i, &c) in e.workers.iter().enumerate() {
            if c >= ncpu {
                return Err(ConfigError::at(
                    format!("engine.workers[{i}]"),
                    format!("core {c} does not exist (this host has {ncpu})"),
                ));
            }
            if e.workers[..i].contains(&c) {
                return Err(ConfigError::at(
                    format!("engine.workers[{i}]"),
                    format!("core {c} listed twice"),
                ));
            }
        }
        range(
            "engine.rx_burst_max",
            e.rx_burst_max,
            1,
            RX_BURST_MAX as u32,
        )?;
        range("engine.spin_us", e.spin_us, 0, SPIN_US_MAX)?;
        range(
            "engine.forward_timeout_ms",
            e.forward_timeout_ms,
            1,
            FORWARD_TIMEOUT_MS_MAX,
        )?;
        range(
            "engine.negotiation_ttl_ms",
            e.negotiation_ttl_ms,
            NEGOTIATION_TTL_MS_MIN,
            NEGOTIATION_TTL_MS_MAX,
        )?;
        crate::auth::config::validate(self)?;
        let tr = &self.tracing;
        if !(0.0..=1.0).contains(&tr.sample_ratio) {
            return Err(ConfigError::at(
                "tracing.sample_ratio",
                "a share from 0 to 1",
            ));
        }
        range(
            "tracing.ring_spans",
            tr.ring_spans,
            1,
            crate::trace::RING_SPANS_MAX,
        )?;
        range(
            "tracing.export_interval_ms",
            tr.export_interval_ms,
            10,
            60_000,
        )?;
        let u = &self.io_uring;
        self.listen_addr()?;
        range(
            "io_uring.ring_entries",
            u.ring_entries,
            RING_ENTRIES_MIN,
            RING_ENTRIES_MAX,
        )?;
        if !u.ring_entries.is_power_of_two() {
            return Err(ConfigError::at(
                "io_uring.ring_entries",
                "must be a power of two",
            ));
        }
        range(
            "io_uring.rx_buffers",
            u.rx_buffers,
            POOL_BUFFERS_MIN,
            POOL_BUFFERS_MAX,
        )?;
        if !u.rx_buffers.is_power_of_two() {
            return Err(ConfigError::at(
                "io_uring.rx_buffers",
                "must be a power of two",
            ));
        }
        range(
            "io_uring.tx_buffers",
            u.tx_buffers,
            POOL_BUFFERS_MIN,
            POOL_BUFFERS_MAX,
        )?;
        if u.tx_buffers < e.rx_burst_max {
            return Err(ConfigError::at(
                "io_uring.tx_buffers",
                "must be at least engine.rx_burst_max: every received frame gets an answer",
            ));
        }
        range(
            "io_uring.buffer_size",
            u.buffer_size,
            BUFFER_SIZE_MIN,
            BUFFER_SIZE_MAX,
        )?;
        if !u.buffer_size.is_multiple_of(BUFFER_ALIGN) {
            return Err(ConfigError::at(
                "io_uring.buffer_size",
                format!("must be a multiple of {BUFFER_ALIGN}"),
            ));
        }
        // [dpdk] is checked here too when the engine has DPDK, so its errors
        // carry file:line like every other key's.
        #[cfg(feature = "dpdk")]
        if self.engine.transport == TransportKind::Dpdk {
            crate::transport::dpdk::DpdkCfg::from_config(self)?;
        }
        self.validate_tables()
    }

    /// Checks shards, routes, models, tenants and peers (what can change live).
    pub fn validate_tables(&self) -> Result<(), ConfigError> {
        validate_tables(
            &self.shards,
            &self.routes,
            &self.models,
            &self.tenants,
            &self.peers,
            self.engine.workers.len(),
        )
    }
}

/// Checks a set of live tables against each other.
pub fn validate_tables(
    shards: &[ShardCfg],
    routes: &[RouteCfg],
    models: &[ModelCfg],
    tenants: &[TenantCfg],
    peers: &[PeerCfg],
    worker_count: usize,
) -> Result<(), ConfigError> {
    validate_shards(shards, worker_count)?;
    validate_routes(routes, shards)?;
    validate_models(models)?;
    validate_tenants(tenants)?;
    validate_peers(peers)
}

fn validate_shards(shards: &[ShardCfg], worker_count: usize) -> Result<(), ConfigError> {
    if shards.len() > SHARD_COUNT_MAX {
        return Err(ConfigError::at(
            "shards",
            format!("at most {SHARD_COUNT_MAX}"),
        ));
    }
    for (i, s) in shards.iter().enumerate() {
        let k = |f: &str| format!("shards[{i}].{f}");
        name_ok(&k("name"), &s.name)?;
        if shards[..i].iter().any(|o| o.name == s.name) {
            return Err(ConfigError::at(
                k("name"),
                format!("duplicate shard {:?}", s.name),
            ));
        }
        range(&k("max_concurrency"), s.max_concurrency, 1, CONCURRENCY_MAX)?;
        range(&k("queue_depth"), s.queue_depth, 1, QUEUE_DEPTH_MAX)?;
        if let Some(w) = &s.workers {
            if let Some(bad) = w.iter().find(|&&w| w >= worker_count) {
                return Err(ConfigError::at(
                    k("workers"),
                    format!("worker {bad} does not exist ({worker_count} configured)"),
                ));
            }
            if w.is_empty() {
                return Err(ConfigError::at(k("workers"), "must not be empty"));
            }
        }
    }
    Ok(())
}

fn validate_routes(routes: &[RouteCfg], shards: &[ShardCfg]) -> Result<(), ConfigError> {
    if routes.len() > ROUTE_COUNT_MAX {
        return Err(ConfigError::at(
            "routes",
            format!("at most {ROUTE_COUNT_MAX}"),
        ));
    }
    for (i, r) in routes.iter().enumerate() {
        let k = |f: &str| format!("routes[{i}].{f}");
        name_ok(&k("name"), &r.name)?;
        if routes[..i].iter().any(|o| o.name == r.name) {
            return Err(ConfigError::at(
                k("name"),
                format!("duplicate route {:?}", r.name),
            ));
        }
        if !shards.iter().any(|s| s.name == r.shard) {
            return Err(ConfigError::at(
                k("shard"),
                format!("no shard named {:?}", r.shard),
            ));
        }
        if let Some(v) = &r.version {
            crate::route::VersionMatcher::parse(v).map_err(|m| ConfigError::at(k("version"), m))?;
        }
    }
    Ok(())
}

fn validate_models(models: &[ModelCfg]) -> Result<(), ConfigError> {
    if models.len() > MODEL_SLOT_COUNT_MAX {
        return Err(ConfigError::at(
            "models",
            format!("at most {MODEL_SLOT_COUNT_MAX}"),
        ));
    }
    for (i, m) in models.iter().enumerate() {
        let k = |f: &str| format!("models[{i}].{f}");
        wire_token(&k("name"), &m.name, sluice_wire::limits::MODEL_NAME_LEN_MAX)?;
        wire_token(
            &k("version"),
            &m.version,
            sluice_wire::limits::MODEL_VERSION_LEN_MAX,
        )?;
        if models[..i]
            .iter()
            .any(|o| o.name == m.name && o.version == m.version)
        {
            return Err(ConfigError::at(k("version"), "duplicate model version"));
        }
        for (j, a) in m.aliases.iter().enumerate() {
            wire_token(
                &format!("models[{i}].aliases[{j}]"),
                a,
                sluice_wire::limits::MODEL_VERSION_LEN_MAX,
            )?;
            let clash = models.iter().enumerate().any(|(oi, o)| {
                o.name == m.name && (o.version == *a || (oi != i && o.aliases.contains(a)))
            });
            if clash {
                return Err(ConfigError::at(
                    format!("models[{i}].aliases[{j}]"),
                    format!("{a:?} already names another version of {:?}", m.name),
                ));
            }
        }
        if m.kind == ModelKind::Onnx && m.path.is_none() {
            return Err(ConfigError::at(k("path"), "an onnx model needs a path"));
        }
        if m.adapters.len() > ADAPTER_COUNT_MAX {
            return Err(ConfigError::at(
                k("adapters"),
                format!("at most {ADAPTER_COUNT_MAX}"),
            ));
        }
        for (j, a) in m.adapters.iter().enumerate() {
            wire_token(
                &format!("models[{i}].adapters[{j}].id"),
                &a.id,
                sluice_wire::limits::ADAPTER_LEN_MAX,
            )?;
        }
    }
    Ok(())
}

fn validate_tenants(tenants: &[TenantCfg]) -> Result<(), ConfigError> {
    if tenants.len() > TENANT_COUNT_MAX {
        return Err(ConfigError::at(
            "tenants",
            format!("at most {TENANT_COUNT_MAX}"),
        ));
    }
    for (i, t) in tenants.iter().enumerate() {
        let k = |f: &str| format!("tenants[{i}].{f}");
        name_ok(&k("name"), &t.name)?;
        if t.id == 0 {
            return Err(ConfigError::at(k("id"), "tenant id 0 is reserved"));
        }
        if tenants[..i]
            .iter()
            .any(|o| o.id == t.id || o.name == t.name)
        {
            return Err(ConfigError::at(k("id"), "duplicate tenant id or name"));
        }
        decode_key(&t.key).map_err(|m| ConfigError::at(k("key"), m))?;
        crate::auth::config::tenant_patterns(i, t)?;
    }
    Ok(())
}

fn validate_peers(peers: &[PeerCfg]) -> Result<(), ConfigError> {
    if peers.len() > PEER_COUNT_MAX {
        return Err(ConfigError::at(
            "peers",
            format!("at most {PEER_COUNT_MAX}"),
        ));
    }
    for (i, p) in peers.iter().enumerate() {
        let k = |f: &str| format!("peers[{i}].{f}");
        name_ok(&k("name"), &p.name)?;
        if peers[..i].iter().any(|o| o.name == p.name) {
            return Err(ConfigError::at(k("name"), "duplicate peer"));
        }
        p.address
            .parse::<SocketAddr>()
            .map_err(|_| ConfigError::at(k("address"), "not an IP:port address"))?;
    }
    Ok(())
}

/// Decodes a tenant key: `hex:...` or `env:VAR` holding hex. At least 16 bytes.
pub fn decode_key(spec: &str) -> Result<Vec<u8>, String> {
    let hex = if let Some(h) = spec.strip_prefix("hex:") {
        h.to_string()
    } else if let Some(var) = spec.strip_prefix("env:") {
        std::env::var(var).map_err(|_| format!("environment variable {var} is not set"))?
    } else {
        return Err("key must start with \"hex:\" or \"env:\"".into());
    };
    let hex = hex.trim();
    if hex.len() % 2 != 0 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("key is not an even number of hex digits".into());
    }
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0))
        .collect();
    if bytes.len() < TENANT_KEY_LEN_MIN {
        return Err(format!("key must be at least {TENANT_KEY_LEN_MIN} bytes"));
    }
    Ok(bytes)
}

pub(crate) fn range(key: &str, v: u32, lo: u32, hi: u32) -> Result<(), ConfigError> {
    if v < lo || v > hi {
        return Err(ConfigError::at(
            key,
            format!("{v} is out of range {lo}..={hi}"),
        ));
    }
    Ok(())
}

fn name_ok(key: &str, v: &str) -> Result<(), ConfigError> {
    if v.is_empty() || v.len() > NAME_LEN_MAX || !v.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ConfigError::at(
            key,
            format!("1 to {NAME_LEN_MAX} printable ASCII characters, no spaces"),
        ));
    }
    Ok(())
}

pub(crate) fn wire_token(key: &str, v: &str, max: usize) -> Result<(), ConfigError> {
    if v.is_empty() || v.len() > max || !v.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ConfigError::at(
            key,
            format!("1 to {max} printable ASCII characters, no spaces"),
        ));
    }
    Ok(())
}
