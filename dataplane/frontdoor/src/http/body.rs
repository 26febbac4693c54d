//! Request bodies read whole within the configured time and size limits
//! (as `Bytes` chunks of the HTTP stack's own buffers: nothing is copied
//! here), and response bodies sent as a list of chunks (the JSON header,
//! then each binary output straight from its reply slot).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::StatusCode;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use tonic::Code;

use crate::errors::Refusal;

/// A response body: chunks sent in order, then (a server-sent event
/// stream) whatever arrives on `live` until it closes.
#[derive(Debug, Default)]
pub struct Chunks {
    parts: VecDeque<Bytes>,
    len: u64,
    live: Option<tokio::sync::mpsc::Receiver<Bytes>>,
}

impl Chunks {
    /// One chunk.
    pub fn one(b: impl Into<Bytes>) -> Chunks {
        let mut c = Chunks::default();
        c.push(b.into());
        c
    }

    /// A body of what arrives on `rx` until it closes. Dropped (the client
    /// went away), it closes `rx`: the sender sees it.
    pub fn live(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Chunks {
        Chunks {
            live: Some(rx),
            ..Chunks::default()
        }
    }

    /// Appends a chunk.
    pub fn push(&mut self, b: Bytes) {
        self.len += b.len() as u64;
        if !b.is_empty() {
            self.parts.push_back(b);
        }
    }
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(b) = self.parts.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(b))));
        }
        match self.live.as_mut() {
            None => Poll::Ready(None),
            Some(rx) => rx.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty() && self.live.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        if self.live.is_some() {
            return SizeHint::default();
        }
        SizeHint::with_exact(self.len)
    }
}

/// A request body, whole.
#[derive(Debug, Default)]
pub struct Received {
    /// The chunks as the HTTP stack delivered them.
    pub chunks: Vec<Bytes>,
    /// Total length.
    pub len: usize,
}

impl Received {
    /// The first `n` bytes contiguous: borrowed when they lie in the first
    /// chunk, else gathered (the JSON part of a request only).
    pub fn prefix(&self, n: usize) -> std::borrow::Cow<'_, [u8]> {
        match self.chunks.first() {
            Some(c) if c.len() >= n => std::borrow::Cow::Borrowed(&c[..n]),
            _ => {
                let mut v = Vec::with_capacity(n);
                for c in &self.chunks {
                    let take = (n - v.len()).min(c.len());
                    v.extend_from_slice(&c[..take]);
                    if v.len() == n {
                        break;
                    }
                }
                std::borrow::Cow::Owned(v)
            }
        }
    }

    /// Copies bytes `[from, from + out.len())` of the body into `out`.
    pub fn copy_range(&self, from: usize, out: &mut [u8]) {
        let mut skip = from;
        let mut done = 0;
        for c in &self.chunks {
            if done == out.len() {
                break;
            }
            if skip >= c.len() {
                skip -= c.len();
                continue;
            }
            let avail = &c[skip..];
            skip = 0;
            let n = avail.len().min(out.len() - done);
            out[done..done + n].copy_from_slice(&avail[..n]);
            done += n;
        }
    }
}

/// Reads a body of at most `max` bytes within `timeout`.
pub async fn receive<B>(body: B, max: usize, timeout: Duration) -> Result<Received, Refusal>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let read = async {
        let mut body = body;
        let mut r = Received::default();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| Refusal::bad(format!("request body: {e}")))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            r.len += data.len();
            if r.len > max {
                return Err(too_large(max));
            }
            r.chunks.push(data);
        }
        Ok(r)
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(r) => r,
        Err(_) => Err(Refusal::other(
            StatusCode::REQUEST_TIMEOUT,
            Code::DeadlineExceeded,
            format!(
                "the request body did not arrive within {} ms (frontdoor.body_timeout_ms)",
                timeout.as_millis()
            ),
        )),
    }
}

/// 413 for a body over the limit.
pub fn too_large(max: usize) -> Refusal {
    Refusal::other(
        StatusCode::PAYLOAD_TOO_LARGE,
        Code::ResourceExhausted,
        format!("request body larger than {max} bytes (frontdoor.body_bytes_max)"),
    )
}
