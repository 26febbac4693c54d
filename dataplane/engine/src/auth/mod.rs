//! Who may send what (docs/wire.md, "Authentication"): the tenant and its
//! tag, the freshness rule and the replay table, then the tenant's lists.
//! Each check is its own function, apart from routing, so that a routing
//! index can replace the list scans without touching the rules.
//!
//! A tenant gets one answer for a thing outside its lists and a thing that
//! does not exist: the same code and the same message. Only the operator
//! sees which it was, through the refusal cause counted per worker.

use sluice_wire::{ErrorCode, Frame, flags};

use crate::tables::{Tables, Tenant};

pub mod config;
mod published;
mod guard;
mod replay;
mod tenant;
mod window;

pub use guard::{Checked, ReplayCounts, ReplayGuard, ReplayKey};
pub use replay::{REPLAY_WAYS, ReplayTable, Seen};
pub use tenant::{
    RouteFound, adapter_allowed, model_allowed, route_for, schema_allowed, subject_allowed,
};
pub use window::{Mark, SenderWindows, WINDOW_WAYS};

/// Messages shared by a refusal and by the answer it imitates.
pub mod msg {
    /// The tenant is unknown, the frame unsigned or its tag wrong.
    pub const UNAUTHENTICATED: &str = "authentication failed";
    /// Deadline 0 or beyond the window on an authenticated frame.
    pub const STALE: &str = "an authenticated frame needs a deadline within the freshness window";
    /// The deadline passed.
    pub const EXPIRED: &str = "deadline passed before the request ran";
    /// The tag was accepted before.
    pub const REPLAYED: &str = "frame already accepted (replay)";
    /// The request id lies below its sender's replay window.
    pub const REPLAY_TOO_OLD: &str =
        "request id below the sender's replay window (replay or too late)";
    /// The replay table has no room.
    pub const REPLAY_FULL: &str = "replay table full";
    /// No such model or version, or not the tenant's.
    pub const UNKNOWN_MODEL: &str = "unknown model or version";
    /// No such adapter, or not the tenant's.
    pub const UNKNOWN_ADAPTER: &str = "unknown adapter for this model";
    /// No route, or none the tenant may use.
    pub const NO_ROUTE: &str = "no route matches the request";
    /// No such subject or version, or not the tenant's.
    pub const UNKNOWN_SUBJECT: &str = "unknown subject or version";
    /// No such schema, or not the tenant's subject.
    pub const UNKNOWN_SCHEMA: &str = "unknown or retired schema";
}

/// `[auth]` as the workers read it (fixed at start-up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthPolicy {
    /// `auth.mode = "tenants"`: requests and negotiations are checked.
    pub required: bool,
    /// `auth.freshness_window_ms`, in µs.
    pub window_us: u64,
}

impl Default for AuthPolicy {
    fn default() -> Self {
        AuthPolicy::of(&crate::config::AuthCfg::default())
    }
}

impl AuthPolicy {
    /// The policy of a config's `[auth]`.
    pub fn of(a: &crate::config::AuthCfg) -> AuthPolicy {
        AuthPolicy {
            required: a.mode == crate::config::AuthMode::Tenants,
            window_us: u64::from(a.freshness_window_ms) * 1000,
        }
    }
}

macro_rules! causes {
    ($( $(#[$doc:meta])* $name:ident = $text:literal; )*) => {
        /// Why a frame was refused before it reached a model, as the
        /// operator sees it (`refusals` per worker, by name).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(u8)]
        pub enum Cause {
            $( $(#[$doc])* $name, )*
        }

        impl Cause {
            /// Every cause, in index order.
            pub const ALL: &'static [Cause] = &[$(Cause::$name,)*];

            /// Stable snake_case name, used in metrics labels.
            pub const fn as_str(self) -> &'static str {
                match self { $( Cause::$name => $text, )* }
            }
        }
    };
}

causes! {
    /// The tenant id names no configured tenant.
    UnknownTenant = "unknown_tenant";
    /// The AUTHENTICATED flag is clear.
    Unsigned = "unsigned";
    /// The tag does not verify with the tenant's key.
    BadTag = "bad_tag";
    /// An authenticated frame with deadline 0.
    NoDeadline = "no_deadline";
    /// An authenticated frame whose deadline lies beyond the window.
    FarDeadline = "far_deadline";
    /// An authenticated frame whose deadline has passed.
    Expired = "expired";
    /// The tag was accepted before and its deadline has not passed.
    Replayed = "replayed";
    /// Both buckets the tag may use are full.
    ReplayTableFull = "replay_table_full";
    /// The request id lies a window or more below the highest one its
    /// sender's window accepted.
    ReplayTooOld = "replay_too_old";
    /// The model is outside the tenant's `models`.
    TenantModel = "tenant_model";
    /// The adapter is outside the tenant's `adapters`.
    TenantAdapter = "tenant_adapter";
    /// Only routes outside the tenant's `routes` matched.
    TenantRoute = "tenant_route";
    /// The negotiated subject is outside the tenant's `subjects`.
    TenantSubject = "tenant_subject";
    /// The request's schema belongs to a subject outside the tenant's `subjects`.
    TenantSchema = "tenant_schema";
}

/// Slots of the per-worker refusal counters.
pub const CAUSE_COUNT: usize = Cause::ALL.len();

/// A refusal: what the client is told, and why, for the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// For the counters.
    pub cause: Cause,
    /// Error code of the answer.
    pub code: ErrorCode,
    /// Message of the answer.
    pub message: &'static str,
}

impl Refusal {
    /// The refusal for a cause whose answer does not depend on context.
    pub const fn of(cause: Cause) -> Refusal {
        use ErrorCode as C;
        let (code, message) = match cause {
            Cause::UnknownTenant | Cause::Unsigned | Cause::BadTag => {
                (C::Unauthenticated, msg::UNAUTHENTICATED)
            }
            Cause::NoDeadline | Cause::FarDeadline => (C::Stale, msg::STALE),
            Cause::Expired => (C::DeadlineExceeded, msg::EXPIRED),
            Cause::Replayed => (C::Replayed, msg::REPLAYED),
            Cause::ReplayTableFull => (C::Busy, msg::REPLAY_FULL),
            Cause::ReplayTooOld => (C::Replayed, msg::REPLAY_TOO_OLD),
            Cause::TenantModel => (C::UnknownModel, msg::UNKNOWN_MODEL),
            Cause::TenantAdapter => (C::UnknownAdapter, msg::UNKNOWN_ADAPTER),
            Cause::TenantRoute => (C::NoRoute, msg::NO_ROUTE),
            Cause::TenantSubject => (C::UnknownSubject, msg::UNKNOWN_SUBJECT),
            Cause::TenantSchema => (C::UnknownSchema, msg::UNKNOWN_SCHEMA),
        };
        Refusal {
            cause,
            code,
            message,
        }
    }

    /// A refusal with an answer chosen by the caller (a hidden route
    /// answers as no route would: `no_route` or `unknown_model`).
    pub const fn with(cause: Cause, code: ErrorCode, message: &'static str) -> Refusal {
        Refusal {
            cause,
            code,
            message,
        }
    }
}

/// Step 3 of the data path, for requests and negotiations: the tenant and
/// its tag, then (with a replay table) the freshness rule and the replay
/// check. `Ok(None)` when `auth.mode = "none"`. `replay = None` checks the
/// tag only (benchmarks measure the difference; workers always pass theirs).
pub fn authenticate<'t>(
    frame: &Frame<&[u8]>,
    t: &'t Tables,
    now_us: u64,
    replay: Option<&mut ReplayGuard>,
) -> Result<Option<&'t Tenant>, Refusal> {
    if !t.auth.required {
        return Ok(None);
    }
    let tenant = verify_tag(frame, t)?;
    if let Some(r) = replay {
        fresh_and_unseen(frame, t.auth.window_us, now_us, r)?;
    }
    Ok(Some(tenant))
}

/// The tenant of a frame, when the frame carries its valid tag.
pub fn verify_tag<'t>(frame: &Frame<&[u8]>, t: &'t Tables) -> Result<&'t Tenant, Refusal> {
    let Some(tenant) = t.tenant(frame.tenant_id()) else {
        return Err(Refusal::of(Cause::UnknownTenant));
    };
    if frame.flags() & flags::AUTHENTICATED == 0 {
        return Err(Refusal::of(Cause::Unsigned));
    }
    if !tenant.key.verify(frame) {
        return Err(Refusal::of(Cause::BadTag));
    }
    Ok(tenant)
}

/// The freshness rule and the replay check of an authenticated frame: its
/// deadline lies in `[now, now + window]`, and it was not accepted before
/// (by its sender's window, or its tag); it is then remembered until the
/// deadline.
pub fn fresh_and_unseen(
    frame: &Frame<&[u8]>,
    window_us: u64,
    now_us: u64,
    replay: &mut ReplayGuard,
) -> Result<(), Refusal> {
    let deadline = frame.deadline_us();
    if deadline == 0 {
        return Err(Refusal::of(Cause::NoDeadline));
    }
    if deadline < now_us {
        return Err(Refusal::of(Cause::Expired));
    }
    if deadline - now_us > window_us {
        return Err(Refusal::of(Cause::FarDeadline));
    }
    match replay.check(&ReplayKey::of(frame), deadline, now_us.max(1)) {
        Checked::Fresh => Ok(()),
        Checked::Replayed => Err(Refusal::of(Cause::Replayed)),
        Checked::TooOld => Err(Refusal::of(Cause::ReplayTooOld)),
        Checked::Full => Err(Refusal::of(Cause::ReplayTableFull)),
    }
}
