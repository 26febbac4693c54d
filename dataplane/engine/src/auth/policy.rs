//! `[auth]` as the workers read it, apart from the checks so that the
//! tables can hold it without importing them.

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
