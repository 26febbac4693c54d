//! `[[backends]]`: pools of model servers a shard dispatches to (crate
//! `sluice-backends`), and `[openai]`: the OpenAI API on the front door.
//! docs/backends.md documents every key.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::validate::range;
use super::{ConfigError, ModelCfg, ModelKind};

/// Hard limits of backend pools.
pub mod limits {
    /// Most pools.
    pub const POOL_COUNT_MAX: usize = 64;
    /// Most endpoints in one pool.
    pub const ENDPOINTS_PER_POOL_MAX: usize = 64;
    /// Most model names one pool lists (or discovers).
    pub const MODELS_PER_POOL_MAX: usize = 256;
    /// Longest pool name.
    pub const NAME_LEN_MAX: usize = 64;
    /// Longest endpoint URL.
    pub const URL_LEN_MAX: usize = 256;
    /// Longest upstream model name (not on the wire: servers name models
    /// as they like, e.g. Hugging Face paths).
    pub const UPSTREAM_LEN_MAX: usize = 256;
    /// Most requests in flight at one endpoint.
    pub const CONCURRENCY_MAX: u32 = 4096;
    /// Most requests waiting for an endpoint, per pool.
    pub const QUEUE_DEPTH_MAX: u32 = 65_536;
    /// Longest connect timeout, ms.
    pub const CONNECT_TIMEOUT_MS_MAX: u32 = 60_000;
    /// Longest upstream timeout, ms (an hour, as `X-AI-Timeout`).
    pub const REQUEST_TIMEOUT_MS_MAX: u32 = 3_600_000;
    /// Shortest health-check interval, ms.
    pub const HEALTH_INTERVAL_MS_MIN: u32 = 100;
    /// Longest health-check interval, ms.
    pub const HEALTH_INTERVAL_MS_MAX: u32 = 600_000;
    /// Most consecutive failures before an ejection.
    pub const EJECT_ERRORS_MAX: u32 = 1000;
    /// Longest first ejection, ms.
    pub const EJECT_MS_MAX: u32 = 600_000;
    /// Longest ejection, ms.
    pub const EJECT_MAX_MS_MAX: u32 = 3_600_000;
    /// Most extra attempts of one request.
    pub const RETRIES_MAX: u32 = 8;
}

/// What a pool's endpoints speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BackendProtocol {
    /// OpenAI's HTTP API: vLLM, llama.cpp, TGI, SGLang.
    Openai,
    /// KServe v2 / Open Inference Protocol over HTTP: Triton, KServe
    /// ModelServer, MLServer.
    KserveHttp,
}

/// `[[backends]]`: one pool of model-server endpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendCfg {
    /// Unique name (metrics, admin API).
    pub name: String,
    /// What the endpoints speak.
    pub protocol: BackendProtocol,
    /// Base URLs, `http://host:port` or `https://host:port`.
    pub endpoints: Vec<String>,
    /// Labels matched against a shard's: a pool serves the shards whose
    /// every label it carries.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The model names the endpoints serve; empty: discovered from each
    /// endpoint (`GET /v1/models`, `GET /v2/models`).
    #[serde(default)]
    pub models: Vec<String>,
    /// Most requests in flight at one endpoint.
    #[serde(default = "default_concurrency")]
    pub max_concurrency: u32,
    /// Requests waiting for an endpoint, pool-wide; more get 429.
    #[serde(default = "default_queue_depth")]
    pub queue_depth: u32,
    /// Connect timeout, ms.
    #[serde(default = "default_connect_ms")]
    pub connect_timeout_ms: u32,
    /// Upstream timeout of a request that names none (`X-AI-Timeout`), ms.
    #[serde(default = "default_request_ms")]
    pub request_timeout_ms: u32,
    /// Active health checks, ms between two.
    #[serde(default = "default_health_ms")]
    pub health_interval_ms: u32,
    /// Consecutive failures (connect errors, timeouts, 5xx) that eject an
    /// endpoint.
    #[serde(default = "default_eject_errors")]
    pub eject_errors: u32,
    /// First ejection, ms; each next one doubles, up to `eject_max_ms`.
    #[serde(default = "default_eject_ms")]
    pub eject_ms: u32,
    /// Longest ejection, ms.
    #[serde(default = "default_eject_max_ms")]
    pub eject_max_ms: u32,
    /// Extra attempts of a request on another endpoint, before any byte
    /// of the answer reached the client.
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// Retries at most this percent of the pool's requests.
    #[serde(default = "default_retry_budget")]
    pub retry_budget_pct: u32,
}

fn default_concurrency() -> u32 {
    8
}
fn default_queue_depth() -> u32 {
    64
}
fn default_connect_ms() -> u32 {
    1000
}
fn default_request_ms() -> u32 {
    120_000
}
fn default_health_ms() -> u32 {
    1000
}
fn default_eject_errors() -> u32 {
    3
}
fn default_eject_ms() -> u32 {
    1000
}
fn default_eject_max_ms() -> u32 {
    30_000
}
fn default_retries() -> u32 {
    1
}
fn default_retry_budget() -> u32 {
    20
}

/// `[openai]`: the OpenAI API on the front door's HTTP listener.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenaiCfg {
    /// The version (or alias) a request for this model gets when it sends
    /// no `X-Model-Version`; a model not listed requires the header.
    #[serde(default)]
    pub default_versions: BTreeMap<String, String>,
}

/// A change to a pool's endpoints at run time (admin API, `sluicectl
/// backends`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointOp {
    /// The pool's name.
    pub pool: String,
    /// The endpoint's URL, as in `endpoints`.
    pub url: String,
    /// What to do.
    pub action: EndpointAction,
}

/// What an [`EndpointOp`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndpointAction {
    /// Adds it; it takes requests once a health check saw it ready.
    Add,
    /// It takes nothing new and finishes what it holds.
    Drain,
    /// It takes requests again.
    Undrain,
    /// Out of the pool; what it holds finishes.
    Remove,
}

/// A URL's parts: `http` or `https`, host, port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointUrl {
    /// TLS.
    pub https: bool,
    /// Host name or address (IPv6 in brackets).
    pub host: String,
    /// Port.
    pub port: u16,
}

/// Parses `http://host:port` (nothing after: no path, not even `/`).
pub fn parse_endpoint(url: &str) -> Result<EndpointUrl, String> {
    if url.len() > limits::URL_LEN_MAX {
        return Err(format!("longer than {} bytes", limits::URL_LEN_MAX));
    }
    let (https, rest) = if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else {
        return Err("must start with http:// or https://".into());
    };
    if rest.contains(['/', '?', '#', '@']) || rest.bytes().any(|b| !b.is_ascii_graphic()) {
        return Err("must be scheme://host:port, with no path, query or user".into());
    }
    let split = rest
        .rfind(':')
        .filter(|&i| !rest[i..].contains(']'))
        .ok_or("needs a port (scheme://host:port)")?;
    let (host, port) = (&rest[..split], &rest[split + 1..]);
    let port: u16 = port
        .parse()
        .ok()
        .filter(|&p| p != 0)
        .ok_or("port must be 1 to 65535")?;
    if host.is_empty() {
        return Err("needs a host".into());
    }
    Ok(EndpointUrl {
        https,
        host: host.to_owned(),
        port,
    })
}

/// Checks `[[backends]]`, `[openai]` and the models served by backends.
pub fn validate(
    backends: &[BackendCfg],
    openai: &OpenaiCfg,
    models: &[ModelCfg],
) -> Result<(), ConfigError> {
    use limits::*;
    if backends.len() > POOL_COUNT_MAX {
        return Err(ConfigError::at(
            "backends",
            format!("at most {POOL_COUNT_MAX} pools"),
        ));
    }
    let mut names = std::collections::HashSet::new();
    for (i, b) in backends.iter().enumerate() {
        let k = |f: &str| format!("backends[{i}].{f}");
        if b.name.is_empty()
            || b.name.len() > NAME_LEN_MAX
            || !b
                .name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c))
        {
            return Err(ConfigError::at(
                k("name"),
                format!("1 to {NAME_LEN_MAX} characters of A-Z a-z 0-9 . _ -"),
            ));
        }
        if !names.insert(b.name.as_str()) {
            return Err(ConfigError::at(
                k("name"),
                format!("duplicate pool {:?}", b.name),
            ));
        }
        if b.endpoints.is_empty() || b.endpoints.len() > ENDPOINTS_PER_POOL_MAX {
            return Err(ConfigError::at(
                k("endpoints"),
                format!("1 to {ENDPOINTS_PER_POOL_MAX} endpoints"),
            ));
        }
        for (j, e) in b.endpoints.iter().enumerate() {
            parse_endpoint(e)
                .map_err(|m| ConfigError::at(format!("backends[{i}].endpoints[{j}]"), m))?;
            if b.endpoints[..j].contains(e) {
                return Err(ConfigError::at(
                    format!("backends[{i}].endpoints[{j}]"),
                    format!("{e:?} listed twice"),
                ));
            }
        }
        if b.models.len() > MODELS_PER_POOL_MAX {
            return Err(ConfigError::at(
                k("models"),
                format!("at most {MODELS_PER_POOL_MAX}"),
            ));
        }
        range(&k("max_concurrency"), b.max_concurrency, 1, CONCURRENCY_MAX)?;
        range(&k("queue_depth"), b.queue_depth, 0, QUEUE_DEPTH_MAX)?;
        range(
            &k("connect_timeout_ms"),
            b.connect_timeout_ms,
            1,
            CONNECT_TIMEOUT_MS_MAX,
        )?;
        range(
            &k("request_timeout_ms"),
            b.request_timeout_ms,
            1,
            REQUEST_TIMEOUT_MS_MAX,
        )?;
        range(
            &k("health_interval_ms"),
            b.health_interval_ms,
            HEALTH_INTERVAL_MS_MIN,
            HEALTH_INTERVAL_MS_MAX,
        )?;
        range(&k("eject_errors"), b.eject_errors, 1, EJECT_ERRORS_MAX)?;
        range(&k("eject_ms"), b.eject_ms, 1, EJECT_MS_MAX)?;
        range(
            &k("eject_max_ms"),
            b.eject_max_ms,
            b.eject_ms,
            EJECT_MAX_MS_MAX,
        )?;
        range(&k("retries"), b.retries, 0, RETRIES_MAX)?;
        range(&k("retry_budget_pct"), b.retry_budget_pct, 0, 100)?;
    }
    for (i, m) in models.iter().enumerate() {
        let k = |f: &str| format!("models[{i}].{f}");
        match (m.kind, &m.upstream) {
            (ModelKind::Backend, _) if m.path.is_some() => {
                return Err(ConfigError::at(
                    k("path"),
                    "a backend model has no file: backends serve it",
                ));
            }
            (ModelKind::Backend, Some(u)) => {
                super::wire_token(&k("upstream"), u, UPSTREAM_LEN_MAX)?;
            }
            (ModelKind::Backend, None) => {}
            (_, Some(_)) => {
                return Err(ConfigError::at(
                    k("upstream"),
                    "only a kind = \"backend\" model has an upstream name",
                ));
            }
            (_, None) => {}
        }
    }
    for (name, v) in &openai.default_versions {
        let key = format!("openai.default_versions.{name}");
        let named = models
            .iter()
            .any(|m| m.name == *name && (m.version == *v || m.aliases.iter().any(|a| a == v)));
        if !named {
            return Err(ConfigError::at(
                key,
                format!("no model {name:?} with version or alias {v:?}"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_urls() {
        let ok = parse_endpoint("http://127.0.0.1:8101").unwrap();
        assert_eq!(
            (ok.https, ok.host.as_str(), ok.port),
            (false, "127.0.0.1", 8101)
        );
        let v6 = parse_endpoint("https://[::1]:443").unwrap();
        assert_eq!((v6.https, v6.host.as_str(), v6.port), (true, "[::1]", 443));
        for bad in [
            "127.0.0.1:80",
            "http://host",
            "http://host:0",
            "http://host:99999",
            "http://host:80/v1",
            "http://user@host:80",
            "http://:80",
            "http://[::1]",
            "http://host:80/",
        ] {
            assert!(parse_endpoint(bad).is_err(), "{bad}");
        }
    }
}
