//! Validation of a whole config: the engine tables and the transports'
//! limits. Every refusal names the key (and, through `ConfigError`, the
//! line) it is about.

use std::collections::{HashMap, HashSet};
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
        self.transforms
            .limits(self.io_uring.buffer_size as usize)
            .check()
            .map_err(|m| ConfigError::at("transforms", m))?;
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
        super::backends::validate(&self.backends, &self.openai, &self.models)?;
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
        let st = &self.streams;
        range(
            "streams.per_worker",
            st.per_worker,
            1,
            STREAMS_PER_WORKER_MAX,
        )?;
        range(
            "streams.per_tenant",
            st.per_tenant,
            1,
            STREAMS_PER_WORKER_MAX,
        )?;
        range("streams.idle_ms", st.idle_ms, 1, STREAM_IDLE_MS_MAX)?;
        range("streams.frames_max", st.frames_max, 1, u32::MAX)?;
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
        self.frontdoor.validate(&e.workers)?;
        self.validate_tcp()?;
        // [dpdk] is checked here too when the engine has DPDK, so its errors
        // carry file:line like every other key's.
        #[cfg(feature = "dpdk")]
        if self.engine.transport == TransportKind::Dpdk {
            crate::transport::dpdk::DpdkCfg::from_config(self)?;
        }
        self.validate_tables()
    }

    fn validate_tcp(&self) -> Result<(), ConfigError> {
        let u = &self.io_uring;
        self.tcp_listen_addr()?;
        range(
            "io_uring.tcp_connections_max",
            u.tcp_connections_max,
            1,
            TCP_CONNECTIONS_MAX,
        )?;
        range(
            "io_uring.tcp_idle_timeout_ms",
            u.tcp_idle_timeout_ms,
            1,
            TCP_IDLE_TIMEOUT_MS_MAX,
        )?;
        for (k, v) in [
            ("io_uring.tcp_frame_timeout_ms", u.tcp_frame_timeout_ms),
            ("io_uring.tcp_send_timeout_ms", u.tcp_send_timeout_ms),
        ] {
            range(k, v, TCP_TIMEOUT_MS_MIN, TCP_IDLE_TIMEOUT_MS_MAX)?;
        }
        range(
            "io_uring.tcp_connections_per_source_max",
            u.tcp_connections_per_source_max,
            1,
            TCP_CONNECTIONS_MAX,
        )?;
        for (k, v) in [
            (
                "io_uring.tcp_large_slots_per_source_pct",
                u.tcp_large_slots_per_source_pct,
            ),
            (
                "io_uring.tcp_large_slots_per_tenant_pct",
                u.tcp_large_slots_per_tenant_pct,
            ),
        ] {
            range(k, v, 1, 100)?;
        }
        range(
            "io_uring.tcp_verified_reserve_pct",
            u.tcp_verified_reserve_pct,
            0,
            TCP_VERIFIED_RESERVE_PCT_MAX,
        )?;
        range(
            "io_uring.tcp_pipeline_max",
            u.tcp_pipeline_max,
            1,
            TCP_PIPELINE_MAX,
        )?;
        if u.tcp_slots.is_empty() || u.tcp_slots.len() > TCP_SLOT_CLASSES_MAX {
            return Err(ConfigError::at(
                "io_uring.tcp_slots",
                format!("1 to {TCP_SLOT_CLASSES_MAX} slot classes"),
            ));
        }
        for (i, c) in u.tcp_slots.iter().enumerate() {
            let k = |f: &str| format!("io_uring.tcp_slots[{i}].{f}");
            range(&k("size"), c.size, TCP_SLOT_SIZE_MIN, TCP_SLOT_SIZE_MAX)?;
            if !c.size.is_multiple_of(TCP_SLOT_SIZE_MIN) {
                return Err(ConfigError::at(
                    k("size"),
                    format!("{} is not a multiple of {TCP_SLOT_SIZE_MIN}", c.size),
                ));
            }
            if i > 0 && c.size <= u.tcp_slots[i - 1].size {
                return Err(ConfigError::at(
                    k("size"),
                    "slot classes must be listed smallest first, each larger than the last",
                ));
            }
            range(&k("count"), c.count, 1, TCP_SLOT_COUNT_MAX)?;
        }
        if u.tcp_pool_bytes() > TCP_POOL_BYTES_MAX {
            return Err(ConfigError::at(
                "io_uring.tcp_slots",
                format!(
                    "{} bytes of slots per worker (receive and reply) exceed {TCP_POOL_BYTES_MAX}",
                    u.tcp_pool_bytes()
                ),
            ));
        }
        let largest = u.tcp_slots.iter().map(|c| c.size).max().unwrap_or(0);
        if u.tcp_frame_len_max != 0 {
            range(
                "io_uring.tcp_frame_len_max",
                u.tcp_frame_len_max,
                sluice_wire::FIXED_HEADER_LEN as u32,
                largest.max(sluice_wire::FIXED_HEADER_LEN as u32),
            )
            .map_err(|mut e| {
                e.message.push_str(" (at most the largest tcp_slots size)");
                e
            })?;
        }
        Ok(())
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
    for (i, r) in routes.iter().enumerate() {
        validate_accepts(&format!("routes[{i}].accepts"), r.accepts.as_ref())?;
    }
    for (i, m) in models.iter().enumerate() {
        validate_accepts(&format!("models[{i}].accepts"), m.accepts.as_ref())?;
    }
    validate_tenants(tenants)?;
    validate_peers(peers)
}

fn validate_accepts(key: &str, a: Option<&crate::config::AcceptsCfg>) -> Result<(), ConfigError> {
    let Some(a) = a else {
        return Ok(());
    };
    if !sluice_transform::RUNTIME {
        return Err(ConfigError::at(
            key,
            format!(
                "`accepts` asks for schema transforms; {}",
                sluice_transform::UNAVAILABLE
            ),
        ));
    }
    if a.subject.is_empty() || a.subject.len() > sluice_wire::limits::SUBJECT_LEN_MAX {
        return Err(ConfigError::at(
            format!("{key}.subject"),
            format!("1 to {} bytes", sluice_wire::limits::SUBJECT_LEN_MAX),
        ));
    }
    if a.version == 0 {
        return Err(ConfigError::at(format!("{key}.version"), "at least 1"));
    }
    Ok(())
}

fn validate_shards(shards: &[ShardCfg], worker_count: usize) -> Result<(), ConfigError> {
    if shards.len() > SHARD_COUNT_MAX {
        return Err(ConfigError::at(
            "shards",
            format!("at most {SHARD_COUNT_MAX}"),
        ));
    }
    let mut names = HashSet::with_capacity(shards.len());
    for (i, s) in shards.iter().enumerate() {
        let k = |f: &str| format!("shards[{i}].{f}");
        name_ok(&k("name"), &s.name)?;
        if !names.insert(s.name.as_str()) {
            return Err(ConfigError::at(
                k("name"),
                format!("duplicate shard {:?}", s.name),
            ));
        }
        range(&k("max_concurrency"), s.max_concurrency, 1, CONCURRENCY_MAX)?;
        range(&k("queue_depth"), s.queue_depth, 1, QUEUE_DEPTH_MAX)?;
        validate_batch(&k(""), s.batch_max, s.batch_delay_us)?;
        if s.batch_max > s.queue_depth {
            return Err(ConfigError::at(
                k("batch_max"),
                format!(
                    "{} is above queue_depth ({}): a batch is taken from the shard's queue",
                    s.batch_max, s.queue_depth
                ),
            ));
        }
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
    let shard_names: HashSet<&str> = shards.iter().map(|s| s.name.as_str()).collect();
    let mut names = HashSet::with_capacity(routes.len());
    for (i, r) in routes.iter().enumerate() {
        let k = |f: &str| format!("routes[{i}].{f}");
        name_ok(&k("name"), &r.name)?;
        if !names.insert(r.name.as_str()) {
            return Err(ConfigError::at(
                k("name"),
                format!("duplicate route {:?}", r.name),
            ));
        }
        if !shard_names.contains(r.shard.as_str()) {
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
    // (name, version) of every model, then (name, alias) -> the model.
    let mut versions: HashSet<(&str, &str)> = HashSet::with_capacity(models.len());
    for (i, m) in models.iter().enumerate() {
        if !versions.insert((m.name.as_str(), m.version.as_str())) {
            return Err(ConfigError::at(
                format!("models[{i}].version"),
                "duplicate model version",
            ));
        }
    }
    // Each alias with its first owner, and whether another model has it too.
    let mut aliases: HashMap<(&str, &str), (usize, bool)> = HashMap::new();
    for (i, m) in models.iter().enumerate() {
        for a in &m.aliases {
            let e = aliases
                .entry((m.name.as_str(), a.as_str()))
                .or_insert((i, false));
            e.1 |= e.0 != i;
        }
    }
    for (i, m) in models.iter().enumerate() {
        let k = |f: &str| format!("models[{i}].{f}");
        wire_token(&k("name"), &m.name, sluice_wire::limits::MODEL_NAME_LEN_MAX)?;
        wire_token(
            &k("version"),
            &m.version,
            sluice_wire::limits::MODEL_VERSION_LEN_MAX,
        )?;
        if m.aliases.len() > ALIAS_COUNT_MAX {
            return Err(ConfigError::at(
                k("aliases"),
                format!("at most {ALIAS_COUNT_MAX}"),
            ));
        }
        for (j, a) in m.aliases.iter().enumerate() {
            wire_token(
                &format!("models[{i}].aliases[{j}]"),
                a,
                sluice_wire::limits::MODEL_VERSION_LEN_MAX,
            )?;
            // An alias may not be a version of the model, nor another
            // version's alias (one version may repeat its own).
            let other = aliases
                .get(&(m.name.as_str(), a.as_str()))
                .is_some_and(|&(first, more)| first != i || more);
            if other || versions.contains(&(m.name.as_str(), a.as_str())) {
                return Err(ConfigError::at(
                    format!("models[{i}].aliases[{j}]"),
                    format!("{a:?} already names another version of {:?}", m.name),
                ));
            }
        }
        if m.kind == ModelKind::Onnx && m.path.is_none() {
            return Err(ConfigError::at(k("path"), "an onnx model needs a path"));
        }
        if m.batch_max.is_some() || m.batch_delay_us.is_some() {
            if m.kind != ModelKind::Onnx {
                let key = if m.batch_max.is_some() {
                    "batch_max"
                } else {
                    "batch_delay_us"
                };
                return Err(ConfigError::at(k(key), "only onnx models batch"));
            }
            validate_batch(
                &k(""),
                m.batch_max.unwrap_or(1),
                m.batch_delay_us.unwrap_or(0),
            )?;
            if m.batch_delay_us.is_some_and(|d| d > 0) && m.batch_max.is_none() {
                return Err(ConfigError::at(
                    k("batch_delay_us"),
                    "needs batch_max on the model too (a delay without a batch size)",
                ));
            }
        }
        if let Some(st) = &m.stream {
            if m.kind != ModelKind::Onnx {
                return Err(ConfigError::at(
                    k("stream"),
                    "only onnx models keep stream state",
                ));
            }
            if m.batch_max.is_some() {
                return Err(ConfigError::at(
                    k("stream"),
                    "a stream model does not batch (each step needs its stream's state)",
                ));
            }
            if st.state.is_empty() || st.state.len() > 8 {
                return Err(ConfigError::at(k("stream.state"), "1 to 8 state pairs"));
            }
            if let Some(g) = &st.generate {
                use crate::config::limits::{GEN_MAX_TOKENS_MAX, GEN_PROMPT_MAX};
                if g.max_tokens == 0 || g.max_tokens > GEN_MAX_TOKENS_MAX {
                    return Err(ConfigError::at(
                        k("stream.generate.max_tokens"),
                        format!("1 to {GEN_MAX_TOKENS_MAX}"),
                    ));
                }
                if g.prompt_max == 0 || g.prompt_max > GEN_PROMPT_MAX {
                    return Err(ConfigError::at(
                        k("stream.generate.prompt_max"),
                        format!("1 to {GEN_PROMPT_MAX}"),
                    ));
                }
                let rows_max = crate::config::limits::BATCH_MAX;
                if g.step_batch_max == 0 || g.step_batch_max > rows_max {
                    return Err(ConfigError::at(
                        k("stream.generate.step_batch_max"),
                        format!("1 to {rows_max}"),
                    ));
                }
            }
            for (j, p) in st.state.iter().enumerate() {
                if p.shape.is_empty() || p.shape.len() > 8 || p.shape.contains(&0) {
                    return Err(ConfigError::at(
                        format!("models[{i}].stream.state[{j}].shape"),
                        "a shape of rank 1 to 8 without 0 dimensions",
                    ));
                }
            }
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

/// Checks `batch_max` and `batch_delay_us` under `prefix` (`shards[0].`).
fn validate_batch(prefix: &str, batch_max: u32, delay_us: u32) -> Result<(), ConfigError> {
    range(&format!("{prefix}batch_max"), batch_max, 1, BATCH_MAX)?;
    range(
        &format!("{prefix}batch_delay_us"),
        delay_us,
        0,
        BATCH_DELAY_US_MAX,
    )?;
    if delay_us > 0 && batch_max == 1 {
        return Err(ConfigError::at(
            format!("{prefix}batch_delay_us"),
            "needs batch_max above 1: a request waits only for others to batch with",
        ));
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
    let mut ids = HashSet::with_capacity(tenants.len());
    let mut names = HashSet::with_capacity(tenants.len());
    for (i, t) in tenants.iter().enumerate() {
        let k = |f: &str| format!("tenants[{i}].{f}");
        name_ok(&k("name"), &t.name)?;
        if t.id == 0 {
            return Err(ConfigError::at(k("id"), "tenant id 0 is reserved"));
        }
        // Both inserted: `|` does not short-circuit.
        if !ids.insert(t.id) | !names.insert(t.name.as_str()) {
            return Err(ConfigError::at(k("id"), "duplicate tenant id or name"));
        }
        decode_key(&t.key).map_err(|m| ConfigError::at(k("key"), m))?;
        super::frontdoor::validate_tokens(&k("tokens"), &t.tokens)?;
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
    let mut names = HashSet::with_capacity(peers.len());
    for (i, p) in peers.iter().enumerate() {
        let k = |f: &str| format!("peers[{i}].{f}");
        name_ok(&k("name"), &p.name)?;
        if !names.insert(p.name.as_str()) {
            return Err(ConfigError::at(k("name"), "duplicate peer"));
        }
        p.address
            .parse::<SocketAddr>()
            .map_err(|_| ConfigError::at(k("address"), "not an IP:port address"))?;
        if let Some(t) = &p.tcp_address {
            t.parse::<SocketAddr>()
                .map_err(|_| ConfigError::at(k("tcp_address"), "not an IP:port address"))?;
        }
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
