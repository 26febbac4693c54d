//! A response body that keeps its request "in flight" for the idle timer
//! until it is sent whole or dropped (a token stream may last minutes
//! with no bytes read from the client).

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};

use super::timers::InFlight;

/// `B`, holding its request's place until it ends.
#[derive(Debug)]
pub struct Tracked<B> {
    inner: B,
    inflight: Option<InFlight>,
}

impl<B> Tracked<B> {
    /// Wraps `inner`.
    pub fn new(inner: B, inflight: InFlight) -> Tracked<B> {
        Tracked {
            inner,
            inflight: Some(inflight),
        }
    }
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(None | Some(Err(_))) = r {
            this.inflight = None;
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
