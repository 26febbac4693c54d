//! Token load over time, for the heatmap (`/ui/heatmap`, `/v1/load`).
//!
//! Each worker owns a fixed ring of one-second buckets ([`LOAD_BUCKETS`]:
//! 15 minutes), allocated at start-up. A bucket holds one cell per shard,
//! per model slot and per tenant slot: tokens, requests, errors and the
//! highest queue depth seen. The worker's hot path only adds to cells of
//! its current bucket (load + store on atomics only it writes: no lock, no
//! locked instruction, no allocation) and moves to the next bucket when
//! its own clock passes a second. Readers (the control side, through one
//! batched C ABI call) read every worker's ring and merge them; a bucket
//! being recycled while read is detected by its second (a sequence lock)
//! and skipped.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

use crate::config::limits::{MODEL_SLOT_COUNT_MAX, SHARD_COUNT_MAX};

/// Buckets per worker ring: one per second, 15 minutes.
pub const LOAD_BUCKETS: usize = 900;
/// Distinct tenants a worker tells apart in its ring; later ones share
/// one overflow cell (reported with tenant id [`TENANT_OTHER`]).
pub const TENANT_SLOTS: usize = 64;
/// The tenant key of the overflow cell.
pub const TENANT_OTHER: u64 = u64::MAX;
/// Distinct model slots a worker tells apart in its ring (of up to
/// `MODEL_SLOT_COUNT_MAX`); later ones share one overflow cell (reported
/// with key [`MODEL_OTHER`]).
pub const MODEL_SLOTS: usize = 64;
/// The model key of requests that ran on no local model slot (forwarded
/// to a peer, or refused before a model was chosen).
pub const MODEL_NONE: u64 = u64::MAX;
/// The model key of the overflow cell.
pub const MODEL_OTHER: u64 = u64::MAX - 1;

// Model cells: MODEL_SLOTS, then the overflow, then "no local model".
const MODEL_CELLS: usize = MODEL_SLOTS + 2;
const TENANT_CELLS: usize = TENANT_SLOTS + 1;
const SHARD_BASE: usize = 0;
const MODEL_BASE: usize = SHARD_COUNT_MAX;
const TENANT_BASE: usize = MODEL_BASE + MODEL_CELLS;
/// Cells per bucket.
pub const CELLS: usize = TENANT_BASE + TENANT_CELLS;

/// Which dimension a read is keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Dim {
    /// Key = shard index.
    Shard = 0,
    /// Key = model slot ([`MODEL_NONE`]: no local model).
    Model = 1,
    /// Key = tenant id ([`TENANT_OTHER`]: tenants past [`TENANT_SLOTS`]).
    Tenant = 2,
}

impl Dim {
    /// From the C ABI's number.
    pub fn from_u32(v: u32) -> Option<Dim> {
        match v {
            0 => Some(Dim::Shard),
            1 => Some(Dim::Model),
            2 => Some(Dim::Tenant),
            _ => None,
        }
    }
}

#[derive(Debug, Default)]
struct Cell {
    tokens: AtomicU32,
    requests: AtomicU32,
    errors: AtomicU32,
    queue_depth_max: AtomicU32,
}

#[derive(Debug)]
struct Bucket {
    /// The second (since the Unix epoch) this bucket counts; 0 while it is
    /// being reset.
    second: AtomicU64,
    cells: [Cell; CELLS],
}

impl Default for Bucket {
    fn default() -> Self {
        Bucket {
            second: AtomicU64::new(0),
            cells: std::array::from_fn(|_| Cell::default()),
        }
    }
}

/// One worker's ring, shared with readers.
#[derive(Debug)]
pub struct LoadRing {
    buckets: Box<[Bucket]>,
    /// Tenant slot -> tenant id + 1 (0: free). Written once per slot.
    tenant_ids: [AtomicU64; TENANT_SLOTS],
    /// Model cell -> model slot + 1 (0: free). Written once per cell.
    model_ids: [AtomicU64; MODEL_SLOTS],
}

impl Default for LoadRing {
    fn default() -> Self {
        LoadRing::new()
    }
}

/// One merged cell of a read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadRow {
    /// Second since the Unix epoch.
    pub second: u64,
    /// Shard index, model slot or tenant id ([`Dim`]).
    pub key: u64,
    /// Tokens declared by requests (and added by [`LoadWriter::add_tokens`]).
    pub tokens: u64,
    /// Requests.
    pub requests: u64,
    /// Error frames.
    pub errors: u64,
    /// Highest queue depth seen at admission (max over workers).
    pub queue_depth_max: u32,
}

impl LoadRing {
    /// Allocates the ring (start-up only).
    pub fn new() -> LoadRing {
        LoadRing {
            buckets: (0..LOAD_BUCKETS).map(|_| Bucket::default()).collect(),
            tenant_ids: std::array::from_fn(|_| AtomicU64::new(0)),
            model_ids: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Adds this ring's nonzero cells of seconds `from..=to` in dimension
    /// `dim` to `acc` (keyed by second and key).
    pub fn read_into(&self, from: u64, to: u64, dim: Dim, acc: &mut BTreeMap<(u64, u64), LoadRow>) {
        let (base, n) = match dim {
            Dim::Shard => (SHARD_BASE, SHARD_COUNT_MAX),
            Dim::Model => (MODEL_BASE, MODEL_CELLS),
            Dim::Tenant => (TENANT_BASE, TENANT_CELLS),
        };
        let mut vals = [[0u32; 4]; CELLS];
        for b in self.buckets.iter() {
            let s1 = b.second.load(Ordering::Acquire);
            if s1 == 0 || s1 < from || s1 > to {
                continue;
            }
            for (k, v) in vals[..n].iter_mut().enumerate() {
                let c = &b.cells[base + k];
                *v = [
                    c.tokens.load(Ordering::Relaxed),
                    c.requests.load(Ordering::Relaxed),
                    c.errors.load(Ordering::Relaxed),
                    c.queue_depth_max.load(Ordering::Relaxed),
                ];
            }
            fence(Ordering::Acquire);
            if b.second.load(Ordering::Relaxed) != s1 {
                continue; // recycled while read
            }
            for (k, v) in vals[..n].iter().enumerate() {
                if v.iter().all(|&x| x == 0) {
                    continue;
                }
                let key = match dim {
                    Dim::Shard => k as u64,
                    Dim::Model if k == MODEL_SLOTS => MODEL_OTHER,
                    Dim::Model if k == MODEL_SLOTS + 1 => MODEL_NONE,
                    Dim::Model => match self.model_ids[k].load(Ordering::Acquire) {
                        0 => continue,
                        id => id - 1,
                    },
                    Dim::Tenant if k == TENANT_SLOTS => TENANT_OTHER,
                    Dim::Tenant => match self.tenant_ids[k].load(Ordering::Acquire) {
                        0 => continue,
                        id => id - 1,
                    },
                };
                let r = acc.entry((s1, key)).or_insert(LoadRow {
                    second: s1,
                    key,
                    ..LoadRow::default()
                });
                r.tokens += u64::from(v[0]);
                r.requests += u64::from(v[1]);
                r.errors += u64::from(v[2]);
                r.queue_depth_max = r.queue_depth_max.max(v[3]);
            }
        }
    }
}

/// Where one request's counts go: its cells in the current bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadKey {
    shard: Option<u16>,
    model: u16,
    tenant: u16,
}

/// A worker's side of its ring: the only writer.
#[derive(Debug)]
pub struct LoadWriter {
    ring: std::sync::Arc<LoadRing>,
    cur: usize,
    cur_second: u64,
    /// Tenant slot -> tenant id + 1 (0: free); the worker's own copy.
    tenants: [u64; TENANT_SLOTS],
    /// Model cell -> model slot + 1 (0: free); the worker's own copy.
    models: [u64; MODEL_SLOTS],
}

/// The cell of `id` in a fixed table (`mine`, published in `ids`): found
/// or taken by probing, or the overflow cell (`mine.len()`) when full.
#[inline]
fn cell_of<const N: usize>(mine: &mut [u64; N], ids: &[AtomicU64; N], id: u64) -> usize {
    let want = id.wrapping_add(1);
    let start = (want.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize % N;
    for i in 0..N {
        let k = (start + i) % N;
        if mine[k] == want {
            return k;
        }
        if mine[k] == 0 {
            mine[k] = want;
            ids[k].store(want, Ordering::Release);
            return k;
        }
    }
    N
}

#[inline]
fn add(a: &AtomicU32, n: u32) {
    a.store(
        a.load(Ordering::Relaxed).saturating_add(n),
        Ordering::Relaxed,
    );
}

impl LoadWriter {
    /// The writer of `ring`.
    pub fn new(ring: std::sync::Arc<LoadRing>) -> LoadWriter {
        LoadWriter {
            ring,
            cur: 0,
            cur_second: 0,
            tenants: [0; TENANT_SLOTS],
            models: [0; MODEL_SLOTS],
        }
    }

    /// Moves to the bucket of `now_us` (the worker's clock, µs since the
    /// epoch) when it is a new second; resets that bucket first.
    #[inline]
    pub fn tick(&mut self, now_us: u64) {
        let s = now_us / 1_000_000;
        if s == self.cur_second || s == 0 {
            return;
        }
        self.cur_second = s;
        self.cur = (s % LOAD_BUCKETS as u64) as usize;
        let b = &self.ring.buckets[self.cur];
        b.second.store(0, Ordering::Relaxed);
        fence(Ordering::Release);
        for c in &b.cells {
            c.tokens.store(0, Ordering::Relaxed);
            c.requests.store(0, Ordering::Relaxed);
            c.errors.store(0, Ordering::Relaxed);
            c.queue_depth_max.store(0, Ordering::Relaxed);
        }
        b.second.store(s, Ordering::Release);
    }

    /// The cells of a request to `shard` (None: not routed) run by model
    /// slot `slot` (None: no local model) for `tenant`. Finds or takes the
    /// tenant's slot: a probe of a fixed table, no allocation.
    #[inline]
    pub fn key(&mut self, shard: Option<usize>, slot: Option<usize>, tenant: u32) -> LoadKey {
        let tenant = cell_of(&mut self.tenants, &self.ring.tenant_ids, u64::from(tenant)) as u16;
        self.key_with(shard, slot, tenant)
    }

    /// The cells of an error whose tenant id is unauthenticated: the
    /// tenant overflow cell ([`TENANT_OTHER`]), never a new tenant slot.
    pub fn key_unclaimed(&mut self, shard: Option<usize>, slot: Option<usize>) -> LoadKey {
        self.key_with(shard, slot, TENANT_SLOTS as u16)
    }

    #[inline]
    fn key_with(&mut self, shard: Option<usize>, slot: Option<usize>, tenant: u16) -> LoadKey {
        let shard = shard.filter(|&s| s < SHARD_COUNT_MAX).map(|s| s as u16);
        let model = match slot.filter(|&m| m < MODEL_SLOT_COUNT_MAX) {
            Some(m) => cell_of(&mut self.models, &self.ring.model_ids, m as u64),
            None => MODEL_SLOTS + 1,
        } as u16;
        LoadKey {
            shard,
            model,
            tenant,
        }
    }

    #[inline]
    fn each(&self, k: LoadKey, mut f: impl FnMut(&Cell)) {
        let b = &self.ring.buckets[self.cur];
        if let Some(s) = k.shard {
            f(&b.cells[SHARD_BASE + usize::from(s)]);
        }
        f(&b.cells[MODEL_BASE + usize::from(k.model)]);
        f(&b.cells[TENANT_BASE + usize::from(k.tenant)]);
    }

    /// Counts one request declaring `tokens` tokens.
    #[inline]
    pub fn request(&self, k: LoadKey, tokens: u32) {
        self.each(k, |c| {
            add(&c.requests, 1);
            add(&c.tokens, tokens);
        });
    }

    /// Adds `n` tokens to the current bucket: the hook for tokens that are
    /// generated after admission (stream steps).
    #[inline]
    pub fn add_tokens(&self, k: LoadKey, n: u32) {
        self.each(k, |c| add(&c.tokens, n));
    }

    /// Counts one error frame.
    #[inline]
    pub fn error(&self, k: LoadKey) {
        self.each(k, |c| add(&c.errors, 1));
    }

    /// Records a queue depth seen at admission.
    #[inline]
    pub fn depth(&self, k: LoadKey, depth: u32) {
        self.each(k, |c| {
            if depth > c.queue_depth_max.load(Ordering::Relaxed) {
                c.queue_depth_max.store(depth, Ordering::Relaxed);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn read(r: &LoadRing, from: u64, to: u64, dim: Dim) -> Vec<LoadRow> {
        let mut acc = BTreeMap::new();
        r.read_into(from, to, dim, &mut acc);
        acc.into_values().collect()
    }

    #[test]
    fn counts_land_in_the_bucket_of_the_second() {
        let ring = Arc::new(LoadRing::new());
        let mut w = LoadWriter::new(Arc::clone(&ring));
        w.tick(1_000_000_500_000);
        let k = w.key(Some(3), Some(1), 7);
        w.request(k, 100);
        w.request(k, 20);
        w.depth(k, 5);
        w.depth(k, 2);
        w.tick(1_000_001_000_001);
        let k2 = w.key(Some(0), None, 8);
        w.request(k2, 1);
        w.error(k2);
        w.add_tokens(k2, 9);
        let rows = read(&ring, 1_000_000, 1_000_001, Dim::Shard);
        assert_eq!(
            rows,
            vec![
                LoadRow {
                    second: 1_000_000,
                    key: 3,
                    tokens: 120,
                    requests: 2,
                    errors: 0,
                    queue_depth_max: 5
                },
                LoadRow {
                    second: 1_000_001,
                    key: 0,
                    tokens: 10,
                    requests: 1,
                    errors: 1,
                    queue_depth_max: 0
                },
            ]
        );
        let m = read(&ring, 1_000_001, 1_000_001, Dim::Model);
        assert_eq!(m[0].key, MODEL_NONE);
        let m = read(&ring, 1_000_000, 1_000_000, Dim::Model);
        assert_eq!((m[0].key, m[0].requests), (1, 2));
        let t = read(&ring, 0, u64::MAX, Dim::Tenant);
        assert_eq!(t.iter().map(|r| r.key).collect::<Vec<_>>(), vec![7, 8]);
        assert!(read(&ring, 1_000_002, 1_000_900, Dim::Shard).is_empty());
    }

    #[test]
    fn a_recycled_bucket_forgets_the_old_second() {
        let ring = Arc::new(LoadRing::new());
        let mut w = LoadWriter::new(Arc::clone(&ring));
        w.tick(5_000_000_000);
        let k = w.key(Some(1), None, 0);
        w.request(k, 4);
        w.tick((5_000 + LOAD_BUCKETS as u64) * 1_000_000);
        assert!(read(&ring, 5_000, 5_000, Dim::Shard).is_empty());
    }

    #[test]
    fn tenants_past_the_table_share_the_overflow_cell() {
        let ring = Arc::new(LoadRing::new());
        let mut w = LoadWriter::new(Arc::clone(&ring));
        w.tick(9_000_000_000);
        for t in 0..(TENANT_SLOTS as u32 + 10) {
            let k = w.key(None, None, t);
            w.request(k, 1);
        }
        let rows = read(&ring, 0, u64::MAX, Dim::Tenant);
        assert_eq!(rows.len(), TENANT_SLOTS + 1);
        let other = rows
            .iter()
            .find(|r| r.key == TENANT_OTHER)
            .map(|r| r.requests);
        assert_eq!(other, Some(10));
        // Not routed: no shard cell.
        assert!(read(&ring, 0, u64::MAX, Dim::Shard).is_empty());
    }

    #[test]
    fn unclaimed_errors_take_no_tenant_slot() {
        let ring = Arc::new(LoadRing::new());
        let mut w = LoadWriter::new(Arc::clone(&ring));
        w.tick(9_000_000_000);
        for _ in 0..(TENANT_SLOTS + 10) {
            let k = w.key_unclaimed(None, None);
            w.error(k);
        }
        // A real tenant still gets its own cell afterwards.
        let k = w.key(None, None, 42);
        w.request(k, 1);
        let rows = read(&ring, 0, u64::MAX, Dim::Tenant);
        assert_eq!(rows.len(), 2);
        let other = rows
            .iter()
            .find(|r| r.key == TENANT_OTHER)
            .map(|r| r.errors);
        assert_eq!(other, Some(TENANT_SLOTS as u64 + 10));
        assert!(rows.iter().any(|r| r.key == 42 && r.requests == 1));
    }
}

#[cfg(test)]
mod model_tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn model_slots_past_the_table_share_the_overflow_cell() {
        let ring = Arc::new(LoadRing::new());
        let mut w = LoadWriter::new(Arc::clone(&ring));
        w.tick(9_000_000_000);
        for slot in 0..(MODEL_SLOTS + 3) {
            let k = w.key(None, Some(slot * 50), 1);
            w.request(k, 1);
        }
        let mut acc = BTreeMap::new();
        ring.read_into(0, u64::MAX, Dim::Model, &mut acc);
        assert_eq!(acc.len(), MODEL_SLOTS + 1);
        let other = acc
            .values()
            .find(|r| r.key == MODEL_OTHER)
            .map(|r| r.requests);
        assert_eq!(other, Some(3));
        assert!(acc.values().any(|r| r.key == 50 * (MODEL_SLOTS as u64 - 1)));
    }
}
