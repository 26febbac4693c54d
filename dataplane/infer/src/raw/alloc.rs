//! The reply allocator: ONNX Runtime's CPU allocator for every Sluice
//! session, so that outputs whose shape is only known after the run are
//! written by ORT straight into the reply buffer.
//!
//! ORT picks an allocator per device; an output cannot be bound to another
//! allocator without ORT copying it there (checked on 1.31: an output bound
//! to a memory info of another device is allocated on the CPU device and
//! never reaches that allocator). So this allocator is registered in the
//! environment under the CPU device itself and sessions opt in with
//! `session.use_env_allocators = 1`: every allocation a session makes goes
//! through it.
//!
//! - Outside a run (loading, initializers, prepacked weights, other threads)
//!   it serves from the heap, with a 64-byte header that marks the block.
//! - During a run the worker *arms* it on its own thread with an [`Arena`]:
//!   the free tail of the reply buffer being built, then a per-model scratch
//!   region made at load. Both are bump regions, 64-byte aligned, reset per
//!   request; a freed block on top of a region is popped (ORT frees kernel
//!   scratch in LIFO order). What fits neither falls back to the heap and is
//!   counted (`heap_allocs`).
//!
//! ORT never frees memory it did not allocate, and the arena is armed for
//! the whole run and the release of its outputs, so no block of a request
//! is freed after its regions were reset. `live` counts blocks handed out
//! and not freed: after a request it must be 0 (checked at load and after
//! every run; a model whose runs keep memory goes back to the heap).

use core::cell::Cell;
use core::ffi::c_void;
use core::marker::PhantomData;
use core::ptr;
use std::ffi::CString;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use ort::AsPointer;
use ort::environment::Environment;
use ort::sys::{OrtAllocator, OrtAllocatorType, OrtMemType, OrtMemoryInfo};

use super::{OrtFailure, check};

/// Blocks one region tracks at once; an allocation past it goes to the next
/// region (or the heap).
pub(crate) const BLOCKS_MAX: usize = 4096;
/// Alignment of every block (the wire's tensor alignment).
const ALIGN: usize = sluice_wire::TENSOR_ALIGN;
/// Heap blocks start with this header.
const HEAP_HEADER: usize = 64;
const HEAP_MAGIC: u64 = 0x5041_4548_4543_4c53; // "SLCEHEAP"

/// Frees of pointers this allocator does not recognise (never expected).
static STRAY_FREES: AtomicU64 = AtomicU64::new(0);
/// Heap blocks handed out and not yet freed (load-time memory, mostly).
static HEAP_LIVE: AtomicU64 = AtomicU64::new(0);
static INFO: AtomicPtr<OrtMemoryInfo> = AtomicPtr::new(ptr::null_mut());

thread_local! {
    /// The arena armed on this thread, if any.
    static CURRENT: Cell<*mut Arena> = const { Cell::new(ptr::null_mut()) };
}

#[derive(Debug, Clone, Copy, Default)]
struct Block {
    off: usize,
    live: bool,
}

/// One bump region with LIFO reclamation.
pub(crate) struct Region {
    base: *mut u8,
    cap: usize,
    top: usize,
    depth: usize,
    peak: usize,
    blocks: Box<[Block]>,
}

impl Region {
    fn new() -> Region {
        Region {
            base: ptr::null_mut(),
            cap: 0,
            top: 0,
            depth: 0,
            peak: 0,
            blocks: vec![Block::default(); BLOCKS_MAX].into_boxed_slice(),
        }
    }

    fn set(&mut self, base: *mut u8, cap: usize) {
        self.base = base;
        self.cap = if base.is_null() { 0 } else { cap };
        self.top = 0;
        self.depth = 0;
    }

    fn contains(&self, p: *const u8) -> bool {
        let (b, p) = (self.base as usize, p as usize);
        !self.base.is_null() && p >= b && p < b + self.cap
    }

    fn alloc(&mut self, size: usize) -> Option<*mut u8> {
        if self.base.is_null() || self.depth == BLOCKS_MAX {
            return None;
        }
        // The base is 64-byte aligned; offsets stay multiples of 64.
        let off = self.top.checked_add(ALIGN - 1)? & !(ALIGN - 1);
        let end = off.checked_add(size.max(1))?;
        if end > self.cap {
            return None;
        }
        self.blocks[self.depth] = Block { off, live: true };
        self.depth += 1;
        self.top = end;
        self.peak = self.peak.max(end);
        // SAFETY: off < end <= cap, inside the region's memory.
        Some(unsafe { self.base.add(off) })
    }

    /// Frees a block of this region; false if `p` starts no live block.
    fn free(&mut self, p: *const u8) -> bool {
        let off = p as usize - self.base as usize;
        let Some(i) = (0..self.depth)
            .rev()
            .find(|&i| self.blocks[i].off == off && self.blocks[i].live)
        else {
            return false;
        };
        self.blocks[i].live = false;
        while self.depth > 0 && !self.blocks[self.depth - 1].live {
            self.depth -= 1;
            self.top = self.blocks[self.depth].off;
        }
        true
    }
}

/// What one run may allocate from: the reply tail, then scratch. Owned by
/// a model (one per worker); armed on the worker's thread for a run.
pub(crate) struct Arena {
    tx: Region,
    scratch: Region,
    /// Backing of `scratch`.
    // Drop order: `scratch` points into this; it is only dereferenced while
    // armed, and arming borrows the arena mutably, so the buffer outlives
    // every use.
    _scratch_buf: Vec<u8>,
    /// Blocks handed out by the regions and not freed.
    pub(crate) live: usize,
    /// Allocations during a run that fit neither region.
    pub(crate) heap_allocs: u64,
}

impl Arena {
    /// An arena with `scratch_len` bytes of scratch (allocated here, at load).
    pub(crate) fn new(scratch_len: usize) -> Arena {
        // One alignment's slack in front, so the 64 bytes before any block
        // are inside the buffer, and one to align the start.
        let mut scratch_buf = vec![0u8; scratch_len + 2 * ALIGN];
        let start = ALIGN
            + scratch_buf[ALIGN..]
                .as_ptr()
                .align_offset(ALIGN)
                .min(ALIGN - 1);
        let mut scratch = Region::new();
        // SAFETY: start < 2 * ALIGN <= scratch_buf.len().
        scratch.set(unsafe { scratch_buf.as_mut_ptr().add(start) }, scratch_len);
        Arena {
            tx: Region::new(),
            scratch,
            _scratch_buf: scratch_buf,
            live: 0,
            heap_allocs: 0,
        }
    }

    /// Scratch bytes.
    pub(crate) fn scratch_len(&self) -> usize {
        self.scratch.cap
    }

    /// Highest scratch offset used since the arena was made.
    pub(crate) fn scratch_peak(&self) -> usize {
        self.scratch.peak
    }

    fn alloc(&mut self, size: usize) -> Option<*mut u8> {
        let p = self.tx.alloc(size).or_else(|| self.scratch.alloc(size))?;
        self.live += 1;
        Some(p)
    }

    fn free(&mut self, p: *const u8) -> bool {
        let ours = (self.tx.contains(p) && self.tx.free(p))
            || (self.scratch.contains(p) && self.scratch.free(p));
        if ours {
            self.live -= 1;
        }
        ours
    }

    /// Empties both regions for the next request.
    fn reset(&mut self) {
        let (b, c) = (self.scratch.base, self.scratch.cap);
        self.scratch.set(b, c);
        self.tx.set(ptr::null_mut(), 0);
        self.live = 0;
    }
}

/// The reply's free tail for one run, with the model's arena armed over it
/// on this thread (when `arm`): while it lives, every ORT allocation on this
/// thread comes from the tail, then scratch. Disarms and resets on drop, so
/// it must outlive every ORT value of the run (declare it first).
pub(crate) struct ReplyTail<'a> {
    base: *mut u8,
    len: usize,
    arena: *mut Arena,
    armed: bool,
    prev: *mut Arena,
    _borrow: PhantomData<(&'a mut Arena, &'a mut [u8])>,
}

impl<'a> ReplyTail<'a> {
    pub(crate) fn new(arena: &'a mut Arena, tx: &'a mut [u8], arm: bool) -> ReplyTail<'a> {
        let (base, len) = (tx.as_mut_ptr(), tx.len());
        let aligned = (base as usize).is_multiple_of(ALIGN);
        arena
            .tx
            .set(if aligned { base } else { ptr::null_mut() }, len);
        arena.live = 0;
        let arena: *mut Arena = arena;
        let prev = if arm {
            CURRENT.with(|c| c.replace(arena))
        } else {
            ptr::null_mut()
        };
        ReplyTail {
            base,
            len,
            arena,
            armed: arm,
            prev,
            _borrow: PhantomData,
        }
    }

    /// The tail's bytes. Only between ORT calls.
    pub(crate) fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: base/len come from the `&'a mut [u8]` this guard holds for
        // its lifetime; ORT writes there only during calls on this thread,
        // never while the returned borrow is in use.
        unsafe { core::slice::from_raw_parts_mut(self.base, self.len) }
    }

    /// Offset of `p` from the tail's start, if it lies inside the tail.
    pub(crate) fn offset_of(&self, p: *const u8) -> Option<usize> {
        let (b, p) = (self.base as usize, p as usize);
        (p >= b && p < b + self.len).then(|| p - b)
    }

    /// Arena blocks handed out and not freed, and heap fallbacks so far.
    pub(crate) fn counts(&self) -> (usize, u64) {
        // SAFETY: the arena is borrowed for 'a; reading two counters between
        // ORT calls does not overlap the callbacks' use.
        let a = unsafe { &*self.arena };
        (a.live, a.heap_allocs)
    }
}

impl Drop for ReplyTail<'_> {
    fn drop(&mut self) {
        if self.armed {
            CURRENT.with(|c| c.set(self.prev));
        }
        // SAFETY: as in `counts`; no ORT call is running.
        unsafe { &mut *self.arena }.reset();
    }
}

fn heap_alloc(size: usize) -> *mut c_void {
    let Some(total) = size.checked_add(HEAP_HEADER) else {
        return ptr::null_mut();
    };
    let Ok(layout) = std::alloc::Layout::from_size_align(total, ALIGN) else {
        return ptr::null_mut();
    };
    // SAFETY: the layout has a non-zero size (at least the header).
    let base = unsafe { std::alloc::alloc(layout) };
    if base.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: the block is at least HEAP_HEADER (64) bytes and 64-aligned,
    // so both u64 writes are in bounds and aligned.
    unsafe {
        base.cast::<u64>().write(HEAP_MAGIC);
        base.cast::<u64>().add(1).write(total as u64);
    }
    HEAP_LIVE.fetch_add(1, Ordering::Relaxed);
    // SAFETY: HEAP_HEADER < total.
    unsafe { base.add(HEAP_HEADER).cast() }
}

/// Frees a heap block.
///
/// # Safety
/// `p` is a pointer ORT got from this allocator and has not freed, and it is
/// not in an armed arena; so it is a heap block with its header before it.
unsafe fn heap_free(p: *mut u8) {
    // SAFETY: per the contract, the header is the 64 bytes before `p`.
    let base = unsafe { p.sub(HEAP_HEADER) };
    // SAFETY: as above; 64-aligned reads inside the block.
    let (magic, total) = unsafe { (base.cast::<u64>().read(), base.cast::<u64>().add(1).read()) };
    if magic != HEAP_MAGIC {
        STRAY_FREES.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let Ok(layout) = std::alloc::Layout::from_size_align(total as usize, ALIGN) else {
        STRAY_FREES.fetch_add(1, Ordering::Relaxed);
        return;
    };
    // SAFETY: the magic is cleared so a double free is caught as stray; the
    // block was allocated by `heap_alloc` with this layout.
    unsafe {
        base.cast::<u64>().write(0);
        std::alloc::dealloc(base, layout);
    }
    HEAP_LIVE.fetch_sub(1, Ordering::Relaxed);
}

extern "system" fn reply_alloc(_this: *mut OrtAllocator, size: usize) -> *mut c_void {
    let arena = CURRENT.with(Cell::get);
    if !arena.is_null() {
        // SAFETY: an armed arena is live for the whole ORT call (see Armed)
        // and only this thread reaches it.
        let a = unsafe { &mut *arena };
        if let Some(p) = a.alloc(size) {
            return p.cast();
        }
        a.heap_allocs += 1;
    }
    heap_alloc(size)
}

extern "system" fn reply_free(_this: *mut OrtAllocator, p: *mut c_void) {
    if p.is_null() {
        return;
    }
    let arena = CURRENT.with(Cell::get);
    if !arena.is_null() {
        // SAFETY: as in `reply_alloc`.
        if unsafe { &mut *arena }.free(p.cast()) {
            return;
        }
    }
    // SAFETY: ORT frees only what it allocated here; arena blocks are all
    // freed while their arena is armed (the run and the release of its
    // outputs), so what is left is a heap block.
    unsafe { heap_free(p.cast()) }
}

extern "system" fn reply_reserve(this: *const OrtAllocator, size: usize) -> *mut c_void {
    reply_alloc(this.cast_mut(), size)
}

extern "system" fn reply_info(_this: *const OrtAllocator) -> *const OrtMemoryInfo {
    INFO.load(Ordering::Acquire)
}

/// Registers the reply allocator in the environment, once per process.
pub(crate) fn register(env: &Environment) -> Result<(), OrtFailure> {
    let api = ort::api();
    let name = CString::new("Cpu").map_err(|_| OrtFailure("memory info name".into()))?;
    let mut info: *mut OrtMemoryInfo = ptr::null_mut();
    // SAFETY: valid NUL-terminated name and out pointer; "Cpu" device 0 with
    // the default memory type is the CPU execution provider's device, so
    // sessions that use environment allocators take this one for it.
    check(unsafe {
        (api.CreateMemoryInfo)(
            name.as_ptr(),
            OrtAllocatorType::OrtDeviceAllocator,
            0,
            OrtMemType::OrtMemTypeDefault,
            &mut info,
        )
    })?;
    INFO.store(info, Ordering::Release);
    // SAFETY: `default` only fills the version and empty slots.
    let mut a = unsafe { OrtAllocator::default() };
    a.Alloc = Some(reply_alloc);
    a.Free = Some(reply_free);
    a.Info = Some(reply_info);
    a.Reserve = Some(reply_reserve);
    // ORT keeps the pointer for the life of the environment (the process).
    let a: &'static mut OrtAllocator = Box::leak(Box::new(a));
    // SAFETY: the environment is live; the allocator and its memory info
    // live for the rest of the process.
    check(unsafe { (api.RegisterAllocator)(env.ptr().cast_mut(), a) })
}

/// Frees the allocator did not recognise (a bug if ever non-zero).
pub fn stray_frees() -> u64 {
    STRAY_FREES.load(Ordering::Relaxed)
}

/// Heap blocks ORT holds from the reply allocator (load-time memory).
pub fn heap_live() -> u64 {
    HEAP_LIVE.load(Ordering::Relaxed)
}

// SAFETY: the raw pointers in an arena point into its own scratch buffer or
// into a reply buffer borrowed for one run; they are dereferenced only while
// the arena is armed on the thread that holds it mutably, so moving the
// arena (inside its model) to another thread between runs is sound.
unsafe impl Send for Arena {}
