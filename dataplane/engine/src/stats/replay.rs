//! Replay-check counts (docs/wire.md, "Replay windows"): frames accepted
//! through senders' windows and through the tag table, fallbacks from one
//! to the other, and windows in use. Written by one worker at each
//! publish, read by snapshots. Refusals are counted by cause beside them
//! (`replayed`, `replay_too_old`, `replay_table_full`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::Serialize;

use crate::auth::ReplayCounts;

/// A worker's replay counts.
#[derive(Debug, Default)]
pub struct ReplayCounters {
    /// Frames accepted through a sender's window.
    pub window_frames: AtomicU64,
    /// Frames accepted through the tag table.
    pub tag_frames: AtomicU64,
    /// Frames naming a sender that found no room for a window.
    pub fallbacks: AtomicU64,
    /// Windows opened.
    pub windows_opened: AtomicU64,
    /// Windows live at the last full sweep (a gauge).
    pub windows_live: AtomicU64,
}

impl ReplayCounters {
    /// Stores the worker's counts (it is their only writer).
    pub fn store(&self, c: &ReplayCounts, windows_live: Option<usize>) {
        self.window_frames.store(c.window_frames, Relaxed);
        self.tag_frames.store(c.tag_frames, Relaxed);
        self.fallbacks.store(c.fallbacks, Relaxed);
        self.windows_opened.store(c.windows_opened, Relaxed);
        if let Some(n) = windows_live {
            self.windows_live.store(n as u64, Relaxed);
        }
    }

    /// For a snapshot.
    pub fn read(&self) -> ReplayStats {
        ReplayStats {
            window_frames: self.window_frames.load(Relaxed),
            tag_frames: self.tag_frames.load(Relaxed),
            fallbacks: self.fallbacks.load(Relaxed),
            windows_opened: self.windows_opened.load(Relaxed),
            windows_live: self.windows_live.load(Relaxed),
        }
    }
}

/// One worker's replay counts in a snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ReplayStats {
    /// Signed frames accepted through their sender's window.
    pub window_frames: u64,
    /// Signed frames accepted through the tag table (no sender id, or a
    /// fallback).
    pub tag_frames: u64,
    /// Frames naming a sender whose buckets held only live windows: they
    /// went to the tag table.
    pub fallbacks: u64,
    /// Windows opened (a sender without a live window on this worker).
    pub windows_opened: u64,
    /// Windows live (at the worker's last sweep of its table).
    pub windows_live: u64,
}
