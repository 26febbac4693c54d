//! Counts per key (a source address, a tenant) in a table laid out at
//! start: open addressing with linear probing, an entry removed when its
//! count drops to zero. No allocation after `new`.

/// A fixed-capacity map from a 128-bit key to a count.
#[derive(Debug)]
pub(super) struct Tally {
    keys: Box<[u128]>,
    counts: Box<[u32]>,
    mask: usize,
    len: usize,
}

impl Tally {
    /// Room for `keys` distinct keys with a nonzero count.
    pub fn new(keys: usize) -> Tally {
        // Half full at most, so probes stay short.
        let cap = (2 * keys.max(1)).next_power_of_two();
        Tally {
            keys: vec![0; cap].into_boxed_slice(),
            counts: vec![0; cap].into_boxed_slice(),
            mask: cap - 1,
            len: 0,
        }
    }

    fn home(&self, k: u128) -> usize {
        let x = (k as u64) ^ ((k >> 64) as u64).rotate_left(29);
        (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & self.mask
    }

    /// Where `k` is, or the empty place it would take.
    fn find(&self, k: u128) -> (usize, bool) {
        let mut i = self.home(k);
        loop {
            if self.counts[i] == 0 {
                return (i, false);
            }
            if self.keys[i] == k {
                return (i, true);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// The count of `k` (0 when absent).
    pub fn get(&self, k: u128) -> u32 {
        match self.find(k) {
            (i, true) => self.counts[i],
            _ => 0,
        }
    }

    /// Counts one more for `k`. False when the table is full (the caller
    /// sized it for every key that can hold a count, so this is a bug).
    pub fn inc(&mut self, k: u128) -> bool {
        match self.find(k) {
            (i, true) => self.counts[i] += 1,
            (i, false) => {
                if 2 * (self.len + 1) > self.counts.len() {
                    return false;
                }
                self.keys[i] = k;
                self.counts[i] = 1;
                self.len += 1;
            }
        }
        true
    }

    /// Counts one less for `k`; the entry goes at zero.
    pub fn dec(&mut self, k: u128) {
        let (mut i, true) = self.find(k) else {
            debug_assert!(false, "tally of an absent key decremented");
            return;
        };
        self.counts[i] -= 1;
        if self.counts[i] > 0 {
            return;
        }
        self.len -= 1;
        // Backward-shift deletion: move later entries of the run into the
        // hole when their home is at or before it, so no probe stops early.
        let mut j = i;
        loop {
            j = (j + 1) & self.mask;
            if self.counts[j] == 0 {
                return;
            }
            let h = self.home(self.keys[j]);
            let between = if i <= j {
                i < h && h <= j
            } else {
                i < h || h <= j
            };
            if !between {
                self.keys[i] = self.keys[j];
                self.counts[i] = self.counts[j];
                self.counts[j] = 0;
                i = j;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_survive_collisions_and_removals() {
        let mut t = Tally::new(64);
        let mut model = std::collections::HashMap::new();
        let mut x = 7u64;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = u128::from(x >> 58); // 64 keys: many collisions
            let n: &mut u32 = model.entry(k).or_default();
            if (x >> 20) & 1 == 0 || *n == 0 {
                assert!(t.inc(k));
                *n += 1;
            } else {
                t.dec(k);
                *n -= 1;
            }
            for (k, n) in &model {
                assert_eq!(t.get(*k), *n, "key {k}");
            }
        }
    }

    #[test]
    fn a_full_table_refuses_new_keys() {
        let mut t = Tally::new(2);
        assert!(t.inc(1) && t.inc(2));
        assert!(!t.inc(3));
        assert!(t.inc(1));
        t.dec(2);
        assert!(t.inc(3));
    }
}
