//! The front door's slots: each a request region, where the front door
//! builds a frame (tensor data at 64-byte aligned offsets, so ONNX Runtime
//! reads it in place), and a reply region, where the worker writes the
//! answer. One pool per front-door thread, mapped at start-up (pages are
//! touched on first use, not populated: a pool is sized for the largest
//! body, most requests use a few KiB of it).
//!
//! Ownership moves with tokens that cannot be copied, and every move is
//! checked against the slot's state: [`Filling`] (the front door writes the
//! request) → queued (a worker's `Queued` reads the request and writes the
//! reply) → [`Done`] (the front door reads the reply) → free. Each token is
//! made only by the step before it, so exactly one side can touch a slot's
//! memory at any time.
#![allow(unsafe_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use crossbeam_queue::ArrayQueue;
use memmap2::{MmapMut, MmapOptions};

const FREE: u8 = 0;
const FILLING: u8 = 1;
const QUEUED: u8 = 2;
const DONE: u8 = 3;

/// One front-door thread's slots.
///
/// Drop order: `map` is the last field; every token holds an `Arc` of the
/// pool, so the memory outlives every view of it.
pub struct SlotPool {
    /// Base of `map`, page aligned.
    base: *mut u8,
    slots: u32,
    request_bytes: usize,
    reply_bytes: usize,
    state: Box<[AtomicU8]>,
    free: ArrayQueue<u32>,
    map: MmapMut,
}

impl std::fmt::Debug for SlotPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotPool")
            .field("slots", &self.slots)
            .field("request_bytes", &self.request_bytes)
            .field("reply_bytes", &self.reply_bytes)
            .field("free", &self.free.len())
            .finish()
    }
}

// SAFETY: the raw base pointer is into `map`, owned by the pool; access to
// each slot's bytes is serialized by the token protocol above (one owner
// per slot, handed over through the state atomics and the SPSC rings).
unsafe impl Send for SlotPool {}
// SAFETY: as for Send: shared references only reach slot memory through a
// token that owns the slot.
unsafe impl Sync for SlotPool {}

impl SlotPool {
    /// `slots` slots of `request_bytes` + `reply_bytes` (each rounded up
    /// to 64).
    pub fn new(slots: u32, request_bytes: usize, reply_bytes: usize) -> std::io::Result<SlotPool> {
        let request_bytes = request_bytes.next_multiple_of(64);
        let reply_bytes = reply_bytes.next_multiple_of(64);
        let len = (slots as usize)
            .checked_mul(request_bytes + reply_bytes)
            .ok_or_else(|| std::io::Error::other("slot pool size overflows"))?;
        let mut map = MmapOptions::new().len(len.max(4096)).map_anon()?;
        let base = map.as_mut_ptr();
        let free = ArrayQueue::new(slots.max(1) as usize);
        for i in 0..slots {
            let _ = free.push(i);
        }
        Ok(SlotPool {
            base,
            slots,
            request_bytes,
            reply_bytes,
            state: (0..slots).map(|_| AtomicU8::new(FREE)).collect(),
            free,
            map,
        })
    }

    /// Number of slots.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Slots free now.
    pub fn free_count(&self) -> usize {
        self.free.len()
    }

    /// Bytes of a request region (the largest request frame).
    pub fn request_bytes(&self) -> usize {
        self.request_bytes
    }

    /// Bytes of a reply region (the largest reply frame).
    pub fn reply_bytes(&self) -> usize {
        self.reply_bytes
    }

    fn step(&self, slot: u32, from: u8, to: u8) {
        let ok = self.state[slot as usize]
            .compare_exchange(from, to, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        assert!(ok, "slot {slot}: state is not {from}");
    }

    fn region(&self, slot: u32, reply: bool) -> *mut u8 {
        assert!(slot < self.slots);
        let off = slot as usize * (self.request_bytes + self.reply_bytes)
            + if reply { self.request_bytes } else { 0 };
        debug_assert!(off < self.map.len());
        // SAFETY: off plus the region length lies inside the mapping
        // (slot < slots, checked above).
        unsafe { self.base.add(off) }
    }

    /// Takes a free slot for a new request.
    pub fn alloc(self: &Arc<Self>) -> Option<Filling> {
        let slot = self.free.pop()?;
        self.step(slot, FREE, FILLING);
        Some(Filling {
            pool: Arc::clone(self),
            slot,
            live: true,
        })
    }

    fn release(&self, slot: u32, from: u8) {
        self.step(slot, from, FREE);
        // Cannot fail: the queue holds every slot and this one was out.
        let _ = self.free.push(slot);
    }
}

/// A slot the front door is building a request in.
#[derive(Debug)]
pub struct Filling {
    pool: Arc<SlotPool>,
    slot: u32,
    live: bool,
}

impl Filling {
    /// The slot's index in its pool.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The request region, 64-byte aligned.
    pub fn request_mut(&mut self) -> &mut [u8] {
        let p = self.pool.region(self.slot, false);
        // SAFETY: state FILLING: this token is the slot's only owner, and
        // the borrow is tied to &mut self.
        unsafe { std::slice::from_raw_parts_mut(p, self.pool.request_bytes) }
    }

    /// Hands the slot to a worker; returns its index for the ring entry.
    pub(super) fn into_queued(mut self) -> u32 {
        self.pool.step(self.slot, FILLING, QUEUED);
        self.live = false;
        self.slot
    }
}

impl Drop for Filling {
    fn drop(&mut self) {
        if self.live {
            self.pool.release(self.slot, FILLING);
        }
    }
}

/// A slot a worker holds: it reads the request and writes the reply.
/// Made only from a ring entry the front door pushed.
#[derive(Debug)]
pub struct Queued {
    slot: u32,
    len: u32,
    /// Address of the pool it came from: views check they are given it.
    pool: usize,
}

impl Queued {
    /// The worker's token for `slot`, popped from its ring.
    pub(super) fn from_ring(pool: &SlotPool, slot: u32, len: u32) -> Queued {
        assert!(slot < pool.slots && len as usize <= pool.request_bytes);
        debug_assert_eq!(pool.state[slot as usize].load(Ordering::Acquire), QUEUED);
        Queued {
            slot,
            len,
            pool: pool as *const SlotPool as usize,
        }
    }

    fn check(&self, pool: &SlotPool) {
        assert_eq!(
            self.pool, pool as *const SlotPool as usize,
            "a slot viewed through another pool"
        );
    }

    /// The request frame.
    pub fn request<'a>(&'a self, pool: &'a SlotPool) -> &'a [u8] {
        self.check(pool);
        let p = pool.region(self.slot, false);
        // SAFETY: state QUEUED and this token exists: the worker owns the
        // slot; len ≤ request_bytes (checked when made).
        unsafe { std::slice::from_raw_parts(p, self.len as usize) }
    }

    /// The request frame and the reply region, disjoint.
    pub fn view<'a>(&'a mut self, pool: &'a SlotPool) -> (&'a [u8], &'a mut [u8]) {
        self.check(pool);
        let rq = pool.region(self.slot, false);
        let rp = pool.region(self.slot, true);
        // SAFETY: as in `request`; the two regions do not overlap (the
        // reply region starts request_bytes after the request region).
        unsafe {
            (
                std::slice::from_raw_parts(rq, self.len as usize),
                std::slice::from_raw_parts_mut(rp, pool.reply_bytes),
            )
        }
    }

    /// Gives the slot back to the front door with `len` reply bytes.
    pub(super) fn complete(self, pool: &SlotPool) -> u32 {
        self.check(pool);
        pool.step(self.slot, QUEUED, DONE);
        self.slot
    }
}

/// An answered slot back on the front door: the reply frame, readable
/// until dropped (then the slot is free again).
#[derive(Debug)]
pub struct Done {
    pool: Arc<SlotPool>,
    slot: u32,
    len: u32,
}

impl Done {
    pub(super) fn from_ring(pool: &Arc<SlotPool>, slot: u32, len: u32) -> Done {
        assert!(slot < pool.slots && len as usize <= pool.reply_bytes);
        debug_assert_eq!(pool.state[slot as usize].load(Ordering::Acquire), DONE);
        Done {
            pool: Arc::clone(pool),
            slot,
            len,
        }
    }

    /// The slot's index in its pool.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The reply frame; empty when the worker gave no answer.
    pub fn reply(&self) -> &[u8] {
        let p = self.pool.region(self.slot, true);
        // SAFETY: state DONE and this token exists: the front door owns the
        // slot again; len ≤ reply_bytes (checked when made).
        unsafe { std::slice::from_raw_parts(p, self.len as usize) }
    }
}

/// A token stream's frame lent by the worker: readable while the drain
/// callback runs (the worker writes the region again only after the credit
/// the drain pushes once the callback returns).
#[derive(Debug)]
pub struct Part<'a> {
    pool: &'a SlotPool,
    slot: u32,
    len: u32,
}

impl<'a> Part<'a> {
    pub(super) fn from_ring(pool: &'a SlotPool, slot: u32, len: u32) -> Part<'a> {
        assert!(slot < pool.slots && len as usize <= pool.reply_bytes);
        debug_assert_eq!(pool.state[slot as usize].load(Ordering::Acquire), QUEUED);
        Part { pool, slot, len }
    }

    /// The slot's index in its pool.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The stream frame.
    pub fn reply(&self) -> &[u8] {
        let p = self.pool.region(self.slot, true);
        // SAFETY: the worker pushed this part after writing the frame
        // (release/acquire through the ring) and writes the region again
        // only after popping the credit that follows this view's end; the
        // borrow cannot outlive the drain callback. len ≤ reply_bytes.
        unsafe { std::slice::from_raw_parts(p, self.len as usize) }
    }
}

impl AsRef<[u8]> for Done {
    fn as_ref(&self) -> &[u8] {
        self.reply()
    }
}

impl Drop for Done {
    fn drop(&mut self) {
        self.pool.release(self.slot, DONE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_move_a_slot_round() {
        let pool = Arc::new(SlotPool::new(2, 100, 100).unwrap());
        assert_eq!(pool.request_bytes(), 128);
        let mut a = pool.alloc().unwrap();
        let b = pool.alloc().unwrap();
        assert!(pool.alloc().is_none());
        assert_eq!(a.request_mut().as_ptr() as usize % 64, 0);
        a.request_mut()[..3].copy_from_slice(b"abc");
        drop(b);
        assert_eq!(pool.free_count(), 1);
        let slot = a.into_queued();
        let mut q = Queued::from_ring(&pool, slot, 3);
        let (req, reply) = q.view(&pool);
        assert_eq!(req, b"abc");
        reply[..2].copy_from_slice(b"ok");
        let slot = q.complete(&pool);
        let d = Done::from_ring(&pool, slot, 2);
        assert_eq!(d.reply(), b"ok");
        drop(d);
        assert_eq!(pool.free_count(), 2);
    }

    #[test]
    #[should_panic(expected = "state is not")]
    fn a_slot_cannot_complete_twice() {
        let pool = Arc::new(SlotPool::new(1, 64, 64).unwrap());
        let slot = pool.alloc().unwrap().into_queued();
        let q = Queued::from_ring(&pool, slot, 0);
        let again = Queued::from_ring(&pool, slot, 0);
        q.complete(&pool);
        again.complete(&pool);
    }
}
