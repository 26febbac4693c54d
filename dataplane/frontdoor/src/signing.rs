//! `Sluice-HMAC-v2` request signatures (docs/frontdoor.md, "Request
//! signing"): HMAC-SHA256 with the tenant's key over a canonical string of
//! the request's method, path, query, routing headers, timestamp, nonce and
//! the SHA-256 of its body, and a bounded set of the nonces seen so that a
//! captured header authorizes one request, not any for the skew window.
//!
//! The header names the body's digest, so the whole signature is checked
//! before the body is read (an unknown tenant or a forged signature costs
//! no body read, and only signatures that verified use the nonce set); the
//! body is then read and must hash to that digest.

use std::collections::HashMap;
use std::sync::Mutex;

use sha2::{Digest, Sha256};
use sluice_engine::tables::Tables;
use sluice_wire::{ErrorCode, TenantKey};

use crate::errors::Refusal;

/// The header's scheme.
pub const SCHEME: &str = "Sluice-HMAC-v2";

/// The first line of the canonical string.
const CANONICAL_TAG: &str = "SLUICE-HMAC-V2";

/// A nonce's shortest and longest length, characters of `[A-Za-z0-9_-]`.
pub const NONCE_LEN_MIN: usize = 16;
/// See [`NONCE_LEN_MIN`].
pub const NONCE_LEN_MAX: usize = 64;

/// What a request signs, besides its body's bytes.
#[derive(Debug, Clone, Default)]
pub struct Signed<'a> {
    /// Tenant id.
    pub tenant: u32,
    /// `POST`, `GET` (gRPC: `POST`).
    pub method: &'a str,
    /// The path as sent, not decoded (gRPC: `/inference.GRPCInferenceService/<Method>`).
    pub path: &'a str,
    /// The query string as sent, without `?`; "" for none (gRPC: "").
    pub query: &'a str,
    /// `X-Model-Version`, trimmed; "" when absent.
    pub model_version: &'a str,
    /// `X-Lora-Adapter-ID`, trimmed; "" when absent.
    pub adapter: &'a str,
    /// `X-AI-Intent`, trimmed; "" when absent.
    pub intent: &'a str,
    /// Unix time, milliseconds.
    pub ts_ms: u64,
    /// The nonce.
    pub nonce: &'a str,
    /// SHA-256 of the body, lower-case hex (HTTP: the body's exact bytes;
    /// gRPC: the call's first message as framed, without its 5-byte prefix).
    pub body_sha256: &'a str,
}

/// The canonical string: the fields one per line, no trailing newline.
pub fn canonical(s: &Signed<'_>) -> String {
    format!(
        "{CANONICAL_TAG}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}\n{}",
        s.tenant,
        s.method,
        s.path,
        s.query,
        s.model_version,
        s.adapter,
        s.intent,
        s.ts_ms,
        s.nonce,
        s.body_sha256
    )
}

/// Lower-case hex.
pub fn hex(b: &[u8]) -> String {
    const H: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 * b.len());
    for x in b {
        s.push(H[usize::from(x >> 4)] as char);
        s.push(H[usize::from(x & 15)] as char);
    }
    s
}

/// SHA-256 of `chunks` in order, lower-case hex.
pub fn sha256_hex<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> String {
    let mut h = Sha256::new();
    for c in chunks {
        h.update(c);
    }
    hex(&h.finalize())
}

/// The `Authorization` value a client sends (what clients implement).
pub fn header(key: &TenantKey, s: &Signed<'_>) -> String {
    let sig = key.sign_message(canonical(s).as_bytes());
    format!(
        "{SCHEME} tenant={}, ts={}, nonce={}, body={}, sig={}",
        s.tenant,
        s.ts_ms,
        s.nonce,
        s.body_sha256,
        hex(&sig)
    )
}

/// Why a signature was refused (each counted apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The header is not well formed.
    Malformed,
    /// The timestamp is outside `hmac_skew_ms`.
    Stale,
    /// Unknown tenant or a wrong signature.
    BadSignature,
    /// The nonce was seen within the skew window.
    Replayed,
    /// The nonce set is full (`hmac_nonces_max`).
    NoncesFull,
    /// The body does not hash to the signed digest.
    BodyMismatch,
    /// The v1 `Sluice-HMAC` header, which signs no body and no nonce.
    OldFormat,
}

/// A refused signature: why, and what the client is told.
#[derive(Debug)]
pub struct Fail {
    /// Why.
    pub cause: Cause,
    /// The answer.
    pub refusal: Refusal,
}

fn fail(cause: Cause, msg: &'static str) -> Fail {
    let refusal = match cause {
        Cause::Replayed => Refusal::code(ErrorCode::Replayed, msg),
        Cause::NoncesFull => Refusal::other(
            http::StatusCode::SERVICE_UNAVAILABLE,
            tonic::Code::Unavailable,
            msg,
        ),
        _ => Refusal::code(ErrorCode::Unauthenticated, msg),
    };
    Fail { cause, refusal }
}

/// The refusal of a v1 header.
pub fn old_format() -> Fail {
    fail(
        Cause::OldFormat,
        "Sluice-HMAC (v1: method, path and timestamp only) is no longer accepted: sign with Sluice-HMAC-v2 (body digest and nonce; docs/frontdoor.md)",
    )
}

/// The refusal of a body that does not hash to the signed digest.
pub fn body_mismatch() -> Fail {
    fail(
        Cause::BodyMismatch,
        "Sluice-HMAC-v2: the body does not match its signed SHA-256",
    )
}

/// A signature that verified; its body is still to be checked.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The tenant's id.
    pub tenant: u32,
    /// The digest the body must have, lower-case hex.
    pub body_sha256: String,
}

/// The nonces seen, with when each may be forgotten.
#[derive(Debug)]
struct Nonces {
    seen: HashMap<(u32, Box<str>), u64>,
    max: usize,
    /// No entry expires before this (ms): a sweep before it finds nothing.
    sweep_at_ms: u64,
}

/// The signature checker: the skew and the nonce set, shared by every
/// front-door thread (connections are spread over the threads by the
/// kernel, so a replay may arrive on any of them).
#[derive(Debug)]
pub struct Signer {
    skew_ms: u64,
    nonces: Mutex<Nonces>,
}

fn nonce_ok(n: &str) -> bool {
    (NONCE_LEN_MIN..=NONCE_LEN_MAX).contains(&n.len())
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn unhex32(s: &str) -> Option<[u8; 32]> {
    if !hex64(s) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// The parameters of a v2 header.
struct Params<'a> {
    tenant: u32,
    ts_ms: u64,
    nonce: &'a str,
    body: &'a str,
    sig: [u8; 32],
}

fn params(rest: &str) -> Result<Params<'_>, Fail> {
    let (mut tenant, mut ts, mut nonce, mut body, mut sig) = (None, None, None, None, None);
    for part in rest.split(',') {
        let (k, v) = part.trim().split_once('=').unwrap_or(("", ""));
        match k {
            "tenant" => tenant = v.parse::<u32>().ok(),
            "ts" => ts = v.parse::<u64>().ok(),
            "nonce" => nonce = Some(v),
            "body" => body = Some(v),
            "sig" => sig = Some(v),
            _ => {}
        }
    }
    let (Some(tenant), Some(ts_ms), Some(nonce), Some(body), Some(sig)) =
        (tenant, ts, nonce, body, sig)
    else {
        return Err(fail(
            Cause::Malformed,
            "Sluice-HMAC-v2 needs tenant=, ts= (unix ms), nonce=, body= and sig=",
        ));
    };
    if !nonce_ok(nonce) {
        return Err(fail(
            Cause::Malformed,
            "Sluice-HMAC-v2 nonce: 16 to 64 characters of A-Z a-z 0-9 - _",
        ));
    }
    if !hex64(body) {
        return Err(fail(
            Cause::Malformed,
            "Sluice-HMAC-v2 body: the body's SHA-256, 64 lower-case hex digits",
        ));
    }
    let sig = unhex32(sig).ok_or_else(|| {
        fail(
            Cause::Malformed,
            "Sluice-HMAC-v2 sig: 64 lower-case hex digits",
        )
    })?;
    Ok(Params {
        tenant,
        ts_ms,
        nonce,
        body,
        sig,
    })
}

impl Signer {
    /// A checker allowing `skew_ms` of clock difference and remembering at
    /// most `nonces_max` nonces.
    pub fn new(skew_ms: u32, nonces_max: u32) -> Signer {
        Signer {
            skew_ms: u64::from(skew_ms),
            nonces: Mutex::new(Nonces {
                seen: HashMap::new(),
                max: nonces_max as usize,
                sweep_at_ms: 0,
            }),
        }
    }

    /// Checks a v2 header's parameters (`rest`, after the scheme) against
    /// the request: the timestamp, the nonce's form, the tenant, the
    /// signature, then the nonce's freshness, in that order, so that only
    /// a signature that verified takes a place in the nonce set.
    pub fn verify(
        &self,
        tables: &Tables,
        rest: &str,
        req: &Signed<'_>,
        now_ms: u64,
    ) -> Result<Verified, Fail> {
        let p = params(rest)?;
        if now_ms.abs_diff(p.ts_ms) > self.skew_ms {
            return Err(fail(
                Cause::Stale,
                "Sluice-HMAC-v2 timestamp is too far from the server's clock (frontdoor.hmac_skew_ms)",
            ));
        }
        let signed = Signed {
            tenant: p.tenant,
            ts_ms: p.ts_ms,
            nonce: p.nonce,
            body_sha256: p.body,
            ..req.clone()
        };
        let ok = tables
            .tenant(p.tenant)
            .is_some_and(|t| t.key.verify_message(canonical(&signed).as_bytes(), &p.sig));
        if !ok {
            return Err(fail(Cause::BadSignature, "authentication failed"));
        }
        self.remember(p.tenant, p.nonce, p.ts_ms + self.skew_ms, now_ms)?;
        Ok(Verified {
            tenant: p.tenant,
            body_sha256: p.body.to_string(),
        })
    }

    /// Takes the nonce, kept until `expires_ms` (past it the timestamp
    /// is refused anyway).
    fn remember(&self, tenant: u32, nonce: &str, expires_ms: u64, now_ms: u64) -> Result<(), Fail> {
        let mut n = self.nonces.lock().unwrap_or_else(|p| p.into_inner());
        let key = (tenant, Box::<str>::from(nonce));
        if n.seen.get(&key).is_some_and(|&e| e >= now_ms) {
            return Err(fail(
                Cause::Replayed,
                "Sluice-HMAC-v2 nonce already used: each request needs a new one",
            ));
        }
        if n.seen.len() >= n.max && !n.seen.contains_key(&key) && now_ms >= n.sweep_at_ms {
            n.seen.retain(|_, e| *e >= now_ms);
            n.sweep_at_ms = n
                .seen
                .values()
                .copied()
                .min()
                .unwrap_or(0)
                .saturating_add(1);
        }
        if n.seen.len() >= n.max && !n.seen.contains_key(&key) {
            // Accepting without remembering would let the request be
            // replayed: refuse, retryable.
            return Err(fail(
                Cause::NoncesFull,
                "too many signed requests in the skew window: the nonce set is full (frontdoor.hmac_nonces_max); retry",
            ));
        }
        n.seen.insert(key, expires_ms);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonces_are_refused_again_and_the_set_is_bounded() {
        let s = Signer::new(1000, 2);
        assert!(s.remember(1, "a", 2000, 1000).is_ok());
        assert_eq!(
            s.remember(1, "a", 2000, 1500).unwrap_err().cause,
            Cause::Replayed
        );
        // Another tenant's nonce is its own.
        assert!(s.remember(2, "a", 2000, 1500).is_ok());
        assert_eq!(
            s.remember(1, "b", 2000, 1500).unwrap_err().cause,
            Cause::NoncesFull
        );
        // Past their expiry the entries make room.
        assert!(s.remember(1, "b", 4000, 2001).is_ok());
        assert!(s.remember(1, "a", 4000, 2001).is_ok());
    }

    #[test]
    fn params_need_every_field_well_formed() {
        let ok = format!(
            "tenant=7, ts=1, nonce={}, body={}, sig={}",
            "n".repeat(16),
            "0".repeat(64),
            "a".repeat(64)
        );
        assert!(params(&ok).is_ok());
        for bad in [
            ok.replace("nonce=nnnnnnnnnnnnnnnn", "nonce=short"),
            ok.replace("nonce=nnnnnnnnnnnnnnnn", "nonce=nnnnnnnnnnnnnnn!"),
            ok.replace("body=0", "body=X"),
            ok.replace(", sig=", ", sog="),
            ok.replace("ts=1", "ts=x"),
        ] {
            assert_eq!(
                params(&bad).err().map(|f| f.cause),
                Some(Cause::Malformed),
                "{bad}"
            );
        }
    }
}
