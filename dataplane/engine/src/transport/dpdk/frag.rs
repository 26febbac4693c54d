//! IPv4 reassembly of one worker with DPDK's librte_ip_frag: a bounded
//! fragment table and its death row (`rte_ipv4_frag_reassemble_packet`,
//! `rte_ip_frag_table_del_expired_entries`, `rte_ip_frag_free_death_row`).
//!
//! Mbuf ownership: a fragment fed to [`Reassembler::feed`] belongs to the
//! table until it comes back inside a reassembled chain (the caller frees
//! that), or lands on the death row, which this module frees (once, with
//! `rte_ip_frag_free_death_row`). The table's mbufs are counted as they go
//! in and out (`held`, in segments), bounded by `frag_mbufs_max`, and
//! [`Reassembler::clear`] frees every one of them.
#![allow(unsafe_code)]

use std::ffi::c_int;

use dpdk_sys as sys;

use super::net::ETH_HDR_LEN;
use super::runtime::{DpdkError, errno_text, rte_errno};
use super::stats::QueueStats;

/// A fragment table and its death row, owned by the runtime (created at
/// start, destroyed after the port is closed).
pub(super) struct FragTable {
    tbl: *mut sys::rte_ip_frag_tbl,
    dr: *mut sys::rte_ip_frag_death_row,
}

impl FragTable {
    /// A table for `entries` datagrams whose fragments expire after
    /// `timeout_ms`.
    pub(super) fn create(
        entries: u32,
        timeout_ms: u32,
        socket: c_int,
    ) -> Result<FragTable, DpdkError> {
        // SAFETY: EAL is initialized (the TSC rate is measured at init).
        let hz = unsafe { sys::sl_tsc_hz() };
        let cycles = hz / 1000 * timeout_ms as u64;
        // SAFETY: EAL is up; sizes checked by the library.
        let tbl = unsafe { sys::sl_frag_table_create(entries, cycles, socket) };
        if tbl.is_null() {
            return Err(DpdkError::Pool(format!(
                "IPv4 fragment table of {entries} entries: {}; raise dpdk.memory_mb or lower dpdk.frag_entries_max",
                errno_text(rte_errno())
            )));
        }
        // SAFETY: EAL is up.
        let dr = unsafe { sys::sl_death_row_create(socket) };
        if dr.is_null() {
            // SAFETY: created above, empty.
            unsafe { sys::sl_frag_table_destroy(tbl) };
            return Err(DpdkError::Pool(
                "IPv4 fragment death row: out of memory".into(),
            ));
        }
        Ok(FragTable { tbl, dr })
    }
}

impl Drop for FragTable {
    fn drop(&mut self) {
        // SAFETY: both created in `create`; no worker uses them any more.
        // Destroying the table frees whatever mbufs it still holds.
        unsafe {
            sys::sl_death_row_free(self.dr);
            sys::sl_frag_table_destroy(self.tbl);
            sys::sl_death_row_destroy(self.dr);
        }
    }
}

impl FragTable {
    /// The worker's handle (valid while the runtime lives).
    pub(super) fn handle(&self) -> FragHandle {
        FragHandle {
            tbl: self.tbl,
            dr: self.dr,
        }
    }
}

/// The raw table and death row a worker's [`Reassembler`] drives.
#[derive(Clone, Copy)]
pub(super) struct FragHandle {
    tbl: *mut sys::rte_ip_frag_tbl,
    dr: *mut sys::rte_ip_frag_death_row,
}

// SAFETY: DPDK objects usable from any thread; one worker uses each.
unsafe impl Send for FragTable {}
// SAFETY: as above.
unsafe impl Send for FragHandle {}

/// What became of a fed fragment.
pub(super) enum Fed {
    /// Kept in the table until its datagram completes or expires.
    Held,
    /// Freed (onto the death row): counted in the stats.
    Dropped,
    /// The last missing fragment: the whole datagram as an mbuf chain,
    /// now the caller's to free.
    Complete(*mut sys::rte_mbuf),
}

/// One worker's use of its [`FragTable`].
pub(super) struct Reassembler {
    tbl: *mut sys::rte_ip_frag_tbl,
    dr: *mut sys::rte_ip_frag_death_row,
    /// Mbuf segments in the table now.
    held: u64,
    held_max: u64,
    /// Free the death row once it has fewer free places than one call may
    /// add (a stale entry and an invalid one, each of up to max_frag + 1).
    dr_flush_at: u32,
}

fn segs(m: *const sys::rte_mbuf) -> u64 {
    let mut v = sys::sl_mbuf_view::default();
    // SAFETY: a live mbuf.
    unsafe { sys::sl_mbuf_view(m, &mut v) };
    v.nb_segs as u64
}

/// Now, in TSC cycles (librte_ip_frag's clock).
pub(super) fn now_tsc() -> u64 {
    // SAFETY: reads the TSC.
    unsafe { sys::sl_tsc() }
}

impl Reassembler {
    /// Uses `t`, holding at most `held_max` mbufs.
    pub(super) fn new(t: FragHandle, held_max: u32) -> Reassembler {
        // SAFETY: pure functions of the linked library.
        let (cap, max_frag) = unsafe { (sys::sl_death_row_capacity(), sys::sl_ip_frag_max_frag()) };
        Reassembler {
            tbl: t.tbl,
            dr: t.dr,
            held: 0,
            held_max: held_max as u64,
            dr_flush_at: cap.saturating_sub(2 * (max_frag + 1)),
        }
    }

    /// Mbufs in the table.
    pub(super) fn held(&self) -> u64 {
        self.held
    }

    fn dr_count(&self) -> u32 {
        // SAFETY: live death row.
        unsafe { sys::sl_death_row_count(self.dr) }
    }

    /// Segments of the death row's entries `from..`: mbufs leaving the table.
    fn dr_segs_from(&self, from: u32) -> u64 {
        (from..self.dr_count())
            // SAFETY: index below the count.
            .map(|i| segs(unsafe { sys::sl_death_row_at(self.dr, i) }))
            .sum()
    }

    /// Frees the death row (every mbuf on it once): at the end of every
    /// receive burst, so nothing waits there.
    pub(super) fn flush(&mut self) {
        if self.dr_count() > 0 {
            // SAFETY: the death row's mbufs are ours to free, each listed once.
            unsafe { sys::sl_death_row_free(self.dr) };
        }
    }

    /// Gives fragment `m` (its IPv4 header `ihl` bytes after Ethernet,
    /// passed the stateless checks of `net::classify`) to the table.
    pub(super) fn feed(
        &mut self,
        m: *mut sys::rte_mbuf,
        ihl: usize,
        now: u64,
        st: &mut QueueStats,
    ) -> Fed {
        st.rx_fragments += 1;
        let n = segs(m);
        if self.held + n > self.held_max {
            st.frag_table_full += 1;
            // SAFETY: ours, not in the table; freed once.
            unsafe { sys::sl_pktmbuf_free(m) };
            return Fed::Dropped;
        }
        if self.dr_count() > self.dr_flush_at {
            self.flush();
        }
        let before = self.dr_count();
        self.held += n;
        // SAFETY: m is a single- or multi-segment mbuf we own whose first
        // segment holds Ethernet and IPv4 headers (checked by classify);
        // the table and death row are live and this worker's only.
        let out = unsafe {
            sys::sl_ipv4_reassemble(self.tbl, self.dr, m, now, ETH_HDR_LEN as u8, ihl as u8)
        };
        let after = self.dr_count();
        let dropped = after - before;
        if dropped > 0 {
            self.held -= self.dr_segs_from(before);
            // The fragment alone on the death row: the table had no entry
            // for it. Anything else: the library found its datagram's
            // fragments inconsistent (overlap, duplicate, too many) and freed
            // all of them.
            // SAFETY: index below the count.
            let alone = dropped == 1 && unsafe { sys::sl_death_row_at(self.dr, before) } == m;
            if alone {
                st.frag_table_full += 1;
            } else {
                st.frag_invalid += dropped as u64;
            }
        }
        st.frag_held = self.held;
        if out.is_null() {
            return if dropped > 0 { Fed::Dropped } else { Fed::Held };
        }
        self.held -= segs(out);
        st.frag_held = self.held;
        st.rx_reassembled += 1;
        Fed::Complete(out)
    }

    /// Frees the fragments of datagrams older than the timeout; whether any
    /// were.
    pub(super) fn expire(&mut self, now: u64, st: &mut QueueStats) -> bool {
        if self.held == 0 {
            self.flush();
            return false;
        }
        let mut freed = false;
        loop {
            self.flush();
            // SAFETY: live table and death row; the death row is empty, so
            // it has room for a whole table entry.
            unsafe { sys::sl_frag_expire(self.tbl, self.dr, now) };
            let n = self.dr_count();
            if n == 0 {
                break;
            }
            freed = true;
            self.held -= self.dr_segs_from(0);
            st.frag_expired += n as u64;
            // Expiry stops when the death row is full: go on until it does not.
            if n < self.dr_flush_at {
                break;
            }
        }
        self.flush();
        st.frag_held = self.held;
        freed
    }

    /// Frees every fragment in the table (at stop), counted as expired.
    pub(super) fn clear(&mut self, st: &mut QueueStats) {
        self.expire(u64::MAX, st);
        debug_assert_eq!(self.held, 0, "fragments left in the table");
    }
}
