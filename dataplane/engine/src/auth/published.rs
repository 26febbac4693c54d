//! Keys and tokens published in the Sluice repository (the demo configs,
//! the README, the wire spec's vectors). Anyone can sign frames or call
//! the front door with them, so an appliance reachable from other hosts
//! refuses to start with one unless `auth.lab = true` says it is a lab.

use sha2::{Digest, Sha256};

use crate::config::{Config, ConfigError, TransportKind};

/// Tenant MAC keys as published: the demo tenant's (cfg/*.toml) and the
/// wire spec's example tenant 7 (docs/wire.md, docs/vectors/frames.json).
const PUBLISHED_KEYS: [&[u8]; 2] = [
    b"suice-demo-key-0000000000000000",
    b"sluice-example-key-tenant-7",
];

/// Bearer tokens as published (README, docs/frontdoor.md).
const PUBLISHED_TOKENS: [&str; 1] = ["sluice-demo-token-0000"];

/// Whether `key` (decoded) is one the repository publishes.
pub fn is_published_key(key: &[u8]) -> bool {
    PUBLISHED_KEYS.contains(&key)
}

/// Whether a configured token (`sha256:<hex>`) is the digest of a
/// published one. `env:` tokens are compared by their value.
fn is_published_token(spec: &str) -> bool {
    let value = if let Some(var) = spec.strip_prefix("env:") {
        match std::env::var(var) {
            Ok(v) => v,
            Err(_) => return false,
        }
    } else {
        String::new()
    };
    PUBLISHED_TOKENS.iter().any(|t| {
        if value.is_empty() {
            let hex: String = Sha256::digest(t.as_bytes())
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            spec.strip_prefix("sha256:")
                .is_some_and(|h| h.eq_ignore_ascii_case(&hex))
        } else {
            value == *t
        }
    })
}

/// Where the config is reachable from other hosts, named for the error:
/// a data plane on a NIC (DPDK, RDMA) or any listener on an address that
/// is not loopback.
fn exposed(cfg: &Config) -> Option<String> {
    match cfg.engine.transport {
        TransportKind::IoUring => {}
        t => return Some(format!("engine.transport = {t:?}")),
    }
    let not_loopback = |s: &str| {
        !s.is_empty()
            && s.parse::<std::net::SocketAddr>()
                .map_or(true, |a| !a.ip().is_loopback())
    };
    for (key, v) in [
        ("io_uring.listen", cfg.io_uring.listen.as_str()),
        ("frontdoor.http_listen", cfg.frontdoor.http_listen.as_str()),
        ("frontdoor.grpc_listen", cfg.frontdoor.grpc_listen.as_str()),
    ] {
        if not_loopback(v) {
            return Some(format!("{key} = {v:?}"));
        }
    }
    if cfg.io_uring.tcp_enabled() && not_loopback(&cfg.io_uring.tcp_listen) {
        return Some(format!(
            "io_uring.tcp_listen = {:?}",
            cfg.io_uring.tcp_listen
        ));
    }
    None
}

/// Refuses a published key or token on an appliance other hosts can
/// reach, unless `auth.lab` is set.
pub fn validate(cfg: &Config) -> Result<(), ConfigError> {
    if cfg.auth.lab {
        return Ok(());
    }
    let Some(where_) = exposed(cfg) else {
        return Ok(());
    };
    for (i, t) in cfg.tenants.iter().enumerate() {
        // An undecodable key is reported by the tenant checks.
        if crate::config::decode_key(&t.key).is_ok_and(|k| is_published_key(&k)) {
            return Err(ConfigError::at(
                format!("tenants[{i}].key"),
                format!(
                    "this key is published in the Sluice repository, and {where_} is reachable from other hosts: anyone could sign as tenant {:?}. Set a key of your own (e.g. key = \"env:SLUICE_KEY_{}\"), or auth.lab = true on a lab host",
                    t.name, t.id
                ),
            ));
        }
        if let Some(j) = t.tokens.iter().position(|s| is_published_token(s)) {
            return Err(ConfigError::at(
                format!("tenants[{i}].tokens[{j}]"),
                format!(
                    "this bearer token is published in the Sluice repository, and {where_} is reachable from other hosts. Set a token of your own, or auth.lab = true on a lab host"
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_keys_decode_as_in_the_configs() {
        let demo = crate::config::decode_key(
            "hex:73756963652d64656d6f2d6b65792d30303030303030303030303030303030",
        );
        assert!(demo.is_ok_and(|k| is_published_key(&k)));
        let spec7 =
            crate::config::decode_key("hex:736c756963652d6578616d706c652d6b65792d74656e616e742d37");
        assert!(spec7.is_ok_and(|k| is_published_key(&k)));
        assert!(!is_published_key(b"a-key-of-my-own-0000000000000000"));
    }

    fn demo_tenant() -> crate::config::TenantCfg {
        crate::config::TenantCfg {
            name: "demo".into(),
            id: 1,
            key: "hex:73756963652d64656d6f2d6b65792d30303030303030303030303030303030".into(),
            models: vec!["*".into()],
            adapters: vec!["*".into()],
            routes: vec!["*".into()],
            tokens: vec![],
            subjects: vec!["*".into()],
        }
    }

    #[test]
    fn a_published_key_is_refused_only_where_other_hosts_reach_it() {
        let mut cfg = Config::default();
        cfg.tenants.push(demo_tenant());
        assert!(validate(&cfg).is_ok(), "loopback");
        cfg.io_uring.listen = "0.0.0.0:7070".into();
        let e = validate(&cfg)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("tenants[0].key") && e.contains("published"),
            "{e}"
        );
        cfg.auth.lab = true;
        assert!(validate(&cfg).is_ok(), "lab");
        cfg.auth.lab = false;
        cfg.io_uring.listen = "127.0.0.1:7070".into();
        cfg.engine.transport = TransportKind::Dpdk;
        assert!(validate(&cfg).is_err(), "dpdk");
    }

    #[test]
    fn the_demo_token_digest_is_recognised() {
        assert!(is_published_token(
            "sha256:93849de6614ec0bbd8d0aed516245f309ec8c5d8bce3c2d79f0a7b35226386f9"
        ));
        assert!(!is_published_token(
            "sha256:0000000000000000000000000000000000000000000000000000000000000000"
        ));
    }
}
