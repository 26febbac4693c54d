//! Requests a worker forwarded to peers and has not yet seen answered: a
//! fixed slab plus an open-addressing index by (peer, request id), both
//! sized at start-up, so a forward and its answer cost O(1) and never
//! allocate.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// A request forwarded to a peer, waiting for its answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Forwarded {
    /// The peer it went to.
    pub peer: SocketAddr,
    /// The client's request id (answers echo it).
    pub request_id: u64,
    /// The client's tenant, for the error frame on timeout.
    pub tenant_id: u32,
    /// Where the answer goes.
    pub client: SocketAddr,
    /// The client's connection, for stream transports (`RxPacket::conn`).
    pub client_conn: u64,
    /// When it was sent.
    pub sent: Instant,
}

/// Why a forward could not be recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertError {
    /// Every slot is taken.
    Full,
    /// The same request id is already waiting on the same peer: its answer
    /// could not be told apart.
    Duplicate,
}

const EMPTY: u16 = u16::MAX;

/// The pending forwards of one worker.
#[derive(Debug)]
pub struct PendingForwards {
    slab: Vec<Option<Forwarded>>,
    /// Free slab slots, used as a stack.
    free: Vec<u16>,
    /// Slab slots by hash, linear probing; twice the slab, so at most half
    /// full and probe runs stay short.
    index: Vec<u16>,
}

fn hash(peer: &SocketAddr, request_id: u64) -> u64 {
    let ip = match peer {
        SocketAddr::V4(a) => u64::from(a.ip().to_bits()),
        SocketAddr::V6(a) => {
            let b = a.ip().to_bits();
            (b as u64) ^ ((b >> 64) as u64)
        }
    };
    // A 64-bit mix (splitmix64 finaliser) over the key's parts.
    let mut x = request_id ^ ip.rotate_left(17) ^ (u64::from(peer.port()) << 48);
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl PendingForwards {
    /// Room for `capacity` forwards (at most 32,767).
    pub fn new(capacity: usize) -> PendingForwards {
        assert!(capacity > 0 && capacity < usize::from(EMPTY) / 2);
        PendingForwards {
            slab: vec![None; capacity],
            free: (0..capacity as u16).rev().collect(),
            index: vec![EMPTY; (capacity * 2).next_power_of_two()],
        }
    }

    /// Forwards waiting.
    pub fn len(&self) -> usize {
        self.slab.len() - self.free.len()
    }

    /// Whether none is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn mask(&self) -> usize {
        self.index.len() - 1
    }

    fn home(&self, f: &Forwarded) -> usize {
        hash(&f.peer, f.request_id) as usize & self.mask()
    }

    /// The index position holding (peer, request id), if any.
    fn find(&self, peer: &SocketAddr, request_id: u64) -> Option<usize> {
        let mut i = hash(peer, request_id) as usize & self.mask();
        loop {
            let s = self.index[i];
            if s == EMPTY {
                return None;
            }
            if let Some(f) = &self.slab[usize::from(s)]
                && f.request_id == request_id
                && f.peer == *peer
            {
                return Some(i);
            }
            i = (i + 1) & self.mask();
        }
    }

    /// Records a forward.
    pub fn insert(&mut self, f: Forwarded) -> Result<(), InsertError> {
        if self.find(&f.peer, f.request_id).is_some() {
            return Err(InsertError::Duplicate);
        }
        let slot = self.free.pop().ok_or(InsertError::Full)?;
        let mut i = self.home(&f);
        while self.index[i] != EMPTY {
            i = (i + 1) & self.mask();
        }
        self.index[i] = slot;
        self.slab[usize::from(slot)] = Some(f);
        Ok(())
    }

    /// Removes and returns the forward of `request_id` to `peer`.
    pub fn take(&mut self, peer: &SocketAddr, request_id: u64) -> Option<Forwarded> {
        let i = self.find(peer, request_id)?;
        self.remove_at(i)
    }

    /// Removes the entry at index position `i`, shifting later members of
    /// its probe run back so lookups never stop at a hole too early.
    fn remove_at(&mut self, mut i: usize) -> Option<Forwarded> {
        let slot = self.index[i];
        // The index points at live slab slots only.
        let f = self.slab[usize::from(slot)].take()?;
        self.free.push(slot);
        self.index[i] = EMPTY;
        let mut j = i;
        loop {
            j = (j + 1) & self.mask();
            let s = self.index[j];
            if s == EMPTY {
                return Some(f);
            }
            let home = match &self.slab[usize::from(s)] {
                Some(g) => self.home(g),
                None => unreachable!("the index points at live slab slots"),
            };
            // Move j back to the hole at i unless its home lies cyclically
            // in (i, j]: then it is already reachable from its home.
            let stays = if i <= j {
                i < home && home <= j
            } else {
                i < home || home <= j
            };
            if !stays {
                self.index[i] = s;
                self.index[j] = EMPTY;
                i = j;
            }
        }
    }

    /// Removes and returns the next forward waiting on `peer`, scanning the
    /// slab from `*cursor` like [`PendingForwards::next_expired`].
    pub fn next_to_peer(&mut self, cursor: &mut usize, peer: &SocketAddr) -> Option<Forwarded> {
        while *cursor < self.slab.len() {
            let slot = *cursor;
            *cursor += 1;
            let Some(f) = self.slab[slot] else {
                continue;
            };
            if f.peer != *peer {
                continue;
            }
            // Every live slab slot is indexed.
            let Some(i) = self.find(&f.peer, f.request_id) else {
                debug_assert!(false, "a live slab slot is not indexed");
                continue;
            };
            return self.remove_at(i);
        }
        None
    }

    /// Removes and returns the next forward older than `timeout`, scanning
    /// the slab from `*cursor` (start at 0; the cursor moves past what was
    /// scanned, so a full sweep is one pass).
    pub fn next_expired(
        &mut self,
        cursor: &mut usize,
        now: Instant,
        timeout: Duration,
    ) -> Option<Forwarded> {
        while *cursor < self.slab.len() {
            let slot = *cursor;
            *cursor += 1;
            let Some(f) = self.slab[slot] else {
                continue;
            };
            if now.duration_since(f.sent) < timeout {
                continue;
            }
            // Every live slab slot is indexed.
            let Some(i) = self.find(&f.peer, f.request_id) else {
                debug_assert!(false, "a live slab slot is not indexed");
                continue;
            };
            return self.remove_at(i);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn fwd(peer: u16, rid: u64, sent: Instant) -> Forwarded {
        Forwarded {
            peer: SocketAddr::from(([127, 0, 0, 1], peer)),
            request_id: rid,
            tenant_id: 1,
            client: SocketAddr::from(([127, 0, 0, 2], 9)),
            client_conn: 0,
            sent,
        }
    }

    #[test]
    fn full_duplicate_and_take() {
        let t0 = Instant::now();
        let mut p = PendingForwards::new(4);
        for rid in 0..4 {
            p.insert(fwd(1, rid, t0)).unwrap();
        }
        assert_eq!(p.insert(fwd(1, 9, t0)), Err(InsertError::Full));
        assert_eq!(
            p.take(&fwd(1, 2, t0).peer, 2).map(|f| f.request_id),
            Some(2)
        );
        assert_eq!(p.insert(fwd(1, 3, t0)), Err(InsertError::Duplicate));
        // Same id to another peer is a different key.
        p.insert(fwd(2, 3, t0)).unwrap();
        assert_eq!(p.len(), 4);
        assert!(p.take(&fwd(1, 2, t0).peer, 2).is_none());
    }

    #[test]
    fn expiry_takes_only_old_entries() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_millis(500);
        let mut p = PendingForwards::new(64);
        for rid in 0..40 {
            p.insert(fwd(1, rid, if rid % 2 == 0 { t0 } else { later }))
                .unwrap();
        }
        let mut got = Vec::new();
        let mut cursor = 0;
        while let Some(f) = p.next_expired(
            &mut cursor,
            t0 + Duration::from_millis(600),
            Duration::from_millis(300),
        ) {
            got.push(f.request_id);
        }
        got.sort();
        assert_eq!(got, (0..40).filter(|r| r % 2 == 0).collect::<Vec<_>>());
        assert_eq!(p.len(), 20);
        for rid in (1..40).step_by(2) {
            assert!(p.take(&fwd(1, 0, t0).peer, rid).is_some(), "{rid}");
        }
        assert!(p.is_empty());
    }

    #[test]
    fn a_lost_peer_takes_only_its_own_forwards() {
        let t0 = Instant::now();
        let mut p = PendingForwards::new(64);
        for rid in 0..30 {
            p.insert(fwd(1 + (rid % 3) as u16, rid, t0)).unwrap();
        }
        let lost = fwd(2, 0, t0).peer;
        let mut got = Vec::new();
        let mut cursor = 0;
        while let Some(f) = p.next_to_peer(&mut cursor, &lost) {
            assert_eq!(f.peer, lost);
            got.push(f.request_id);
        }
        got.sort();
        assert_eq!(got, (0..30).filter(|r| r % 3 == 1).collect::<Vec<_>>());
        assert_eq!(p.len(), 20);
        // The others are still found by key.
        assert!(p.take(&fwd(1, 0, t0).peer, 3).is_some());
        assert!(p.take(&fwd(3, 0, t0).peer, 5).is_some());
    }

    /// Random inserts and removals, checked against a HashMap; a small
    /// index makes long probe runs and wrap-around common.
    #[test]
    fn agrees_with_a_hash_map() {
        let t0 = Instant::now();
        let mut p = PendingForwards::new(48);
        let mut model: HashMap<(u16, u64), Forwarded> = HashMap::new();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..200_000 {
            let r = next();
            let key = ((r % 3) as u16 + 1, (r >> 8) % 64);
            let f = fwd(key.0, key.1, t0);
            if r & 0x10 == 0 {
                let want = if model.contains_key(&key) {
                    Err(InsertError::Duplicate)
                } else if model.len() == 48 {
                    Err(InsertError::Full)
                } else {
                    Ok(())
                };
                assert_eq!(p.insert(f), want);
                if want.is_ok() {
                    model.insert(key, f);
                }
            } else {
                assert_eq!(p.take(&f.peer, key.1), model.remove(&key));
            }
            assert_eq!(p.len(), model.len());
        }
        for (k, f) in model {
            assert_eq!(p.take(&f.peer, k.1), Some(f));
        }
        assert!(p.is_empty());
    }
}
