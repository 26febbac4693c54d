//! Steps 2 to 6 of the data path for one frame (parse, authenticate,
//! validate, route, admit) as a pure function, and the answers a worker
//! gives without running a model.

use sluice_wire::{BodyRepr, ErrorCode, Frame, FrameRepr, Kind, flags};

use crate::route::RouteKey;
use crate::tables::Tables;

/// What to answer without running a model.
#[derive(Debug, Clone, Copy)]
pub enum Immediate {
    /// An error frame.
    Error(ErrorCode, &'static str),
    /// A pong.
    Pong,
    /// A negotiation answer (or unknown_subject) for the request's subject,
    /// looked up once, when the answer is built.
    Negotiate,
}

/// The outcome of classifying a frame.
#[derive(Debug, Clone, Copy)]
pub enum Verdict {
    /// Not a Sluice frame: count and drop.
    Drop,
    /// Answer now.
    Reply(Immediate),
    /// The shard lives on a peer: forward.
    Forward {
        /// Shard index.
        shard: usize,
    },
    /// Queue for the shard; run on the model slot.
    Admit {
        /// Shard index.
        shard: usize,
        /// Handler slot.
        slot: usize,
    },
}

/// Steps 2 to 6 of the data path for one frame: parse, authenticate,
/// validate, route, admit. Pure: no I/O, no allocation.
pub fn classify_frame(
    bytes: &[u8],
    truncated: bool,
    t: &Tables,
    draining: bool,
    now_us: u64,
) -> Verdict {
    use Immediate::Error as E;
    if !Frame::new_unchecked(bytes).has_magic() {
        return Verdict::Drop;
    }
    if truncated {
        return Verdict::Reply(E(
            ErrorCode::FrameTooLarge,
            "frame larger than the receive buffer",
        ));
    }
    let frame = match Frame::new_checked(bytes) {
        Ok(f) => f,
        Err(e) => return Verdict::Reply(E(e.code(), e.as_str())),
    };
    match frame.kind() {
        Kind::Request => {}
        Kind::Ping => return Verdict::Reply(Immediate::Pong),
        Kind::NegotiateRequest => return Verdict::Reply(Immediate::Negotiate),
        _ => {
            return Verdict::Reply(E(
                ErrorCode::UnsupportedKind,
                "this endpoint accepts requests, pings and negotiations",
            ));
        }
    }
    if draining {
        return Verdict::Reply(E(ErrorCode::ShuttingDown, "appliance is shutting down"));
    }
    let mut tenant_name = "";
    let tenant = if t.auth_required() {
        let auth = Verdict::Reply(E(ErrorCode::Unauthenticated, "authentication failed"));
        let Some(tenant) = t.tenant(frame.tenant_id()) else {
            return auth;
        };
        if frame.flags() & flags::AUTHENTICATED == 0 || !tenant.key.verify(&frame) {
            return auth;
        }
        tenant_name = &tenant.name;
        Some(tenant)
    } else {
        None
    };
    if frame.model_version().is_empty() {
        return Verdict::Reply(E(ErrorCode::ModelVersionRequired, "model version required"));
    }
    if frame.deadline_us() != 0 && now_us > frame.deadline_us() {
        return Verdict::Reply(E(
            ErrorCode::DeadlineExceeded,
            "deadline passed before the request ran",
        ));
    }
    // Validation comes before routing: routes may look into the section.
    let mut json = None;
    if frame.schema_id() != 0 {
        match t.schemas.validate(&frame) {
            Ok(j) => json = j,
            Err(r) => return Verdict::Reply(E(r.code, r.message)),
        }
    }
    // One version rule (docs/wire.md, "Model versions"): the request names an
    // exact version or an alias, resolved first; routes match the resolved
    // full version. A request that resolves to no loaded version is
    // unknown_model unless a route sends it to a remote shard.
    let model = t.models.resolve(frame.model(), frame.model_version());
    let key = RouteKey {
        model: frame.model(),
        version: model.map_or(frame.model_version(), |m| m.version.as_str()),
        adapter: frame.adapter(),
        intent: frame.intent(),
        tenant: tenant_name,
        json,
    };
    let Some((_, route)) = t.routes.find(&key) else {
        if model.is_none() {
            return Verdict::Reply(E(ErrorCode::UnknownModel, "unknown model or version"));
        }
        return Verdict::Reply(E(ErrorCode::NoRoute, "no route matches the request"));
    };
    let forbidden = Verdict::Reply(E(ErrorCode::Forbidden, "not permitted for this tenant"));
    if let Some(tn) = tenant {
        if !tn.allows_route(&route.name) || !tn.allows_model(frame.model()) {
            return forbidden;
        }
        if !frame.adapter().is_empty() && !tn.allows_adapter(frame.adapter()) {
            return forbidden;
        }
    }
    let shard = route.shard;
    if !t.shards[shard].local {
        if frame.flags() & flags::FORWARDED != 0 {
            return Verdict::Reply(E(
                ErrorCode::NoRouteToShard,
                "no route to shard (already forwarded once)",
            ));
        }
        return Verdict::Forward { shard };
    }
    let Some(model) = model else {
        return Verdict::Reply(E(ErrorCode::UnknownModel, "unknown model or version"));
    };
    if !frame.adapter().is_empty() && !model.adapters.iter().any(|a| a == frame.adapter()) {
        return Verdict::Reply(E(
            ErrorCode::UnknownAdapter,
            "unknown adapter for this model",
        ));
    }
    Verdict::Admit {
        shard,
        slot: model.slot,
    }
}

/// Writes an immediate answer to `req` into `tx`. `None` when even the error
/// frame cannot be built (cannot happen with buffers of at least 2 KiB).
pub(super) fn build_immediate(
    req: &[u8],
    tx: &mut [u8],
    r: &Immediate,
    t: &Tables,
) -> Option<usize> {
    // The request may be malformed: echo only the fields that are readable.
    let raw = Frame::new_unchecked(req);
    let rid = raw.try_request_id().unwrap_or(0);
    let tenant = raw.try_tenant_id().unwrap_or(0);
    let checked = Frame::new_checked(req).ok();
    let trace = checked.as_ref().map(|f| f.trace()).unwrap_or_default();
    let answer = |kind| FrameRepr::answer(kind, rid, tenant, trace);
    let repr = match *r {
        Immediate::Error(code, message) => FrameRepr {
            body: BodyRepr::Error { code, message },
            ..answer(Kind::Error)
        },
        Immediate::Pong => answer(Kind::Pong),
        Immediate::Negotiate => {
            let found = checked
                .as_ref()
                .and_then(|f| f.negotiate_request())
                .and_then(|n| t.schemas.negotiate(n.subject, n.version_hint));
            match found {
                Some(e) => FrameRepr {
                    schema_id: e.id,
                    schema_version: e.version,
                    body: BodyRepr::NegotiateResponse {
                        schema_id: e.id,
                        version: e.version,
                        ttl_ms: t.schemas.ttl_ms,
                        schema_type: e.schema_type,
                        schema: &e.text,
                    },
                    ..answer(Kind::NegotiateResponse)
                },
                None => FrameRepr {
                    body: BodyRepr::Error {
                        code: ErrorCode::UnknownSubject,
                        message: "unknown subject or version",
                    },
                    ..answer(Kind::Error)
                },
            }
        }
    };
    repr.emit(tx).ok().map(|l| l.frame_len)
}
