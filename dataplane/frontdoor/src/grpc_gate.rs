//! What every gRPC call passes before tonic decodes its message: the
//! tenant's credentials are checked on the call's metadata, once per call
//! (the handlers take the result from the request's extensions, so a
//! `Sluice-HMAC-v2` nonce is used once), and a call that fails is answered
//! at once with none of its message read. A signed call's first message
//! must hash to the signed body digest (SHA-256 of its bytes as framed,
//! without the 5-byte prefix): it is checked as its last byte arrives,
//! before tonic can decode it. The body tonic
//! then reads is bounded: a few KiB for calls that carry no tensors, and
//! `body_timeout_ms` for each message (for a unary call, from the call's
//! start) so a slow sender cannot hold its stream.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use sha2::{Digest, Sha256};
use tonic::Status;
use tonic::codegen::Service as _;

use crate::ctx::{Ctx, Stats};
use crate::grpc::Service;
use crate::pb::grpc_inference_service_server::GrpcInferenceServiceServer;

/// Most bytes a call without tensors may send (ServerLive, ModelReady,
/// ..., and unknown methods): their messages are a few names.
pub const SMALL_CALL_BYTES_MAX: usize = 4096;

const PREFIX: &str = "/inference.GRPCInferenceService/";

/// How a method is gated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// No credentials, a small message.
    Open,
    /// Credentials, a small message.
    Model,
    /// Credentials, tensors: one message.
    Infer,
    /// Credentials, tensors: a stream of messages.
    Stream,
}

fn kind(path: &str) -> Kind {
    match path.strip_prefix(PREFIX).unwrap_or("") {
        "ModelInfer" => Kind::Infer,
        "ModelStreamInfer" => Kind::Stream,
        "ModelReady" | "ModelMetadata" | "ModelConfig" => Kind::Model,
        _ => Kind::Open,
    }
}

/// The gRPC service behind its gate.
#[derive(Clone)]
pub struct Gate {
    ctx: Arc<Ctx>,
    inner: GrpcInferenceServiceServer<Service>,
}

/// The gate in front of `inner`.
pub fn gate(ctx: Arc<Ctx>, inner: GrpcInferenceServiceServer<Service>) -> Gate {
    Gate { ctx, inner }
}

impl Gate {
    /// Serves one call.
    pub async fn call(
        &self,
        mut req: http::Request<Incoming>,
    ) -> Result<http::Response<tonic::body::Body>, Infallible> {
        let ctx = &self.ctx;
        let k = kind(req.uri().path());
        let mut first_sha256 = None;
        if k != Kind::Open {
            let tables = ctx.tables();
            let path = req.uri().path().to_string();
            let call = crate::semantic::Call {
                method: "POST",
                path: &path,
                query: "",
                checked: None,
            };
            match crate::semantic::authenticate(req.headers(), &ctx.env(&tables), &call) {
                Ok(mut a) => {
                    first_sha256 = a.body_sha256.take();
                    req.extensions_mut().insert(a);
                }
                Err(r) => {
                    // Dropping the unread body resets the stream: what the
                    // client already sent is discarded by h2, never decoded.
                    Stats::add(&ctx.stats.grpc_requests, 1);
                    Stats::add(&ctx.stats.grpc_refused_unread, 1);
                    ctx.stats.refusal(r.status);
                    return Ok(r.to_status().into_http());
                }
            }
        }
        let limit = match k {
            Kind::Open | Kind::Model => Some(SMALL_CALL_BYTES_MAX),
            // tonic bounds each message (max_decoding_message_size).
            Kind::Infer | Kind::Stream => None,
        };
        let (parts, body) = req.into_parts();
        let body = GateBody {
            inner: body,
            ctx: Arc::clone(ctx),
            limit,
            read: 0,
            timeout: Duration::from_millis(u64::from(ctx.cfg.body_timeout_ms)),
            deadline: None,
            frame: [0; 5],
            frame_got: 0,
            msg_left: 0,
            first: first_sha256.map(|w| (w, None)),
            done: false,
        };
        let mut body = body;
        if k != Kind::Stream {
            // A unary call's one message is due from the call's start.
            body.arm();
        }
        let mut inner = self.inner.clone();
        inner.call(http::Request::from_parts(parts, body)).await
    }
}

/// A gRPC request body read within the gate's limits.
pub struct GateBody {
    inner: Incoming,
    ctx: Arc<Ctx>,
    limit: Option<usize>,
    read: usize,
    timeout: Duration,
    /// When the message being read is due.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The message's 5-byte prefix (flag, length), as far as read.
    frame: [u8; 5],
    frame_got: usize,
    /// Bytes of the message's payload still to come.
    msg_left: usize,
    /// A signed call: the first message's signed digest, and its hash so
    /// far once its payload began; `None` once checked.
    first: Option<(String, Option<Sha256>)>,
    done: bool,
}

impl GateBody {
    fn arm(&mut self) {
        if self.deadline.is_none() {
            self.deadline = Some(Box::pin(tokio::time::sleep(self.timeout)));
        }
    }

    /// Hashes the first message's payload bytes `b`; at its end (`last`),
    /// compares with the signed digest.
    fn hash_first(&mut self, b: &[u8], last: bool) -> Result<(), Status> {
        let Some((want, h)) = self.first.as_mut() else {
            return Ok(());
        };
        h.get_or_insert_with(Sha256::new).update(b);
        if !last {
            return Ok(());
        }
        let got = crate::signing::hex(&h.take().unwrap_or_default().finalize());
        let ok = got == *want;
        self.first = None;
        if ok {
            return Ok(());
        }
        let f = crate::signing::body_mismatch();
        self.ctx.stats.signature_refused(f.cause);
        self.ctx.stats.refusal(f.refusal.status);
        Err(f.refusal.to_status())
    }

    /// Follows message boundaries: a message's timer runs from its first
    /// byte to its last.
    fn follow(&mut self, mut b: &[u8]) -> Result<(), Status> {
        while !b.is_empty() {
            if self.msg_left > 0 {
                let n = b.len().min(self.msg_left);
                self.msg_left -= n;
                self.hash_first(&b[..n], self.msg_left == 0)?;
                b = &b[n..];
                if self.msg_left == 0 {
                    self.deadline = None;
                }
                continue;
            }
            if self.frame_got == 0 {
                self.arm();
            }
            self.frame[self.frame_got] = b[0];
            self.frame_got += 1;
            b = &b[1..];
            if self.frame_got == 5 {
                self.frame_got = 0;
                let [_, a, c, d, e] = self.frame;
                self.msg_left = u32::from_be_bytes([a, c, d, e]) as usize;
                if self.msg_left == 0 {
                    self.hash_first(&[], true)?;
                    self.deadline = None;
                }
            }
        }
        Ok(())
    }

    fn fail(&mut self, s: Status) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        self.done = true;
        self.deadline = None;
        Poll::Ready(Some(Err(s)))
    }
}

impl Body for GateBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(f))) => {
                if let Some(d) = f.data_ref() {
                    Stats::add(&this.ctx.stats.grpc_bytes_read, d.len() as u64);
                    this.read += d.len();
                    if let Some(max) = this.limit
                        && this.read > max
                    {
                        this.ctx.stats.refusal(http::StatusCode::PAYLOAD_TOO_LARGE);
                        return this.fail(Status::resource_exhausted(format!(
                            "this call's message is at most {max} bytes"
                        )));
                    }
                    if let Err(s) = this.follow(d) {
                        return this.fail(s);
                    }
                }
                Poll::Ready(Some(Ok(f)))
            }
            Poll::Ready(Some(Err(e))) => this.fail(Status::from_error(Box::new(e))),
            Poll::Ready(None) => {
                this.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => {
                if let Some(d) = this.deadline.as_mut()
                    && d.as_mut().poll(cx).is_ready()
                {
                    Stats::add(&this.ctx.stats.slow_clients, 1);
                    this.ctx.stats.refusal(http::StatusCode::REQUEST_TIMEOUT);
                    let ms = this.timeout.as_millis();
                    return this.fail(Status::deadline_exceeded(format!(
                        "the request message did not arrive within {ms} ms (frontdoor.body_timeout_ms)"
                    )));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
