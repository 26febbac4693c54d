//! Replay windows: per (tenant, sender id), the highest request id
//! accepted and a bitmap of the ids just below it (docs/wire.md, "Replay
//! windows"). A sender's request ids are its counter, so its replay state
//! is one window, however fast it sends: the scheme of IPsec's and
//! WireGuard's anti-replay windows, with Sluice's deadlines deciding when
//! a window may be forgotten.
//!
//! Fixed size, allocated once when the worker is built; a check touches
//! two buckets of [`WINDOW_WAYS`] heads and one window's bitmap, and
//! allocates nothing. Senders choose their ids, so the buckets come from
//! a hash keyed at random per start: a sender cannot aim at a bucket.

use std::hash::{BuildHasher, RandomState};

/// Windows per bucket. 4 × 32 bytes: two cache lines.
pub const WINDOW_WAYS: usize = 4;

/// Which window, and how far it reaches. `until_us == 0`: never used.
#[derive(Debug, Clone, Copy, Default)]
struct Head {
    sender: u64,
    /// Highest request id accepted.
    top: u64,
    /// Latest deadline of a frame accepted: the window is live, and may not
    /// be reused, while `now <= until_us` (a replay of any of its frames
    /// would still be fresh).
    until_us: u64,
    tenant: u32,
}

/// What [`SenderWindows::check_mark`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Not seen: marked in the sender's window.
    Fresh,
    /// Not seen: the sender had no live window and got one.
    Opened,
    /// The id's bit is set: accepted before.
    Replayed,
    /// The id lies below the window (`top - id >= window`): whether it
    /// was accepted can no longer be told.
    TooOld,
    /// The sender has no window, and both of its buckets hold live ones.
    NoRoom,
}

/// A worker's replay windows.
#[derive(Debug, Clone)]
pub struct SenderWindows {
    heads: Box<[Head]>,
    /// `words` u64 per window, slot-major.
    bits: Box<[u64]>,
    words: usize,
    bucket_mask: usize,
    hasher: RandomState,
    /// Where the live count's sweep is, and what it counted so far.
    sweep_at: usize,
    sweep_count: usize,
}

impl SenderWindows {
    /// `windows` windows (a power of two, at least one bucket) of
    /// `window_ids` request ids each (a power of two, at least 64; the
    /// config checks both). Allocates here, never afterwards.
    pub fn new(windows: usize, window_ids: usize) -> SenderWindows {
        let buckets = (windows / WINDOW_WAYS).max(1).next_power_of_two();
        let words = (window_ids / 64).max(1).next_power_of_two();
        SenderWindows {
            heads: vec![Head::default(); buckets * WINDOW_WAYS].into_boxed_slice(),
            bits: vec![0; buckets * WINDOW_WAYS * words].into_boxed_slice(),
            words,
            bucket_mask: buckets - 1,
            hasher: RandomState::new(),
            sweep_at: 0,
            sweep_count: 0,
        }
    }

    /// Windows in the table.
    pub fn capacity(&self) -> usize {
        self.heads.len()
    }

    /// Request ids one window spans.
    pub fn window_ids(&self) -> u64 {
        (self.words * 64) as u64
    }

    fn buckets(&self, tenant: u32, sender: u64) -> [usize; 2] {
        let h = self.hasher.hash_one((tenant, sender));
        [
            h as usize & self.bucket_mask,
            (h >> 32) as usize & self.bucket_mask,
        ]
    }

    /// The slot of (tenant, sender), live or not.
    fn find(&self, tenant: u32, sender: u64) -> Option<usize> {
        self.buckets(tenant, sender).into_iter().find_map(|b| {
            (b * WINDOW_WAYS..(b + 1) * WINDOW_WAYS).find(|&at| {
                let h = &self.heads[at];
                h.until_us != 0 && h.sender == sender && h.tenant == tenant
            })
        })
    }

    /// Checks request id `id` of (tenant, sender) at `now_us` and marks it
    /// unless it was accepted before; the window then stays live until at
    /// least `deadline_us`. Callers pass `deadline_us >= now_us > 0` (a
    /// fresh frame's deadline). No allocation; O(window / 64) at worst
    /// (a slide across the whole window).
    pub fn check_mark(
        &mut self,
        tenant: u32,
        sender: u64,
        id: u64,
        deadline_us: u64,
        now_us: u64,
    ) -> Mark {
        debug_assert!(now_us > 0 && deadline_us >= now_us);
        let at = match self.find(tenant, sender) {
            Some(at) if self.heads[at].until_us >= now_us => {
                return self.mark(at, id, deadline_us);
            }
            // Its window expired: every frame it accepted has too, so the
            // sender starts afresh in the same slot.
            Some(at) => at,
            None => {
                let [b1, b2] = self.buckets(tenant, sender);
                let free = |b: usize| {
                    (b * WINDOW_WAYS..(b + 1) * WINDOW_WAYS)
                        .find(|&at| self.heads[at].until_us < now_us)
                };
                match free(b1).or_else(|| free(b2)) {
                    Some(at) => at,
                    None => return Mark::NoRoom,
                }
            }
        };
        self.heads[at] = Head {
            sender,
            top: id,
            until_us: deadline_us,
            tenant,
        };
        self.window_mut(at).fill(0);
        self.set(at, id);
        Mark::Opened
    }

    fn mark(&mut self, at: usize, id: u64, deadline_us: u64) -> Mark {
        let n = self.window_ids();
        let top = self.heads[at].top;
        if id > top {
            self.slide(at, top, id - top);
        } else if top - id >= n {
            return Mark::TooOld;
        } else if self.is_set(at, id) {
            return Mark::Replayed;
        }
        self.set(at, id);
        let h = &mut self.heads[at];
        h.until_us = h.until_us.max(deadline_us);
        Mark::Fresh
    }

    /// Moves the top of window `at` up by `d` ids, clearing the bits of
    /// the ids it enters (they have not been seen).
    fn slide(&mut self, at: usize, top: u64, d: u64) {
        let n = self.window_ids();
        self.heads[at].top = top + d;
        let w = self.window_mut(at);
        if d >= n {
            w.fill(0);
            return;
        }
        let mut pos = ((top + 1) % n) as usize;
        let mut left = d as usize;
        while left > 0 {
            if pos.is_multiple_of(64) && left >= 64 {
                w[pos / 64] = 0;
                pos += 64;
                left -= 64;
            } else {
                w[pos / 64] &= !(1u64 << (pos % 64));
                pos += 1;
                left -= 1;
            }
            if pos as u64 == n {
                pos = 0;
            }
        }
    }

    /// Clears the mark of `id` in the sender's window, if it is there: for
    /// a frame accepted and then handed back to its stream transport
    /// unprocessed (back-pressure), which is checked again when it comes
    /// back. The window's top and deadline stay. No allocation.
    pub fn forget(&mut self, tenant: u32, sender: u64, id: u64) {
        if let Some(at) = self.find(tenant, sender) {
            let top = self.heads[at].top;
            if id <= top && top - id < self.window_ids() {
                let (word, bit) = self.pos(id);
                self.window_mut(at)[word] &= !(1u64 << bit);
            }
        }
    }

    /// Windows live at `now_us` (for tests; O(capacity)).
    pub fn live(&self, now_us: u64) -> usize {
        self.heads
            .iter()
            .filter(|h| h.until_us != 0 && h.until_us >= now_us)
            .count()
    }

    /// Counts the live windows of the next `n` slots: the total of a
    /// sweep when this step ends one, so that a large table is counted a
    /// piece at a time.
    pub fn sweep_live(&mut self, now_us: u64, n: usize) -> Option<usize> {
        let end = (self.sweep_at + n).min(self.heads.len());
        self.sweep_count += self.heads[self.sweep_at..end]
            .iter()
            .filter(|h| h.until_us != 0 && h.until_us >= now_us)
            .count();
        self.sweep_at = end;
        if end < self.heads.len() {
            return None;
        }
        self.sweep_at = 0;
        Some(std::mem::take(&mut self.sweep_count))
    }

    fn pos(&self, id: u64) -> (usize, u32) {
        let p = (id % self.window_ids()) as usize;
        (p / 64, (p % 64) as u32)
    }

    fn is_set(&self, at: usize, id: u64) -> bool {
        let (word, bit) = self.pos(id);
        self.bits[at * self.words + word] & (1u64 << bit) != 0
    }

    fn set(&mut self, at: usize, id: u64) {
        let (word, bit) = self.pos(id);
        self.window_mut(at)[word] |= 1u64 << bit;
    }

    fn window_mut(&mut self, at: usize) -> &mut [u64] {
        &mut self.bits[at * self.words..(at + 1) * self.words]
    }
}

#[cfg(test)]
mod tests;
