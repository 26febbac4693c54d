//! A tiny Sluice server for tests: real UDP on 127.0.0.1, frames parsed and
//! built with `sluice_wire`. What it does depends on the request's model name.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use sluice_wire::{
    BodyRepr, ErrorCode, ExtRepr, Frame, FrameRepr, Kind, SchemaType, TenantKey, TensorRepr, flags,
};

/// Tenant the responder knows, and its key.
pub const TENANT_ID: u32 = 7;
pub const KEY: &[u8] = b"test-tenant-key-0123456789";

pub struct Responder {
    pub addr: SocketAddr,
    /// Schema negotiations answered (not served from a client cache).
    pub negotiations: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Responder {
    pub fn start() -> Responder {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let addr = sock.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let negotiations = Arc::new(AtomicU32::new(0));
        let (s, n) = (stop.clone(), negotiations.clone());
        let thread = std::thread::spawn(move || serve(sock, s, n));
        Responder {
            addr,
            negotiations,
            stop,
            thread: Some(thread),
        }
    }
}

struct State {
    key: TenantKey,
    out: Vec<u8>,
    busy_left: u32,
    late: Option<(u64, SocketAddr)>,
    batch: Vec<(Vec<u8>, SocketAddr)>,
}

fn serve(sock: UdpSocket, stop: Arc<AtomicBool>, negotiations: Arc<AtomicU32>) {
    let mut buf = vec![0u8; 1 << 16];
    let mut st = State {
        key: TenantKey::new(KEY),
        out: vec![0u8; 1 << 16],
        busy_left: 0,
        late: None,
        batch: Vec::new(),
    };
    while !stop.load(Ordering::Relaxed) {
        let (n, from) = match sock.recv_from(&mut buf) {
            Ok(x) => x,
            Err(_) => continue,
        };
        handle(&sock, &mut st, &buf[..n], from, &negotiations);
    }
}

fn reply(sock: &UdpSocket, st: &mut State, repr: &FrameRepr<'_>, to: SocketAddr) {
    let mut repr = *repr;
    repr.flags |= flags::AUTHENTICATED;
    let len = repr.emit(&mut st.out).unwrap().frame_len;
    let mut f = Frame::new_unchecked(&mut st.out[..len]);
    st.key.sign(&mut f);
    sock.send_to(&st.out[..len], to).unwrap();
}

fn error(
    sock: &UdpSocket,
    st: &mut State,
    req: &Frame<&[u8]>,
    code: ErrorCode,
    msg: &str,
    to: SocketAddr,
) {
    let repr = FrameRepr::error_for(req, code, msg);
    reply(sock, st, &repr, to);
}

fn handle(
    sock: &UdpSocket,
    st: &mut State,
    bytes: &[u8],
    from: SocketAddr,
    negotiations: &AtomicU32,
) {
    let req = match Frame::new_checked(bytes) {
        Ok(f) => f,
        Err(e) => {
            // Unparseable: answer like a server would, with id 0.
            let repr = FrameRepr {
                kind: Kind::Error,
                body: BodyRepr::Error {
                    code: e.code(),
                    message: e.as_str(),
                },
                ..FrameRepr::default()
            };
            reply(sock, st, &repr, from);
            return;
        }
    };
    if req.tenant_id() != TENANT_ID
        || req.flags() & flags::AUTHENTICATED == 0
        || !st.key.verify(&req)
    {
        // Unsigned: the responder cannot know the key the client used.
        let repr = FrameRepr::error_for(&req, ErrorCode::Unauthenticated, "bad tenant or tag");
        let len = repr.emit(&mut st.out).unwrap().frame_len;
        sock.send_to(&st.out[..len], from).unwrap();
        return;
    }
    // The appliance's freshness rule (docs/wire.md, "What the appliance
    // checks"): a signed request or negotiation needs a deadline within
    // 10 s; the deadline is then echoed (requests: as an extension).
    if matches!(req.kind(), Kind::Request | Kind::NegotiateRequest) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as u64;
        let d = req.deadline_us();
        let far = d > now + 10_000_000;
        // A deadline in the past is the server's deadline_exceeded; the
        // tests that send one ask for it.
        if d == 0 || far {
            error(sock, st, &req, ErrorCode::Stale, "stale", from);
            return;
        }
    }
    // A request that timed out earlier is answered late, before this one.
    if let Some((id, to)) = st.late.take() {
        let repr = FrameRepr {
            kind: Kind::Response,
            request_id: id,
            tenant_id: TENANT_ID,
            ..FrameRepr::default()
        };
        reply(sock, st, &repr, to);
    }
    match req.kind() {
        Kind::Ping => {
            let repr = FrameRepr {
                kind: Kind::Pong,
                request_id: req.request_id(),
                tenant_id: TENANT_ID,
                ..FrameRepr::default()
            };
            reply(sock, st, &repr, from);
        }
        Kind::NegotiateRequest => {
            let body = req.negotiate_request().unwrap();
            let ttl_ms = match body.subject {
                "short" => 1000,
                "nocache" => 0,
                "long" => 3_600_000,
                _ => {
                    error(
                        sock,
                        st,
                        &req,
                        ErrorCode::UnknownSubject,
                        "no such subject",
                        from,
                    );
                    return;
                }
            };
            let n = negotiations.fetch_add(1, Ordering::Relaxed) + 1;
            let schema = format!(
                "{{\"subject\":\"{}\",\"hint\":{}}}",
                body.subject, body.version_hint
            );
            let repr = FrameRepr {
                kind: Kind::NegotiateResponse,
                request_id: req.request_id(),
                tenant_id: TENANT_ID,
                body: BodyRepr::NegotiateResponse {
                    schema_id: 100 + n,
                    version: body.version_hint.max(1),
                    ttl_ms,
                    schema_type: SchemaType::Json,
                    schema: schema.as_bytes(),
                },
                ..FrameRepr::default()
            };
            reply(sock, st, &repr, from);
        }
        Kind::Request => request(sock, st, &req, from),
        _ => error(
            sock,
            st,
            &req,
            ErrorCode::UnsupportedKind,
            "not a request",
            from,
        ),
    }
}

fn request(sock: &UdpSocket, st: &mut State, req: &Frame<&[u8]>, from: SocketAddr) {
    let id = req.request_id();
    match req.model() {
        "echo" => echo(sock, st, req, from),
        "error" => {
            let v = req.extension("code").unwrap_or(&[1, 0]);
            let code = u16::from_le_bytes([v[0], v[1]]);
            match ErrorCode::from_u16(code) {
                Some(c) => error(sock, st, req, c, &format!("forced {}", c.as_str()), from),
                None => {
                    // Unknown to this build: write the frame, then patch the code.
                    let repr = FrameRepr::error_for(req, ErrorCode::Internal, "from the future");
                    let len = repr.emit(&mut st.out).unwrap().frame_len;
                    let hl = Frame::new_unchecked(&st.out[..len]).header_len();
                    st.out[hl..hl + 2].copy_from_slice(&code.to_le_bytes());
                    sock.send_to(&st.out[..len], from).unwrap();
                }
            }
        }
        "busy-once" => {
            // Busy for `busy` (extension, one byte) requests in a row, then echo.
            if st.busy_left == 0 {
                st.busy_left = req.extension("busy").map_or(1, |v| v[0] as u32) + 1;
            }
            st.busy_left -= 1;
            if st.busy_left > 0 {
                error(sock, st, req, ErrorCode::Busy, "queue full", from);
            } else {
                echo(sock, st, req, from);
            }
        }
        "silent" => {}
        "late" => st.late = Some((id, from)),
        "noise" => {
            // A foreign id and a garbled datagram before the real answer.
            let repr = FrameRepr {
                kind: Kind::Response,
                request_id: id ^ 0xdead_beef,
                tenant_id: TENANT_ID,
                ..FrameRepr::default()
            };
            reply(sock, st, &repr, from);
            sock.send_to(b"SLCE but not a frame", from).unwrap();
            echo(sock, st, req, from);
        }
        "forged" => {
            let repr = FrameRepr {
                kind: Kind::Response,
                request_id: id,
                tenant_id: TENANT_ID,
                flags: flags::AUTHENTICATED,
                ..FrameRepr::default()
            };
            let len = repr.emit(&mut st.out).unwrap().frame_len;
            let mut f = Frame::new_unchecked(&mut st.out[..len]);
            TenantKey::new(b"someone else").sign(&mut f);
            sock.send_to(&st.out[..len], from).unwrap();
            // Then the genuine answer.
            echo(sock, st, req, from);
        }
        "wrongkind" => {
            let repr = FrameRepr {
                kind: Kind::Pong,
                request_id: id,
                tenant_id: TENANT_ID,
                ..FrameRepr::default()
            };
            reply(sock, st, &repr, from);
        }
        "reverse" => {
            // Hold `n` requests, then answer them newest first.
            let n = req.extension("n").map_or(1, |v| v[0] as usize);
            st.batch.push((req.as_bytes().to_vec(), from));
            if st.batch.len() >= n {
                let batch = std::mem::take(&mut st.batch);
                for (bytes, to) in batch.iter().rev() {
                    let f = Frame::new_checked(bytes.as_slice()).unwrap();
                    echo(sock, st, &f, *to);
                }
            }
        }
        _ => error(
            sock,
            st,
            req,
            ErrorCode::UnknownModel,
            "no such model",
            from,
        ),
    }
}

/// Answers with the request's tensors, and headers reported as extensions.
fn echo(sock: &UdpSocket, st: &mut State, req: &Frame<&[u8]>, from: SocketAddr) {
    let descs: Vec<_> = req.tensors().collect();
    let dims: Vec<Vec<u64>> = descs.iter().map(|d| d.dims().to_vec()).collect();
    let tensors: Vec<TensorRepr<'_>> = descs
        .iter()
        .zip(&dims)
        .map(|(d, dims)| TensorRepr {
            name: d.name,
            dtype: d.dtype,
            dims,
            data: Some(req.tensor_data(d)),
        })
        .collect();
    let deadline = req.deadline_us().to_le_bytes();
    let schema = [
        req.schema_id().to_le_bytes(),
        req.schema_version().to_le_bytes(),
    ]
    .concat();
    let tokens = req.token_count().to_le_bytes();
    let sender = req.sender_id().unwrap_or(0).to_le_bytes();
    let mut exts = vec![
        ExtRepr {
            key: "sender_id",
            value: &sender,
        },
        ExtRepr {
            key: "deadline_us",
            value: &deadline,
        },
        ExtRepr {
            key: "schema",
            value: &schema,
        },
        ExtRepr {
            key: "tokens",
            value: &tokens,
        },
        ExtRepr {
            key: "intent",
            value: req.intent().as_bytes(),
        },
    ];
    exts.extend(req.extensions().map(|e| ExtRepr {
        key: e.key,
        value: e.value,
    }));
    let repr = FrameRepr {
        kind: Kind::Response,
        request_id: req.request_id(),
        tenant_id: TENANT_ID,
        trace: req.trace(),
        token_count: req.token_count(),
        schema_id: req.schema_id(),
        schema_version: req.schema_version(),
        model: req.model(),
        model_version: req.model_version(),
        adapter: req.adapter(),
        extensions: &exts,
        tensors: &tensors,
        ..FrameRepr::default()
    };
    reply(sock, st, &repr, from);
}
