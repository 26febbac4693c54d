//! A blocking RDMA client for tests and benchmarks: one RC connection,
//! small frames by SEND, large frames by RDMA WRITE WITH IMM into the slots
//! the appliance granted, replies by SEND or into the client's own reply
//! slots. Frames are built in place in registered memory (no copy).
// A verbs backend module: posting work requests over raw addresses.
#![allow(unsafe_code)]

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::proto::{ClientHello, IMM_SLOT, ServerHello};
use super::verbs::{
    self, Access, CmChannel, CmEventKind, CmId, ConnParams, Cq, Mr, Pd, Qp, QpCaps, SendOp, Wc,
    WcKind,
};
use super::{NO_DEVICE_HINT, device_check};
use crate::config::HugepageMode;
use crate::pool::{FreeList, PoolError, Region};

/// Client settings.
#[derive(Debug, Clone, Copy)]
pub struct ClientOpts {
    /// Small send and receive buffer size, bytes.
    pub buffer_size: u32,
    /// Most requests in flight.
    pub outstanding_max: u32,
    /// Reply slots (and staging buffers for large requests) to set up.
    pub slots: u32,
    /// Size of each reply slot and staging buffer, bytes (2 MiB multiple).
    pub slot_size: u32,
    /// How long connection set-up may take.
    pub connect_timeout_ms: u32,
}

impl Default for ClientOpts {
    fn default() -> Self {
        ClientOpts {
            buffer_size: 65536,
            outstanding_max: 16,
            slots: 2,
            slot_size: 18 << 20,
            connect_timeout_ms: 5000,
        }
    }
}

/// Why a client call failed.
#[derive(Debug)]
pub enum ClientError {
    /// The host has no RDMA device.
    NoDevice(String),
    /// Set-up failed at a named step.
    Setup(&'static str, io::Error),
    /// The appliance refused or never answered the connection.
    Refused(String),
    /// The connection is gone; the requests in flight failed with it.
    /// Retryable: a new connection may serve them.
    ConnectionLost {
        /// Requests that were in flight.
        outstanding: u32,
    },
    /// No reply in time.
    Timeout,
    /// The frame does not fit the buffer or slot.
    TooLarge {
        /// Frame length.
        len: usize,
        /// Largest allowed.
        max: usize,
    },
    /// `outstanding_max` requests are in flight already.
    NoCredit,
    /// No such slot, or the slot's staging buffer is still being sent.
    SlotBusy(u32),
    /// Buffer memory.
    Pool(PoolError),
}

impl ClientError {
    /// Whether the same request may succeed if sent again (perhaps on a
    /// new connection).
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            ClientError::ConnectionLost { .. }
                | ClientError::Timeout
                | ClientError::NoCredit
                | ClientError::SlotBusy(_)
        )
    }
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::NoDevice(m) => write!(f, "{m}; {NO_DEVICE_HINT}"),
            ClientError::Setup(s, e) => write!(f, "rdma client {s}: {e}"),
            ClientError::Refused(m) => write!(f, "connection refused: {m}"),
            ClientError::ConnectionLost { outstanding } => {
                write!(
                    f,
                    "connection lost; {outstanding} request(s) in flight failed (retryable)"
                )
            }
            ClientError::Timeout => f.write_str("no reply in time (retryable)"),
            ClientError::TooLarge { len, max } => write!(f, "frame of {len} bytes exceeds {max}"),
            ClientError::NoCredit => f.write_str("too many requests in flight (retryable)"),
            ClientError::SlotBusy(s) => write!(f, "slot {s} is busy or does not exist"),
            ClientError::Pool(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ClientError {}

const TAG_RECV: u64 = 1 << 62;
const TAG_SEND: u64 = 1 << 61;
const TAG_WRITE: u64 = 1 << 60;
const IDX: u64 = 0xffff_ffff;
/// Empty CQ polls between looks at the connection's events.
const CM_CHECK_EVERY: u32 = 256;

/// How a reply arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyPath {
    /// By SEND into a receive buffer.
    Send,
    /// By RDMA WRITE into reply slot `k`.
    Slot(u32),
}

/// One RC connection to an appliance.
///
/// Drop order: `Drop::drop` destroys the QP; then the MRs, the CQ, the PD,
/// the id (which may close the device context), the memory and the channel.
pub struct RdmaClient {
    local_mr: Mr,
    reply_mr: Mr,
    cq: Cq,
    pd: Pd,
    id: CmId,
    region: Region,
    ch: CmChannel,
    qp: Qp,
    opts: ClientOpts,
    server: ServerHello,
    tx_free: FreeList,
    staging_busy: Vec<bool>,
    recv_count: u32,
    rx_off: usize,
    staging_off: usize,
    reply_off: usize,
    outstanding: u32,
    lost: bool,
    /// Receive completions polled while reaping sends, kept for `recv`.
    pending: std::collections::VecDeque<Wc>,
}

impl RdmaClient {
    /// Connects to an appliance's `rdma.listen` address.
    pub fn connect(server: SocketAddr, opts: ClientOpts) -> Result<RdmaClient, ClientError> {
        device_check().map_err(ClientError::NoDevice)?;
        let deadline = Instant::now() + Duration::from_millis(opts.connect_timeout_ms as u64);
        let ch = CmChannel::new().map_err(|e| ClientError::Setup("event channel", e))?;
        let mut id = CmId::new(&ch).map_err(|e| ClientError::Setup("create id", e))?;
        id.resolve_addr(server, opts.connect_timeout_ms as i32)
            .map_err(|e| ClientError::Setup("resolve address", e))?;
        expect(&ch, CmEventKind::AddrResolved, deadline)?;
        id.resolve_route(opts.connect_timeout_ms as i32)
            .map_err(|e| ClientError::Setup("resolve route", e))?;
        expect(&ch, CmEventKind::RouteResolved, deadline)?;
        let ctx = id
            .context()
            .ok_or_else(|| ClientError::Refused("route resolved to no RDMA device".into()))?;
        let pd = Pd::new(ctx).map_err(|e| ClientError::Setup("alloc pd", e))?;
        let a = super::limits::SLOT_ALIGN_BYTES as usize;
        let bs = opts.buffer_size as usize;
        let recv_count = opts.outstanding_max + opts.slots + 4;
        let rx_off = opts.outstanding_max as usize * bs;
        let staging_off = (rx_off + recv_count as usize * bs).div_ceil(a) * a;
        let slots_bytes = opts.slots as usize * opts.slot_size as usize;
        let reply_off = staging_off + slots_bytes;
        // The reply MR spans at least 2 MiB (none is empty), so the region
        // must too, even for a client without slots.
        let mut region = Region::alloc(reply_off + slots_bytes.max(a), HugepageMode::Auto)
            .map_err(ClientError::Pool)?;
        let base = region.as_mut_ptr();
        // SAFETY: the region is the client's and outlives both MRs (field
        // order drops the MRs before the region).
        let local_mr = unsafe { Mr::register(&pd, base, region.len(), Access::Local) }
            .map_err(|e| ClientError::Setup("reg mr", e))?;
        // SAFETY: as above; the reply slots lie inside the region.
        let reply_mr = unsafe {
            Mr::register(
                &pd,
                base.wrapping_add(reply_off),
                slots_bytes.max(a),
                Access::RemoteWrite,
            )
        }
        .map_err(|e| ClientError::Setup("reg mr (reply slots)", e))?;
        let cq = Cq::new(
            ctx,
            (opts.outstanding_max + opts.slots) * 2 + recv_count + 16,
        )
        .map_err(|e| ClientError::Setup("create cq", e))?;
        let caps = QpCaps {
            send_wr: opts.outstanding_max + opts.slots + 4,
            recv_wr: recv_count,
        };
        let qp = id
            .create_qp(&pd, &cq, None, caps)
            .map_err(|e| ClientError::Setup("create qp", e))?;
        for i in 0..recv_count {
            let p = base.wrapping_add(rx_off + i as usize * bs);
            // SAFETY: receive buffer i lies in `local_mr` and is left alone
            // until its completion.
            unsafe { qp.post_recv(TAG_RECV | i as u64, p, opts.buffer_size, local_mr.lkey()) }
                .map_err(|e| ClientError::Setup("post recv", e))?;
        }
        let hello = ClientHello {
            reply_base: base.wrapping_add(reply_off) as u64,
            reply_rkey: reply_mr.rkey(),
            reply_count: opts.slots,
            reply_size: opts.slot_size,
            buffer_size: opts.buffer_size,
        };
        let data = hello.encode();
        id.connect(&ConnParams {
            private_data: &data,
        })
        .map_err(|e| ClientError::Setup("connect", e))?;
        // Memory set-up above may take a while on a slow host: the answer
        // gets its own full timeout.
        let deadline = Instant::now() + Duration::from_millis(opts.connect_timeout_ms as u64);
        let server = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ClientError::Refused(
                    "no answer to the connect request in time".into(),
                ));
            }
            let Some(ev) = ch.next_timeout(left.as_millis().min(100) as i32) else {
                continue;
            };
            match ev.kind() {
                CmEventKind::Established => {
                    break ServerHello::decode(ev.private_data()).ok_or_else(|| {
                        ClientError::Refused("the peer is not a Sluice RDMA appliance".into())
                    })?;
                }
                CmEventKind::Rejected => {
                    let why = String::from_utf8_lossy(ev.private_data())
                        .trim_end_matches('\0')
                        .to_string();
                    return Err(ClientError::Refused(if why.is_empty() {
                        format!("rejected (status {})", ev.status())
                    } else {
                        why
                    }));
                }
                CmEventKind::Error(e) => {
                    return Err(ClientError::Refused(format!(
                        "rdma_cm error event {e}, status {}",
                        ev.status()
                    )));
                }
                _ => {}
            }
        };
        Ok(RdmaClient {
            local_mr,
            reply_mr,
            cq,
            pd,
            id,
            region,
            ch,
            qp,
            opts,
            server,
            tx_free: FreeList::new(opts.outstanding_max),
            staging_busy: vec![false; opts.slots as usize],
            recv_count,
            rx_off,
            staging_off,
            reply_off,
            outstanding: 0,
            lost: false,
            pending: std::collections::VecDeque::with_capacity(recv_count as usize),
        })
    }

    /// What the appliance granted.
    pub fn server(&self) -> ServerHello {
        self.server
    }

    /// Large-request slots usable (granted by both sides).
    pub fn slot_count(&self) -> u32 {
        self.server.slot_count.min(self.opts.slots)
    }

    /// Largest frame for `write_slot`.
    pub fn slot_size(&self) -> usize {
        self.server.slot_size.min(self.opts.slot_size) as usize
    }

    /// Largest frame for `send`.
    pub fn send_max(&self) -> usize {
        self.server.buffer_size.min(self.opts.buffer_size) as usize
    }

    /// Requests in flight.
    pub fn outstanding(&self) -> u32 {
        self.outstanding
    }

    fn credit(&self) -> u32 {
        self.opts.outstanding_max.min(self.server.credits.max(1))
    }

    /// Builds a frame in a registered send buffer with `build` (which
    /// returns its length) and SENDs it.
    pub fn send(&mut self, build: impl FnOnce(&mut [u8]) -> usize) -> Result<(), ClientError> {
        self.check_lost()?;
        if self.outstanding >= self.credit() {
            return Err(ClientError::NoCredit);
        }
        let i = match self.tx_free.alloc() {
            Some(i) => i,
            None => {
                self.reap_sends()?;
                self.tx_free.alloc().ok_or(ClientError::NoCredit)?
            }
        };
        let bs = self.opts.buffer_size as usize;
        let off = i as usize * bs;
        let len = build(&mut self.region.bytes_mut()[off..off + bs]);
        if len > self.send_max() {
            self.tx_free.free(i);
            return Err(ClientError::TooLarge {
                len,
                max: self.send_max(),
            });
        }
        let p = self.region.as_mut_ptr().wrapping_add(off);
        // SAFETY: send buffer i lies in `local_mr` and stays allocated and
        // unwritten until its TAG_SEND completion frees it (`reap_sends`).
        let posted = unsafe {
            self.qp.post_send(
                TAG_SEND | i as u64,
                p,
                len as u32,
                self.local_mr.lkey(),
                SendOp::Send,
            )
        };
        if let Err(e) = posted {
            self.tx_free.free(i);
            return Err(self.lose_on(e));
        }
        self.outstanding += 1;
        Ok(())
    }

    /// Builds a frame in staging buffer `slot` with `build` and RDMA WRITEs
    /// it into the appliance's request slot `slot`. The slot is the
    /// caller's again once the reply for that request has arrived.
    pub fn write_slot(
        &mut self,
        slot: u32,
        build: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<(), ClientError> {
        self.check_lost()?;
        if slot >= self.slot_count() {
            return Err(ClientError::SlotBusy(slot));
        }
        while self.staging_busy[slot as usize] {
            self.reap_sends()?;
        }
        let size = self.slot_size();
        let off = self.staging_off + slot as usize * self.opts.slot_size as usize;
        let len = build(&mut self.region.bytes_mut()[off..off + size]);
        if len > size {
            return Err(ClientError::TooLarge { len, max: size });
        }
        let p = self.region.as_mut_ptr().wrapping_add(off);
        let op = SendOp::WriteImm {
            remote_addr: self.server.slot_base + slot as u64 * self.server.slot_size as u64,
            rkey: self.server.slot_rkey,
            imm: IMM_SLOT | slot,
        };
        // SAFETY: staging buffer `slot` lies in `local_mr` and is marked
        // busy (never rewritten) until its TAG_WRITE completion.
        let posted = unsafe {
            self.qp.post_send(
                TAG_WRITE | slot as u64,
                p,
                len as u32,
                self.local_mr.lkey(),
                op,
            )
        };
        if let Err(e) = posted {
            return Err(self.lose_on(e));
        }
        self.staging_busy[slot as usize] = true;
        self.outstanding += 1;
        Ok(())
    }

    /// Waits for the next reply and hands its bytes, in place, to `f`.
    pub fn recv<R>(
        &mut self,
        timeout: Duration,
        f: impl FnOnce(&[u8], ReplyPath) -> R,
    ) -> Result<R, ClientError> {
        self.check_lost()?;
        let deadline = Instant::now() + timeout;
        let mut empty = 0u32;
        loop {
            let wc = match self.pending.pop_front() {
                Some(w) => w,
                None => {
                    let mut one = [Wc::default(); 1];
                    if self.cq.poll(&mut one) == 0 {
                        empty += 1;
                        if empty.is_multiple_of(CM_CHECK_EVERY) {
                            self.check_events()?;
                            if Instant::now() > deadline {
                                return Err(ClientError::Timeout);
                            }
                        }
                        std::hint::spin_loop();
                        continue;
                    }
                    one[0]
                }
            };
            if !wc.ok {
                return Err(self.lose());
            }
            if wc.wr_id & TAG_RECV == 0 {
                self.sent(wc);
                continue;
            }
            let b = (wc.wr_id & IDX) as u32;
            let (off, len, path) = match wc.kind {
                WcKind::RecvWriteImm => {
                    let k = wc.imm & 0xffff;
                    if wc.imm & IMM_SLOT == 0
                        || k >= self.opts.slots
                        || wc.byte_len > self.opts.slot_size
                    {
                        self.repost(b);
                        continue;
                    }
                    (
                        self.reply_off + k as usize * self.opts.slot_size as usize,
                        wc.byte_len as usize,
                        ReplyPath::Slot(k),
                    )
                }
                _ => (
                    self.rx_off + b as usize * self.opts.buffer_size as usize,
                    (wc.byte_len as usize).min(self.opts.buffer_size as usize),
                    ReplyPath::Send,
                ),
            };
            let r = f(&verbs::region_bytes(&self.region)[off..off + len], path);
            self.repost(b);
            self.outstanding = self.outstanding.saturating_sub(1);
            return Ok(r);
        }
    }

    /// Completions polled but not consumed by `recv`: sends are finished
    /// here; receives are kept for the next call.
    fn requeue(&mut self, wc: Wc) -> Result<(), ClientError> {
        if !wc.ok {
            return Err(self.lose());
        }
        if wc.wr_id & TAG_RECV == 0 {
            self.sent(wc);
        } else {
            self.pending.push_back(wc);
        }
        Ok(())
    }

    fn sent(&mut self, wc: Wc) {
        let i = (wc.wr_id & IDX) as u32;
        if wc.wr_id & TAG_SEND != 0 && i < self.opts.outstanding_max {
            self.tx_free.free(i);
        } else if wc.wr_id & TAG_WRITE != 0
            && let Some(b) = self.staging_busy.get_mut(i as usize)
        {
            *b = false;
        }
    }

    fn reap_sends(&mut self) -> Result<(), ClientError> {
        let mut wcs = [Wc::default(); 8];
        let n = self.cq.poll(&mut wcs);
        for &wc in &wcs[..n] {
            self.requeue(wc)?;
        }
        if n == 0 {
            self.check_events()?;
        }
        Ok(())
    }

    fn repost(&mut self, b: u32) {
        if b >= self.recv_count {
            return;
        }
        let bs = self.opts.buffer_size;
        let p = self
            .region
            .as_mut_ptr()
            .wrapping_add(self.rx_off + b as usize * bs as usize);
        // SAFETY: receive buffer b lies in `local_mr`; its frame was handed
        // back by the caller, so nothing reads it until its next completion.
        if unsafe {
            self.qp
                .post_recv(TAG_RECV | b as u64, p, bs, self.local_mr.lkey())
        }
        .is_err()
        {
            self.lost = true;
        }
    }

    fn check_events(&mut self) -> Result<(), ClientError> {
        while let Some(ev) = self.ch.next() {
            if matches!(ev.kind(), CmEventKind::Disconnected | CmEventKind::Error(_)) {
                drop(ev);
                return Err(self.lose());
            }
        }
        Ok(())
    }

    fn check_lost(&mut self) -> Result<(), ClientError> {
        if self.lost {
            return Err(ClientError::ConnectionLost { outstanding: 0 });
        }
        Ok(())
    }

    /// Marks the connection lost and fails every request in flight.
    fn lose(&mut self) -> ClientError {
        self.lost = true;
        ClientError::ConnectionLost {
            outstanding: std::mem::take(&mut self.outstanding),
        }
    }

    fn lose_on(&mut self, _e: io::Error) -> ClientError {
        self.lose()
    }

    /// Whether the connection was lost.
    pub fn is_lost(&self) -> bool {
        self.lost
    }
}

impl Drop for RdmaClient {
    fn drop(&mut self) {
        if !self.lost {
            self.id.disconnect();
        }
        // The QP goes before the MRs, CQ and PD (field order does the rest).
        self.id.destroy_qp();
        let _ = (&self.reply_mr, &self.pd);
    }
}

fn expect(ch: &CmChannel, want: CmEventKind, deadline: Instant) -> Result<(), ClientError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ClientError::Refused(format!(
                "timed out waiting for {want:?}"
            )));
        }
        if let Some(ev) = ch.next_timeout(left.as_millis().min(100) as i32) {
            let k = ev.kind();
            if k == want {
                return Ok(());
            }
            if let CmEventKind::Error(e) = k {
                return Err(ClientError::Refused(format!(
                    "rdma_cm error event {e} (status {}) waiting for {want:?}",
                    ev.status()
                )));
            }
        }
    }
}
