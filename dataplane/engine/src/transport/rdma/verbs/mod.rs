//! Thin owning wrappers over ibverbs and rdma_cm (`cm`): every FFI call of
//! the RDMA transport is here. The calls whose safety depends on the caller
//! (registering memory, posting buffers by address) are `unsafe fn` with
//! their contracts; the transport's callers keep them. Every handle frees
//! its object on drop;
//! the callers keep them in an order where a QP goes before the CQ, SRQ and
//! MRs it uses, and those before the PD.
#![allow(unsafe_code)]

use std::io;
use std::ptr::{NonNull, null_mut};

use rdma_sys as sys;

mod cm;

pub use cm::{CmChannel, CmEvent, CmEventKind, CmId, ConnParams, QpCaps};

/// `errno` as an `io::Error`, for verbs calls that return null or -1.
fn last_err() -> io::Error {
    io::Error::last_os_error()
}

/// Verbs calls that return an errno value directly (ibv_post_*, ibv_destroy_*).
fn rc(r: i32) -> io::Result<()> {
    match r {
        0 => Ok(()),
        e if e > 0 => Err(io::Error::from_raw_os_error(e)),
        _ => Err(last_err()),
    }
}

/// How many RDMA devices the host has; `Err` carries why the list could not be read.
pub fn device_count() -> io::Result<usize> {
    let mut n: i32 = 0;
    // SAFETY: ibv_get_device_list writes the count and returns a list we
    // free right away; a null list means failure with errno set.
    let list = unsafe { sys::ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Err(last_err());
    }
    // SAFETY: list came from ibv_get_device_list and is freed once.
    unsafe { sys::ibv_free_device_list(list) };
    Ok(n.max(0) as usize)
}

/// A device context, owned by the rdma_cm id it came from.
#[derive(Clone, Copy)]
pub struct Context(NonNull<sys::ibv_context>);

// SAFETY: verbs contexts are thread-safe; the owning listen id outlives
// every user (the runtime drops it last).
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Context {
    /// Whether both handles name the same opened device (librdmacm opens
    /// each device once, so ids on one device share the pointer).
    pub fn same(&self, other: &Context) -> bool {
        self.0 == other.0
    }

    /// The device name (e.g. `rxe0`, `mlx5_0`).
    pub fn device_name(&self) -> String {
        // SAFETY: device and its name live as long as the context.
        unsafe {
            let dev = (*self.0.as_ptr()).device;
            if dev.is_null() {
                return String::new();
            }
            std::ffi::CStr::from_ptr(sys::ibv_get_device_name(dev))
                .to_string_lossy()
                .into_owned()
        }
    }
}

/// A protection domain.
pub struct Pd(NonNull<sys::ibv_pd>);

// SAFETY: protection domains are thread-safe in ibverbs.
unsafe impl Send for Pd {}
// SAFETY: as above.
unsafe impl Sync for Pd {}

impl Pd {
    /// Allocates a PD on `ctx`.
    pub fn new(ctx: Context) -> io::Result<Pd> {
        // SAFETY: live context; null means failure with errno set.
        NonNull::new(unsafe { sys::ibv_alloc_pd(ctx.0.as_ptr()) })
            .map(Pd)
            .ok_or_else(last_err)
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: every MR and QP on the PD is gone before (owners' order).
        unsafe { sys::ibv_dealloc_pd(self.0.as_ptr()) };
    }
}

/// Access a memory region grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Local reads and writes only (send and receive buffers).
    Local,
    /// Peers may RDMA WRITE into it (slots granted to a peer).
    RemoteWrite,
}

/// A registered memory region.
pub struct Mr(NonNull<sys::ibv_mr>);

// SAFETY: an MR is immutable after registration and thread-safe.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Mr {
    /// Registers `len` bytes at `addr`.
    ///
    /// # Safety
    ///
    /// `addr..addr + len` must be memory the caller owns and keeps mapped
    /// (and does not free or remap) until the returned MR is dropped: the
    /// NIC reads it, and with [`Access::RemoteWrite`] a peer may write it,
    /// at any time in between. Owners hold the region in a field dropped
    /// after the MR.
    pub unsafe fn register(pd: &Pd, addr: *mut u8, len: usize, access: Access) -> io::Result<Mr> {
        let mut flags = sys::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
        if access == Access::RemoteWrite {
            flags |= sys::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
        }
        // SAFETY: addr..addr+len is mapped memory owned by the caller and
        // kept alive past the MR (this function's contract).
        let mr = unsafe { sys::ibv_reg_mr(pd.0.as_ptr(), addr.cast(), len, flags as i32) };
        NonNull::new(mr).map(Mr).ok_or_else(last_err)
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: live MR.
        unsafe { (*self.0.as_ptr()).lkey }
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: live MR.
        unsafe { (*self.0.as_ptr()).rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: no QP uses the MR any more (owners' order).
        unsafe { sys::ibv_dereg_mr(self.0.as_ptr()) };
    }
}

/// What a completion was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcKind {
    /// A SEND landed in a posted receive buffer.
    Recv,
    /// An RDMA WRITE WITH IMM landed; it consumed a posted receive.
    RecvWriteImm,
    /// Our SEND or RDMA WRITE finished.
    SendDone,
    /// Anything else.
    Other,
}

/// A work completion, copied out of the CQ.
#[derive(Debug, Clone, Copy)]
pub struct Wc {
    pub wr_id: u64,
    pub ok: bool,
    pub kind: WcKind,
    pub byte_len: u32,
    /// Immediate data in host order (valid for RecvWriteImm).
    pub imm: u32,
    pub qp_num: u32,
}

impl Default for Wc {
    fn default() -> Self {
        Wc {
            wr_id: 0,
            ok: false,
            kind: WcKind::Other,
            byte_len: 0,
            imm: 0,
            qp_num: 0,
        }
    }
}

/// Most completions taken by one `Cq::poll`.
pub const POLL_BATCH_MAX: usize = 32;

/// A completion queue, polled (no completion channel).
pub struct Cq(NonNull<sys::ibv_cq>);

// SAFETY: a CQ is polled by its one owner thread; creation may happen on
// another thread before the handle moves.
unsafe impl Send for Cq {}
// SAFETY: QP creation on the control thread only reads the pointer.
unsafe impl Sync for Cq {}

impl Cq {
    /// A CQ of at least `entries` entries.
    pub fn new(ctx: Context, entries: u32) -> io::Result<Cq> {
        // SAFETY: live context; no channel, no vector.
        let cq = unsafe {
            sys::ibv_create_cq(ctx.0.as_ptr(), entries as i32, null_mut(), null_mut(), 0)
        };
        NonNull::new(cq).map(Cq).ok_or_else(last_err)
    }

    /// Polls up to `out.len()` (at most POLL_BATCH_MAX) completions.
    pub fn poll(&self, out: &mut [Wc]) -> usize {
        // SAFETY: ibv_wc is plain old data; all-zero is valid.
        let mut raw: [sys::ibv_wc; POLL_BATCH_MAX] = unsafe { std::mem::zeroed() };
        let want = out.len().min(POLL_BATCH_MAX);
        // SAFETY: raw has room for `want` entries; the CQ is live.
        let n = unsafe { sys::ibv_poll_cq(self.0.as_ptr(), want as i32, raw.as_mut_ptr()) };
        if n <= 0 {
            return 0;
        }
        let n = n as usize;
        for (o, w) in out.iter_mut().zip(&raw[..n]) {
            use sys::ibv_wc_opcode::*;
            let kind = match w.opcode {
                IBV_WC_RECV => WcKind::Recv,
                IBV_WC_RECV_RDMA_WITH_IMM => WcKind::RecvWriteImm,
                IBV_WC_SEND | IBV_WC_RDMA_WRITE => WcKind::SendDone,
                _ => WcKind::Other,
            };
            // SAFETY: imm_data is the active member for completions with
            // IBV_WC_WITH_IMM; for others the value is unused.
            let imm = unsafe { w.imm_data_invalidated_rkey_union.imm_data };
            *o = Wc {
                wr_id: w.wr_id,
                ok: w.status == sys::ibv_wc_status::IBV_WC_SUCCESS,
                kind,
                byte_len: w.byte_len,
                imm: u32::from_be(imm),
                qp_num: w.qp_num,
            };
        }
        n
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: every QP using the CQ is destroyed before (owners' order).
        unsafe { sys::ibv_destroy_cq(self.0.as_ptr()) };
    }
}

/// A shared receive queue: one per worker, shared by all its connections.
pub struct Srq(NonNull<sys::ibv_srq>);

// SAFETY: posted to by its owner thread only; QP creation elsewhere only
// reads the pointer.
unsafe impl Send for Srq {}
// SAFETY: as above.
unsafe impl Sync for Srq {}

impl Srq {
    /// An SRQ of `max_wr` receives.
    pub fn new(pd: &Pd, max_wr: u32) -> io::Result<Srq> {
        // SAFETY: ibv_srq_init_attr is plain old data; all-zero is valid.
        let mut a: sys::ibv_srq_init_attr = unsafe { std::mem::zeroed() };
        a.attr.max_wr = max_wr;
        a.attr.max_sge = 1;
        // SAFETY: live PD; attr outlives the call.
        let s = unsafe { sys::ibv_create_srq(pd.0.as_ptr(), &mut a) };
        NonNull::new(s).map(Srq).ok_or_else(last_err)
    }

    /// Posts one receive buffer.
    ///
    /// # Safety
    ///
    /// `addr..addr + len` must lie in a live MR whose local key is `lkey`,
    /// and the caller must neither read, write nor reuse those bytes, nor
    /// drop the MR or its memory, until the completion carrying `wr_id`
    /// hands the buffer back (the NIC writes it at any time before).
    pub unsafe fn post_recv(
        &self,
        wr_id: u64,
        addr: *mut u8,
        len: u32,
        lkey: u32,
    ) -> io::Result<()> {
        let mut sge = sys::ibv_sge {
            addr: addr as u64,
            length: len,
            lkey,
        };
        // SAFETY: ibv_recv_wr is plain old data; all-zero is valid.
        let mut wr: sys::ibv_recv_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        let mut bad: *mut sys::ibv_recv_wr = null_mut();
        // SAFETY: the buffer lies in a registered MR (lkey) and is the NIC's
        // until its completion (this function's contract); wr and sge are
        // copied by the provider during the call.
        rc(unsafe { sys::ibv_post_srq_recv(self.0.as_ptr(), &mut wr, &mut bad) })
    }
}

impl Drop for Srq {
    fn drop(&mut self) {
        // SAFETY: every QP using the SRQ is destroyed before (owners' order).
        unsafe { sys::ibv_destroy_srq(self.0.as_ptr()) };
    }
}

/// What a send work request does.
#[derive(Debug, Clone, Copy)]
pub enum SendOp {
    /// Two-sided SEND into the peer's posted receive.
    Send,
    /// One-sided RDMA WRITE WITH IMM into a slot the peer granted.
    WriteImm {
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    },
}

/// A queue pair handle. The QP itself belongs to its `CmId`; the owner of
/// the id destroys it only after the poster said it stopped using it. Not
/// `Copy`: one handle, moved to the one thread that posts to it.
pub struct Qp(NonNull<sys::ibv_qp>);

// SAFETY: posting to a QP from one thread at a time is allowed from any
// thread; the handle moves to the worker that posts.
unsafe impl Send for Qp {}

impl Qp {
    /// The QP number completions carry.
    pub fn num(&self) -> u32 {
        // SAFETY: live QP (see type docs).
        unsafe { (*self.0.as_ptr()).qp_num }
    }

    /// Posts one signaled send of `len` bytes at `addr` (in an MR with `lkey`).
    ///
    /// # Safety
    ///
    /// `addr..addr + len` must lie in a live MR whose local key is `lkey`,
    /// and the caller must not write those bytes, nor drop the MR or its
    /// memory, until the completion carrying `wr_id` (the NIC reads them at
    /// any time before). For [`SendOp::WriteImm`] the remote range is the
    /// peer's to vouch for (its rkey); a bad one fails the completion.
    pub unsafe fn post_send(
        &self,
        wr_id: u64,
        addr: *const u8,
        len: u32,
        lkey: u32,
        op: SendOp,
    ) -> io::Result<()> {
        let mut sge = sys::ibv_sge {
            addr: addr as u64,
            length: len,
            lkey,
        };
        // SAFETY: ibv_send_wr is plain old data; all-zero is valid.
        let mut wr: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.send_flags = sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
        match op {
            SendOp::Send => wr.opcode = sys::ibv_wr_opcode::IBV_WR_SEND,
            SendOp::WriteImm {
                remote_addr,
                rkey,
                imm,
            } => {
                wr.opcode = sys::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
                wr.imm_data_invalidated_rkey_union.imm_data = imm.to_be();
                wr.wr.rdma = sys::rdma_t { remote_addr, rkey };
            }
        }
        let mut bad: *mut sys::ibv_send_wr = null_mut();
        // SAFETY: the buffer lies in a registered MR (lkey) and stays
        // untouched until this WR's completion (this function's contract);
        // the QP is live (type docs).
        rc(unsafe { sys::ibv_post_send(self.0.as_ptr(), &mut wr, &mut bad) })
    }

    /// Posts one receive buffer (QPs without an SRQ: the client).
    ///
    /// # Safety
    ///
    /// As [`Srq::post_recv`]: the buffer lies in a live MR with `lkey` and
    /// is the NIC's until the completion carrying `wr_id`.
    pub unsafe fn post_recv(
        &self,
        wr_id: u64,
        addr: *mut u8,
        len: u32,
        lkey: u32,
    ) -> io::Result<()> {
        let mut sge = sys::ibv_sge {
            addr: addr as u64,
            length: len,
            lkey,
        };
        // SAFETY: ibv_recv_wr is plain old data; all-zero is valid.
        let mut wr: sys::ibv_recv_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        let mut bad: *mut sys::ibv_recv_wr = null_mut();
        // SAFETY: the buffer lies in a registered MR and is the NIC's until
        // its completion (this function's contract).
        rc(unsafe { sys::ibv_post_recv(self.0.as_ptr(), &mut wr, &mut bad) })
    }
}

/// The whole region read-only, borrowed from it. Buffers posted to the NIC
/// are never read by the callers until their completion hands them back.
pub fn region_bytes(r: &crate::pool::Region) -> &[u8] {
    // SAFETY: the mapping is live and `len` long for the borrow of `r`.
    unsafe { std::slice::from_raw_parts(r.as_ptr(), r.len()) }
}
