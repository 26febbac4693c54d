//! A worker's replay state: the windows of senders that name themselves
//! (`sluice-sender`), and the tag table for every other signed frame and
//! for senders the windows have no room for (docs/wire.md, "Replay
//! windows").

use super::replay::{ReplayTable, Seen};
use super::window::{Mark, SenderWindows};

/// What identifies a frame to the replay check, read before its buffer
/// may go back to the transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayKey {
    /// The frame's tag.
    pub tag: [u8; 16],
    /// Its tenant.
    pub tenant: u32,
    /// Its sender id, when it names one.
    pub sender: Option<u64>,
    /// Its request id: the sender's counter.
    pub id: u64,
}

impl ReplayKey {
    /// The key of a frame (any frame: an unsigned one's tag is zeros).
    pub fn of<B: AsRef<[u8]>>(f: &sluice_wire::Frame<B>) -> ReplayKey {
        let mut tag = [0u8; 16];
        tag.copy_from_slice(f.auth_tag());
        ReplayKey {
            tag,
            tenant: f.tenant_id(),
            sender: f.sender_id(),
            id: f.request_id(),
        }
    }
}

/// What [`ReplayGuard::check`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked {
    /// Not seen: remembered until its deadline.
    Fresh,
    /// Accepted before, and its deadline has not passed.
    Replayed,
    /// Its request id lies below its sender's window.
    TooOld,
    /// The tag table had no room for it.
    Full,
}

/// Counters of the replay check (the worker publishes them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplayCounts {
    /// Frames accepted through a sender's window.
    pub window_frames: u64,
    /// Frames accepted through the tag table (no sender id, or no room).
    pub tag_frames: u64,
    /// Frames that named a sender but went to the tag table: every window
    /// their sender could use was live.
    pub fallbacks: u64,
    /// Windows opened (a sender without a live window).
    pub windows_opened: u64,
}

/// A worker's replay state. Fixed size, allocated at start.
#[derive(Debug, Clone)]
pub struct ReplayGuard {
    tags: ReplayTable,
    windows: SenderWindows,
    /// Latest deadline of a frame that named a sender but went to the tag
    /// table. Until then a frame that finds a window is also looked up
    /// there: its sender may have had no window when the original came.
    fallback_until_us: u64,
    counts: ReplayCounts,
}

impl ReplayGuard {
    /// A tag table of `entries` slots and `windows` windows of
    /// `window_ids` request ids (`[auth]`, checked by the config).
    pub fn new(entries: usize, windows: usize, window_ids: usize) -> ReplayGuard {
        ReplayGuard {
            tags: ReplayTable::new(entries),
            windows: SenderWindows::new(windows, window_ids),
            fallback_until_us: 0,
            counts: ReplayCounts::default(),
        }
    }

    /// The tag table (benchmarks fill it).
    pub fn tags_mut(&mut self) -> &mut ReplayTable {
        &mut self.tags
    }

    /// Checks a fresh frame (`deadline_us >= now_us > 0`) and remembers it
    /// until its deadline unless it was accepted before. No allocation.
    pub fn check(&mut self, k: &ReplayKey, deadline_us: u64, now_us: u64) -> Checked {
        if let Some(sender) = k.sender {
            if now_us <= self.fallback_until_us && self.tags.contains(&k.tag, now_us) {
                return Checked::Replayed;
            }
            match self
                .windows
                .check_mark(k.tenant, sender, k.id, deadline_us, now_us)
            {
                m @ (Mark::Fresh | Mark::Opened) => {
                    self.counts.window_frames += 1;
                    self.counts.windows_opened += u64::from(m == Mark::Opened);
                    return Checked::Fresh;
                }
                Mark::Replayed => return Checked::Replayed,
                Mark::TooOld => return Checked::TooOld,
                Mark::NoRoom => self.counts.fallbacks += 1,
            }
        }
        match self.tags.check_insert(&k.tag, deadline_us, now_us) {
            Seen::Fresh => {
                self.counts.tag_frames += 1;
                if k.sender.is_some() {
                    self.fallback_until_us = self.fallback_until_us.max(deadline_us);
                }
                Checked::Fresh
            }
            Seen::Replayed => Checked::Replayed,
            Seen::Full => Checked::Full,
        }
    }

    /// Forgets a frame accepted by [`ReplayGuard::check`] (handed back to
    /// its stream transport unprocessed): it is checked again when it
    /// comes back. No allocation.
    pub fn forget(&mut self, k: &ReplayKey) {
        if let Some(sender) = k.sender {
            self.windows.forget(k.tenant, sender, k.id);
        }
        self.tags.forget(&k.tag);
    }

    /// The counters so far.
    pub fn counts(&self) -> ReplayCounts {
        self.counts
    }

    /// Windows live at `now_us`, counted `n` slots at a time: the total
    /// when a sweep of the table ends (for publishing, not per frame).
    pub fn sweep_live(&mut self, now_us: u64, n: usize) -> Option<usize> {
        self.windows.sweep_live(now_us, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::WINDOW_WAYS;

    fn key(sender: Option<u64>, id: u64) -> ReplayKey {
        let mut tag = [0u8; 16];
        tag[..8].copy_from_slice(&id.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
        tag[8..].copy_from_slice(&sender.unwrap_or(0).to_le_bytes());
        ReplayKey {
            tag,
            tenant: 7,
            sender,
            id,
        }
    }

    #[test]
    fn senders_use_windows_and_others_the_tag_table() {
        let mut g = ReplayGuard::new(8, WINDOW_WAYS, 64);
        // Far more frames of one sender than the tag table holds.
        for id in 0..1_000 {
            assert_eq!(g.check(&key(Some(1), id), 100, 1), Checked::Fresh, "{id}");
        }
        assert_eq!(g.check(&key(Some(1), 999), 100, 1), Checked::Replayed);
        assert_eq!(g.check(&key(Some(1), 900), 100, 1), Checked::TooOld);
        assert_eq!(g.check(&key(None, 5), 100, 1), Checked::Fresh);
        assert_eq!(g.check(&key(None, 5), 100, 1), Checked::Replayed);
        let c = g.counts();
        assert_eq!((c.window_frames, c.tag_frames, c.fallbacks), (1_000, 1, 0));
        assert_eq!(c.windows_opened, 1);
    }

    #[test]
    fn a_full_window_table_falls_back_and_a_later_window_still_refuses_the_replay() {
        let mut g = ReplayGuard::new(64, WINDOW_WAYS, 64);
        for s in 1..=WINDOW_WAYS as u64 {
            assert_eq!(g.check(&key(Some(s), 1), 100, 1), Checked::Fresh);
        }
        // No room for sender 99 while those windows live: the tag table.
        assert_eq!(g.check(&key(Some(99), 50), 300, 1), Checked::Fresh);
        assert_eq!(g.check(&key(Some(99), 50), 300, 2), Checked::Replayed);
        assert_eq!(g.counts().fallbacks, 1);
        // The others expire; sender 99 gets a window with a later id. The
        // frame that went to the tag table is still refused, although its
        // id is within the new window.
        assert_eq!(g.check(&key(Some(99), 60), 300, 101), Checked::Fresh);
        assert_eq!(g.counts().windows_opened, WINDOW_WAYS as u64 + 1);
        assert_eq!(g.check(&key(Some(99), 50), 300, 102), Checked::Replayed);
        assert_eq!(g.check(&key(Some(99), 55), 300, 102), Checked::Fresh);
    }

    #[test]
    fn a_forgotten_frame_is_accepted_once_more() {
        let mut g = ReplayGuard::new(8, WINDOW_WAYS, 64);
        for k in [key(Some(3), 10), key(None, 10)] {
            assert_eq!(g.check(&k, 100, 1), Checked::Fresh);
            g.forget(&k);
            assert_eq!(g.check(&k, 100, 2), Checked::Fresh);
            assert_eq!(g.check(&k, 100, 3), Checked::Replayed);
        }
    }

    #[test]
    fn windows_are_counted_live_a_sweep_at_a_time() {
        let mut g = ReplayGuard::new(8, 64, 64);
        for s in 1..=5 {
            g.check(&key(Some(s), 1), 100, 1);
        }
        assert_eq!(g.sweep_live(50, 40), None);
        assert_eq!(g.sweep_live(50, 40), Some(5));
        assert_eq!(g.sweep_live(101, 64), Some(0));
    }
}
