//! A latency histogram any thread records into without a lock: 4 buckets
//! per power of two of microseconds (each within 19% of its value), from
//! 1 µs to about 18 minutes. Percentiles read from it are upper bounds of
//! their bucket.

use std::sync::atomic::{AtomicU64, Ordering};

/// Buckets per power of two.
const SUB: u32 = 4;
/// Powers of two covered: 2^30 µs is about 18 minutes.
const OCTAVES: u32 = 30;
const BUCKETS: usize = (SUB * OCTAVES) as usize + 1;

/// Lock-free latency histogram (µs).
#[derive(Debug)]
pub struct Hist {
    buckets: [AtomicU64; BUCKETS],
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl Default for Hist {
    fn default() -> Self {
        Hist {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
        }
    }
}

/// The bucket of `us`: values below 8 have one each; above, octave
/// `o = floor(log2 us)` is split in quarters.
fn bucket(us: u64) -> usize {
    if us < 8 {
        return us as usize;
    }
    let o = 63 - us.leading_zeros();
    if o > OCTAVES {
        return BUCKETS - 1;
    }
    ((o - 1) * SUB + ((us >> (o - 2)) & 3) as u32) as usize
}

/// The largest value bucket `b` holds.
fn upper(b: usize) -> u64 {
    if b < 8 {
        return b as u64;
    }
    if b >= BUCKETS - 1 {
        return u64::MAX;
    }
    let (o, q) = (b as u32 / SUB + 1, b as u32 % SUB);
    let base = 1u64 << o;
    base + (base / u64::from(SUB)) * u64::from(q + 1) - 1
}

impl Hist {
    /// Records one value.
    pub fn record(&self, us: u64) {
        self.buckets[bucket(us)].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The value at quantile `q` (0..=1): the upper bound of its bucket;
    /// 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        let n = self.count();
        if n == 0 {
            return 0;
        }
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        for (b, c) in self.buckets.iter().enumerate() {
            seen += c.load(Ordering::Relaxed);
            if seen >= rank {
                return upper(b);
            }
        }
        upper(BUCKETS - 1)
    }

    /// Count, mean, p50, p90, p99, as JSON (µs).
    pub fn to_json(&self) -> serde_json::Value {
        let n = self.count();
        let mean = self
            .sum_us
            .load(Ordering::Relaxed)
            .checked_div(n)
            .unwrap_or(0);
        serde_json::json!({
            "count": n,
            "mean_us": mean,
            "p50_us": self.quantile(0.5),
            "p90_us": self.quantile(0.9),
            "p99_us": self.quantile(0.99),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_bound_their_values() {
        for us in [
            0u64,
            1,
            2,
            3,
            5,
            7,
            8,
            100,
            1000,
            12_345,
            1 << 29,
            u64::MAX / 2,
        ] {
            let b = bucket(us);
            assert!(upper(b) >= us, "{us}: bucket {b} ends at {}", upper(b));
            if b > 0 && b < BUCKETS - 1 {
                assert!(upper(b - 1) < us, "{us}: bucket {b} starts too late");
            }
        }
    }

    #[test]
    fn quantiles_within_a_bucket() {
        let h = Hist::default();
        for us in 1..=1000u64 {
            h.record(us);
        }
        let p50 = h.quantile(0.5);
        assert!((500..=620).contains(&p50), "{p50}");
        let p99 = h.quantile(0.99);
        assert!((990..=1200).contains(&p99), "{p99}");
        assert_eq!(Hist::default().quantile(0.5), 0);
    }
}
