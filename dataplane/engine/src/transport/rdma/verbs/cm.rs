//! rdma_cm: the event channel, its events, and connection ids (address
//! and route resolution, listen, connect, accept, the QP of a connection).
#![allow(unsafe_code)]

use std::io;
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::raw::c_void;
use std::ptr::{NonNull, null_mut};

use rdma_sys as sys;

use super::{Context, Cq, Pd, Qp, Srq, last_err};

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
