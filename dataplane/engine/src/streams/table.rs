//! One worker's open streams of one model: who owns each slot, which `seq`
//! it expects next, when it was last used, and its state in ping-pong
//! buffers. Everything is allocated when the table is made; opening,
//! stepping, ending and reclaiming a stream allocate nothing and take no
//! lock (the table belongs to one worker).

use sluice_wire::{ErrorCode, Reject};

use super::aligned::Aligned;

/// The limits of one table (`[streams]`, docs/wire.md "Limits and errors
/// of streams").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// Slots: open streams of this model on this worker.
    pub per_worker: u32,
    /// Open streams of one tenant on this worker.
    pub per_tenant: u32,
    /// A stream with no frame for this long is reclaimed (µs).
    pub idle_us: u64,
    /// Frames per stream (the frame after the last is refused and ends it).
    pub frames_max: u32,
}

/// Why a stream frame was refused; `expected` is the `seq` the error
/// frame's stream header carries (docs/wire.md, "Frames of a stream").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamRefusal {
    /// The refusal.
    pub reject: Reject,
    /// The seq the stream expects next (for `stream_sequence`), else the
    /// refused frame's.
    pub seq: u32,
    /// The refusal ended the stream.
    pub ended: bool,
}

pub(crate) mod msg {
    pub const UNKNOWN: &str = "unknown or expired stream";
    pub const SEQUENCE: &str = "stream frame out of sequence";
    pub const WORKER_FULL: &str = "too many open streams on this worker";
    pub const TENANT_FULL: &str = "too many open streams for this tenant";
    pub const FRAMES_MAX: &str = "the stream reached its frame limit";
}

fn refuse(code: ErrorCode, message: &'static str, seq: u32, ended: bool) -> StreamRefusal {
    StreamRefusal {
        reject: Reject::new(code, message),
        seq,
        ended,
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    live: bool,
    tenant: u32,
    stream_id: u64,
    /// The seq the next client frame must carry.
    next_seq: u32,
    last_us: u64,
    /// Which half of the slot's state holds the current state (0 or 1).
    side: u8,
}

/// Counts a table keeps (read into the worker's stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableCounts {
    /// Streams opened.
    pub opened: u64,
    /// Streams ended by END, CANCEL or a refusal that ends them.
    pub ended: u64,
    /// Streams reclaimed after `idle_us`.
    pub reclaimed: u64,
    /// Steps run.
    pub steps: u64,
    /// Frames refused (any stream error).
    pub refused: u64,
}

/// A worker's streams of one model.
pub struct StreamTable {
    limits: StreamLimits,
    // Drop order: plain memory, no order needed.
    entries: Box<[Entry]>,
    /// Open addressing, linear probing: slot index + 1, 0 = empty. Twice
    /// the slots, so a probe ends within a few steps.
    index: Box<[u32]>,
    free: Vec<u32>,
    /// Per open tenant on this table: (tenant, open streams). At most one
    /// entry per slot.
    tenants: Vec<(u32, u32)>,
    /// Each slot's state: two halves of `state_len` bytes each, every half
    /// starting at a multiple of 64.
    state: Aligned,
    state_len: usize,
    /// Where the next bounded reclaim scan starts.
    reclaim_cursor: usize,
    counts: TableCounts,
    /// The counts at the last [`StreamTable::take_counts`].
    reported: TableCounts,
    /// SipHash with a random key drawn when the table is made: stream ids
    /// are chosen by clients, so none may aim a run of them at one probe
    /// chain (a fixed mix would let them).
    hasher: std::collections::hash_map::RandomState,
}

impl std::fmt::Debug for StreamTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamTable")
            .field("limits", &self.limits)
            .field("open", &self.open())
            .field("state_len", &self.state_len)
            .finish()
    }
}

/// A slot handed out by [`StreamTable::open`] or [`StreamTable::step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotId(u32);

impl SlotId {
    /// The slot of index `i` (a generator's own record of it).
    pub(crate) fn new(i: u32) -> SlotId {
        SlotId(i)
    }

    /// Index of the slot.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl StreamTable {
    /// The keyed hash of a stream's name (no allocation).
    fn hash(&self, tenant: u32, stream_id: u64) -> u64 {
        use std::hash::{BuildHasher, Hasher};
        let mut h = self.hasher.build_hasher();
        h.write_u32(tenant);
        h.write_u64(stream_id);
        h.finish()
    }

    /// Makes a table of `limits.per_worker` slots with `state_len` bytes of
    /// state per slot (rounded up to 64 per half).
    pub fn new(limits: StreamLimits, state_len: usize) -> StreamTable {
        let n = limits.per_worker as usize;
        let half = state_len.div_ceil(64) * 64;
        StreamTable {
            limits,
            entries: vec![Entry::default(); n].into_boxed_slice(),
            index: vec![0u32; (2 * n).max(2)].into_boxed_slice(),
            free: (0..n as u32).rev().collect(),
            tenants: Vec::with_capacity(n),
            state: Aligned::new(2 * half * n.max(1)),
            state_len: half,
            reclaim_cursor: 0,
            counts: TableCounts::default(),
            reported: TableCounts::default(),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }

    /// Open streams.
    pub fn open(&self) -> usize {
        self.entries.len() - self.free.len()
    }

    /// The counts so far.
    pub fn counts(&self) -> TableCounts {
        self.counts
    }

    /// The counts since the last call.
    pub fn take_counts(&mut self) -> TableCounts {
        let (c, r) = (self.counts, self.reported);
        self.reported = c;
        TableCounts {
            opened: c.opened - r.opened,
            ended: c.ended - r.ended,
            reclaimed: c.reclaimed - r.reclaimed,
            steps: c.steps - r.steps,
            refused: c.refused - r.refused,
        }
    }

    /// The limits.
    pub fn limits(&self) -> StreamLimits {
        self.limits
    }

    fn find(&self, tenant: u32, stream_id: u64) -> Result<usize, usize> {
        let cap = self.index.len();
        let mut at = (self.hash(tenant, stream_id) % cap as u64) as usize;
        for _ in 0..cap {
            match self.index[at] {
                0 => return Err(at),
                s => {
                    let e = &self.entries[s as usize - 1];
                    if e.tenant == tenant && e.stream_id == stream_id {
                        return Ok(at);
                    }
                }
            }
            at = (at + 1) % cap;
        }
        Err(cap)
    }

    fn tenant_count(&mut self, tenant: u32) -> &mut u32 {
        let at = match self.tenants.iter().position(|t| t.0 == tenant) {
            Some(at) => at,
            None => {
                // Capacity is the slot count and every entry holds a
                // stream, so this never grows the vector.
                self.tenants.push((tenant, 0));
                self.tenants.len() - 1
            }
        };
        &mut self.tenants[at].1
    }

    /// Opens a stream (an `OPEN` frame with `seq` 0) and makes its state
    /// zero: the state a model starts from.
    pub fn open_stream(
        &mut self,
        tenant: u32,
        stream_id: u64,
        seq: u32,
        now_us: u64,
    ) -> Result<SlotId, StreamRefusal> {
        let at = match self.find(tenant, stream_id) {
            Ok(found) => {
                let e = self.entries[self.index[found] as usize - 1];
                self.counts.refused += 1;
                return Err(refuse(
                    ErrorCode::StreamSequence,
                    msg::SEQUENCE,
                    e.next_seq,
                    false,
                ));
            }
            // Where it goes; nothing changes the index before it is used.
            Err(at) => at,
        };
        if seq != 0 {
            self.counts.refused += 1;
            return Err(refuse(ErrorCode::StreamSequence, msg::SEQUENCE, 0, false));
        }
        // The worker first: with a free slot, fewer tenants than slots hold
        // streams, so the tenant list never grows past its capacity.
        if self.free.is_empty() {
            self.counts.refused += 1;
            return Err(refuse(ErrorCode::StreamLimit, msg::WORKER_FULL, seq, false));
        }
        let per_tenant = self.limits.per_tenant;
        if *self.tenant_count(tenant) >= per_tenant {
            self.counts.refused += 1;
            self.drop_empty_tenants();
            return Err(refuse(ErrorCode::StreamLimit, msg::TENANT_FULL, seq, false));
        }
        let Some(slot) = self.free.pop() else {
            return Err(refuse(ErrorCode::StreamLimit, msg::WORKER_FULL, seq, false));
        };
        debug_assert!(at < self.index.len(), "the index has room for every slot");
        self.index[at] = slot + 1;
        self.entries[slot as usize] = Entry {
            live: true,
            tenant,
            stream_id,
            next_seq: 0,
            last_us: now_us,
            side: 0,
        };
        *self.tenant_count(tenant) += 1;
        let half = self.state_len;
        let base = 2 * half * slot as usize;
        self.state.bytes_mut()[base..base + 2 * half].fill(0);
        self.counts.opened += 1;
        Ok(SlotId(slot))
    }

    /// Looks up the stream of a `CONTINUE` (or `CANCEL`) frame and checks
    /// its `seq` and the frame limit.
    pub fn step(
        &mut self,
        tenant: u32,
        stream_id: u64,
        seq: u32,
        now_us: u64,
    ) -> Result<SlotId, StreamRefusal> {
        let Ok(at) = self.find(tenant, stream_id) else {
            self.counts.refused += 1;
            return Err(refuse(ErrorCode::UnknownStream, msg::UNKNOWN, seq, false));
        };
        let slot = self.index[at] - 1;
        let e = self.entries[slot as usize];
        if now_us.saturating_sub(e.last_us) > self.limits.idle_us {
            // Expired but not reclaimed yet: the same answer as reclaimed.
            self.remove(slot);
            self.counts.reclaimed += 1;
            self.counts.refused += 1;
            return Err(refuse(ErrorCode::UnknownStream, msg::UNKNOWN, seq, false));
        }
        if seq != e.next_seq {
            self.counts.refused += 1;
            return Err(refuse(
                ErrorCode::StreamSequence,
                msg::SEQUENCE,
                e.next_seq,
                false,
            ));
        }
        if seq >= self.limits.frames_max {
            self.remove(slot);
            self.counts.ended += 1;
            self.counts.refused += 1;
            return Err(refuse(ErrorCode::StreamLimit, msg::FRAMES_MAX, seq, true));
        }
        Ok(SlotId(slot))
    }

    /// Finds an open stream whatever its `seq` (a `CANCEL`).
    pub fn find_stream(
        &mut self,
        tenant: u32,
        stream_id: u64,
        seq: u32,
    ) -> Result<SlotId, StreamRefusal> {
        match self.find(tenant, stream_id) {
            Ok(at) => Ok(SlotId(self.index[at] - 1)),
            Err(_) => {
                self.counts.refused += 1;
                Err(refuse(ErrorCode::UnknownStream, msg::UNKNOWN, seq, false))
            }
        }
    }

    /// Whether (`tenant`, `stream_id`) is open here.
    pub fn contains(&self, tenant: u32, stream_id: u64) -> bool {
        self.find(tenant, stream_id).is_ok()
    }

    /// Removes a stream and returns its next seq and current state (the
    /// slot's memory is not reused before the next open).
    pub fn take(&mut self, tenant: u32, stream_id: u64) -> Option<(u32, &[u8])> {
        let at = self.find(tenant, stream_id).ok()?;
        let slot = SlotId(self.index[at] - 1);
        let seq = self.next_seq(slot);
        self.remove(slot.0);
        self.counts.ended += 1;
        let (cur, _) = self.buffers(slot);
        Some((seq, cur))
    }

    /// Opens a stream that goes on from another table: its next seq and
    /// its state, copied in (one copy of the state, at an alias switch).
    pub fn adopt(
        &mut self,
        tenant: u32,
        stream_id: u64,
        next_seq: u32,
        state: &[u8],
        now_us: u64,
    ) -> bool {
        let Ok(slot) = self.open_stream(tenant, stream_id, 0, now_us) else {
            return false;
        };
        self.entries[slot.index()].next_seq = next_seq;
        let (cur, _) = self.buffers(slot);
        let n = cur.len().min(state.len());
        cur[..n].copy_from_slice(&state[..n]);
        true
    }

    /// The seq a stream expects next.
    pub fn next_seq(&self, slot: SlotId) -> u32 {
        self.entries[slot.index()].next_seq
    }

    /// The state a step reads (the current half) and the one it writes
    /// (the other half), each `state_len` bytes, 64-byte aligned.
    pub fn buffers(&mut self, slot: SlotId) -> (&mut [u8], &mut [u8]) {
        let half = self.state_len;
        let base = 2 * half * slot.index();
        let side = self.entries[slot.index()].side as usize;
        let (a, b) = self.state.bytes_mut()[base..base + 2 * half].split_at_mut(half);
        if side == 0 { (a, b) } else { (b, a) }
    }

    /// The step ran: the half it wrote becomes the current state (no copy),
    /// and the stream expects the next `seq`.
    pub fn commit(&mut self, slot: SlotId, now_us: u64) {
        let e = &mut self.entries[slot.index()];
        e.side ^= 1;
        e.next_seq = e.next_seq.wrapping_add(1);
        e.last_us = now_us;
        self.counts.steps += 1;
    }

    /// Whether `slot` still holds stream (`tenant`, `stream_id`): not
    /// ended, cancelled or reclaimed since.
    pub fn holds(&self, slot: SlotId, tenant: u32, stream_id: u64) -> bool {
        let e = &self.entries[slot.index()];
        e.live && e.tenant == tenant && e.stream_id == stream_id
    }

    /// A server-driven step ran: the half it wrote becomes current. The
    /// idle clock is not restarted (it runs from the client's last frame).
    pub fn flip(&mut self, slot: SlotId) {
        self.entries[slot.index()].side ^= 1;
        self.counts.steps += 1;
    }

    /// The step failed before it changed anything: only its time counts.
    pub fn touch(&mut self, slot: SlotId, now_us: u64) {
        self.entries[slot.index()].last_us = now_us;
    }

    /// Ends a stream (END after its step, CANCEL, or an error that ends it).
    pub fn end(&mut self, slot: SlotId) {
        if self.entries[slot.index()].live {
            self.remove(slot.0);
            self.counts.ended += 1;
        }
    }

    /// Reclaims streams idle for longer than `idle_us`, looking at no more
    /// than `scan_max` slots (a bounded piece of work per loop iteration).
    /// Returns how many were reclaimed.
    pub fn reclaim_idle(&mut self, now_us: u64, scan_max: usize) -> usize {
        let n = self.entries.len();
        let mut reclaimed = 0;
        for _ in 0..scan_max.min(n) {
            let i = self.reclaim_cursor % n.max(1);
            self.reclaim_cursor = (i + 1) % n.max(1);
            let e = self.entries[i];
            if e.live && now_us.saturating_sub(e.last_us) > self.limits.idle_us {
                self.remove(i as u32);
                self.counts.reclaimed += 1;
                reclaimed += 1;
            }
        }
        reclaimed
    }

    /// Ends every stream (the model was unloaded, or its state shapes
    /// changed); returns how many.
    pub fn clear(&mut self) -> usize {
        let mut n = 0;
        for i in 0..self.entries.len() {
            if self.entries[i].live {
                self.remove(i as u32);
                self.counts.ended += 1;
                n += 1;
            }
        }
        n
    }

    fn remove(&mut self, slot: u32) {
        let e = self.entries[slot as usize];
        debug_assert!(e.live, "removing a free slot");
        if let Ok(at) = self.find(e.tenant, e.stream_id) {
            self.unlink(at);
        }
        self.entries[slot as usize].live = false;
        self.free.push(slot);
        if let Some(t) = self.tenants.iter_mut().find(|t| t.0 == e.tenant) {
            t.1 -= 1;
        }
        self.drop_empty_tenants();
    }

    fn drop_empty_tenants(&mut self) {
        self.tenants.retain(|t| t.1 > 0);
    }

    /// Removes index entry `at` and moves later entries of its probe run
    /// back, so every lookup still finds its entry (no tombstones).
    fn unlink(&mut self, mut at: usize) {
        let cap = self.index.len();
        self.index[at] = 0;
        let mut next = (at + 1) % cap;
        while self.index[next] != 0 {
            let s = self.index[next];
            let e = self.entries[s as usize - 1];
            let home = (self.hash(e.tenant, e.stream_id) % cap as u64) as usize;
            // Move it back when its home is not within (at, next].
            let between = if at <= next {
                at < home && home <= next
            } else {
                at < home || home <= next
            };
            if !between {
                self.index[at] = s;
                self.index[next] = 0;
                at = next;
            }
            next = (next + 1) % cap;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> StreamLimits {
        StreamLimits {
            per_worker: 4,
            per_tenant: 3,
            idle_us: 1_000,
            frames_max: 5,
        }
    }

    #[test]
    fn open_step_commit_pingpong() {
        let mut t = StreamTable::new(limits(), 100);
        let s = t.open_stream(1, 77, 0, 0).unwrap();
        {
            let (cur, next) = t.buffers(s);
            assert_eq!(cur.len(), 128);
            assert!(cur.iter().all(|&b| b == 0));
            assert_eq!(cur.as_ptr() as usize % 64, 0);
            assert_eq!(next.as_ptr() as usize % 64, 0);
            next.fill(7);
        }
        t.commit(s, 10);
        let s2 = t.step(1, 77, 1, 20).unwrap();
        assert_eq!(s, s2);
        let (cur, next) = t.buffers(s2);
        assert!(cur.iter().all(|&b| b == 7), "the written half is current");
        next.fill(9);
        t.commit(s2, 30);
        let (cur, _) = t.buffers(s2);
        assert!(cur.iter().all(|&b| b == 9));
        assert_eq!(t.counts().steps, 2);
    }

    #[test]
    fn sequence_rules() {
        let mut t = StreamTable::new(limits(), 8);
        let s = t.open_stream(1, 5, 0, 0).unwrap();
        // The OPEN resent (its answer lost): the expected seq comes back.
        assert_eq!(
            t.open_stream(1, 5, 0, 0).unwrap_err().reject.code,
            ErrorCode::StreamSequence
        );
        t.commit(s, 1);
        let e = t.step(1, 5, 0, 2).unwrap_err();
        assert_eq!((e.reject.code, e.seq), (ErrorCode::StreamSequence, 1));
        let e = t.step(1, 5, 3, 2).unwrap_err();
        assert_eq!((e.reject.code, e.seq), (ErrorCode::StreamSequence, 1));
        assert!(t.step(1, 5, 1, 2).is_ok());
        // Another tenant's stream 5 is another stream.
        let e = t.step(2, 5, 1, 2).unwrap_err();
        assert_eq!(e.reject.code, ErrorCode::UnknownStream);
        assert_eq!(
            t.open_stream(1, 6, 1, 0).unwrap_err().reject.code,
            ErrorCode::StreamSequence,
            "an OPEN carries seq 0"
        );
    }

    #[test]
    fn frames_max_ends_the_stream() {
        let mut t = StreamTable::new(limits(), 8);
        let s = t.open_stream(1, 5, 0, 0).unwrap();
        for seq in 0..5 {
            if seq > 0 {
                t.step(1, 5, seq, 0).unwrap();
            }
            t.commit(s, 0);
        }
        let e = t.step(1, 5, 5, 0).unwrap_err();
        assert_eq!((e.reject.code, e.ended), (ErrorCode::StreamLimit, true));
        assert_eq!(t.open(), 0);
        assert_eq!(
            t.step(1, 5, 6, 0).unwrap_err().reject.code,
            ErrorCode::UnknownStream
        );
    }

    #[test]
    fn limits_per_worker_and_tenant() {
        let mut t = StreamTable::new(limits(), 8);
        for id in 1..=3 {
            t.open_stream(1, id, 0, 0).unwrap();
        }
        let e = t.open_stream(1, 4, 0, 0).unwrap_err();
        assert_eq!(
            (e.reject.code, e.reject.message),
            (ErrorCode::StreamLimit, msg::TENANT_FULL)
        );
        t.open_stream(2, 1, 0, 0).unwrap();
        let e = t.open_stream(3, 1, 0, 0).unwrap_err();
        assert_eq!(
            (e.reject.code, e.reject.message),
            (ErrorCode::StreamLimit, msg::WORKER_FULL)
        );
        assert!(e.reject.code.retryable());
        let s = t.step(2, 1, 0, 0).unwrap();
        t.end(s);
        t.open_stream(3, 1, 0, 0).unwrap();
        assert_eq!(t.open(), 4);
    }

    #[test]
    fn idle_streams_are_reclaimed_and_counted() {
        let mut t = StreamTable::new(limits(), 8);
        t.open_stream(1, 1, 0, 0).unwrap();
        t.open_stream(1, 2, 0, 500).unwrap();
        assert_eq!(t.reclaim_idle(1_200, 4), 1, "only the first is idle");
        assert_eq!(
            t.step(1, 1, 0, 1_200).unwrap_err().reject.code,
            ErrorCode::UnknownStream
        );
        assert!(t.step(1, 2, 0, 1_200).is_ok());
        // Expired but not scanned yet: unknown too, and counted.
        assert_eq!(
            t.step(1, 2, 0, 5_000).unwrap_err().reject.code,
            ErrorCode::UnknownStream
        );
        assert_eq!(t.counts().reclaimed, 2);
        assert_eq!(t.open(), 0);
    }

    #[test]
    fn index_survives_churn() {
        // Many ids through a small table: every open stream stays findable
        // after others are removed from the middle of probe runs.
        let mut t = StreamTable::new(
            StreamLimits {
                per_worker: 16,
                per_tenant: 16,
                idle_us: u64::MAX,
                frames_max: u32::MAX,
            },
            8,
        );
        let mut open = std::collections::BTreeMap::new();
        let mut x = 1u64;
        for round in 0..2_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let id = (x >> 33) % 40 + 1;
            if let Some(slot) = open.remove(&id) {
                t.end(slot);
            } else if let Ok(slot) = t.open_stream(1, id, 0, round) {
                open.insert(id, slot);
            }
            for (&id, &slot) in &open {
                assert_eq!(t.step(1, id, 0, round), Ok(slot), "round {round} id {id}");
            }
            assert_eq!(t.open(), open.len());
        }
    }
}
