//! Buffer memory allocated once at start-up, in 2 MiB hugepages when the
//! host has them free, with a fallback to normal pages that is reported.

use memmap2::{MmapMut, MmapOptions};

use crate::config::HugepageMode;

const HUGE_PAGE_BYTES: usize = 2 << 20;

/// Why a pool could not be made.
#[derive(Debug)]
pub enum PoolError {
    /// `hugepages = "required"` and none were free.
    NoHugepages(std::io::Error),
    /// Even normal pages could not be mapped.
    Map(std::io::Error),
}

impl std::fmt::Display for PoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PoolError::NoHugepages(e) => write!(
                f,
                "hugepages are required but none could be mapped ({e}); \
                 reserve some with scripts/hugepages.sh or set engine.hugepages = \"auto\""
            ),
            PoolError::Map(e) => write!(f, "cannot map buffer memory: {e}"),
        }
    }
}

impl std::error::Error for PoolError {}

/// One mapping of buffer memory, 2 MiB aligned.
#[derive(Debug)]
pub struct Region {
    map: MmapMut,
    huge: bool,
}

impl Region {
    /// Maps at least `bytes`, rounded up to 2 MiB, and touches every page so
    /// nothing faults on the hot path.
    pub fn alloc(bytes: usize, mode: HugepageMode) -> Result<Region, PoolError> {
        let len = bytes.div_ceil(HUGE_PAGE_BYTES).max(1) * HUGE_PAGE_BYTES;
        if mode != HugepageMode::Off {
            match MmapOptions::new()
                .len(len)
                .huge(Some(21))
                .populate()
                .map_anon()
            {
                Ok(map) => return Ok(Region { map, huge: true }),
                Err(e) if mode == HugepageMode::Required => return Err(PoolError::NoHugepages(e)),
                Err(_) => {}
            }
        }
        let mut map = MmapOptions::new()
            .len(len)
            .map_anon()
            .map_err(PoolError::Map)?;
        // Normal pages: ask for transparent hugepages before the first
        // touch (populating first would fault in 4 KiB pages, and only
        // khugepaged, minutes later, would fold them), then pre-fault.
        let _ = map.advise(memmap2::Advice::HugePage);
        for page in map.chunks_mut(4096) {
            page[0] = 0;
        }
        Ok(Region { map, huge: false })
    }

    /// Whether the region sits in hugepages.
    pub fn is_huge(&self) -> bool {
        self.huge
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether empty (never, once mapped).
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The bytes.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.map
    }

    /// Base address, read-only.
    pub fn as_ptr(&self) -> *const u8 {
        self.map.as_ptr()
    }

    /// Base address, for transports that hand buffers to the kernel or a NIC.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.map.as_mut_ptr()
    }
}

/// The pools a transport reports, by index into
/// [`crate::transport::TransportCounters::pools`].
pub mod kind {
    /// Receive buffers (or slots, where the NIC's mempool owns the memory).
    pub const RX: usize = 0;
    /// Transmit buffers.
    pub const TX: usize = 1;
    /// Large transmit buffers (RDMA WRITE replies).
    pub const LARGE: usize = 2;
    /// How many there are.
    pub const COUNT: usize = 3;
    /// Their names in stats and metrics.
    pub const NAMES: [&str; COUNT] = ["rx", "tx", "large"];
}

/// How one pool's buffers are used, as its transport counts them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PoolCounters {
    /// Buffers in the pool (0: the transport has no such pool).
    pub capacity: u32,
    /// Buffers taken now.
    pub in_use: u32,
    /// Bytes of memory behind the pool.
    pub bytes: u64,
    /// Whether that memory sits in 2 MiB hugepages.
    pub huge: bool,
    /// Buffers handed out (each receive or allocation).
    pub allocs: u64,
    /// Of those, buffers handed out before: the same pages reused for a new
    /// frame. `allocs - reuses` is first touches.
    pub reuses: u64,
    /// Distinct buffers handed out at least once.
    pub touched: u32,
}

/// First touch or reuse, per buffer: one flag a buffer, preallocated.
#[derive(Debug)]
pub struct TouchMap {
    touched: Box<[bool]>,
    /// Buffers handed out.
    pub allocs: u64,
    /// Handed out again.
    pub reuses: u64,
    /// Distinct buffers handed out.
    pub count: u32,
}

impl TouchMap {
    /// `n` buffers, none touched.
    pub fn new(n: u32) -> TouchMap {
        TouchMap {
            touched: vec![false; n as usize].into_boxed_slice(),
            allocs: 0,
            reuses: 0,
            count: 0,
        }
    }

    /// Counts buffer `i` handed out. Out of range is ignored (counted as an
    /// allocation only): a counter never panics the data path.
    #[inline]
    pub fn take(&mut self, i: u32) {
        self.allocs += 1;
        let Some(t) = self.touched.get_mut(i as usize) else {
            return;
        };
        if *t {
            self.reuses += 1;
        } else {
            *t = true;
            self.count += 1;
        }
    }

    /// The pool's counters, with what only its owner knows.
    pub fn counters(&self, in_use: u32, bytes: u64, huge: bool) -> PoolCounters {
        PoolCounters {
            capacity: self.touched.len() as u32,
            in_use,
            bytes,
            huge,
            allocs: self.allocs,
            reuses: self.reuses,
            touched: self.count,
        }
    }
}

/// A LIFO free list of buffer indices: the most recently freed buffer is
/// reused first, while it is still warm in cache.
#[derive(Debug)]
pub struct FreeList {
    free: Vec<u32>,
    capacity: u32,
    /// Allocations served from a buffer used before.
    pub reuses: u64,
    touch: TouchMap,
}

impl FreeList {
    /// All `n` buffers free.
    pub fn new(n: u32) -> FreeList {
        FreeList {
            free: (0..n).rev().collect(),
            capacity: n,
            reuses: 0,
            touch: TouchMap::new(n),
        }
    }

    /// Takes a buffer.
    pub fn alloc(&mut self) -> Option<u32> {
        let i = self.free.pop()?;
        self.touch.take(i);
        self.reuses = self.touch.reuses;
        Some(i)
    }

    /// Returns a buffer. A double free is a bug: asserted.
    pub fn free(&mut self, i: u32) {
        assert!(i < self.capacity, "buffer index out of range");
        debug_assert!(!self.free.contains(&i), "double free of buffer {i}");
        assert!(
            self.free.len() < self.capacity as usize,
            "free list overflow"
        );
        self.free.push(i);
    }

    /// Buffers in use.
    pub fn in_use(&self) -> u32 {
        self.capacity - self.free.len() as u32
    }

    /// Total buffers.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// The pool's counters, given the memory behind it.
    pub fn counters(&self, bytes: u64, huge: bool) -> PoolCounters {
        self.touch.counters(self.in_use(), bytes, huge)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_touch_then_reuse() {
        let mut f = FreeList::new(4);
        let a = f.alloc().unwrap();
        let b = f.alloc().unwrap();
        f.free(a);
        let c = f.alloc().unwrap();
        assert_eq!(c, a, "LIFO: the warm buffer comes back first");
        f.free(b);
        f.free(c);
        let p = f.counters(4 * 4096, false);
        assert_eq!(
            (p.allocs, p.reuses, p.touched, p.in_use, p.capacity),
            (3, 1, 2, 0, 4)
        );
        let mut t = TouchMap::new(2);
        t.take(1);
        t.take(1);
        t.take(9); // out of range: an allocation, never a panic
        assert_eq!((t.allocs, t.reuses, t.count), (3, 1, 1));
    }
}
