//! `[auth]` in the config and its checks (the types the engine config
//! embeds; `config.rs` calls these).

use serde::{Deserialize, Serialize};

use crate::config::{Config, ConfigError, TenantCfg, TransportKind, range, wire_token};

/// Limits of `[auth]` and of a tenant's lists.
pub mod limits {
    /// Bounds of `auth.freshness_window_ms`: 100 ms to 5 min.
    pub const FRESHNESS_WINDOW_MS_MIN: u32 = 100;
    /// See `FRESHNESS_WINDOW_MS_MIN`.
    pub const FRESHNESS_WINDOW_MS_MAX: u32 = 300_000;
    /// Bounds of `auth.replay_entries` (per worker; a power of two): one
    /// bucket of the replay table to 4 Mi entries (96 MiB).
    pub const REPLAY_ENTRIES_MIN: u32 = crate::auth::replay::REPLAY_WAYS as u32;
    /// See `REPLAY_ENTRIES_MIN`.
    pub const REPLAY_ENTRIES_MAX: u32 = 1 << 22;
    /// Bounds of `auth.replay_senders` (windows per worker; a power of
    /// two): one bucket to 128 Ki windows.
    pub const REPLAY_SENDERS_MIN: u32 = crate::auth::window::WINDOW_WAYS as u32;
    /// See `REPLAY_SENDERS_MIN`.
    pub const REPLAY_SENDERS_MAX: u32 = 1 << 17;
    /// Bounds of `auth.replay_window_ids` (request ids one window spans; a
    /// power of two): one 64-bit word to 8 Ki ids (1 KiB of bitmap).
    pub const REPLAY_WINDOW_IDS_MIN: u32 = 64;
    /// See `REPLAY_WINDOW_IDS_MIN`.
    pub const REPLAY_WINDOW_IDS_MAX: u32 = 8_192;
    /// Bytes of a window besides its bitmap (sender, top, deadline, tenant).
    pub const REPLAY_WINDOW_HEAD_BYTES: usize = 32;
    /// Most patterns in each of a tenant's lists (models, adapters,
    /// routes, subjects). Lists are hashed sets (`route/set.rs`): a lookup
    /// does not grow with them.
    pub const TENANT_PATTERN_COUNT_MAX: usize = 16_384;
    /// Most general globs (other than `*`, `name*`, `*name`) in one of a
    /// tenant's lists: the only entries matched one by one.
    pub const TENANT_GLOB_COUNT_MAX: usize = crate::route::set::GLOB_COUNT_MAX;
}

use limits::*;

/// How frames are authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthMode {
    /// Requests and negotiations need a valid tag of a configured tenant,
    /// a fresh deadline and a tag not seen before. With no tenant
    /// configured every one of them is refused.
    #[default]
    Tenants,
    /// Nothing is checked: tags, tenant ids and freshness are ignored.
    /// No tenant may be configured.
    None,
}

/// `[auth]`. Start-time only: a reload does not change it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthCfg {
    /// "tenants" (default) or "none".
    pub mode: AuthMode,
    /// An authenticated frame's `deadline_us` must lie in
    /// `[now, now + freshness_window_ms]`.
    pub freshness_window_ms: u32,
    /// Tags each worker remembers to refuse replays of frames that name
    /// no sender, or whose sender finds no window (a power of two).
    pub replay_entries: u32,
    /// A lab host: keys and tokens published in the Sluice repository are
    /// accepted even where other hosts can reach the appliance (they are
    /// refused there otherwise: auth/published.rs).
    pub lab: bool,
    /// Senders (`sluice-sender`) each worker keeps a replay window for (a
    /// power of two).
    pub replay_senders: u32,
    /// Request ids one sender's window spans (a power of two): how far
    /// below its highest id a sender's frame may still arrive.
    pub replay_window_ids: u32,
}

impl Default for AuthCfg {
    fn default() -> Self {
        AuthCfg {
            mode: AuthMode::Tenants,
            freshness_window_ms: 10_000,
            replay_entries: 1 << 18,
            lab: false,
            replay_senders: 4_096,
            replay_window_ids: 1_024,
        }
    }
}

/// Checks `[auth]` and that its mode allows the config's tenants.
pub fn validate(cfg: &Config) -> Result<(), ConfigError> {
    let a = &cfg.auth;
    range(
        "auth.freshness_window_ms",
        a.freshness_window_ms,
        FRESHNESS_WINDOW_MS_MIN,
        FRESHNESS_WINDOW_MS_MAX,
    )?;
    range(
        "auth.replay_entries",
        a.replay_entries,
        REPLAY_ENTRIES_MIN,
        REPLAY_ENTRIES_MAX,
    )?;
    if !a.replay_entries.is_power_of_two() {
        return Err(ConfigError::at(
            "auth.replay_entries",
            "must be a power of two",
        ));
    }
    for (name, v, min, max) in [
        (
            "auth.replay_senders",
            a.replay_senders,
            REPLAY_SENDERS_MIN,
            REPLAY_SENDERS_MAX,
        ),
        (
            "auth.replay_window_ids",
            a.replay_window_ids,
            REPLAY_WINDOW_IDS_MIN,
            REPLAY_WINDOW_IDS_MAX,
        ),
    ] {
        range(name, v, min, max)?;
        if !v.is_power_of_two() {
            return Err(ConfigError::at(name, "must be a power of two"));
        }
    }
    auth_allows_tenants(a.mode, &cfg.tenants)?;
    super::published::validate(cfg)
}

impl Config {
    /// Whether the data plane can be reached from other hosts with nothing
    /// checked: `auth.mode = "none"` and a listen address that is not
    /// loopback (DPDK and RDMA face a NIC, so they always count). The
    /// engine and the daemon warn at start-up when this holds.
    pub fn unauthenticated_exposure(&self) -> Option<String> {
        if self.auth.mode != AuthMode::None {
            return None;
        }
        match self.engine.transport {
            TransportKind::IoUring => match self.listen_addr() {
                Ok(a) if a.ip().is_loopback() => None,
                _ => Some(format!(
                    "auth.mode = \"none\" with io_uring.listen = {:?}, which is not loopback: anyone who reaches it may send requests under any tenant id",
                    self.io_uring.listen
                )),
            },
            t => Some(format!(
                "auth.mode = \"none\" with transport {t:?}: anyone on its network may send requests under any tenant id"
            )),
        }
    }
}

/// `auth.mode = "none"` checks no tag, so tenants would only pretend to
/// protect something: a config or a live change that has both is refused.
pub fn auth_allows_tenants(mode: AuthMode, tenants: &[TenantCfg]) -> Result<(), ConfigError> {
    if mode == AuthMode::None && !tenants.is_empty() {
        return Err(ConfigError::at(
            "tenants[0]",
            "auth.mode is \"none\": no tag would be checked; remove the tenants or set auth.mode = \"tenants\"",
        ));
    }
    Ok(())
}

/// Checks a tenant's lists: at most TENANT_PATTERN_COUNT_MAX patterns
/// each, every one a token within the wire limit of what it matches.
pub(crate) fn tenant_patterns(i: usize, t: &TenantCfg) -> Result<(), ConfigError> {
    let lists: [(&str, &[String], usize); 4] = [
        ("models", &t.models, sluice_wire::limits::MODEL_NAME_LEN_MAX),
        (
            "adapters",
            &t.adapters,
            sluice_wire::limits::ADAPTER_LEN_MAX,
        ),
        ("routes", &t.routes, crate::config::limits::NAME_LEN_MAX),
        (
            "subjects",
            &t.subjects,
            sluice_wire::limits::SUBJECT_LEN_MAX,
        ),
    ];
    for (name, list, len_max) in lists {
        if list.len() > TENANT_PATTERN_COUNT_MAX {
            return Err(ConfigError::at(
                format!("tenants[{i}].{name}"),
                format!("at most {TENANT_PATTERN_COUNT_MAX} patterns"),
            ));
        }
        let mut globs = 0;
        for (j, p) in list.iter().enumerate() {
            wire_token(&format!("tenants[{i}].{name}[{j}]"), p, len_max)?;
            if crate::route::set::form(p) == crate::route::set::Form::Glob {
                globs += 1;
                if globs > TENANT_GLOB_COUNT_MAX {
                    return Err(ConfigError::at(
                        format!("tenants[{i}].{name}[{j}]"),
                        format!(
                            "at most {TENANT_GLOB_COUNT_MAX} globs other than \"*\", \"name*\" and \"*name\""
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn err(text: &str) -> ConfigError {
        Config::parse(text, PathBuf::from("/tmp")).expect_err("config must be refused")
    }

    #[test]
    fn auth_keys_are_checked_at_their_lines() {
        let t =
            "[[tenants]]\nname = \"t\"\nid = 1\nkey = \"hex:000102030405060708090a0b0c0d0e0f\"\n";
        let e = err("[auth]\nfreshness_window_ms = 50\n");
        assert_eq!(
            (e.line, e.key.as_str()),
            (Some(2), "auth.freshness_window_ms"),
            "{e}"
        );
        let e = err("[auth]\nreplay_entries = 1000\n");
        assert_eq!(
            (e.line, e.key.as_str()),
            (Some(2), "auth.replay_entries"),
            "{e}"
        );
        assert!(e.message.contains("power of two"), "{e}");
        for (text, key) in [
            ("replay_senders = 3000", "auth.replay_senders"),
            ("replay_senders = 2", "auth.replay_senders"),
            ("replay_senders = 262144", "auth.replay_senders"),
            ("replay_window_ids = 1000", "auth.replay_window_ids"),
            ("replay_window_ids = 32", "auth.replay_window_ids"),
            ("replay_window_ids = 16384", "auth.replay_window_ids"),
        ] {
            let e = err(&format!("[auth]\n{text}\n"));
            assert_eq!((e.line, e.key.as_str()), (Some(2), key), "{text}: {e}");
        }
        let e = err("[auth]\nmode = \"open\"\n");
        assert_eq!(e.line, Some(2), "{e}");
        let e = err(&format!("[auth]\nmode = \"none\"\n{t}"));
        assert_eq!((e.line, e.key.as_str()), (Some(3), "tenants[0]"), "{e}");
        let e = err(&format!("{t}subjects = [\"ok-*\", \"has space\"]\n"));
        assert_eq!(
            (e.line, e.key.as_str()),
            (Some(5), "tenants[0].subjects[1]"),
            "{e}"
        );
        let many: Vec<String> = (0..=TENANT_PATTERN_COUNT_MAX)
            .map(|i| format!("\"m{i}\""))
            .collect();
        let e = err(&format!("{t}models = [{}]\n", many.join(", ")));
        assert_eq!(e.key, "tenants[0].models", "{e}");
        // Exact names, `name*` and `*name` are sets; other globs are
        // counted, since each is matched one by one.
        let mut globs: Vec<String> = vec!["\"a*\"".into(), "\"*b\"".into(), "\"*\"".into()];
        globs.extend((0..=TENANT_GLOB_COUNT_MAX).map(|i| format!("\"x{i}*y\"")));
        let e = err(&format!("{t}adapters = [{}]\n", globs.join(", ")));
        assert_eq!(
            e.key,
            format!("tenants[0].adapters[{}]", TENANT_GLOB_COUNT_MAX + 3),
            "{e}"
        );
        // The defaults: tenants mode, a 10 s window, 2^18 slots; subjects "*".
        let c = Config::parse(t, PathBuf::from("/tmp")).unwrap();
        assert_eq!(c.auth, AuthCfg::default());
        assert_eq!(c.auth.mode, AuthMode::Tenants);
        assert_eq!(c.tenants[0].subjects, ["*"]);
    }

    #[test]
    fn unauthenticated_mode_off_loopback_is_flagged() {
        let parse = |t: &str| Config::parse(t, PathBuf::from("/tmp")).unwrap();
        let none = "[auth]\nmode = \"none\"\n";
        assert!(parse(none).unauthenticated_exposure().is_none(), "loopback");
        let open = parse(&format!("{none}[io_uring]\nlisten = \"0.0.0.0:7070\"\n"));
        let why = open.unauthenticated_exposure().unwrap();
        assert!(why.contains("0.0.0.0:7070"), "{why}");
        let six = parse(&format!("{none}[io_uring]\nlisten = \"[::1]:7070\"\n"));
        assert!(six.unauthenticated_exposure().is_none());
        let tenants = parse("[io_uring]\nlisten = \"0.0.0.0:7070\"\n");
        assert!(tenants.unauthenticated_exposure().is_none(), "mode tenants");
    }
}
