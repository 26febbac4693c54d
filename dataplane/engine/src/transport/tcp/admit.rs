//! Who may take a slot: a header's tag is checked before a large slot is
//! reserved, caps per source address and per tenant, a reserve of the
//! smallest class for verified frames, and how far a stuck send has got.
//! The worker still runs every check of docs/wire.md on the whole frame
//! (replay included); this only keeps unauthenticated or greedy clients
//! from pinning slots.
#![allow(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_wire::{ErrorCode, Frame, Kind};

use super::Tcp;
use super::conn::Role;
use crate::config::UringCfg;
use crate::tables::Tables;

/// The connection limits of `[io_uring] tcp_*`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub frame: Duration,
    pub send: Duration,
    pub conns_per_source: u32,
    pub source_pct: u32,
    pub tenant_pct: u32,
    pub reserve_pct: u32,
}

impl Limits {
    pub fn of(cfg: &UringCfg) -> Limits {
        Limits {
            frame: Duration::from_millis(cfg.tcp_frame_timeout_ms.into()),
            send: Duration::from_millis(cfg.tcp_send_timeout_ms.into()),
            conns_per_source: cfg
                .tcp_connections_per_source_max
                .min(cfg.tcp_connections_max),
            source_pct: cfg.tcp_large_slots_per_source_pct,
            tenant_pct: cfg.tcp_large_slots_per_tenant_pct,
            reserve_pct: cfg.tcp_verified_reserve_pct,
        }
    }
}

/// `pct` percent of `count` pairs, at least one.
fn share(count: u32, pct: u32) -> u32 {
    (u64::from(count) * u64::from(pct) / 100).max(1) as u32
}

/// Why a header was refused before a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HeaderRefusal {
    /// Unknown tenant, unsigned, or a tag that does not verify.
    Unauthenticated,
    /// A negotiate request's tag covers its body: it never needs a large
    /// slot, so one that asks for it is not checked.
    Unverifiable,
    /// Verified, but its deadline is 0, passed, or beyond the window.
    Stale(ErrorCode),
}

impl Tcp {
    /// The worker's tables changed: keep a reference for tag checks. The
    /// worker calls this before it reports the new epoch, so the old
    /// snapshot dropped here is never the last reference.
    pub(in crate::transport) fn set_tables(&mut self, t: &Arc<Tables>) {
        self.tables = Some(Arc::clone(t));
    }

    fn auth_required(&self) -> bool {
        self.tables.as_ref().is_some_and(|t| t.auth.required)
    }

    /// Pairs of the smallest class only verified frames may take.
    fn reserve(&self) -> u32 {
        if self.limits.reserve_pct == 0 || !self.auth_required() {
            return 0;
        }
        share(self.pool.count(0), self.limits.reserve_pct)
    }

    /// Whether the header staged on client connection `c`, bound for class
    /// `k`, must verify before it takes a slot: always for a large class
    /// under `auth.mode = "tenants"`; for the smallest class once only the
    /// reserve is left.
    pub(super) fn needs_verify(&self, c: u32, k: usize) -> bool {
        self.conns[c as usize].role == Role::Client
            && self.auth_required()
            && (k > 0 || self.pool.free_len(0) <= self.reserve())
    }

    /// Checks the tag of the whole header staged on `c` (and, cheaply, the
    /// freshness rule): the tenant when it verifies.
    pub(super) fn verify_staged(&self, c: u32) -> Result<u32, HeaderRefusal> {
        let Some(t) = self.tables.as_deref() else {
            return Err(HeaderRefusal::Unauthenticated);
        };
        let conn = &self.conns[c as usize];
        let f = Frame::new_unchecked(&conn.hdr[..conn.staged as usize]);
        if f.kind() == Kind::NegotiateRequest {
            return Err(HeaderRefusal::Unverifiable);
        }
        let tenant = crate::auth::verify_tag(&f, t)
            .map_err(|_| HeaderRefusal::Unauthenticated)?
            .id;
        let now_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let deadline = f.deadline_us();
        if deadline == 0 || deadline > now_us.saturating_add(t.auth.window_us) {
            return Err(HeaderRefusal::Stale(ErrorCode::Stale));
        }
        if deadline < now_us {
            return Err(HeaderRefusal::Stale(ErrorCode::DeadlineExceeded));
        }
        Ok(tenant)
    }

    /// Whether the frame staged on `c` may take a pair of class `k` now:
    /// within its source's and tenant's share of a large class, and outside
    /// the reserve unless it verified.
    pub(super) fn may_take(&self, c: u32, k: usize) -> bool {
        let conn = &self.conns[c as usize];
        if conn.role != Role::Client {
            return true;
        }
        if k > 0 {
            let count = self.pool.count(k);
            if self.pool.held_by_source(k, conn.source) >= share(count, self.limits.source_pct) {
                return false;
            }
            if let Some(t) = conn.tenant
                && self.pool.held_by_tenant(k, t) >= share(count, self.limits.tenant_pct)
            {
                return false;
            }
            return true;
        }
        conn.tenant.is_some() || self.pool.free_len(0) > self.reserve()
    }

    /// Whether client connection `c` may be accepted from its source.
    pub(super) fn source_has_room(&self, source: u128) -> bool {
        self.sources.get(source) < self.limits.conns_per_source
    }
}

/// Bytes the peer has acknowledged on socket `fd` (`TCP_INFO`), to tell a
/// slow send from one that makes no progress.
pub(super) fn bytes_acked(fd: i32) -> Option<u64> {
    // SAFETY: tcp_info is plain old data; zero is valid.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `info`.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(info.tcpi_bytes_acked)
}

/// Has the kernel abort a connection whose sent data stays unacknowledged
/// (a zero window included) for `d`: a backstop that frees the pages of a
/// zero-copy send the transport's own timeout cannot reclaim.
pub(super) fn set_user_timeout(fd: i32, d: Duration) {
    let ms = libc::c_uint::try_from(d.as_millis()).unwrap_or(libc::c_uint::MAX);
    // SAFETY: setsockopt reads one c_uint from `ms`.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            (&ms as *const libc::c_uint).cast(),
            std::mem::size_of::<libc::c_uint>() as libc::socklen_t,
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_round_down_but_never_to_zero() {
        assert_eq!(share(2, 50), 1);
        assert_eq!(share(2, 1), 1);
        assert_eq!(share(16, 50), 8);
        assert_eq!(share(3, 100), 3);
        assert_eq!(share(128, 25), 32);
    }
}
