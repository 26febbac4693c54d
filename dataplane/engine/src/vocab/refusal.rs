//! Why a frame is refused, and what its sender is told.

use sluice_wire::ErrorCode;

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
