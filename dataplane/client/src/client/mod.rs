use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::io::{ErrorKind, IoSlice};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant};

use sluice_wire::{BodyRepr, ErrorCode, ExtRepr, Frame, FrameRepr, Kind, TenantKey, flags};

use crate::request::sign;
use crate::tcp::TcpLink;
use crate::{ClientError, NegotiatedSchema, Request, Response};

mod config;
mod follow;
mod stream;

pub use config::{ClientConfig, ClientStats, Endpoints, PollMode, TransportMode};

/// Most outstanding-request slots reserved at connect time.
const PENDING_RESERVE_MAX: usize = 4096;

/// Largest UDP payload over IPv4; one frame travels in one datagram.
pub const DATAGRAM_LEN_MAX: usize = 65507;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Udp,
    Tcp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Response,
    Negotiate,
    Pong,
}

struct Pending {
    expect: Expect,
    key: Option<TenantKey>,
    via: Via,
}

/// A frame off the wire: a datagram in the receive buffer, or a frame the
/// TCP connection read into its own memory.
enum Incoming {
    Udp(usize),
    Tcp(Vec<u8>),
}

type Event = (u64, Result<Frame<Vec<u8>>, ClientError>);

/// An answer from [`Client::recv`]: the request id and its outcome.
pub type Answer = (u64, Result<Response, ClientError>);

/// A Sluice client over one UDP socket, one TCP connection, or both.
///
/// Use [`Client::call`] for one request at a time, or [`Client::send`] and
/// [`Client::recv`] to keep many outstanding (over TCP they are pipelined
/// on the one connection, and answered in order). Not thread-safe by
/// design: one client per thread.
pub struct Client {
    sock: UdpSocket,
    server: SocketAddr,
    udp_server: Option<SocketAddr>,
    tcp: Option<TcpLink>,
    /// Header (and typed tensor data) of frames sent over TCP; grows to
    /// the largest frame sent.
    tcp_buf: Vec<u8>,
    pending_tcp: usize,
    /// Requests failed by a lost connection, handed out first.
    failed: VecDeque<Event>,
    cfg: ClientConfig,
    key: Option<TenantKey>,
    next_id: u64,
    /// Names this client in its signed frames (`sluice-sender`): its
    /// request ids are then one counter the appliance keeps a replay
    /// window for (docs/wire.md, "Replay windows").
    sender_id: u64,
    send_buf: Vec<u8>,
    recv_buf: Vec<u8>,
    pending: HashMap<u64, Pending>,
    // Earliest expiry first; answered ids are skipped lazily.
    expiry: BinaryHeap<Reverse<(Instant, u64)>>,
    // Events that arrived while a synchronous call waited for another id.
    ready: VecDeque<Event>,
    /// Frames of followed request ids (token streams: every frame after
    /// the first shares the OPEN's id), read while waiting for something
    /// else; see follow.rs.
    followed: HashMap<u64, VecDeque<Frame<Vec<u8>>>>,
    schemas: HashMap<(String, u32), (NegotiatedSchema, Instant)>,
    nonblocking: bool,
    stats: ClientStats,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("server", &self.server)
            .field("tcp", &self.tcp.as_ref().map(TcpLink::addr))
            .field("tenant_id", &self.cfg.tenant_id)
            .field("outstanding", &self.pending.len())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Binds an ephemeral local port and connects it to `addr`, so the
    /// kernel drops datagrams from anyone else.
    pub fn connect(addr: impl ToSocketAddrs, cfg: ClientConfig) -> Result<Client, ClientError> {
        let server = resolve(addr)?;
        Client::connect_endpoints(
            Endpoints {
                udp: Some(server),
                tcp: None,
            },
            cfg,
        )
    }

    /// Connects over TCP only (to the server's `io_uring.tcp_listen`).
    pub fn connect_tcp(addr: impl ToSocketAddrs, cfg: ClientConfig) -> Result<Client, ClientError> {
        let server = resolve(addr)?;
        Client::connect_endpoints(
            Endpoints {
                udp: None,
                tcp: Some(server),
            },
            cfg,
        )
    }

    /// Connects to whichever of the server's addresses are given; with both,
    /// [`TransportMode::Auto`] sends a frame that fits a datagram by UDP and
    /// a larger one over TCP. The TCP connection is opened now, and again on
    /// the next send after it is lost.
    pub fn connect_endpoints(ep: Endpoints, cfg: ClientConfig) -> Result<Client, ClientError> {
        let Some(server) = ep.udp.or(ep.tcp) else {
            return Err(std::io::Error::new(ErrorKind::InvalidInput, "no server address").into());
        };
        let local: SocketAddr = if server.is_ipv4() {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let sock = UdpSocket::bind(local)?;
        if let Some(u) = ep.udp {
            sock.connect(u)?;
        }
        let nonblocking = cfg.poll == PollMode::Spin;
        sock.set_nonblocking(nonblocking)?;
        let tcp = match ep.tcp {
            Some(a) => {
                let mut l = TcpLink::new(a);
                l.connect(cfg.timeout)?;
                Some(l)
            }
            None => None,
        };
        let key = cfg.key.as_deref().map(TenantKey::new);
        let reserve = cfg.outstanding_max.clamp(1, PENDING_RESERVE_MAX);
        Ok(Client {
            sock,
            server,
            udp_server: ep.udp,
            tcp,
            tcp_buf: Vec::new(),
            pending_tcp: 0,
            failed: VecDeque::new(),
            key,
            next_id: initial_request_id(),
            sender_id: random_sender_id(),
            send_buf: vec![0; DATAGRAM_LEN_MAX],
            recv_buf: vec![0; 1 << 16],
            // Sized up front so that sending allocates nothing until this
            // many requests are in flight.
            pending: HashMap::with_capacity(reserve),
            expiry: BinaryHeap::with_capacity(reserve),
            ready: VecDeque::new(),
            followed: HashMap::new(),
            schemas: HashMap::new(),
            nonblocking,
            stats: ClientStats::default(),
            cfg,
        })
    }

    /// The server address.
    pub fn server_addr(&self) -> SocketAddr {
        self.server
    }

    /// The local address of the socket.
    pub fn local_addr(&self) -> Result<SocketAddr, ClientError> {
        Ok(self.sock.local_addr()?)
    }

    /// The socket, for tuning options such as buffer sizes. Reading from
    /// it or reconnecting it breaks the client.
    pub fn socket(&self) -> &UdpSocket {
        &self.sock
    }

    /// The TCP connection, while one is open (for tuning, as `socket`).
    pub fn tcp_stream(&self) -> Option<&TcpStream> {
        self.tcp.as_ref().and_then(TcpLink::stream)
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.cfg
    }

    /// Changes the timeout of requests sent from now on.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.cfg.timeout = timeout;
    }

    /// Counters.
    pub fn stats(&self) -> ClientStats {
        let mut s = self.stats;
        if let Some(l) = &self.tcp {
            s.answers_copied += l.copied_frames;
            s.answer_bytes_copied += l.copied_bytes;
            s.answers_recycled += l.recycled_frames;
        }
        s
    }

    /// Number of requests sent whose answer (or timeout, or loss) `recv`
    /// has not handed out yet.
    pub fn outstanding(&self) -> usize {
        self.pending.len() + self.ready.len() + self.failed.len()
    }

    /// Whether answers (or failures of a lost connection) were already
    /// taken off the sockets and wait for `recv`/`try_recv`: a TCP write
    /// that the server pushed back reads answers meanwhile, and an event
    /// loop watching the sockets' readiness would not hear of them.
    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty() || !self.failed.is_empty()
    }

    /// Gives back the memory of an answer the caller is done with
    /// ([`Response::into_frame`], then `into_inner`). The client keeps one
    /// such buffer, the largest, and reads the next large TCP answer that
    /// fits into it: a stream of megabyte answers then lands in memory
    /// already mapped, instead of faulting in fresh pages for each one.
    /// Buffers no larger than the read buffer (64 KiB) are dropped.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if let Some(l) = self.tcp.as_mut() {
            l.recycle(buf);
        }
    }

    /// Sends a request without waiting and returns its request id. The
    /// answer comes from [`Client::recv`] or [`Client::try_recv`]. Writes
    /// into a buffer owned by the client: no allocation besides the
    /// bookkeeping of outstanding ids.
    pub fn send(&mut self, req: &Request<'_>) -> Result<u64, ClientError> {
        self.check_outstanding()?;
        let signed = match req.tenant {
            Some((_, k)) => k.is_some(),
            None => self.key.is_some(),
        };
        let len = req
            .encoded_len_as(signed, self.sender_id)
            .map_err(ClientError::InvalidRequest)?;
        let via = self.choose(len)?;
        let id = self.take_id();
        let key = match req.tenant {
            Some((_, k)) => k.cloned(),
            None => self.key.clone(),
        };
        match via {
            Via::Udp => {
                let len = req
                    .encode_with(
                        &mut self.send_buf,
                        id,
                        self.cfg.tenant_id,
                        self.key.as_ref(),
                        self.cfg.signed_deadline,
                        self.sender_id,
                    )
                    .map_err(datagram_limit)?;
                self.transmit(len)?;
            }
            Via::Tcp => self.transmit_tcp(req, id, len)?,
        }
        self.track(id, Expect::Response, key, via);
        Ok(id)
    }

    /// Waits for the next answer to any outstanding request. Yields
    /// `(request_id, Err(Timeout))` when a request's timeout passes first.
    /// Fails with `NothingPending` when nothing is outstanding, or with `Io`
    /// when the socket fails (for example: connection refused by the host
    /// because nothing listens on the server port).
    pub fn recv(&mut self) -> Result<Answer, ClientError> {
        if let Some(ev) = self.ready.pop_front().or_else(|| self.failed.pop_front()) {
            return Ok(to_response(ev));
        }
        if self.pending.is_empty() {
            return Err(ClientError::NothingPending);
        }
        loop {
            if let Some(ev) = self.next_event(true, None)? {
                return Ok(to_response(ev));
            }
        }
    }

    /// Like [`Client::recv`], but returns `None` at once when no answer is
    /// ready and no timeout has passed.
    pub fn try_recv(&mut self) -> Result<Option<Answer>, ClientError> {
        if let Some(ev) = self.ready.pop_front().or_else(|| self.failed.pop_front()) {
            return Ok(Some(to_response(ev)));
        }
        if self.pending.is_empty() {
            return Ok(None);
        }
        Ok(self.next_event(false, None)?.map(to_response))
    }

    /// Like [`Client::recv`], but gives up after `wait` and returns `None`
    /// (or at once when nothing is outstanding).
    pub fn recv_timeout(&mut self, wait: Duration) -> Result<Option<Answer>, ClientError> {
        if let Some(ev) = self.ready.pop_front().or_else(|| self.failed.pop_front()) {
            return Ok(Some(to_response(ev)));
        }
        if self.pending.is_empty() {
            return Ok(None);
        }
        let until = Instant::now() + wait;
        Ok(self.next_event(true, Some(until))?.map(to_response))
    }

    /// Sends a request and waits for its answer. Retries retryable server
    /// errors up to `retries_max` times, each under a new request id.
    pub fn call(&mut self, req: &Request<'_>) -> Result<Response, ClientError> {
        let mut attempt = 0;
        loop {
            let id = self.send(req)?;
            match self.wait_for(id) {
                Ok(frame) => return Ok(Response::new(frame)),
                Err(e) if e.retryable() && attempt < self.cfg.retries_max => {
                    attempt += 1;
                    self.stats.retries += 1;
                    std::thread::sleep(self.cfg.retry_backoff);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Sends a ping and returns the round-trip time.
    pub fn ping(&mut self) -> Result<Duration, ClientError> {
        let id = self.take_id();
        // A signed negotiation or ping names the sender too.
        let sv = sluice_wire::sender_value(self.sender_id);
        let ext = [ExtRepr::sender(&sv)];
        let repr = FrameRepr {
            kind: Kind::Ping,
            request_id: id,
            tenant_id: self.cfg.tenant_id,
            deadline_us: self.control_deadline_us(),
            extensions: if self.key.is_some() { &ext } else { &[] },
            ..FrameRepr::default()
        };
        let start = Instant::now();
        self.send_control(&repr, Expect::Pong)?;
        self.wait_for(id)?;
        Ok(start.elapsed())
    }

    /// Asks the server for the schema of `subject` (`version_hint` 0 means
    /// the latest). Answers are cached per `(subject, version_hint)` for the
    /// ttl the server gave; a ttl of 0 is never cached.
    pub fn negotiate(
        &mut self,
        subject: &str,
        version_hint: u32,
    ) -> Result<NegotiatedSchema, ClientError> {
        self.negotiate_at(subject, version_hint, Instant::now())
    }

    /// [`Client::negotiate`] with the cache clock given by the caller (tests,
    /// or callers that already read the clock).
    pub fn negotiate_at(
        &mut self,
        subject: &str,
        version_hint: u32,
        now: Instant,
    ) -> Result<NegotiatedSchema, ClientError> {
        let cache_key = (subject.to_owned(), version_hint);
        if let Some((schema, expires)) = self.schemas.get(&cache_key)
            && now < *expires
        {
            self.stats.schema_cache_hits += 1;
            return Ok(schema.clone());
        }
        self.schemas.remove(&cache_key);
        let id = self.take_id();
        // A signed negotiation or ping names the sender too.
        let sv = sluice_wire::sender_value(self.sender_id);
        let ext = [ExtRepr::sender(&sv)];
        let repr = FrameRepr {
            kind: Kind::NegotiateRequest,
            request_id: id,
            tenant_id: self.cfg.tenant_id,
            deadline_us: self.control_deadline_us(),
            extensions: if self.key.is_some() { &ext } else { &[] },
            body: BodyRepr::NegotiateRequest {
                subject,
                version_hint,
            },
            ..FrameRepr::default()
        };
        self.send_control(&repr, Expect::Negotiate)?;
        let frame = self.wait_for(id)?;
        let body = frame.negotiate_response().ok_or(ClientError::Malformed(
            "negotiation answer has no schema body",
        ))?;
        let schema = NegotiatedSchema {
            schema_id: body.schema_id,
            version: body.version,
            ttl: Duration::from_millis(body.ttl_ms.into()),
            schema_type: body.schema_type,
            bytes: body.schema.to_vec(),
        };
        if self.schemas.len() >= self.cfg.schema_cache_max {
            self.schemas.retain(|_, (_, expires)| now < *expires);
        }
        if !schema.ttl.is_zero() && self.schemas.len() < self.cfg.schema_cache_max {
            self.schemas
                .insert(cache_key, (schema.clone(), now + schema.ttl));
        }
        Ok(schema)
    }

    /// Drops every cached schema, forcing renegotiation.
    pub fn clear_schema_cache(&mut self) {
        self.schemas.clear();
    }

    /// A negotiation's or ping's deadline: fresh when signed, none when not.
    fn control_deadline_us(&self) -> u64 {
        match self.key {
            Some(_) => crate::request::signed_deadline_us(0, self.cfg.signed_deadline),
            None => 0,
        }
    }

    /// The sender id this client names in its signed frames.
    pub fn sender_id(&self) -> u64 {
        self.sender_id
    }

    fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        id
    }

    fn check_outstanding(&self) -> Result<(), ClientError> {
        if self.pending.len() >= self.cfg.outstanding_max.max(1) {
            return Err(ClientError::TooManyOutstanding);
        }
        Ok(())
    }

    fn send_control(&mut self, repr: &FrameRepr<'_>, expect: Expect) -> Result<(), ClientError> {
        self.check_outstanding()?;
        let layout = repr.emit(&mut self.send_buf).map_err(datagram_limit)?;
        if let Some(key) = &self.key {
            sign(key, &mut self.send_buf[..layout.frame_len]);
        }
        let via = if self.udp_server.is_some() && self.cfg.transport != TransportMode::Tcp {
            self.transmit(layout.frame_len)?;
            Via::Udp
        } else {
            self.tcp_ready()?;
            let frame = std::mem::take(&mut self.send_buf);
            let r = self.write_tcp(&mut [IoSlice::new(&frame[..layout.frame_len])]);
            self.send_buf = frame;
            r?;
            Via::Tcp
        };
        self.track(repr.request_id, expect, self.key.clone(), via);
        Ok(())
    }

    fn track(&mut self, id: u64, expect: Expect, key: Option<TenantKey>, via: Via) {
        if via == Via::Tcp {
            self.pending_tcp += 1;
        }
        self.pending.insert(id, Pending { expect, key, via });
        self.expiry
            .push(Reverse((Instant::now() + self.cfg.timeout, id)));
        self.stats.sent += 1;
    }

    fn transmit(&mut self, len: usize) -> Result<(), ClientError> {
        let give_up = Instant::now() + self.cfg.timeout;
        loop {
            match self.sock.send(&self.send_buf[..len]) {
                Ok(_) => return Ok(()),
                // Socket buffer full in spin mode: the kernel drains it soon.
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if Instant::now() >= give_up {
                        return Err(ClientError::Timeout);
                    }
                    std::hint::spin_loop();
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Waits for the answer to `id`, parking answers to other ids.
    /// On a socket error the request is forgotten, so that its timeout does
    /// not surface later in `recv`.
    fn wait_for(&mut self, id: u64) -> Result<Frame<Vec<u8>>, ClientError> {
        loop {
            // Answers read while a TCP write waited are parked in `ready`.
            if let Some(k) = self.ready.iter().position(|e| e.0 == id)
                && let Some((_, res)) = self.ready.remove(k)
            {
                return res;
            }
            let ev = self.next_event(true, None).inspect_err(|_| {
                self.forget(id);
            });
            if let Some((got, res)) = ev? {
                if got == id {
                    return res;
                }
                self.ready.push_back((got, res));
            }
        }
    }

    /// One step: a timed-out request, an answer, or (when not blocking, or
    /// after a block that ended without a matching answer) `None`.
    fn next_event(
        &mut self,
        block: bool,
        until: Option<Instant>,
    ) -> Result<Option<Event>, ClientError> {
        loop {
            if let Some(ev) = self.failed.pop_front() {
                return Ok(Some(ev));
            }
            let now = Instant::now();
            let mut next_expiry = None;
            while let Some(&Reverse((at, id))) = self.expiry.peek() {
                if !self.pending.contains_key(&id) {
                    self.expiry.pop();
                    continue;
                }
                if at <= now {
                    self.expiry.pop();
                    self.forget(id);
                    self.stats.timeouts += 1;
                    return Ok(Some((id, Err(ClientError::Timeout))));
                }
                next_expiry = Some(at);
                break;
            }
            if until.is_some_and(|u| u <= now) {
                return Ok(None);
            }
            let wake = match (next_expiry, until) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let got = match self.receive(block, wake.map(|at| at - now))? {
                Some(got) => got,
                // A lost connection's requests wait in `failed`: hand them
                // out now, blocking or not (a caller that polls would
                // otherwise hear of them only at their timeouts).
                None if !self.failed.is_empty() => continue,
                None if block && wake.is_some() => continue,
                None => return Ok(None),
            };
            if let Some(ev) = self.classify(got) {
                return Ok(Some(ev));
            }
            if !block {
                return Ok(None);
            }
        }
    }

    /// Receives one datagram; `None` when none came in time.
    fn receive_udp(
        &mut self,
        block: bool,
        wait: Option<Duration>,
    ) -> Result<Option<usize>, ClientError> {
        let spin = self.cfg.poll == PollMode::Spin || !block;
        if spin != self.nonblocking {
            self.sock.set_nonblocking(spin)?;
            self.nonblocking = spin;
        }
        if !spin {
            // A zero timeout means "forever" to the kernel; wake at least
            // every second so expiries are noticed.
            let wait = wait
                .unwrap_or(Duration::from_secs(1))
                .max(Duration::from_micros(1));
            self.sock.set_read_timeout(Some(wait))?;
        }
        let until = wait.map(|w| Instant::now() + w);
        loop {
            match self.sock.recv(&mut self.recv_buf) {
                Ok(n) => return Ok(Some(n)),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    if !block || !spin {
                        return Ok(None);
                    }
                    if until.is_some_and(|u| Instant::now() >= u) {
                        return Ok(None);
                    }
                    std::hint::spin_loop();
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Matches a received frame to an outstanding request. `None` when it
    /// is ignored (counted in the stats).
    fn classify(&mut self, got: Incoming) -> Option<Event> {
        let (id, res) = {
            let bytes = match &got {
                Incoming::Udp(n) => &self.recv_buf[..*n],
                Incoming::Tcp(v) => &v[..],
            };
            let Ok(frame) = Frame::new_checked(bytes) else {
                self.stats.malformed += 1;
                return None;
            };
            let id = frame.request_id();
            if self.followed.contains_key(&id) {
                // A token stream's frames, the first included (follow.rs).
                let frame = Frame::new_unchecked(bytes.to_vec());
                if self.pending.contains_key(&id) {
                    self.forget(id);
                }
                self.keep_followed(id, frame);
                return None;
            }
            let Some(p) = self.pending.get(&id) else {
                self.stats.stale += 1;
                return None;
            };
            // Error frames are taken even with a bad tag: a server that
            // rejects a wrongly signed request cannot sign with the key the
            // client used, and an error gives a forger nothing but a failed
            // request.
            if frame.flags() & flags::AUTHENTICATED != 0
                && frame.kind() != Kind::Error
                && p.key.as_ref().is_some_and(|key| !key.verify(&frame))
            {
                self.stats.bad_tag += 1;
                return None;
            }
            let res = match (frame.kind(), p.expect) {
                (Kind::Error, _) => Err(server_error(&frame)),
                (Kind::Response, Expect::Response)
                | (Kind::NegotiateResponse, Expect::Negotiate)
                | (Kind::Pong, Expect::Pong) => Ok(()),
                _ => Err(ClientError::Malformed("answer has the wrong frame kind")),
            };
            (id, res)
        };
        // A frame read over TCP is already in its own memory: no copy.
        let res = res.map(|()| match got {
            Incoming::Udp(n) => {
                self.stats.answers_copied += 1;
                self.stats.answer_bytes_copied += n as u64;
                Frame::new_unchecked(self.recv_buf[..n].to_vec())
            }
            Incoming::Tcp(v) => Frame::new_unchecked(v),
        });
        self.forget(id);
        self.stats.received += 1;
        Some((id, res))
    }
}

fn server_error<B: AsRef<[u8]>>(frame: &Frame<B>) -> ClientError {
    match frame.error_body() {
        None => ClientError::Malformed("error frame without a body"),
        Some(body) => match ErrorCode::from_u16(body.code_raw) {
            Some(code) => ClientError::Server {
                code,
                message: body.message.to_owned(),
                retryable: code.retryable(),
            },
            None => ClientError::ServerUnknownCode {
                code_raw: body.code_raw,
                message: body.message.to_owned(),
            },
        },
    }
}

fn to_response(ev: Event) -> Answer {
    (ev.0, ev.1.map(Response::new))
}

fn resolve(addr: impl ToSocketAddrs) -> Result<SocketAddr, ClientError> {
    Ok(addr.to_socket_addrs()?.next().ok_or_else(|| {
        std::io::Error::new(ErrorKind::InvalidInput, "address resolves to nothing")
    })?)
}

fn datagram_limit(e: sluice_wire::Error) -> ClientError {
    match e {
        sluice_wire::Error::BufferTooSmall => {
            ClientError::InvalidRequest(sluice_wire::Error::TooLarge)
        }
        e => ClientError::InvalidRequest(e),
    }
}

/// A random sender id, not 0 (the std hasher's keys come from the OS), for
/// tools that sign frames themselves ([`crate::Request::sender`]).
pub fn random_sender_id() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now()) | 1
}

/// Ids start at a value unlikely to repeat across runs so that late answers
/// meant for an earlier process are not taken for ours, and below 2^63 so
/// that they do not wrap (a sender's ids only grow: docs/wire.md, "Replay
/// windows").
fn initial_request_id() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    let mixed = (t ^ (u64::from(std::process::id()) << 40)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    // Keep clear of 0, which servers may treat as "no id".
    (mixed >> 1) | 1
}
