//! The seed's semantic headers, read the same way for HTTP and gRPC:
//! `X-Model-Version`, `X-Lora-Adapter-ID`, `X-AI-Intent`, `X-AI-Timeout`,
//! `traceparent` and the tenant's credentials (`Authorization: Bearer` or
//! `Sluice-HMAC-v2`). Routing uses only these and the path: the body is not
//! read before the request is known to be routable and authenticated (a
//! signed request's body is then checked against its signed digest).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_engine::tables::Tables;
use sluice_wire::{ErrorCode, TenantKey, TraceContext, limits};

use crate::ctx::Stats;
use crate::errors::Refusal;
use crate::signing::Signer;

/// Largest `X-AI-Timeout`: one hour.
pub const TIMEOUT_MAX: Duration = Duration::from_secs(3600);

/// Header access over HTTP headers and gRPC metadata alike.
pub trait Headers {
    /// The value of `name` (lower case), if present and visible ASCII.
    fn text(&self, name: &str) -> Result<Option<&str>, Refusal>;
}

impl Headers for http::HeaderMap {
    fn text(&self, name: &str) -> Result<Option<&str>, Refusal> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v
                .to_str()
                .map(Some)
                .map_err(|_| Refusal::bad(format!("{name}: not visible ASCII"))),
        }
    }
}

impl Headers for tonic::metadata::MetadataMap {
    fn text(&self, name: &str) -> Result<Option<&str>, Refusal> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v
                .to_str()
                .map(Some)
                .map_err(|_| Refusal::bad(format!("{name}: not visible ASCII"))),
        }
    }
}

/// Who sends the request.
#[derive(Debug, Clone)]
pub struct Tenant {
    /// Wire id (0 when authentication is off).
    pub id: u32,
    /// Name, as routes match it ("" when authentication is off).
    pub name: String,
    /// The key the frame is signed with, so the worker checks it as it
    /// checks every frame.
    pub key: Option<TenantKey>,
}

/// Everything routing needs, from the path and the headers.
#[derive(Debug, Clone)]
pub struct Semantic {
    /// Model name.
    pub model: String,
    /// Model version or alias.
    pub version: String,
    /// LoRA adapter id, "" for none.
    pub adapter: String,
    /// Intent, "" for none.
    pub intent: String,
    /// Absolute deadline, µs since the epoch; 0 for none.
    pub deadline_us: u64,
    /// The timeout the request named, if any.
    pub timeout: Option<Duration>,
    /// W3C trace context from `traceparent`.
    pub trace: TraceContext,
    /// The tenant.
    pub tenant: Tenant,
    /// A signed request's body digest, to compare once the body is read.
    pub body_sha256: Option<String>,
}

/// Microseconds since the epoch.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn token(name: &str, v: &str, max: usize) -> Result<String, Refusal> {
    if v.len() > max {
        return Err(Refusal::bad(format!("{name}: longer than {max} bytes")));
    }
    if !v.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(Refusal::bad(format!(
            "{name}: must be visible ASCII without spaces"
        )));
    }
    Ok(v.to_string())
}

/// A duration like `8s`, `250ms`, `1.5s`, `100us`, `2m`.
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (num, unit) = s.split_at(split);
    if num.is_empty() || num.len() > 20 {
        return None;
    }
    let v: f64 = num.parse().ok()?;
    let scale = match unit {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return None,
    };
    let secs = v * scale;
    if !secs.is_finite() || secs <= 0.0 || secs > TIMEOUT_MAX.as_secs_f64() {
        return None;
    }
    Some(Duration::from_secs_f64(secs))
}

/// gRPC's own `grpc-timeout` (`<digits><H|M|S|m|u|n>`).
fn parse_grpc_timeout(s: &str) -> Option<Duration> {
    let (num, unit) = s.split_at(s.len().checked_sub(1)?);
    let v: u64 = num.parse().ok()?;
    let d = match unit {
        "H" => Duration::from_secs(v.checked_mul(3600)?),
        "M" => Duration::from_secs(v.checked_mul(60)?),
        "S" => Duration::from_secs(v),
        "m" => Duration::from_millis(v),
        "u" => Duration::from_micros(v),
        "n" => Duration::from_nanos(v),
        _ => return None,
    };
    Some(d.min(TIMEOUT_MAX))
}

/// `00-<32 hex>-<16 hex>-<2 hex>`; anything else is ignored, as W3C asks.
pub fn parse_traceparent(s: &str) -> TraceContext {
    fn hex<const N: usize>(s: &str) -> Option<[u8; N]> {
        if s.len() != 2 * N {
            return None;
        }
        let mut out = [0u8; N];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(out)
    }
    let mut it = s.trim().split('-');
    let parsed = (|| {
        let ver = it.next()?;
        if ver.len() != 2 || ver == "ff" {
            return None;
        }
        let trace_id = hex::<16>(it.next()?)?;
        let parent_id = hex::<8>(it.next()?)?;
        let flags = hex::<1>(it.next()?)?[0];
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(TraceContext {
            trace_id,
            parent_id,
            flags,
        })
    })();
    parsed.unwrap_or_default()
}

/// What credentials are checked and deadlines set with.
#[derive(Clone, Copy)]
pub struct Env<'a> {
    /// The tables as of the request.
    pub tables: &'a Tables,
    /// `Sluice-HMAC-v2` checks and nonces.
    pub signer: &'a Signer,
    /// Where refusals are counted.
    pub stats: &'a Stats,
    /// `frontdoor.request_timeout_ms`: the deadline of a request that
    /// names none.
    pub request_timeout: Duration,
}

/// The request as its signature covers it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Call<'a> {
    /// `POST`, `GET` (gRPC: `POST`).
    pub method: &'a str,
    /// The path as sent (gRPC: the method's path).
    pub path: &'a str,
    /// The query as sent, "" for none.
    pub query: &'a str,
    /// Credentials already checked for this call (gRPC: by the gate, once
    /// per call, with its first message's digest): not checked again.
    pub checked: Option<&'a Auth>,
}

/// Checked credentials.
#[derive(Debug, Clone)]
pub struct Auth {
    /// Who.
    pub tenant: Tenant,
    /// A signed request's body digest (lower-case hex), still to be
    /// compared with the body once read.
    pub body_sha256: Option<String>,
}

/// SHA-256 of nothing: what a request without a body signs.
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// The tenant behind the request's credentials. With no tenant
/// configured, authentication is off (as for every other transport).
/// Everything here comes from the headers: no body is read before it
/// passes.
pub fn authenticate(h: &dyn Headers, env: &Env<'_>, call: &Call<'_>) -> Result<Auth, Refusal> {
    if let Some(a) = call.checked {
        return Ok(a.clone());
    }
    let tables = env.tables;
    if !tables.auth.required {
        return Ok(Auth {
            tenant: Tenant {
                id: 0,
                name: String::new(),
                key: None,
            },
            body_sha256: None,
        });
    }
    let unauth = |m: &'static str| Refusal::code(ErrorCode::Unauthenticated, m);
    let Some(auth) = h.text("authorization")? else {
        return Err(unauth(
            "credentials required: Authorization: Bearer <token> or Sluice-HMAC-v2",
        ));
    };
    let counted = |f: crate::signing::Fail| {
        env.stats.signature_refused(f.cause);
        f.refusal
    };
    let (found, body_sha256) = if let Some(tok) = auth.strip_prefix("Bearer ") {
        let digest = sluice_engine::config::token_digest(tok.trim().as_bytes())
            .map_err(|_| unauth("unknown bearer token"))?;
        (tables.tenant_by_token(&digest), None)
    } else if let Some(rest) = auth.strip_prefix(crate::signing::SCHEME) {
        let text = |n: &str| -> Result<&str, Refusal> { Ok(h.text(n)?.unwrap_or("").trim()) };
        let signed = crate::signing::Signed {
            method: call.method,
            path: call.path,
            query: call.query,
            model_version: text("x-model-version")?,
            adapter: text("x-lora-adapter-id")?,
            intent: text("x-ai-intent")?,
            ..Default::default()
        };
        let v = env
            .signer
            .verify(tables, rest, &signed, now_us() / 1000)
            .map_err(counted)?;
        (tables.tenant(v.tenant), Some(v.body_sha256))
    } else if auth.starts_with("Sluice-HMAC ") {
        return Err(counted(crate::signing::old_format()));
    } else {
        return Err(unauth("Authorization must be Bearer or Sluice-HMAC-v2"));
    };
    let t = found.ok_or_else(|| unauth("authentication failed"))?;
    Ok(Auth {
        tenant: Tenant {
            id: t.id,
            name: t.name.clone(),
            key: Some(t.key.clone()),
        },
        body_sha256,
    })
}

/// Compares a signed request's body with its signed digest (nothing to do
/// for a request that was not signed).
pub fn check_body<'a>(
    stats: &Stats,
    want: Option<&str>,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Result<(), Refusal> {
    match want {
        Some(w) if crate::signing::sha256_hex(chunks) != w => {
            let f = crate::signing::body_mismatch();
            stats.signature_refused(f.cause);
            Err(f.refusal)
        }
        _ => Ok(()),
    }
}

/// A request's deadline: its timeout (`X-AI-Timeout`, `grpc-timeout`), or
/// `frontdoor.request_timeout_ms` when it names none; with
/// authentication on, at most the freshness window, which a signed
/// frame's deadline must lie within (docs/wire.md, Authentication).
pub fn request_deadline_us(timeout: Option<Duration>, default: Duration, tables: &Tables) -> u64 {
    let t = timeout.unwrap_or(default).as_micros() as u64;
    let t = if tables.auth.required {
        t.min(tables.auth.window_us)
    } else {
        t
    };
    now_us() + t
}

/// A token stream's deadline: its timeout, or none (authentication on:
/// the freshness window, the longest a signed frame may carry).
pub fn stream_deadline_us(timeout: Option<Duration>, tables: &Tables) -> u64 {
    match (timeout, tables.auth.required) {
        (None, false) => 0,
        (None, true) => now_us() + tables.auth.window_us,
        (Some(t), false) => now_us() + t.as_micros() as u64,
        (Some(t), true) => now_us() + (t.as_micros() as u64).min(tables.auth.window_us),
    }
}

/// Reads the semantic headers of an inference request. `path_version` is
/// the version the path (or the gRPC message) names, "" for none:
/// then `X-Model-Version` is required.
pub fn read(
    h: &dyn Headers,
    env: &Env<'_>,
    call: &Call<'_>,
    model: &str,
    path_version: &str,
) -> Result<Semantic, Refusal> {
    let model = token("model name", model, limits::MODEL_NAME_LEN_MAX)?;
    if model.is_empty() {
        return Err(Refusal::bad("model name required"));
    }
    let header_version = h.text("x-model-version")?.unwrap_or("").trim();
    let version = match (path_version, header_version) {
        ("", "") => {
            return Err(Refusal::code(
                ErrorCode::ModelVersionRequired,
                "X-Model-Version required",
            ));
        }
        ("", v) | (v, "") => v,
        (p, v) if p == v => p,
        _ => {
            return Err(Refusal::bad(
                "X-Model-Version differs from the version the request names",
            ));
        }
    };
    let version = token("X-Model-Version", version, limits::MODEL_VERSION_LEN_MAX)?;
    let adapter = match h.text("x-lora-adapter-id")? {
        Some(a) => token("X-Lora-Adapter-ID", a.trim(), limits::ADAPTER_LEN_MAX)?,
        None => String::new(),
    };
    let intent = match h.text("x-ai-intent")? {
        Some(a) => token("X-AI-Intent", a.trim(), limits::INTENT_LEN_MAX)?,
        None => String::new(),
    };
    let mut timeout = None;
    if let Some(t) = h.text("x-ai-timeout")? {
        timeout = Some(parse_duration(t).ok_or_else(|| {
            Refusal::bad("X-AI-Timeout: not a duration like 8s or 250ms (at most 1h)")
        })?);
    }
    if let Some(g) = h.text("grpc-timeout")?.and_then(parse_grpc_timeout) {
        timeout = Some(timeout.map_or(g, |t: Duration| t.min(g)));
    }
    let deadline_us = request_deadline_us(timeout, env.request_timeout, env.tables);
    let trace = h
        .text("traceparent")?
        .map(parse_traceparent)
        .unwrap_or_default();
    let auth = authenticate(h, env, call)?;
    Ok(Semantic {
        model,
        version,
        adapter,
        intent,
        deadline_us,
        timeout,
        trace,
        tenant: auth.tenant,
        body_sha256: auth.body_sha256,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("8s"), Some(Duration::from_secs(8)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1ms"), Some(Duration::from_millis(1)));
        assert_eq!(parse_duration("100us"), Some(Duration::from_micros(100)));
        for bad in ["", "8", "s", "-1s", "0s", "2h", "1e3s", "abc", "5 parsecs"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
        assert_eq!(parse_grpc_timeout("250m"), Some(Duration::from_millis(250)));
    }

    #[test]
    fn traceparent() {
        let t = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        assert_eq!(t.trace_id[0], 0x4b);
        assert_eq!(t.parent_id[7], 0xb7);
        assert_eq!(t.flags, 1);
        assert!(!parse_traceparent("00-zz-00f067aa0ba902b7-01").is_set());
        assert!(
            !parse_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_set()
        );
    }

    #[test]
    fn version_rule() {
        let mut t = Tables::default();
        t.auth.required = false;
        let signer = Signer::new(30_000, 16);
        let stats = Stats::default();
        let env = Env {
            tables: &t,
            signer: &signer,
            stats: &stats,
            request_timeout: Duration::from_millis(2000),
        };
        let call = Call {
            method: "POST",
            path: "/",
            ..Call::default()
        };
        let mut h = http::HeaderMap::new();
        let e = read(&h, &env, &call, "mlp", "").unwrap_err();
        assert_eq!(e.status, http::StatusCode::BAD_REQUEST);
        assert_eq!(e.message, "X-Model-Version required");
        assert_eq!(read(&h, &env, &call, "mlp", "1").unwrap().version, "1");
        h.insert("x-model-version", "2".parse().unwrap());
        assert_eq!(read(&h, &env, &call, "mlp", "").unwrap().version, "2");
        assert!(read(&h, &env, &call, "mlp", "1").is_err());
        h.insert("x-ai-timeout", "soon".parse().unwrap());
        assert!(read(&h, &env, &call, "mlp", "2").is_err());
    }

    #[test]
    fn a_request_without_a_timeout_gets_request_timeout_ms() {
        let mut t = Tables::default();
        t.auth.required = true;
        t.auth.window_us = 10_000_000;
        let d = Duration::from_millis(2000);
        let left = |deadline: u64| deadline.saturating_sub(now_us());
        assert!((1_900_000..=2_000_000).contains(&left(request_deadline_us(None, d, &t))));
        // A longer timeout is cut to the freshness window.
        let long = Some(Duration::from_secs(60));
        assert!(left(request_deadline_us(long, d, &t)) <= 10_000_000);
        assert!(left(request_deadline_us(long, d, &t)) > 9_000_000);
        t.auth.required = false;
        assert!(left(request_deadline_us(long, d, &t)) > 59_000_000);
        // Streams: their own timeout or none.
        assert_eq!(stream_deadline_us(None, &t), 0);
    }
}
