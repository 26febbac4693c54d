//! Test-only fault injection (cargo feature `fault-hooks`, off by default
//! and never in a release build): makes workers panic on demand so the
//! supervision tests can fail one under load. The worker checks once per
//! burst with frames, after classifying them and before running any.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// Bursts left to panic on.
static BURSTS: AtomicU32 = AtomicU32::new(0);
/// The worker index that panics; `ANY`: whichever gets a burst.
static WORKER: AtomicUsize = AtomicUsize::new(ANY);
const ANY: usize = usize::MAX;

/// The text of an injected panic (tests look for it in status).
pub const PANIC_TEXT: &str = "injected fault (fault-hooks)";

/// Makes the next `bursts` bursts with frames panic, on worker `worker`
/// (`None`: on any worker). Zero disarms.
pub fn panic_bursts(worker: Option<usize>, bursts: u32) {
    WORKER.store(worker.unwrap_or(ANY), Ordering::Relaxed);
    BURSTS.store(bursts, Ordering::Release);
}

/// Injected panics still to come.
pub fn pending() -> u32 {
    BURSTS.load(Ordering::Acquire)
}

/// The hook: panics when armed for worker `index`.
#[inline]
pub(crate) fn hit(index: usize) {
    if BURSTS.load(Ordering::Relaxed) == 0 {
        return;
    }
    let w = WORKER.load(Ordering::Relaxed);
    if w != ANY && w != index {
        return;
    }
    let taken = BURSTS
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
        .is_ok();
    if taken {
        panic!("{PANIC_TEXT}");
    }
}
