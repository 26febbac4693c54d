//! Slots: 64-byte aligned buffers of 64 KiB, in IOVA-contiguous 512 KiB
//! memzones per worker and direction, reserved at start-up.
//!
//! A frame larger than one mbuf (a scattered jumbo frame, a reassembled
//! datagram) is copied once into a receive slot, where ONNX Runtime reads
//! its tensors in place. An answer too large for one mbuf is written in
//! place into a transmit slot, which is then attached to mbufs as an
//! external buffer and sent as a chain or as IPv4 fragments; the slot comes
//! back when the last mbuf referring to it is freed (by the PMD after
//! sending), which the C shim's free callback records.
#![allow(unsafe_code)]

use std::ffi::CString;

use dpdk_sys as sys;

use super::net;
use super::runtime::{DpdkError, errno_text, rte_errno};

/// Where a frame starts in its slot: 64-byte aligned, with room in front
/// for the Ethernet, IPv4 and UDP headers of an answer.
pub const SLOT_FRAME_OFF: usize = 64;
/// The largest frame a slot holds: the largest UDP payload over IPv4.
pub const SLOT_FRAME_MAX: usize = net::UDP_PAYLOAD_MAX;
/// Bytes per slot (a multiple of 64).
pub const SLOT_BYTES: usize = SLOT_FRAME_OFF + 65_536;

const _: () =
    assert!(SLOT_BYTES.is_multiple_of(64) && SLOT_FRAME_OFF + SLOT_FRAME_MAX <= SLOT_BYTES);
const _: () = assert!(SLOT_FRAME_OFF >= net::HDRS_LEN);

/// The slots of one worker in one direction; owned by the runtime, freed
/// after the port is closed (when no mbuf can refer to them any more).
pub(super) struct SlotRegion {
    raw: *mut sys::sl_slots,
}

impl SlotRegion {
    /// Reserves `count` slots on `socket`; `None` for zero slots.
    pub(super) fn create(
        name: &str,
        count: u32,
        socket: i32,
    ) -> Result<Option<SlotRegion>, DpdkError> {
        if count == 0 {
            return Ok(None);
        }
        let cname = CString::new(name).map_err(|_| DpdkError::Pool("slot zone name".into()))?;
        // SAFETY: EAL is up; the name is copied by DPDK.
        let raw = unsafe { sys::sl_slots_create(cname.as_ptr(), count, SLOT_BYTES as u32, socket) };
        if raw.is_null() {
            return Err(DpdkError::Pool(format!(
                "{count} slots of {SLOT_BYTES} B ({name}): {}; raise dpdk.memory_mb or lower dpdk.rx_slots / dpdk.tx_slots",
                errno_text(rte_errno())
            )));
        }
        Ok(Some(SlotRegion { raw }))
    }

    /// A handle for the worker.
    pub(super) fn handle(&self) -> Slots {
        // SAFETY: `raw` is live until this region drops.
        let s = unsafe { &*self.raw };
        Slots {
            raw: self.raw,
            count: s.count,
        }
    }
}

impl Drop for SlotRegion {
    fn drop(&mut self) {
        // SAFETY: created by sl_slots_create; the port is closed and every
        // worker has exited, so nothing refers to the slots.
        unsafe { sys::sl_slots_destroy(self.raw) };
    }
}

/// A worker's view of a [`SlotRegion`] (valid while the runtime lives,
/// which outlives every worker).
#[derive(Clone, Copy)]
pub(super) struct Slots {
    raw: *mut sys::sl_slots,
    count: u32,
}

impl Slots {
    /// Slots in the region.
    pub(super) fn count(&self) -> u32 {
        self.count
    }

    /// Start of slot `i`.
    pub(super) fn slot(&self, i: u32) -> *mut u8 {
        assert!(i < self.count, "slot {i} of {}", self.count);
        // SAFETY: live region, i < count: the start of a slot of SLOT_BYTES.
        unsafe { sys::sl_slot_addr(self.raw, i) }
    }

    /// Where the frame of slot `i` starts (64-byte aligned).
    pub(super) fn frame(&self, i: u32) -> *mut u8 {
        // SAFETY: SLOT_FRAME_OFF < SLOT_BYTES.
        unsafe { self.slot(i).add(SLOT_FRAME_OFF) }
    }

    /// Makes `m` refer to bytes `[off, off + len)` of slot `i` as an
    /// external buffer (refcount 1; attached mbufs add to it).
    ///
    /// # Safety
    /// `m` is a fresh direct mbuf owned by the caller, and slot `i` is not
    /// attached to any other mbuf.
    pub(super) unsafe fn attach(
        &self,
        i: u32,
        m: *mut sys::rte_mbuf,
        off: usize,
        len: usize,
    ) -> bool {
        // SAFETY: per the contract; the shim checks the range.
        unsafe { sys::sl_slot_attach(self.raw, i, m, off as u32, len as u32) == 0 }
    }

    /// Whether every mbuf attached to slot `i` has been freed since the
    /// last attach (clears the mark).
    pub(super) fn take_released(&self, i: u32) -> bool {
        // SAFETY: live region; an atomic exchange in the shim.
        unsafe { sys::sl_slot_take_released(self.raw, i) == 1 }
    }
}

// SAFETY: the region is a DPDK memzone usable from any thread; each worker
// uses only its own region.
unsafe impl Send for Slots {}
// SAFETY: as above; the runtime only destroys it after the workers exit.
unsafe impl Send for SlotRegion {}
