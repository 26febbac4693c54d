//! Thin owning wrappers over ibverbs and rdma_cm: the only module of the
//! RDMA transport with unsafe code. Every handle frees its object on drop;
//! the callers keep them in an order where a QP goes before the CQ, SRQ and
//! MRs it uses, and those before the PD.
#![allow(unsafe_code)]

use std::io;
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::raw::c_void;
use std::ptr::{NonNull, null_mut};

use rdma_sys as sys;

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

fn to_sockaddr(a: &SocketAddr, out: &mut libc::sockaddr_storage) {
    // SAFETY: sockaddr_storage is plain old data; all-zero is valid, and
    // sockaddr_in/in6 fit inside it with compatible alignment.
    unsafe {
        *out = std::mem::zeroed();
        match a {
            SocketAddr::V4(v4) => {
                let s = &mut *(out as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>();
                s.sin_family = libc::AF_INET as libc::sa_family_t;
                s.sin_port = v4.port().to_be();
                s.sin_addr.s_addr = u32::from_ne_bytes(v4.ip().octets());
            }
            SocketAddr::V6(v6) => {
                let s = &mut *(out as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>();
                s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                s.sin6_port = v6.port().to_be();
                s.sin6_addr.s6_addr = v6.ip().octets();
                s.sin6_scope_id = v6.scope_id();
            }
        }
    }
}

fn from_sockaddr(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match s.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says this storage holds a sockaddr_in.
            let v4 = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(v4.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this storage holds a sockaddr_in6.
            let v6 = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = std::net::Ipv6Addr::from(v6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(v6.sin6_port),
                0,
                v6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// An rdma_cm event channel.
pub struct CmChannel(NonNull<sys::rdma_event_channel>);

// SAFETY: rdma_cm channels may be used from any thread; reading events is
// a read(2) on the channel's descriptor, safe to call concurrently.
unsafe impl Send for CmChannel {}
// SAFETY: as above.
unsafe impl Sync for CmChannel {}

impl CmChannel {
    /// A new channel, non-blocking so the owner can poll it.
    pub fn new() -> io::Result<CmChannel> {
        // SAFETY: plain constructor; null means failure with errno set.
        let ch = NonNull::new(unsafe { sys::rdma_create_event_channel() }).ok_or_else(last_err)?;
        let ch = CmChannel(ch);
        let fd = ch.fd();
        // SAFETY: fcntl on the channel's own descriptor.
        unsafe {
            let fl = libc::fcntl(fd, libc::F_GETFL);
            if fl < 0 || libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
                return Err(last_err());
            }
        }
        Ok(ch)
    }

    /// The descriptor to poll.
    pub fn fd(&self) -> i32 {
        // SAFETY: the channel is live while self is.
        unsafe { (*self.0.as_ptr()).fd }
    }

    /// Waits up to `timeout_ms` for the channel to become readable.
    pub fn wait(&self, timeout_ms: i32) {
        let mut p = libc::pollfd {
            fd: self.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd on the stack.
        unsafe { libc::poll(&mut p, 1, timeout_ms) };
    }

    /// The next event, if one is ready.
    pub fn next(&self) -> Option<CmEvent> {
        let mut ev: *mut sys::rdma_cm_event = null_mut();
        // SAFETY: non-blocking read of one event; on success `ev` is ours
        // until acked (CmEvent's drop).
        let r = unsafe { sys::rdma_get_cm_event(self.0.as_ptr(), &mut ev) };
        if r != 0 {
            return None;
        }
        NonNull::new(ev).map(CmEvent)
    }

    /// Waits up to `timeout_ms` for the next event.
    pub fn next_timeout(&self, timeout_ms: i32) -> Option<CmEvent> {
        if let Some(e) = self.next() {
            return Some(e);
        }
        self.wait(timeout_ms);
        self.next()
    }
}

impl Drop for CmChannel {
    fn drop(&mut self) {
        // SAFETY: every id on the channel is destroyed before (field order
        // of the owners), so the channel is idle.
        unsafe { sys::rdma_destroy_event_channel(self.0.as_ptr()) }
    }
}

/// The rdma_cm event kinds this transport acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmEventKind {
    AddrResolved,
    RouteResolved,
    ConnectRequest,
    Established,
    Disconnected,
    Rejected,
    /// Address, route or connection errors, unreachable peer, device removal.
    Error(u32),
    /// Events of no interest (timewait exit, address change).
    Other(u32),
}

/// One event, acknowledged on drop.
pub struct CmEvent(NonNull<sys::rdma_cm_event>);

impl CmEvent {
    fn ev(&self) -> &sys::rdma_cm_event {
        // SAFETY: the event is live until acked in drop.
        unsafe { self.0.as_ref() }
    }

    /// What happened.
    pub fn kind(&self) -> CmEventKind {
        use sys::rdma_cm_event_type::*;
        match self.ev().event {
            RDMA_CM_EVENT_ADDR_RESOLVED => CmEventKind::AddrResolved,
            RDMA_CM_EVENT_ROUTE_RESOLVED => CmEventKind::RouteResolved,
            RDMA_CM_EVENT_CONNECT_REQUEST => CmEventKind::ConnectRequest,
            RDMA_CM_EVENT_ESTABLISHED => CmEventKind::Established,
            RDMA_CM_EVENT_DISCONNECTED => CmEventKind::Disconnected,
            RDMA_CM_EVENT_REJECTED => CmEventKind::Rejected,
            e @ (RDMA_CM_EVENT_ADDR_ERROR
            | RDMA_CM_EVENT_ROUTE_ERROR
            | RDMA_CM_EVENT_CONNECT_ERROR
            | RDMA_CM_EVENT_UNREACHABLE
            | RDMA_CM_EVENT_DEVICE_REMOVAL) => CmEventKind::Error(e),
            e => CmEventKind::Other(e),
        }
    }

    /// The event's status (negative errno or a reject reason).
    pub fn status(&self) -> i32 {
        self.ev().status
    }

    /// The token stored in the id's context (0 when none was set).
    pub fn id_token(&self) -> u64 {
        let id = self.ev().id;
        if id.is_null() {
            return 0;
        }
        // SAFETY: the id is live while its event is not acked.
        unsafe { (*id).context as u64 }
    }

    /// The peer's private data of a connect request or an established/accept.
    pub fn private_data(&self) -> &[u8] {
        // SAFETY: for connection events the conn member of the param union
        // is the active one; the data lives until the event is acked.
        unsafe {
            let c = &self.ev().param.conn;
            if c.private_data.is_null() {
                return &[];
            }
            std::slice::from_raw_parts(c.private_data.cast::<u8>(), c.private_data_len as usize)
        }
    }

    /// Takes ownership of the new id of a connect request.
    pub fn take_new_id(&self) -> Option<CmId> {
        if self.kind() != CmEventKind::ConnectRequest {
            return None;
        }
        NonNull::new(self.ev().id).map(|id| CmId { id, has_qp: false })
    }
}

impl Drop for CmEvent {
    fn drop(&mut self) {
        // SAFETY: acked exactly once.
        unsafe { sys::rdma_ack_cm_event(self.0.as_ptr()) };
    }
}

/// Queue capacities of a QP.
#[derive(Debug, Clone, Copy)]
pub struct QpCaps {
    pub send_wr: u32,
    pub recv_wr: u32,
}

/// What a connection is set up with.
pub struct ConnParams<'a> {
    pub private_data: &'a [u8],
}

/// An rdma_cm id, destroyed (with its QP) on drop.
pub struct CmId {
    id: NonNull<sys::rdma_cm_id>,
    has_qp: bool,
}

// SAFETY: an id is used by one thread at a time (its owner); rdma_cm allows
// calls from any thread.
unsafe impl Send for CmId {}

impl CmId {
    /// A reliable-connected (TCP port space) id on `ch`.
    pub fn new(ch: &CmChannel) -> io::Result<CmId> {
        let mut id: *mut sys::rdma_cm_id = null_mut();
        // SAFETY: creates an id bound to a live channel.
        let r = unsafe {
            sys::rdma_create_id(
                ch.0.as_ptr(),
                &mut id,
                null_mut(),
                sys::rdma_port_space::RDMA_PS_TCP,
            )
        };
        if r != 0 {
            return Err(last_err());
        }
        let id = NonNull::new(id).ok_or_else(last_err)?;
        Ok(CmId { id, has_qp: false })
    }

    fn p(&self) -> *mut sys::rdma_cm_id {
        self.id.as_ptr()
    }

    /// Stores a token that events on this id carry back.
    pub fn set_token(&mut self, token: u64) {
        // SAFETY: context is a user field of a live id.
        unsafe { (*self.p()).context = token as *mut c_void };
    }

    /// Binds to a local address (this picks the device for a specific IP).
    pub fn bind(&mut self, addr: SocketAddr) -> io::Result<()> {
        let mut ss: libc::sockaddr_storage = unsafe_zeroed_storage();
        to_sockaddr(&addr, &mut ss);
        // SAFETY: the address outlives the call; rdma_cm copies it.
        let r = unsafe {
            sys::rdma_bind_addr(self.p(), (&mut ss as *mut libc::sockaddr_storage).cast())
        };
        if r != 0 { Err(last_err()) } else { Ok(()) }
    }

    /// Starts listening.
    pub fn listen(&mut self, backlog: i32) -> io::Result<()> {
        // SAFETY: live, bound id.
        if unsafe { sys::rdma_listen(self.p(), backlog) } != 0 {
            Err(last_err())
        } else {
            Ok(())
        }
    }

    /// Starts resolving a destination address (AddrResolved follows).
    pub fn resolve_addr(&mut self, dst: SocketAddr, timeout_ms: i32) -> io::Result<()> {
        self.resolve_addr_from(None, dst, timeout_ms)
    }

    /// Like [`CmId::resolve_addr`], from a given local address (which pins
    /// the device: a peer connection must use the appliance's own).
    pub fn resolve_addr_from(
        &mut self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout_ms: i32,
    ) -> io::Result<()> {
        let mut ss: libc::sockaddr_storage = unsafe_zeroed_storage();
        to_sockaddr(&dst, &mut ss);
        let mut sr: libc::sockaddr_storage = unsafe_zeroed_storage();
        let src_p = match src {
            Some(a) => {
                to_sockaddr(&a, &mut sr);
                (&mut sr as *mut libc::sockaddr_storage).cast()
            }
            None => null_mut(),
        };
        // SAFETY: both addresses outlive the call; rdma_cm copies them.
        let r = unsafe {
            sys::rdma_resolve_addr(
                self.p(),
                src_p,
                (&mut ss as *mut libc::sockaddr_storage).cast(),
                timeout_ms,
            )
        };
        if r != 0 { Err(last_err()) } else { Ok(()) }
    }

    /// Starts resolving the route (RouteResolved follows).
    pub fn resolve_route(&mut self, timeout_ms: i32) -> io::Result<()> {
        // SAFETY: live id with a resolved address.
        if unsafe { sys::rdma_resolve_route(self.p(), timeout_ms) } != 0 {
            Err(last_err())
        } else {
            Ok(())
        }
    }

    /// The device context the id is bound to, once bound or resolved.
    pub fn context(&self) -> Option<Context> {
        // SAFETY: reading a field of a live id.
        NonNull::new(unsafe { (*self.p()).verbs }).map(Context)
    }

    /// The remote address of a connected id.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: route.addr.dst_addr is what rdma_get_peer_addr returns;
        // the storage member covers the whole union.
        unsafe { from_sockaddr(&(*self.p()).route.addr.dst_addr_union.dst_storage) }
    }

    /// Creates the id's RC QP on `pd` with the given CQ and optional SRQ.
    pub fn create_qp(
        &mut self,
        pd: &Pd,
        cq: &Cq,
        srq: Option<&Srq>,
        caps: QpCaps,
    ) -> io::Result<Qp> {
        // SAFETY: ibv_qp_init_attr is plain old data; all-zero is valid.
        let mut attr: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        attr.send_cq = cq.0.as_ptr();
        attr.recv_cq = cq.0.as_ptr();
        attr.srq = srq.map_or(null_mut(), |s| s.0.as_ptr());
        attr.qp_type = sys::ibv_qp_type::IBV_QPT_RC;
        attr.cap.max_send_wr = caps.send_wr;
        attr.cap.max_recv_wr = if srq.is_some() { 0 } else { caps.recv_wr };
        attr.cap.max_send_sge = 1;
        attr.cap.max_recv_sge = 1;
        attr.sq_sig_all = 0;
        // SAFETY: pd, cq and srq are live and outlive the QP (the owners
        // destroy the id first); attr outlives the call.
        let r = unsafe { sys::rdma_create_qp(self.p(), pd.0.as_ptr(), &mut attr) };
        if r != 0 {
            return Err(last_err());
        }
        self.has_qp = true;
        // SAFETY: rdma_create_qp set id->qp on success.
        let qp = NonNull::new(unsafe { (*self.p()).qp }).ok_or_else(last_err)?;
        Ok(Qp(qp))
    }

    fn conn_param(p: &ConnParams<'_>) -> sys::rdma_conn_param {
        // SAFETY: rdma_conn_param is plain old data; all-zero is valid.
        let mut c: sys::rdma_conn_param = unsafe { std::mem::zeroed() };
        c.private_data = p.private_data.as_ptr().cast();
        c.private_data_len = p.private_data.len().min(u8::MAX as usize) as u8;
        c.responder_resources = 1;
        c.initiator_depth = 1;
        c.retry_count = 7;
        // 7 = retry forever on receiver-not-ready: a full SRQ waits, never drops.
        c.rnr_retry_count = 7;
        c
    }

    /// Accepts a connect request, sending `p.private_data`.
    pub fn accept(&mut self, p: &ConnParams<'_>) -> io::Result<()> {
        let mut c = Self::conn_param(p);
        // SAFETY: the private data outlives the call; rdma_cm copies it.
        if unsafe { sys::rdma_accept(self.p(), &mut c) } != 0 {
            Err(last_err())
        } else {
            Ok(())
        }
    }

    /// Refuses a connect request.
    pub fn reject(&mut self, private: &[u8]) {
        // SAFETY: the data outlives the call; rdma_cm copies it.
        unsafe {
            sys::rdma_reject(
                self.p(),
                private.as_ptr().cast(),
                private.len().min(u8::MAX as usize) as u8,
            )
        };
    }

    /// Connects (Established or Rejected follows).
    pub fn connect(&mut self, p: &ConnParams<'_>) -> io::Result<()> {
        let mut c = Self::conn_param(p);
        // SAFETY: the private data outlives the call; rdma_cm copies it.
        if unsafe { sys::rdma_connect(self.p(), &mut c) } != 0 {
            Err(last_err())
        } else {
            Ok(())
        }
    }

    /// Destroys the QP now (before the PD, CQ and MRs it uses go), keeping
    /// the id.
    pub fn destroy_qp(&mut self) {
        if self.has_qp {
            // SAFETY: the QP exists and is destroyed once; nobody posts to it.
            unsafe { sys::rdma_destroy_qp(self.p()) };
            self.has_qp = false;
        }
    }

    /// Starts a disconnect; both sides see Disconnected.
    pub fn disconnect(&mut self) {
        // SAFETY: live id; an error only means it was not connected.
        unsafe { sys::rdma_disconnect(self.p()) };
    }
}

fn unsafe_zeroed_storage() -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain old data; all-zero is valid.
    unsafe { std::mem::zeroed() }
}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: the QP (if any) is destroyed before its id, both exactly
        // once; nobody posts to the QP any more (owners guarantee it).
        unsafe {
            if self.has_qp {
                sys::rdma_destroy_qp(self.p());
            }
            sys::rdma_destroy_id(self.p());
        }
    }
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
