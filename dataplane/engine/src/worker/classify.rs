//! Steps 2 to 6 of the data path for one frame (parse, authenticate,
//! validate, route, admit) as a pure function, and the answers a worker
//! gives without running a model.

use std::time::Instant;

use sluice_wire::{BodyRepr, ErrorCode, ExtRepr, Frame, FrameRepr, Kind, flags};

use crate::auth::{self, ReplayGuard, RouteFound};
use crate::route::RouteKey;
use crate::schema::SchemaTable;
use crate::tables::{BatchPolicy, Tables, Tenant};
use crate::trace::Sampler;
use crate::transform::TransformRef;
use crate::vocab::{Refusal, msg};

/// Where one frame's stages ended, recorded only for a traced request.
#[derive(Debug, Clone, Copy, Default)]
pub struct Marks {
    /// The worker's sampling rule.
    pub sampler: Sampler,
    /// This frame is traced (a request the sampler chose).
    pub on: bool,
    /// Parsed and authenticated.
    pub auth: Option<Instant>,
    /// Validated.
    pub validate: Option<Instant>,
    /// Routed.
    pub route: Option<Instant>,
}

impl Marks {
    /// Starts a frame: nothing traced yet.
    #[inline]
    pub fn reset(&mut self) {
        self.on = false;
        self.auth = None;
        self.validate = None;
        self.route = None;
    }

    #[inline]
    fn stamp(on: bool, at: &mut Option<Instant>) {
        if on {
            *at = Some(Instant::now());
        }
    }
}

/// What to answer without running a model.
#[derive(Debug, Clone, Copy)]
pub enum Immediate {
    /// An error frame.
    Error(ErrorCode, &'static str),
    /// `response_too_large`, saying the length needed and the buffer's.
    TooLarge {
        /// Response length needed.
        needed_len: usize,
        /// Reply buffer length.
        buffer_len: usize,
    },
    /// An error frame for a refusal whose cause the worker counts.
    Refused(Refusal),
    /// A pong.
    Pong,
    /// A negotiation answer: the index of the schema entry in the tables
    /// of this burst.
    Negotiate(usize),
    /// An error frame for a refused stream frame: its stream header carries
    /// `seq` (the expected one for `stream_sequence`), and END when the
    /// refusal `ended` the stream.
    Stream {
        /// Code.
        code: ErrorCode,
        /// Message.
        message: &'static str,
        /// Seq of the error's stream header.
        seq: u32,
        /// The refusal ended the stream.
        ended: bool,
    },
}

/// The outcome of classifying a frame.
#[derive(Debug, Clone, Copy)]
pub enum Verdict {
    /// Not a Sluice frame: count and drop.
    Drop,
    /// Answer now.
    Reply(Immediate),
    /// The shard lives on a peer: forward.
    Forward {
        /// Shard index.
        shard: usize,
    },
    /// Queue for the shard; run on the model slot.
    Admit {
        /// Shard index.
        shard: usize,
        /// Handler slot.
        slot: usize,
        /// How it may batch with others.
        batch: BatchPolicy,
        /// The schema transform the request goes through first, when its
        /// route or model accepts another version (docs/transforms.md).
        transform: Option<TransformRef>,
    },
}

fn refused(r: Refusal) -> Verdict {
    Verdict::Reply(Immediate::Refused(r))
}

/// The largest frame one UDP datagram over IPv4 carries (65,535 - 20 - 8).
pub const DATAGRAM_FRAME_MAX: usize = 65_507;

/// The answer to a frame larger than a datagram, sent over one.
pub const DATAGRAM_TOO_SMALL: &str = "frame larger than a UDP datagram (65,507 bytes): send it over TCP (io_uring tcp_listen) or RDMA";

/// Steps 2 to 6 of the data path for one frame: parse, authenticate,
/// validate, route, admit. No I/O, no allocation; the only state it
/// changes is the worker's replay table (`None`: the tag is checked, but
/// not the freshness rule nor replays, for benchmarks).
pub fn classify_frame(
    bytes: &[u8],
    truncated: bool,
    t: &Tables,
    draining: bool,
    now_us: u64,
    replay: Option<&mut ReplayGuard>,
) -> Verdict {
    classify_traced(
        bytes,
        truncated,
        t,
        draining,
        now_us,
        replay,
        &mut Marks::default(),
    )
}

/// [`classify_frame`], deciding whether a request is traced (`marks.on`)
/// and, when it is, stamping where its stages ended.
pub fn classify_traced(
    bytes: &[u8],
    truncated: bool,
    t: &Tables,
    draining: bool,
    now_us: u64,
    replay: Option<&mut ReplayGuard>,
    marks: &mut Marks,
) -> Verdict {
    use Immediate::Error as E;
    if !Frame::new_unchecked(bytes).has_magic() {
        return Verdict::Drop;
    }
    // A frame that declares more bytes than one UDP datagram can carry
    // never arrives whole over UDP or DPDK: say where it can travel.
    let declared = {
        let f = Frame::new_unchecked(bytes);
        f.check_len()
            .map_or(0, |()| f.header_len() + f.payload_len())
    };
    if declared > DATAGRAM_FRAME_MAX && declared > bytes.len() {
        return Verdict::Reply(E(ErrorCode::FrameTooLarge, DATAGRAM_TOO_SMALL));
    }
    if truncated {
        return Verdict::Reply(E(
            ErrorCode::FrameTooLarge,
            "frame larger than the receive buffer",
        ));
    }
    let frame = match Frame::new_checked(bytes) {
        Ok(f) => f,
        Err(e) => return Verdict::Reply(E(e.code(), e.as_str())),
    };
    match frame.kind() {
        Kind::Request => {}
        // A ping is never checked: its pong says only that we are up.
        Kind::Ping => return Verdict::Reply(Immediate::Pong),
        Kind::NegotiateRequest => return negotiate(&frame, t, now_us, replay),
        _ => {
            return Verdict::Reply(E(
                ErrorCode::UnsupportedKind,
                "this endpoint accepts requests, pings and negotiations",
            ));
        }
    }
    // The one test an untraced request pays.
    marks.on = marks.sampler.decide(frame.trace_flags(), || frame.trace());
    if draining {
        return Verdict::Reply(E(ErrorCode::ShuttingDown, "appliance is shutting down"));
    }
    let rid = frame.request_id();
    probes_sys::parse(|| (rid, frame.tenant_id(), frame.frame_len() as u32));
    let tenant = match auth::authenticate(&frame, t, now_us, replay) {
        Ok(tn) => tn,
        Err(r) => {
            probes_sys::auth(|| (rid, frame.tenant_id(), 0));
            return refused(r);
        }
    };
    probes_sys::auth(|| (rid, frame.tenant_id(), 1));
    Marks::stamp(marks.on, &mut marks.auth);
    if frame.model_version().is_empty() {
        return Verdict::Reply(E(ErrorCode::ModelVersionRequired, "model version required"));
    }
    if frame.deadline_us() != 0 && now_us > frame.deadline_us() {
        return Verdict::Reply(E(ErrorCode::DeadlineExceeded, msg::EXPIRED));
    }
    // The tenant's lists come before any lookup that would tell it whether
    // a model, adapter or schema exists.
    if let Err(r) = auth::model_allowed(tenant, frame.model())
        .and_then(|()| auth::adapter_allowed(tenant, frame.adapter()))
    {
        return refused(r);
    }
    // Validation comes before routing: routes may look into the section.
    let mut json = None;
    let mut named = None;
    if frame.schema_id() != 0 {
        let entry = match t.schemas.lookup(&frame) {
            Ok(e) => e,
            Err(r) => return Verdict::Reply(E(r.code, r.message)),
        };
        if let Err(r) = auth::schema_allowed(tenant, &entry.subject) {
            return refused(r);
        }
        match SchemaTable::validate_with(entry, &frame) {
            Ok(j) => json = j,
            Err(r) => return Verdict::Reply(E(r.code, r.message)),
        }
        named = Some((entry.subject.as_str(), entry.version));
    }
    probes_sys::validate(|| (rid, frame.schema_id()));
    Marks::stamp(marks.on, &mut marks.validate);
    let v = route(&frame, t, tenant, json, named);
    probes_sys::route(|| {
        let shard = match v {
            Verdict::Admit { shard, .. } | Verdict::Forward { shard } => shard as u32,
            _ => u32::from(u16::MAX),
        };
        (rid, shard)
    });
    Marks::stamp(marks.on, &mut marks.route);
    v
}

/// Steps 5 and 6: resolve the model, route among the routes the tenant may
/// use, then forward or admit.
fn route(
    frame: &Frame<&[u8]>,
    t: &Tables,
    tenant: Option<&Tenant>,
    json: Option<&[u8]>,
    named: Option<(&str, u32)>,
) -> Verdict {
    use Immediate::Error as E;
    let tenant_name = tenant.map_or("", |tn| tn.name.as_str());
    // One version rule (docs/wire.md, "Model versions"): the request names an
    // exact version or an alias, resolved first; routes match the resolved
    // full version. A request that resolves to no loaded version is
    // unknown_model unless a route sends it to a remote shard.
    let model = t.models.resolve(frame.model(), frame.model_version());
    let key = RouteKey {
        model: frame.model(),
        version: model.map_or(frame.model_version(), |m| m.version.as_str()),
        adapter: frame.adapter(),
        intent: frame.intent(),
        tenant: tenant_name,
        json,
    };
    let (route_index, route) = match auth::route_for(t, &key, tenant) {
        RouteFound::Route(r) => (r.index, r),
        found => {
            let (code, message) = match model {
                None => (ErrorCode::UnknownModel, msg::UNKNOWN_MODEL),
                Some(_) => (ErrorCode::NoRoute, msg::NO_ROUTE),
            };
            return match found {
                RouteFound::Hidden => refused(Refusal::with(
                    crate::vocab::Cause::TenantRoute,
                    code,
                    message,
                )),
                _ => Verdict::Reply(E(code, message)),
            };
        }
    };
    let shard = route.shard;
    if !t.shards[shard].local {
        if frame.flags() & flags::FORWARDED != 0 {
            return Verdict::Reply(E(
                ErrorCode::NoRouteToShard,
                "no route to shard (already forwarded once)",
            ));
        }
        return Verdict::Forward { shard };
    }
    let Some(model) = model else {
        return Verdict::Reply(E(ErrorCode::UnknownModel, msg::UNKNOWN_MODEL));
    };
    if !frame.adapter().is_empty() && !model.has_adapter(frame.adapter()) {
        return Verdict::Reply(E(ErrorCode::UnknownAdapter, msg::UNKNOWN_ADAPTER));
    }
    // `accepts`: the request's validated version against the one its route
    // or model takes (an empty table costs one branch).
    let transform = if t.transforms.is_empty() {
        None
    } else {
        match t.transforms.decide(route_index, Some(model.slot), named) {
            Ok(x) => x,
            Err(r) => return Verdict::Reply(E(r.code, r.message)),
        }
    };
    Verdict::Admit {
        shard,
        slot: model.slot,
        batch: BatchPolicy::of(model, &t.shards[shard]),
        transform,
    }
}

/// A negotiation: authenticated like a request (when tenants are on), then
/// answered only for a subject in the tenant's list; a subject outside it
/// is answered as an unknown one.
fn negotiate(
    frame: &Frame<&[u8]>,
    t: &Tables,
    now_us: u64,
    replay: Option<&mut ReplayGuard>,
) -> Verdict {
    let tenant = match auth::authenticate(frame, t, now_us, replay) {
        Ok(tn) => tn,
        Err(r) => return refused(r),
    };
    let unknown = Verdict::Reply(Immediate::Error(
        ErrorCode::UnknownSubject,
        msg::UNKNOWN_SUBJECT,
    ));
    // The checked parse validated the body.
    let Some(n) = frame.negotiate_request() else {
        return unknown;
    };
    if let Err(r) = auth::subject_allowed(tenant, n.subject) {
        return refused(r);
    }
    match t.schemas.negotiate_index(n.subject, n.version_hint) {
        Some(i) => Verdict::Reply(Immediate::Negotiate(i)),
        None => unknown,
    }
}

/// Writes an immediate answer to `req` into `tx`. `None` when even the error
/// frame cannot be built (cannot happen with buffers of at least 2 KiB).
pub(super) fn build_immediate(
    req: &[u8],
    tx: &mut [u8],
    r: &Immediate,
    t: &Tables,
) -> Option<usize> {
    // The request may be malformed: echo only the fields that are readable.
    let raw = Frame::new_unchecked(req);
    let rid = raw.try_request_id().unwrap_or(0);
    let tenant = raw.try_tenant_id().unwrap_or(0);
    let checked = Frame::new_checked(req).ok();
    let trace = checked.as_ref().map(|f| f.trace()).unwrap_or_default();
    let answer = |kind| FrameRepr::answer(kind, rid, tenant, trace);
    let mut text = MessageBuf::default();
    // An error answering a stream frame carries its stream header, so the
    // client knows which stream (and, for `stream_sequence`, which seq).
    let stream = checked.as_ref().and_then(|f| f.stream()).map(|h| {
        let (seq, ended) = match *r {
            Immediate::Stream { seq, ended, .. } => (seq, ended),
            _ => (h.seq, false),
        };
        crate::streams::error_header(h, seq, ended).to_bytes()
    });
    let ext = stream.as_ref().map(|v| [ExtRepr::stream(v)]);
    let extensions: &[ExtRepr<'_>] = ext.as_ref().map_or(&[], |e| &e[..]);
    let error = |code, message| FrameRepr {
        body: BodyRepr::Error { code, message },
        extensions,
        ..answer(Kind::Error)
    };
    let repr = match *r {
        Immediate::Error(code, message) => error(code, message),
        Immediate::Stream { code, message, .. } => error(code, message),
        Immediate::Refused(r) => error(r.code, r.message),
        Immediate::TooLarge {
            needed_len,
            buffer_len,
        } => {
            use core::fmt::Write;
            // A message longer than the limit cannot happen (two numbers);
            // were it cut, the frame still carries the code.
            let _ = write!(
                text,
                "response needs {needed_len} bytes; the reply buffer holds {buffer_len}"
            );
            FrameRepr {
                body: BodyRepr::Error {
                    code: ErrorCode::ResponseTooLarge,
                    message: text.as_str(),
                },
                ..answer(Kind::Error)
            }
        }
        Immediate::Pong => answer(Kind::Pong),
        Immediate::Negotiate(index) => {
            match t.schemas.entry(index) {
                Some(e) => FrameRepr {
                    schema_id: e.id,
                    schema_version: e.version,
                    body: BodyRepr::NegotiateResponse {
                        schema_id: e.id,
                        version: e.version,
                        ttl_ms: t.schemas.ttl_ms,
                        schema_type: e.schema_type,
                        schema: &e.text,
                    },
                    ..answer(Kind::NegotiateResponse)
                },
                // Classified against the same tables: cannot happen.
                None => error(ErrorCode::Internal, "negotiation lost its schema"),
            }
        }
    };
    repr.emit(tx).ok().map(|l| l.frame_len)
}

/// A message formatted on the stack (error frames carry at most 256 bytes).
struct MessageBuf {
    buf: [u8; sluice_wire::limits::ERROR_MESSAGE_LEN_MAX],
    len: usize,
}

impl Default for MessageBuf {
    fn default() -> Self {
        MessageBuf {
            buf: [0; sluice_wire::limits::ERROR_MESSAGE_LEN_MAX],
            len: 0,
        }
    }
}

impl MessageBuf {
    fn as_str(&self) -> &str {
        // Only whole `&str`s are written (see write_str), so this holds.
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl core::fmt::Write for MessageBuf {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let end = self.len + s.len();
        if end > self.buf.len() {
            return Err(core::fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}
