//! Read-copy-update for the tables: the control side publishes a new
//! snapshot; each worker loads it at a burst boundary and reports the epoch
//! it runs on; old snapshots are freed on the control side once every worker
//! has moved past them, so a worker never frees a snapshot on its hot path.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;

/// A published value with an epoch.
#[derive(Debug)]
pub struct Rcu<T> {
    current: ArcSwap<T>,
    epoch: AtomicU64,
    retired: Mutex<Vec<(u64, Arc<T>)>>,
}

impl<T> Rcu<T> {
    /// Publishes `v` as epoch 1.
    pub fn new(v: T) -> Rcu<T> {
        Rcu {
            current: ArcSwap::from_pointee(v),
            epoch: AtomicU64::new(1),
            retired: Mutex::new(Vec::new()),
        }
    }

    /// The current epoch (cheap; workers poll it once per burst).
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Loads the current value and its epoch.
    pub fn load(&self) -> (u64, Arc<T>) {
        loop {
            let e = self.epoch();
            let v = self.current.load_full();
            if self.epoch() == e {
                return (e, v);
            }
        }
    }

    /// Publishes a new value (control side); returns its epoch.
    pub fn publish(&self, v: T) -> u64 {
        let mut retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
        let old = self.current.swap(Arc::new(v));
        let e = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        retired.push((e, old));
        e
    }

    /// Frees retired values that no worker can hold any more: every worker
    /// has reported an epoch at or past the one that replaced them.
    pub fn reclaim(&self, min_seen: u64) -> usize {
        let mut retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
        let before = retired.len();
        retired.retain(|(e, _)| *e > min_seen);
        before - retired.len()
    }

    /// Values waiting to be freed.
    pub fn retired_len(&self) -> usize {
        self.retired.lock().map(|r| r.len()).unwrap_or(0)
    }
}
