//! `[frontdoor]`: the KServe v2 / Triton-compatible HTTP and gRPC front
//! door (crate `sluice-frontdoor`), and the tenants' bearer tokens it
//! accepts. Off unless a listen address is set.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::ConfigError;
use super::validate::range;

/// Hard limits of the front door.
pub mod limits {
    /// Most front-door threads.
    pub const THREAD_COUNT_MAX: u32 = 16;
    /// Most requests in flight per front-door thread (its slot pool).
    pub const SLOTS_MAX: u32 = 4096;
    /// Largest request body accepted, bytes (the wire's frame limit less
    /// the largest header).
    pub const BODY_BYTES_MAX: u32 = (256 << 20) - 4096;
    /// Smallest body limit that still fits a useful request.
    pub const BODY_BYTES_MIN: u32 = 4096;
    /// Largest reply frame, bytes.
    pub const REPLY_BYTES_MAX: u32 = 256 << 20;
    /// Smallest reply region (an error frame and a small answer).
    pub const REPLY_BYTES_MIN: u32 = 4096;
    /// Longest timeout of any kind, milliseconds.
    pub const TIMEOUT_MS_MAX: u32 = 3_600_000;
    /// Most connections (per thread, per source) and tracked sources.
    pub const CONNECTIONS_MAX: u32 = 1 << 20;
    /// Most bearer tokens per tenant.
    pub const TOKENS_PER_TENANT_MAX: usize = 8;
    /// Shortest bearer token accepted, bytes.
    pub const TOKEN_LEN_MIN: usize = 16;
    /// Largest `hmac_skew_ms`: five minutes (the v1 signature's window,
    /// which let a captured header be reused for ten).
    pub const HMAC_SKEW_MS_MAX: u32 = 300_000;
    /// Shortest `tls_reload_ms`.
    pub const TLS_RELOAD_MS_MIN: u32 = 100;
    /// Most nonces remembered (`hmac_nonces_max`).
    pub const HMAC_NONCES_MAX: u32 = 1 << 24;
}

use limits::*;

/// `[frontdoor]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FrontdoorCfg {
    /// HTTP/1.1 and HTTP/2 (cleartext) listen address; "" is off.
    pub http_listen: String,
    /// gRPC (HTTP/2) listen address; "" is off.
    pub grpc_listen: String,
    /// Front-door threads (each runs its own event loop and slot pool).
    pub threads: u32,
    /// Cores to pin the front-door threads to, in order; empty: not pinned.
    /// They should not be worker cores.
    pub cores: Vec<usize>,
    /// Requests in flight per thread: aligned request and reply slots
    /// mapped at start-up.
    pub slots: u32,
    /// Largest request body, bytes: longer ones are refused with 413
    /// before they are read.
    pub body_bytes_max: u32,
    /// Largest reply frame, bytes (a reply region per slot).
    pub reply_bytes_max: u32,
    /// A new connection must show its protocol within this, milliseconds:
    /// its first bytes (HTTP/1), or the HTTP/2 preface and its first
    /// SETTINGS frame (HTTP/2, gRPC). Else it is closed.
    pub handshake_timeout_ms: u32,
    /// A connection with no request in flight is closed after this long,
    /// milliseconds (HTTP/1 keep-alive; HTTP/2 and gRPC with no open
    /// request stream, whatever PINGs or SETTINGS it sends).
    pub idle_timeout_ms: u32,
    /// A request's headers must arrive within this, milliseconds, from
    /// their first byte (HTTP/1), or an HTTP/2 frame (a header block) from
    /// its first byte to its end.
    pub header_timeout_ms: u32,
    /// A client must send a request's whole body within this, milliseconds
    /// (HTTP: 408; gRPC: DEADLINE_EXCEEDED for a message that does not
    /// arrive whole in time), and an HTTP/2 DATA frame from its first
    /// byte to its end.
    pub body_timeout_ms: u32,
    /// A write that makes no progress for this long (a client that does
    /// not read its answer) closes the connection, milliseconds.
    pub write_timeout_ms: u32,
    /// Most connections open per thread; more are closed at accept.
    pub connections_max: u32,
    /// Most connections open from one source address (IPv6: one /64)
    /// across all threads; more are closed at accept.
    pub connections_per_source_max: u32,
    /// Most source addresses tracked for `connections_per_source_max`;
    /// a connection from a new source while the table is full is closed
    /// at accept.
    pub sources_max: u32,
    /// The deadline of a request that names no timeout (`X-AI-Timeout`,
    /// `grpc-timeout`), milliseconds; a named one overrides it (with
    /// authentication on, up to `[auth] freshness_window_ms`). Token
    /// streams are not bounded by it.
    pub request_timeout_ms: u32,
    /// How far a `Sluice-HMAC-v2` timestamp may be from the server's
    /// clock, milliseconds.
    pub hmac_skew_ms: u32,
    /// Most `Sluice-HMAC-v2` nonces remembered (each for `hmac_skew_ms`
    /// after its timestamp, all threads together); a signed request that
    /// would need one more is refused 503 / UNAVAILABLE rather than let
    /// through unremembered.
    pub hmac_nonces_max: u32,
    /// TLS on both listeners: the certificate chain (PEM), "" for none
    /// (cleartext). Relative to the config file.
    pub tls_cert: String,
    /// The private key (PEM: PKCS#8, PKCS#1 or SEC1) of `tls_cert`.
    pub tls_key: String,
    /// How often the two files are checked for a change, milliseconds; a
    /// changed pair is loaded without a restart (new connections use it).
    pub tls_reload_ms: u32,
}

impl Default for FrontdoorCfg {
    fn default() -> Self {
        FrontdoorCfg {
            http_listen: String::new(),
            grpc_listen: String::new(),
            threads: 1,
            cores: Vec::new(),
            slots: 64,
            body_bytes_max: 16 << 20,
            reply_bytes_max: 16 << 20,
            handshake_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            header_timeout_ms: 30_000,
            body_timeout_ms: 10_000,
            write_timeout_ms: 30_000,
            connections_max: 1024,
            connections_per_source_max: 256,
            sources_max: 65_536,
            request_timeout_ms: 2_000,
            hmac_skew_ms: 30_000,
            hmac_nonces_max: 262_144,
            tls_cert: String::new(),
            tls_key: String::new(),
            tls_reload_ms: 5_000,
        }
    }
}

impl FrontdoorCfg {
    /// Whether any listener is configured.
    pub fn enabled(&self) -> bool {
        !self.http_listen.is_empty() || !self.grpc_listen.is_empty()
    }

    /// Bytes of one request slot: the largest frame (header and body).
    pub fn request_slot_bytes(&self) -> usize {
        (self.body_bytes_max as usize + sluice_wire::limits::HEADER_LEN_MAX).next_multiple_of(64)
    }

    /// Checks ranges; `workers` are the worker cores.
    pub fn validate(&self, workers: &[usize]) -> Result<(), ConfigError> {
        let k = |f: &str| format!("frontdoor.{f}");
        for (f, v) in [
            ("http_listen", &self.http_listen),
            ("grpc_listen", &self.grpc_listen),
        ] {
            if !v.is_empty() && v.parse::<std::net::SocketAddr>().is_err() {
                return Err(ConfigError::at(k(f), "not an IP:port address"));
            }
        }
        // Port 0 asks for an ephemeral port each: those never collide.
        let fixed = !self.http_listen.ends_with(":0");
        if !self.http_listen.is_empty() && fixed && self.http_listen == self.grpc_listen {
            return Err(ConfigError::at(
                k("grpc_listen"),
                "must differ from http_listen",
            ));
        }
        range(&k("threads"), self.threads, 1, THREAD_COUNT_MAX)?;
        if !self.cores.is_empty() && self.cores.len() != self.threads as usize {
            return Err(ConfigError::at(
                k("cores"),
                "one core per front-door thread, or none",
            ));
        }
        let ncpu = crate::sys::cores_configured();
        for (i, &c) in self.cores.iter().enumerate() {
            if c >= ncpu {
                return Err(ConfigError::at(
                    format!("frontdoor.cores[{i}]"),
                    format!("core {c} does not exist (this host has {ncpu})"),
                ));
            }
            if workers.contains(&c) {
                return Err(ConfigError::at(
                    format!("frontdoor.cores[{i}]"),
                    format!(
                        "core {c} is a worker core: the front door runs off the pinned workers"
                    ),
                ));
            }
        }
        range(&k("slots"), self.slots, 1, SLOTS_MAX)?;
        range(
            &k("body_bytes_max"),
            self.body_bytes_max,
            BODY_BYTES_MIN,
            BODY_BYTES_MAX,
        )?;
        range(
            &k("reply_bytes_max"),
            self.reply_bytes_max,
            REPLY_BYTES_MIN,
            REPLY_BYTES_MAX,
        )?;
        for (f, v) in [
            ("handshake_timeout_ms", self.handshake_timeout_ms),
            ("idle_timeout_ms", self.idle_timeout_ms),
            ("header_timeout_ms", self.header_timeout_ms),
            ("body_timeout_ms", self.body_timeout_ms),
            ("write_timeout_ms", self.write_timeout_ms),
            ("request_timeout_ms", self.request_timeout_ms),
        ] {
            range(&k(f), v, 1, TIMEOUT_MS_MAX)?;
        }
        range(
            &k("connections_max"),
            self.connections_max,
            1,
            CONNECTIONS_MAX,
        )?;
        range(
            &k("connections_per_source_max"),
            self.connections_per_source_max,
            1,
            CONNECTIONS_MAX,
        )?;
        range(&k("sources_max"), self.sources_max, 1, CONNECTIONS_MAX)?;
        range(&k("hmac_skew_ms"), self.hmac_skew_ms, 1, HMAC_SKEW_MS_MAX)?;
        range(
            &k("hmac_nonces_max"),
            self.hmac_nonces_max,
            1,
            HMAC_NONCES_MAX,
        )?;
        if self.tls_cert.is_empty() != self.tls_key.is_empty() {
            return Err(ConfigError::at(
                // Named at the one that is there (the other has no line).
                k(if self.tls_cert.is_empty() {
                    "tls_key"
                } else {
                    "tls_cert"
                }),
                "tls_cert and tls_key go together",
            ));
        }
        range(
            &k("tls_reload_ms"),
            self.tls_reload_ms,
            TLS_RELOAD_MS_MIN,
            TIMEOUT_MS_MAX,
        )?;
        Ok(())
    }
}

/// Decodes a tenant's bearer token spec into the SHA-256 digest the front
/// door compares: `sha256:<64 hex digits>` (the config holds only the
/// digest) or `env:VAR` (the variable holds the token itself).
pub fn decode_token(spec: &str) -> Result<[u8; 32], String> {
    if let Some(h) = spec.strip_prefix("sha256:") {
        let h = h.trim();
        if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("a sha256: token is 64 hex digits".into());
        }
        let mut out = [0u8; 32];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap_or(0);
        }
        return Ok(out);
    }
    if let Some(var) = spec.strip_prefix("env:") {
        let t = std::env::var(var).map_err(|_| format!("environment variable {var} is not set"))?;
        return token_digest(t.trim().as_bytes());
    }
    Err("token must start with \"sha256:\" or \"env:\"".into())
}

/// The digest of a presented bearer token; refuses short ones.
pub fn token_digest(token: &[u8]) -> Result<[u8; 32], String> {
    if token.len() < TOKEN_LEN_MIN {
        return Err(format!("a token is at least {TOKEN_LEN_MIN} bytes"));
    }
    Ok(Sha256::digest(token).into())
}

/// Checks a tenant's `tokens`.
pub fn validate_tokens(key: &str, tokens: &[String]) -> Result<(), ConfigError> {
    if tokens.len() > TOKENS_PER_TENANT_MAX {
        return Err(ConfigError::at(
            key,
            format!("at most {TOKENS_PER_TENANT_MAX} tokens"),
        ));
    }
    for (j, t) in tokens.iter().enumerate() {
        decode_token(t).map_err(|m| ConfigError::at(format!("{key}[{j}]"), m))?;
    }
    Ok(())
}
