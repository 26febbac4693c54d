//! The replay table: tags of authenticated frames a worker has accepted,
//! each remembered until its frame's deadline passes (docs/wire.md,
//! "Freshness and replays").
//!
//! Fixed size, allocated once when the worker is built; a lookup touches two
//! buckets of [`REPLAY_WAYS`] slots and allocates nothing. The tag is an HMAC
//! output, uniformly distributed and unforgeable without the tenant's key,
//! and only tags that verified are inserted, so its own bits index the table:
//! no hash function, and no way for a sender to aim at one bucket.
//!
//! Two-choice hashing: a tag may live in either of two buckets (from its
//! first and second 8 bytes) and goes into the one with fewer live slots.
//! A bucket overflows only when both choices are full, which keeps the
//! table usable close to its capacity.

/// Slots per bucket. 8 × 24 bytes: three cache lines.
pub const REPLAY_WAYS: usize = 8;

/// One remembered tag. `expires_us == 0` is an empty slot (no clock reads 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Slot {
    tag: [u64; 2],
    /// The frame's deadline: the slot is live while `now <= expires_us`.
    expires_us: u64,
}

/// What [`ReplayTable::check_insert`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Not seen: now remembered until its deadline.
    Fresh,
    /// The same tag is remembered and its deadline has not passed.
    Replayed,
    /// Both buckets the tag may use are full of live tags: not remembered.
    Full,
}

/// A worker's replay table.
#[derive(Debug, Clone)]
pub struct ReplayTable {
    slots: Box<[Slot]>,
    /// Buckets − 1; the bucket count is a power of two.
    bucket_mask: usize,
}

impl ReplayTable {
    /// A table of `entries` slots (a power of two, at least one bucket; the
    /// config checks both). Allocates here, never afterwards.
    pub fn new(entries: usize) -> ReplayTable {
        let buckets = (entries / REPLAY_WAYS).max(1).next_power_of_two();
        ReplayTable {
            slots: vec![Slot::default(); buckets * REPLAY_WAYS].into_boxed_slice(),
            bucket_mask: buckets - 1,
        }
    }

    /// Slots in the table.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The two buckets a tag may live in (equal when the table has one, or
    /// by chance).
    pub fn buckets_of(&self, tag: &[u8; 16]) -> (usize, usize) {
        let (a, b) = split(tag);
        (a as usize & self.bucket_mask, b as usize & self.bucket_mask)
    }

    /// Looks a tag up at time `now_us` and remembers it until `expires_us`
    /// unless it is already there. Callers pass `expires_us >= now_us > 0`
    /// (a fresh frame's deadline). O(2 × REPLAY_WAYS), no allocation.
    pub fn check_insert(&mut self, tag: &[u8; 16], expires_us: u64, now_us: u64) -> Seen {
        debug_assert!(now_us > 0 && expires_us >= now_us);
        let key = split(tag);
        let (b1, b2) = self.buckets_of(tag);
        let live = |s: &Slot| s.expires_us >= now_us;
        let mut free = [None::<usize>; 2];
        let mut load = [0usize; 2];
        for (k, b) in [b1, b2].into_iter().enumerate() {
            if k == 1 && b == b1 {
                load[1] = REPLAY_WAYS; // the same bucket twice: one choice
                break;
            }
            let base = b * REPLAY_WAYS;
            for (w, s) in self.slots[base..base + REPLAY_WAYS].iter().enumerate() {
                if live(s) {
                    if s.tag == [key.0, key.1] {
                        return Seen::Replayed;
                    }
                    load[k] += 1;
                } else if free[k].is_none() {
                    free[k] = Some(base + w);
                }
            }
        }
        let pick = if load[1] < load[0] { 1 } else { 0 };
        let at = free[pick]
            .or(free[1 - pick])
            .or_else(|| self.make_room(b1, now_us))
            .or_else(|| (b2 != b1).then(|| self.make_room(b2, now_us)).flatten());
        let Some(at) = at else {
            return Seen::Full;
        };
        self.slots[at] = Slot {
            tag: [key.0, key.1],
            expires_us,
        };
        Seen::Fresh
    }

    /// Moves one live tag of full bucket `b` to a free slot of its other
    /// bucket, and returns the slot it left. One step of cuckoo hashing:
    /// it runs only when both buckets of a new tag are full, and costs at
    /// most REPLAY_WAYS more bucket scans.
    fn make_room(&mut self, b: usize, now_us: u64) -> Option<usize> {
        let base = b * REPLAY_WAYS;
        for at in base..base + REPLAY_WAYS {
            let s = self.slots[at];
            let (mut t, mut u) = ([0u8; 16], 0usize);
            t[..8].copy_from_slice(&s.tag[0].to_le_bytes());
            t[8..].copy_from_slice(&s.tag[1].to_le_bytes());
            let (c1, c2) = self.buckets_of(&t);
            let other = if c1 == b { c2 } else { c1 };
            if other == b {
                continue;
            }
            let obase = other * REPLAY_WAYS;
            while u < REPLAY_WAYS {
                if self.slots[obase + u].expires_us < now_us {
                    self.slots[obase + u] = s;
                    return Some(at);
                }
                u += 1;
            }
        }
        None
    }

    /// Forgets a tag remembered by [`ReplayTable::check_insert`], if it is
    /// there: for a frame accepted and then handed back to its stream
    /// transport unprocessed (back-pressure), which checks it again when it
    /// is delivered again. O(2 × REPLAY_WAYS), no allocation.
    pub fn forget(&mut self, tag: &[u8; 16]) {
        let key = split(tag);
        let (b1, b2) = self.buckets_of(tag);
        for b in [b1, b2] {
            let base = b * REPLAY_WAYS;
            for s in &mut self.slots[base..base + REPLAY_WAYS] {
                if s.expires_us != 0 && s.tag == [key.0, key.1] {
                    *s = Slot::default();
                    return;
                }
            }
        }
    }

    /// Whether a tag is remembered and live at `now_us`, without
    /// remembering it. O(2 × REPLAY_WAYS), no allocation.
    pub fn contains(&self, tag: &[u8; 16], now_us: u64) -> bool {
        let key = split(tag);
        let (b1, b2) = self.buckets_of(tag);
        [b1, b2].into_iter().any(|b| {
            self.slots[b * REPLAY_WAYS..(b + 1) * REPLAY_WAYS]
                .iter()
                .any(|s| s.expires_us >= now_us && s.tag == [key.0, key.1])
        })
    }

    /// Live slots at `now_us`, counted over the whole table (for tests and
    /// status; O(capacity)).
    pub fn live(&self, now_us: u64) -> usize {
        self.slots.iter().filter(|s| s.expires_us >= now_us).count()
    }

    /// Forgets every tag (benchmarks; a worker never does this).
    pub fn clear(&mut self) {
        self.slots.fill(Slot::default());
    }
}

fn split(tag: &[u8; 16]) -> (u64, u64) {
    let mut a = [0u8; 8];
    let mut b = [0u8; 8];
    a.copy_from_slice(&tag[..8]);
    b.copy_from_slice(&tag[8..]);
    (u64::from_le_bytes(a), u64::from_le_bytes(b))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    fn tag(n: u64) -> [u8; 16] {
        // Spread like an HMAC output: a 64-bit mix of n in both halves.
        let m = |x: u64| {
            let x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            let x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            x ^ (x >> 31)
        };
        let mut t = [0u8; 16];
        t[..8].copy_from_slice(&m(n).to_le_bytes());
        t[8..].copy_from_slice(&m(n ^ 0xa5a5_a5a5).to_le_bytes());
        t
    }

    #[test]
    fn a_tag_is_refused_until_its_deadline_then_forgotten() {
        let mut r = ReplayTable::new(64);
        assert_eq!(r.check_insert(&tag(1), 100, 10), Seen::Fresh);
        assert_eq!(r.check_insert(&tag(1), 100, 50), Seen::Replayed);
        assert_eq!(r.check_insert(&tag(1), 100, 100), Seen::Replayed);
        assert_eq!(r.check_insert(&tag(2), 100, 50), Seen::Fresh);
        // Past the deadline the slot is free again (the frame itself would
        // now be refused as deadline_exceeded before reaching the table).
        assert_eq!(r.check_insert(&tag(1), 300, 101), Seen::Fresh);
        assert_eq!(r.live(101), 1);
    }

    #[test]
    fn a_forgotten_tag_is_fresh_again_and_others_stay() {
        let mut r = ReplayTable::new(REPLAY_WAYS);
        for i in 0..REPLAY_WAYS as u64 {
            assert_eq!(r.check_insert(&tag(i), 1000, 1), Seen::Fresh);
        }
        assert!(r.contains(&tag(5), 1000) && !r.contains(&tag(5), 1001));
        r.forget(&tag(5));
        r.forget(&tag(99)); // never seen: nothing changes
        assert!(!r.contains(&tag(5), 1) && !r.contains(&tag(99), 1));
        assert_eq!(r.live(1), REPLAY_WAYS - 1);
        assert_eq!(r.check_insert(&tag(5), 1000, 2), Seen::Fresh);
        assert_eq!(r.check_insert(&tag(4), 1000, 2), Seen::Replayed);
        assert_eq!(r.check_insert(&tag(5), 1000, 3), Seen::Replayed);
    }

    #[test]
    fn one_bucket_holds_exactly_its_ways_then_is_full() {
        let mut r = ReplayTable::new(REPLAY_WAYS);
        for i in 0..REPLAY_WAYS as u64 {
            assert_eq!(r.check_insert(&tag(i), 1000, 1), Seen::Fresh, "tag {i}");
        }
        assert_eq!(r.check_insert(&tag(99), 1000, 1), Seen::Full);
        // Full does not hide a replay, and expiry frees room.
        assert_eq!(r.check_insert(&tag(3), 1000, 1), Seen::Replayed);
        assert_eq!(r.check_insert(&tag(99), 2000, 1001), Seen::Fresh);
    }

    /// Two choices fill the table close to its capacity before the first
    /// overflow (measured: the figure is in docs/operations.md).
    #[test]
    fn two_choices_fill_most_of_the_table() {
        for entries in [1024usize, 1 << 16] {
            let mut r = ReplayTable::new(entries);
            let mut n = 0u64;
            while r.check_insert(&tag(n), u64::MAX, 1) == Seen::Fresh {
                n += 1;
            }
            let load = n as f64 / entries as f64;
            eprintln!("{entries} entries: first overflow at load {load:.3}");
            assert!(
                load > 0.90,
                "{entries} entries: first overflow at {load:.3}"
            );
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Tag from a small pool, lifetime, clock step.
        Check(u8, u16, u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        (0u8..40, 0u16..300, 0u8..20).prop_map(|(t, life, step)| Op::Check(t, life, step))
    }

    proptest! {
        /// Against a model that remembers every accepted tag forever: the
        /// table refuses exactly the tags the model holds live, never
        /// refuses one it does not, and says Full only when both buckets
        /// of the tag could really be full of live tags.
        #[test]
        fn matches_a_hash_map_model(ops in proptest::collection::vec(op(), 1..400), buckets in 1usize..4) {
            let mut r = ReplayTable::new(buckets.next_power_of_two() * REPLAY_WAYS);
            let mut model: HashMap<[u8; 16], u64> = HashMap::new();
            let mut now = 1u64;
            for Op::Check(t, life, step) in ops {
                now += u64::from(step);
                let tg = tag(u64::from(t));
                let expires = now + u64::from(life);
                let got = r.check_insert(&tg, expires, now);
                let live_in_model = model.get(&tg).is_some_and(|&e| e >= now);
                if live_in_model {
                    prop_assert_eq!(got, Seen::Replayed);
                    continue;
                }
                prop_assert_ne!(got, Seen::Replayed, "a tag the model does not hold live");
                if got == Seen::Full {
                    let (b1, b2) = r.buckets_of(&tg);
                    let room = if b1 == b2 { REPLAY_WAYS } else { 2 * REPLAY_WAYS };
                    let competing = model
                        .iter()
                        .filter(|(k, e)| **e >= now && {
                            let (c1, c2) = r.buckets_of(k);
                            [c1, c2].iter().any(|c| *c == b1 || *c == b2)
                        })
                        .count();
                    prop_assert!(competing >= room, "Full with {} live competitors for {} slots", competing, room);
                } else {
                    model.insert(tg, expires);
                }
                prop_assert_eq!(r.live(now), model.values().filter(|&&e| e >= now).count());
            }
        }
    }
}
