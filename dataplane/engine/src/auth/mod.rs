//! Who may send what (docs/wire.md, "Authentication"): the tenant and its
//! tag, the freshness rule and the replay table, then the tenant's lists.
//! Each check is its own function, apart from routing, so that a routing
//! index can replace the list scans without touching the rules.
//!
//! A tenant gets one answer for a thing outside its lists and a thing that
//! does not exist: the same code and the same message. Only the operator
//! sees which it was, through the refusal cause counted per worker.

use sluice_wire::{Frame, flags};

use crate::tables::{Tables, Tenant};

pub mod config;
mod guard;
pub(crate) mod policy;
mod published;
mod replay;
mod tenant;
mod window;

pub use guard::{Checked, ReplayCounts, ReplayGuard, ReplayKey};
pub use policy::AuthPolicy;
pub use replay::{REPLAY_WAYS, ReplayTable, Seen};
pub use tenant::{
    RouteFound, adapter_allowed, model_allowed, route_for, schema_allowed, subject_allowed,
};
pub use window::{Mark, SenderWindows, WINDOW_WAYS};

// The refusal words live in the vocabulary leaf; these names stay for the
// callers that know them from here.
pub use crate::vocab::{CAUSE_COUNT, Cause, Refusal, msg};

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
