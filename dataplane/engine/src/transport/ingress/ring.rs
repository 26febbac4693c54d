//! A bounded single-producer single-consumer ring of `u64` entries. The
//! two ends are separate owned handles, so the type system keeps one
//! producer and one consumer; the entries are atomics, so no unsafe code.
//! Entry `i` is written before `tail` moves past it (release) and read
//! after `tail` is seen past it (acquire): what the producer wrote before
//! pushing (a request frame, a reply) is visible to the consumer that pops.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Keeps the two indices on separate cache lines.
#[repr(align(64))]
#[derive(Debug, Default)]
struct Padded(AtomicU64);

#[derive(Debug)]
struct Ring {
    entries: Box<[AtomicU64]>,
    mask: u64,
    /// Next entry to pop; written by the consumer only.
    head: Padded,
    /// Next entry to push; written by the producer only.
    tail: Padded,
}

/// The pushing end.
#[derive(Debug)]
pub struct Producer(Arc<Ring>);

/// The popping end.
#[derive(Debug)]
pub struct Consumer(Arc<Ring>);

/// A ring of at least `capacity` entries (rounded up to a power of two).
pub fn ring(capacity: usize) -> (Producer, Consumer) {
    let cap = capacity.max(2).next_power_of_two();
    let r = Arc::new(Ring {
        entries: (0..cap).map(|_| AtomicU64::new(0)).collect(),
        mask: cap as u64 - 1,
        head: Padded::default(),
        tail: Padded::default(),
    });
    (Producer(Arc::clone(&r)), Consumer(r))
}

impl Producer {
    /// Pushes `v`; gives it back when the ring is full.
    pub fn push(&mut self, v: u64) -> Result<(), u64> {
        let r = &*self.0;
        let t = r.tail.0.load(Ordering::Relaxed);
        let h = r.head.0.load(Ordering::Acquire);
        if t - h > r.mask {
            return Err(v);
        }
        r.entries[(t & r.mask) as usize].store(v, Ordering::Relaxed);
        // SeqCst, not only Release: the sleep/wake handshake (wake.rs)
        // orders this store before the producer's load of the sleep flag.
        r.tail.0.store(t + 1, Ordering::SeqCst);
        Ok(())
    }

    /// Entries the ring holds.
    pub fn capacity(&self) -> usize {
        self.0.entries.len()
    }
}

impl Consumer {
    /// Pops the oldest entry.
    pub fn pop(&mut self) -> Option<u64> {
        let r = &*self.0;
        let h = r.head.0.load(Ordering::Relaxed);
        let t = r.tail.0.load(Ordering::Acquire);
        if h == t {
            return None;
        }
        let v = r.entries[(h & r.mask) as usize].load(Ordering::Relaxed);
        r.head.0.store(h + 1, Ordering::Release);
        Some(v)
    }

    /// Whether nothing is waiting (SeqCst: see `Producer::push`).
    pub fn is_empty(&self) -> bool {
        let r = &*self.0;
        r.head.0.load(Ordering::Relaxed) == r.tail.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_bounded() {
        let (mut p, mut c) = ring(3);
        assert_eq!(p.capacity(), 4);
        for i in 0..4 {
            p.push(i).unwrap();
        }
        assert_eq!(p.push(9), Err(9));
        assert_eq!(c.pop(), Some(0));
        p.push(4).unwrap();
        let got: Vec<u64> = std::iter::from_fn(|| c.pop()).collect();
        assert_eq!(got, [1, 2, 3, 4]);
        assert!(c.is_empty());
    }

    #[test]
    fn across_threads_in_order() {
        let (mut p, mut c) = ring(64);
        const N: u64 = 200_000;
        let t = std::thread::spawn(move || {
            let mut i = 0;
            while i < N {
                if p.push(i).is_ok() {
                    i += 1;
                }
            }
        });
        let mut want = 0;
        while want < N {
            if let Some(v) = c.pop() {
                assert_eq!(v, want);
                want += 1;
            }
        }
        t.join().unwrap();
    }
}
