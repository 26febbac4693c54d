//! NATS request-reply baseline for Sluice (perf/nats): the same request
//! frames, the same ONNX model run in place by `sluice-infer`, but carried
//! by nats-server instead of Sluice's own transport.
//!
//! - [`proto`]: a minimal synchronous NATS protocol client.
//! - [`Responder`]: subscribes to a subject, checks each frame (parse, HMAC
//!   tag), runs the model into its reply buffer and publishes the answer.
//! - [`NatsTransport`]: the requester side, a `sluice_perf` driver
//!   transport, so latency and throughput come from the same closed-loop
//!   HDR loop as `loadgen`.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod proto;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use sluice_infer::{OrtModel, RunStats};
use sluice_perf::driver::{Outcome, Transport};
use sluice_perf::mix::Mix;
use sluice_wire::{ErrorCode, Frame, FrameRepr, Kind, TenantKey};

use proto::{Conn, NatsError};

/// Offset of the request id in a Sluice frame.
const ID_OFFSET: usize = 16;
/// Alignment of the staging buffer the request is copied into: the wire
/// format's tensor alignment, which ONNX Runtime needs for in-place reads.
pub const STAGE_ALIGN: usize = 64;
/// Largest reply written, in bytes: what a raised max_payload carries here
/// (the 1 MiB tensor comparison of perf/tcp.sh answers with 1 MiB and more).
pub const REPLY_BYTES_MAX: usize = proto::PAYLOAD_BYTES_MAX;

/// Counters of a responder.
#[derive(Debug, Default, Clone)]
pub struct ResponderStats {
    /// Requests answered with a response.
    pub ok: u64,
    /// Requests answered with an error frame.
    pub errors: u64,
    /// Messages that were not frames at all (dropped).
    pub malformed: u64,
    /// The model's own counters (in-place bytes, copies, rejects).
    pub run: RunStats,
}

/// A 64-byte aligned byte buffer made of a larger Vec.
struct Aligned {
    raw: Vec<u8>,
    off: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let raw = vec![0u8; len + STAGE_ALIGN];
        let off = raw.as_ptr().align_offset(STAGE_ALIGN);
        Aligned { raw, off, len }
    }
    fn get(&mut self, n: usize) -> &mut [u8] {
        if n > self.len {
            *self = Aligned::new(n.next_power_of_two());
        }
        &mut self.raw[self.off..self.off + n]
    }
}

/// A NATS responder running one model.
pub struct Responder {
    conn: Conn,
    model: OrtModel,
    keys: HashMap<u32, TenantKey>,
    stage: Aligned,
    tx: Aligned,
    /// What it did so far.
    pub stats: ResponderStats,
}

impl Responder {
    /// Connects to nats-server at `addr` and subscribes to `subject` in
    /// queue group `queue`. `keys` are the tenants' HMAC keys: a frame whose
    /// tenant is unknown or whose tag is wrong is answered unauthenticated,
    /// as the engine does.
    pub fn new(
        addr: SocketAddr,
        subject: &str,
        queue: &str,
        model: OrtModel,
        keys: HashMap<u32, TenantKey>,
    ) -> Result<Responder, NatsError> {
        let mut conn = Conn::connect(addr, "sluice-nats-responder")?;
        conn.subscribe(subject, queue, 1)?;
        // Round trip so that the subscription is in place on return.
        conn.publish("_sluice.flush", "", b"")?;
        Ok(Responder {
            conn,
            model,
            keys,
            stage: Aligned::new(64 << 10),
            tx: Aligned::new(REPLY_BYTES_MAX),
            stats: ResponderStats::default(),
        })
    }

    /// Serves one message if one arrives within `wait` (None: only if one
    /// is there now). Returns whether one was served.
    pub fn serve_one(&mut self, wait: Option<Duration>) -> Result<bool, NatsError> {
        let Some(msg) = self.conn.next_msg(wait)? else {
            return Ok(false);
        };
        let n = msg.payload.len();
        // The payload sits at an arbitrary offset of the TCP stream: one
        // copy into an aligned buffer (Sluice receives in place instead).
        let stage = self.stage.get(n);
        stage.copy_from_slice(&self.conn.buf()[msg.payload.clone()]);
        let stage: &[u8] = stage;
        let tx = self.tx.get(REPLY_BYTES_MAX);
        let frame = match Frame::new_checked(stage) {
            Ok(f) if f.kind() == Kind::Request => f,
            Ok(f) => {
                let len =
                    FrameRepr::error_for(&f, ErrorCode::UnsupportedKind, "not a request").emit(tx);
                self.stats.errors += 1;
                return self.answer(msg.reply, len.map(|l| l.frame_len));
            }
            Err(_) => {
                self.stats.malformed += 1;
                return Ok(true);
            }
        };
        let authentic = self
            .keys
            .get(&frame.tenant_id())
            .is_some_and(|k| k.verify(&frame));
        let out = if !authentic {
            Err((ErrorCode::Unauthenticated, "bad tenant or tag"))
        } else {
            let adapter = Some(frame.adapter()).filter(|a| !a.is_empty());
            self.model
                .run_into(&frame, adapter, tx, &mut self.stats.run)
                .map_err(|r| (r.code, r.message))
        };
        let len = match out {
            Ok(len) => {
                self.stats.ok += 1;
                Ok(len)
            }
            Err((code, message)) => {
                self.stats.errors += 1;
                FrameRepr::error_for(&frame, code, message)
                    .emit(tx)
                    .map(|l| l.frame_len)
            }
        };
        self.answer(msg.reply, len)
    }

    fn answer(
        &mut self,
        reply: std::ops::Range<usize>,
        len: Result<usize, sluice_wire::Error>,
    ) -> Result<bool, NatsError> {
        let len = len.map_err(|e| NatsError::Protocol(format!("reply frame: {e}")))?;
        let tx = self.tx.get(REPLY_BYTES_MAX);
        self.conn.respond(reply, &tx[..len])?;
        Ok(true)
    }
}

/// The requester side: mix requests published to a subject, answers on a
/// private inbox, matched by request id.
pub struct NatsTransport<'m> {
    conn: Conn,
    subject: String,
    inbox: String,
    mix: &'m Mix,
    buf: Vec<u8>,
    next_id: u64,
    pending: HashMap<u64, ()>,
    expiry: VecDeque<(u64, Instant)>,
    timeout: Duration,
}

impl<'m> NatsTransport<'m> {
    /// Connects and subscribes to a private inbox.
    pub fn connect(
        addr: SocketAddr,
        subject: &str,
        mix: &'m Mix,
        timeout: Duration,
    ) -> Result<NatsTransport<'m>, NatsError> {
        let mut conn = Conn::connect(addr, "sluice-nats-requester")?;
        let inbox = format!("_INBOX.sluice-perf.{}", std::process::id());
        conn.subscribe(&inbox, "", 1)?;
        Ok(NatsTransport {
            conn,
            subject: subject.to_string(),
            inbox,
            mix,
            buf: vec![0u8; REPLY_BYTES_MAX],
            next_id: 1,
            pending: HashMap::new(),
            expiry: VecDeque::new(),
            timeout,
        })
    }
}

impl Transport for NatsTransport<'_> {
    fn send(&mut self, entry: usize) -> std::io::Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        // Encoded per send, as the Sluice client does (signed, fresh deadline).
        let len = self.mix.entries[entry]
            .request()
            .encode(&mut self.buf, id, 0, None)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        self.conn
            .publish(&self.subject, &self.inbox, &self.buf[..len])
            .map_err(io)?;
        self.pending.insert(id, ());
        self.expiry.push_back((id, Instant::now() + self.timeout));
        Ok(id)
    }

    fn poll(&mut self, wait: Option<Duration>) -> std::io::Result<Option<(u64, Outcome)>> {
        let now = Instant::now();
        while let Some(&(id, at)) = self.expiry.front() {
            if !self.pending.contains_key(&id) {
                self.expiry.pop_front();
                continue;
            }
            if at <= now {
                self.expiry.pop_front();
                self.pending.remove(&id);
                return Ok(Some((id, Outcome::Timeout)));
            }
            break;
        }
        let Some(msg) = self.conn.next_msg(wait).map_err(io)? else {
            return Ok(None);
        };
        let body = &self.conn.buf()[msg.payload];
        let Some(idb) = body.get(ID_OFFSET..ID_OFFSET + 8) else {
            return Ok(None);
        };
        let mut id = [0u8; 8];
        id.copy_from_slice(idb);
        let id = u64::from_le_bytes(id);
        if self.pending.remove(&id).is_none() {
            return Ok(None); // late answer to a timed-out request
        }
        let outcome = match Frame::new_checked(body) {
            Ok(f) if f.kind() == Kind::Response => Outcome::Ok,
            Ok(f) => match f.error_body() {
                Some(e) => Outcome::Server(e.code_raw),
                None => Outcome::Malformed,
            },
            Err(_) => Outcome::Malformed,
        };
        Ok(Some((id, outcome)))
    }

    fn outstanding(&self) -> usize {
        self.pending.len()
    }
}

fn io(e: NatsError) -> std::io::Error {
    match e {
        NatsError::Io(e) => e,
        other => std::io::Error::other(other.to_string()),
    }
}
