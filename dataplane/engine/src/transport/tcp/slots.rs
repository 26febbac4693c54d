//! The large-slot pool of the TCP side: classes of fixed-size slots, each
//! slot paired with a reply slot of the same size. A frame takes a pair at
//! header time (so its answer always has room), lands whole in the receive
//! half, and the pair returns to its class once the receive half is
//! released and the reply half is sent (or was never needed).
//!
//! Pure bookkeeping: no memory, no I/O. The memory is one region laid out
//! by [`SlotPool::layout`]; the transport turns offsets into pointers.

use std::collections::VecDeque;
use std::net::SocketAddr;

use super::tally::Tally;
use crate::config::TcpSlotCfg;

/// Who a pair is held for, for the per-source and per-tenant caps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Owner {
    /// The client's address (IPv4 mapped into IPv6); none for frames from
    /// a peer connection this worker opened.
    pub source: Option<u128>,
    /// The tenant whose tag verified.
    pub tenant: Option<u32>,
}

/// Who waits for a slot: a connection index and its generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Waiter {
    pub conn: u32,
    pub generation: u16,
}

#[derive(Debug)]
struct Class {
    size: u32,
    first: u32,
    count: u32,
    /// Byte offset of the first receive slot in the region; reply slots
    /// follow the receive slots of the class.
    off: usize,
    free: Vec<u32>,
    waiters: VecDeque<Waiter>,
    /// Pairs held per source address and per tenant.
    by_source: Tally,
    by_tenant: Tally,
}

/// What the answer to the frame in a pair will use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reply {
    /// Nothing yet: released unanswered, the frame's place in its
    /// connection's order is skipped.
    None,
    /// The worker holds the reply slot (an answer is being written, or is
    /// queued or in flight on the connection).
    Lent,
    /// The frame went to a peer; the answer will come in another buffer.
    Elsewhere,
}

/// One pair and the frame in it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pair {
    class: u8,
    /// The receive half holds a frame (arriving, ready, or with the worker).
    rx_held: bool,
    /// The reply half is reserved or in use.
    reply_held: bool,
    pub reply: Reply,
    /// Frame length.
    pub len: u32,
    /// The frame's connection token (`RxPacket::conn`); 0 for frames that
    /// are answers from a peer.
    pub token: u64,
    /// `RxPacket::peer`.
    pub peer: SocketAddr,
    /// `RxPacket::port`.
    pub port: u8,
    owner: Owner,
}

/// The pool.
#[derive(Debug)]
pub(super) struct SlotPool {
    classes: Vec<Class>,
    pairs: Box<[Pair]>,
    bytes: usize,
}

impl SlotPool {
    /// Pairs for every class; `conns` bounds each class's waiting list.
    pub fn new(cfg: &[TcpSlotCfg], conns: usize) -> SlotPool {
        let mut classes = Vec::with_capacity(cfg.len());
        let mut first = 0u32;
        let mut off = 0usize;
        let mut pairs = Vec::new();
        for (k, c) in cfg.iter().enumerate() {
            classes.push(Class {
                size: c.size,
                first,
                count: c.count,
                off,
                free: (first..first + c.count).rev().collect(),
                waiters: VecDeque::with_capacity(conns),
                by_source: Tally::new(c.count as usize),
                by_tenant: Tally::new(c.count as usize),
            });
            for _ in 0..c.count {
                pairs.push(Pair {
                    class: k as u8,
                    rx_held: false,
                    reply_held: false,
                    reply: Reply::None,
                    len: 0,
                    token: 0,
                    peer: SocketAddr::from(([0, 0, 0, 0], 0)),
                    port: 0,
                    owner: Owner::default(),
                });
            }
            first += c.count;
            off += 2 * c.size as usize * c.count as usize;
        }
        SlotPool {
            classes,
            pairs: pairs.into_boxed_slice(),
            bytes: off,
        }
    }

    /// Bytes of memory the pool lays out.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Number of pairs.
    pub fn len(&self) -> u32 {
        self.pairs.len() as u32
    }

    /// The smallest class whose slots hold `len` bytes.
    pub fn class_for(&self, len: u64) -> Option<usize> {
        self.classes.iter().position(|c| u64::from(c.size) >= len)
    }

    /// Slot size of a pair.
    pub fn size_of(&self, pair: u32) -> u32 {
        self.classes[self.pairs[pair as usize].class as usize].size
    }

    /// Offset of a pair's receive slot in the region.
    pub fn rx_off(&self, pair: u32) -> usize {
        let c = &self.classes[self.pairs[pair as usize].class as usize];
        c.off + (pair - c.first) as usize * c.size as usize
    }

    /// Offset of a pair's reply slot in the region.
    pub fn reply_off(&self, pair: u32) -> usize {
        let c = &self.classes[self.pairs[pair as usize].class as usize];
        c.off + (c.count + pair - c.first) as usize * c.size as usize
    }

    /// Takes a free pair of `class` for `owner`, both halves held.
    pub fn alloc(&mut self, class: usize, owner: Owner) -> Option<u32> {
        let c = &mut self.classes[class];
        let p = c.free.pop()?;
        // Each table has room for every pair of the class.
        if let Some(s) = owner.source {
            c.by_source.inc(s);
        }
        if let Some(t) = owner.tenant {
            c.by_tenant.inc(u128::from(t));
        }
        let e = &mut self.pairs[p as usize];
        debug_assert!(!e.rx_held && !e.reply_held, "pair {p} allocated twice");
        e.rx_held = true;
        e.reply_held = true;
        e.reply = Reply::None;
        e.token = 0;
        e.owner = owner;
        Some(p)
    }

    /// Pairs of `class` held for a source address.
    pub fn held_by_source(&self, class: usize, source: u128) -> u32 {
        self.classes[class].by_source.get(source)
    }

    /// Pairs of `class` held for a tenant.
    pub fn held_by_tenant(&self, class: usize, tenant: u32) -> u32 {
        self.classes[class].by_tenant.get(u128::from(tenant))
    }

    /// Free pairs of `class`.
    pub fn free_len(&self, class: usize) -> u32 {
        self.classes[class].free.len() as u32
    }

    /// Pairs of `class`.
    pub fn count(&self, class: usize) -> u32 {
        self.classes[class].count
    }

    /// The pair's state.
    pub fn get(&self, pair: u32) -> &Pair {
        &self.pairs[pair as usize]
    }

    /// The pair's state, writable.
    pub fn get_mut(&mut self, pair: u32) -> &mut Pair {
        &mut self.pairs[pair as usize]
    }

    /// Whether `pair` names a held receive half.
    pub fn rx_held(&self, pair: u32) -> bool {
        self.pairs.get(pair as usize).is_some_and(|p| p.rx_held)
    }

    /// Gives the receive half back. Returns the class when the pair became
    /// free (its waiters may go on).
    pub fn release_rx(&mut self, pair: u32) -> Option<usize> {
        let e = &mut self.pairs[pair as usize];
        assert!(e.rx_held, "receive half of pair {pair} released twice");
        e.rx_held = false;
        self.maybe_free(pair)
    }

    /// Gives the reply half back (sent, or never needed).
    pub fn release_reply(&mut self, pair: u32) -> Option<usize> {
        let e = &mut self.pairs[pair as usize];
        assert!(e.reply_held, "reply half of pair {pair} released twice");
        e.reply_held = false;
        e.reply = Reply::None;
        self.maybe_free(pair)
    }

    fn maybe_free(&mut self, pair: u32) -> Option<usize> {
        let e = &self.pairs[pair as usize];
        if e.rx_held || e.reply_held {
            return None;
        }
        let (k, owner) = (e.class as usize, e.owner);
        let c = &mut self.classes[k];
        if let Some(s) = owner.source {
            c.by_source.dec(s);
        }
        if let Some(t) = owner.tenant {
            c.by_tenant.dec(u128::from(t));
        }
        assert!(
            c.free.len() < c.count as usize,
            "slot class free list overflow"
        );
        c.free.push(pair);
        Some(k)
    }

    /// Queues a connection that waits for a pair of `class`.
    pub fn wait(&mut self, class: usize, w: Waiter) {
        let q = &mut self.classes[class].waiters;
        // Each connection waits at most once, so this stays within capacity.
        debug_assert!(q.len() < q.capacity());
        q.push_back(w);
    }

    /// Forgets a waiter (its connection closed).
    pub fn unwait(&mut self, class: usize, conn: u32) {
        self.classes[class].waiters.retain(|w| w.conn != conn);
    }

    /// The next waiter of `class`, while a pair of it is free.
    pub fn next_waiter(&mut self, class: usize) -> Option<Waiter> {
        let c = &mut self.classes[class];
        if c.free.is_empty() {
            return None;
        }
        c.waiters.pop_front()
    }

    /// Connections waiting for a pair of `class`.
    pub fn waiting(&self, class: usize) -> usize {
        self.classes[class].waiters.len()
    }

    /// Pairs in use, per class.
    pub fn in_use(&self) -> impl Iterator<Item = (u32, u32, u32)> + '_ {
        self.classes
            .iter()
            .map(|c| (c.size, c.count, c.count - c.free.len() as u32))
    }

    /// Whether every pair is free.
    #[cfg(test)]
    pub fn all_free(&self) -> bool {
        self.classes
            .iter()
            .all(|c| c.free.len() == c.count as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> SlotPool {
        SlotPool::new(
            &[
                TcpSlotCfg {
                    size: 4096,
                    count: 2,
                },
                TcpSlotCfg {
                    size: 1 << 20,
                    count: 1,
                },
            ],
            4,
        )
    }

    #[test]
    fn frames_take_the_smallest_class_that_holds_them() {
        let p = pool();
        assert_eq!(p.class_for(96), Some(0));
        assert_eq!(p.class_for(4096), Some(0));
        assert_eq!(p.class_for(4097), Some(1));
        assert_eq!(p.class_for(1 << 20), Some(1));
        assert_eq!(p.class_for((1 << 20) + 1), None);
        assert_eq!(p.bytes(), 2 * 2 * 4096 + (2 << 20));
    }

    #[test]
    fn layout_is_disjoint_and_aligned() {
        let p = pool();
        let mut spans: Vec<(usize, usize)> = (0..p.len())
            .flat_map(|i| {
                let s = p.size_of(i) as usize;
                [(p.rx_off(i), s), (p.reply_off(i), s)]
            })
            .collect();
        spans.sort();
        for w in spans.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "{w:?} overlap");
        }
        assert!(spans.iter().all(|(o, _)| o % 64 == 0));
        let (o, s) = spans[spans.len() - 1];
        assert_eq!(o + s, p.bytes());
    }

    #[test]
    fn a_pair_is_free_once_both_halves_are_back() {
        let mut p = pool();
        let a = p.alloc(1, Owner::default()).unwrap();
        assert_eq!(p.alloc(1, Owner::default()), None);
        p.wait(
            1,
            Waiter {
                conn: 3,
                generation: 1,
            },
        );
        assert_eq!(p.next_waiter(1), None, "no pair free yet");
        assert_eq!(p.release_rx(a), None);
        assert_eq!(p.release_reply(a), Some(1));
        assert_eq!(
            p.next_waiter(1),
            Some(Waiter {
                conn: 3,
                generation: 1
            })
        );
        assert!(p.all_free());
        let b = p.alloc(1, Owner::default()).unwrap();
        assert_eq!(a, b, "the warm pair comes back first");
    }

    #[test]
    fn owners_are_counted_while_they_hold_a_pair() {
        let mut p = pool();
        let o = Owner {
            source: Some(9),
            tenant: Some(4),
        };
        let a = p.alloc(0, o).unwrap();
        let b = p.alloc(0, o).unwrap();
        assert_eq!((p.held_by_source(0, 9), p.held_by_tenant(0, 4)), (2, 2));
        assert_eq!(p.held_by_source(1, 9), 0);
        p.release_rx(a);
        assert_eq!(p.held_by_source(0, 9), 2, "the reply half is still held");
        p.release_reply(a);
        p.release_reply(b);
        p.release_rx(b);
        assert_eq!((p.held_by_source(0, 9), p.held_by_tenant(0, 4)), (0, 0));
    }

    #[test]
    #[should_panic(expected = "released twice")]
    fn double_release_is_caught() {
        let mut p = pool();
        let a = p.alloc(0, Owner::default()).unwrap();
        p.release_rx(a);
        p.release_rx(a);
    }
}
