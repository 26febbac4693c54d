//! A second frame source beside a worker's transport: frames the front
//! door (crate `sluice-frontdoor`) builds from HTTP and gRPC requests.
//!
//! Each front-door thread owns a [`SlotPool`] and, per worker, one SPSC
//! ring of requests to that worker and one SPSC ring of answers back. A
//! worker drains its rings at the start of a burst, beside its transport,
//! into the same classify/admit/run path as every other frame
//! ([`Sources`]); the handler reads the tensors in the request slot in
//! place and writes the answer into the slot's reply region, which goes
//! back on the answer ring. Nothing is copied between the rings; the
//! entries are slot numbers and lengths.

mod ring;
mod slots;
mod source;
mod wake;

use std::sync::Arc;

pub use ring::{Consumer, Producer, ring};
pub use slots::{Done, Filling, Part, Queued, SlotPool};
pub use source::Sources;
pub use wake::Wake;

use crate::config::FrontdoorCfg;

/// `RxPacket::buf` of an ingress frame has this bit set; bits 16..=30 name
/// the front-door thread, bits 0..=15 the slot.
pub const INGRESS_BIT: u32 = 1 << 31;

fn ingress_id(thread: usize, slot: u32) -> u32 {
    INGRESS_BIT | ((thread as u32) << 16) | slot
}

/// Whether a buffer id names an ingress slot.
pub fn is_ingress(buf: u32) -> bool {
    buf & INGRESS_BIT != 0
}

fn split_id(buf: u32) -> (usize, u32) {
    (((buf & !INGRESS_BIT) >> 16) as usize, buf & 0xffff)
}

fn entry(slot: u32, len: u32) -> u64 {
    (slot as u64) << 32 | len as u64
}

/// In an entry's length: on a worker's ring, a credit (the front door has
/// read the stream frame in the slot's reply region); on an answer ring, a
/// part (a token stream's frame, more follow).
const MARK: u32 = 1 << 31;

/// What a worker pops from a front-door thread's ring.
#[derive(Debug)]
enum Popped {
    /// A request frame.
    Request(u32, Queued),
    /// The stream frame lent from this slot was read.
    Credit(u32),
}

fn unentry(e: u64) -> (u32, u32) {
    ((e >> 32) as u32, e as u32)
}

/// A worker's side: rings from and to every front-door thread.
#[derive(Debug)]
pub struct IngressWorker {
    index: usize,
    from: Vec<Consumer>,
    to: Vec<Producer>,
    pools: Vec<Arc<SlotPool>>,
    port_wakes: Vec<Arc<Wake>>,
    wake: Arc<Wake>,
}

impl IngressWorker {
    /// The worker's index.
    pub fn index(&self) -> usize {
        self.index
    }

    /// What wakes this worker: the front door writes it after a push, and
    /// the control side after a publish (one eventfd the worker's ring polls).
    pub fn wake(&self) -> &Arc<Wake> {
        &self.wake
    }

    /// Front-door threads.
    pub fn threads(&self) -> usize {
        self.from.len()
    }

    /// The next entry from thread `t`: a request (its id and token) or a
    /// credit.
    fn pop(&mut self, t: usize) -> Option<Popped> {
        let (slot, len) = unentry(self.from[t].pop()?);
        if len & MARK != 0 {
            return Some(Popped::Credit(ingress_id(t, slot)));
        }
        Some(Popped::Request(
            ingress_id(t, slot),
            Queued::from_ring(&self.pools[t], slot, len),
        ))
    }

    /// Lends thread `t` the stream frame of `len` bytes in `slot`'s reply
    /// region (the slot stays the worker's).
    fn part(&mut self, t: usize, slot: u32, len: u32) {
        assert!(len as usize <= self.pools[t].reply_bytes());
        // Cannot be full: each slot has at most one entry on the ring.
        let pushed = self.to[t].push(entry(slot, len | MARK));
        debug_assert!(pushed.is_ok());
        self.port_wakes[t].notify();
    }

    /// Whether any thread has a request waiting.
    fn pending(&self) -> bool {
        self.from.iter().any(|c| !c.is_empty())
    }

    /// Returns a slot to thread `t` with `len` reply bytes (0: no answer).
    fn complete(&mut self, t: usize, q: Queued, len: u32) {
        let slot = q.complete(&self.pools[t]);
        // Cannot be full: the ring holds as many entries as the pool slots.
        let pushed = self.to[t].push(entry(slot, len));
        debug_assert!(pushed.is_ok());
        self.port_wakes[t].notify();
    }
}

/// What comes back from a worker.
#[derive(Debug)]
pub enum Answer<'a> {
    /// The slot, with its reply (empty: no answer, or a token stream that
    /// ended).
    Done(Done),
    /// A token stream's frame; more follow until the slot comes back.
    Part(Part<'a>),
}

/// When a lent stream frame's region goes back to its worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credit {
    /// Once the drain callback returns.
    Now,
    /// When the front door calls [`IngressPort::credit`].
    Later,
}

/// Why a request could not be handed to a worker.
#[derive(Debug)]
pub enum SubmitError {
    /// No such worker.
    NoWorker(Filling),
    /// The worker's ring is full (cannot happen while the ring is as large
    /// as the pool; kept as an answer rather than an assumption).
    Full(Filling),
}

/// A front-door thread's side: its slot pool and rings to every worker.
#[derive(Debug)]
pub struct IngressPort {
    thread: usize,
    pool: Arc<SlotPool>,
    to: Vec<Producer>,
    from: Vec<Consumer>,
    worker_wakes: Vec<Arc<Wake>>,
    wake: Arc<Wake>,
}

impl IngressPort {
    /// This thread's index.
    pub fn thread(&self) -> usize {
        self.thread
    }

    /// Workers reachable.
    pub fn workers(&self) -> usize {
        self.to.len()
    }

    /// The slot pool.
    pub fn pool(&self) -> &Arc<SlotPool> {
        &self.pool
    }

    /// A free slot, or `None` when every slot is in flight.
    pub fn alloc(&self) -> Option<Filling> {
        self.pool.alloc()
    }

    /// Hands a request frame of `len` bytes to worker `w`.
    pub fn submit(&mut self, f: Filling, len: usize, w: usize) -> Result<(), SubmitError> {
        assert!(len <= self.pool.request_bytes());
        let Some(ring) = self.to.get_mut(w) else {
            return Err(SubmitError::NoWorker(f));
        };
        if ring.capacity() < self.pool.slots() as usize {
            return Err(SubmitError::Full(f));
        }
        let slot = f.into_queued();
        // The ring holds every slot of the pool: it cannot be full.
        let pushed = ring.push(entry(slot, len as u32));
        assert!(pushed.is_ok(), "ingress ring full");
        self.worker_wakes[w].notify();
        Ok(())
    }

    /// Every answer that has arrived, in order per worker: each slot that
    /// came back ([`Answer::Done`]) and each stream frame lent from a slot
    /// still in flight ([`Answer::Part`]: the worker gets the region back
    /// once `f` returns).
    pub fn drain(&mut self, mut f: impl FnMut(Answer<'_>)) -> usize {
        self.drain_credited(|a| {
            f(a);
            Credit::Now
        })
    }

    /// As [`drain`](Self::drain), but `f` decides for each stream frame
    /// whether the worker gets its region back now or only at
    /// [`credit`](Self::credit): a stream whose reader is behind holds its
    /// worker back (one frame at a time per slot) instead of queueing
    /// without bound.
    pub fn drain_credited(&mut self, mut f: impl FnMut(Answer<'_>) -> Credit) -> usize {
        let mut n = 0;
        for (w, c) in self.from.iter_mut().enumerate() {
            while let Some(e) = c.pop() {
                let (slot, len) = unentry(e);
                n += 1;
                if len & MARK == 0 {
                    f(Answer::Done(Done::from_ring(&self.pool, slot, len)));
                    continue;
                }
                let c = f(Answer::Part(Part::from_ring(&self.pool, slot, len & !MARK)));
                if c == Credit::Now {
                    give_credit(&mut self.to[w], &self.worker_wakes[w], slot);
                }
            }
        }
        n
    }

    /// Gives worker `w` back the region of the stream frame lent from
    /// `slot` (held by [`drain_credited`](Self::drain_credited)). Once per
    /// lent frame: the worker lends the next only after it.
    pub fn credit(&mut self, w: usize, slot: u32) {
        if let (Some(to), Some(wake)) = (self.to.get_mut(w), self.worker_wakes.get(w)) {
            give_credit(to, wake, slot);
        }
    }

    /// What wakes this thread: written by a worker that answered while the
    /// thread was (about to be) asleep.
    pub fn wake(&self) -> &Arc<Wake> {
        &self.wake
    }
}

fn give_credit(to: &mut Producer, wake: &Wake, slot: u32) {
    // Cannot be full: the slot's request entry was popped before the
    // worker lent this frame, so the ring holds at most one entry per slot.
    let pushed = to.push(entry(slot, MARK));
    debug_assert!(pushed.is_ok());
    wake.notify();
}

/// Builds the rings and pools for `workers` workers and the configured
/// front-door threads.
pub fn build(
    cfg: &FrontdoorCfg,
    workers: usize,
) -> std::io::Result<(Vec<IngressWorker>, Vec<IngressPort>)> {
    let threads = cfg.threads as usize;
    let slots = cfg.slots;
    let pools: Vec<Arc<SlotPool>> = (0..threads)
        .map(|_| {
            SlotPool::new(
                slots,
                cfg.request_slot_bytes(),
                cfg.reply_bytes_max as usize,
            )
            .map(Arc::new)
        })
        .collect::<Result<_, _>>()?;
    let worker_wakes: Vec<Arc<Wake>> = (0..workers)
        .map(|_| Wake::new().map(Arc::new))
        .collect::<Result<_, _>>()?;
    let port_wakes: Vec<Arc<Wake>> = (0..threads)
        .map(|_| Wake::new().map(Arc::new))
        .collect::<Result<_, _>>()?;
    let mut ws: Vec<IngressWorker> = (0..workers)
        .map(|w| IngressWorker {
            index: w,
            from: Vec::with_capacity(threads),
            to: Vec::with_capacity(threads),
            pools: pools.clone(),
            port_wakes: port_wakes.clone(),
            wake: Arc::clone(&worker_wakes[w]),
        })
        .collect();
    let mut ports: Vec<IngressPort> = (0..threads)
        .map(|t| IngressPort {
            thread: t,
            pool: Arc::clone(&pools[t]),
            to: Vec::with_capacity(workers),
            from: Vec::with_capacity(workers),
            worker_wakes: worker_wakes.clone(),
            wake: Arc::clone(&port_wakes[t]),
        })
        .collect();
    for port in &mut ports {
        for w in &mut ws {
            let (p, c) = ring(slots as usize);
            port.to.push(p);
            w.from.push(c);
            let (p, c) = ring(slots as usize);
            w.to.push(p);
            port.from.push(c);
        }
    }
    Ok((ws, ports))
}
