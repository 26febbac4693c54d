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
            .populate()
            .map_anon()
            .map_err(PoolError::Map)?;
        // Normal pages: ask for transparent hugepages and pre-fault.
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

/// A LIFO free list of buffer indices: the most recently freed buffer is
/// reused first, while it is still warm in cache.
#[derive(Debug)]
pub struct FreeList {
    free: Vec<u32>,
    capacity: u32,
    /// Allocations served from a buffer used before.
    pub reuses: u64,
    touched: Vec<bool>,
}

impl FreeList {
    /// All `n` buffers free.
    pub fn new(n: u32) -> FreeList {
        FreeList {
            free: (0..n).rev().collect(),
            capacity: n,
            reuses: 0,
            touched: vec![false; n as usize],
        }
    }

    /// Takes a buffer.
    pub fn alloc(&mut self) -> Option<u32> {
        let i = self.free.pop()?;
        let t = &mut self.touched[i as usize];
        if *t {
            self.reuses += 1;
        }
        *t = true;
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
}
