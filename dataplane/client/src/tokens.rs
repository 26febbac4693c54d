//! Token streams (server-driven, docs/wire.md "Streams"): one `OPEN`
//! request with a prompt, then the appliance sends token frames until the
//! last one, marked END. A [`TokenStream`] is an iterator over those
//! frames.

use std::time::{Duration, Instant};

use sluice_wire::{EndReason, Frame, STREAM_EXT_KEY, StreamHeader, stream_flags};

use crate::{Client, ClientError, Request, Response};

/// One token frame of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenFrame {
    /// Its seq: 0, 1, 2, … within the stream.
    pub seq: u32,
    /// Its tokens (at most `tokens_per_frame`; none in a last frame that
    /// carries none).
    pub tokens: Vec<i64>,
    /// The end reason on the last frame (`EndReason as u8`), else `None`.
    pub end: Option<u8>,
}

/// A running token stream. It reads the token frames from the client's
/// UDP socket itself, so while it runs the client must have no other
/// request outstanding (its answers would be taken for stray frames and
/// dropped). Over UDP a lost frame shows as a gap in `seq`: the iterator
/// yields `Malformed("a token frame was lost")` and the stream ends (call
/// [`TokenStream::cancel`] to free its slot at once).
#[derive(Debug)]
pub struct TokenStream<'c> {
    c: &'c mut Client,
    id: u64,
    model: String,
    version: String,
    request_id: u64,
    next_seq: u32,
    first: Option<Response>,
    done: bool,
    buf: Vec<u8>,
}

fn frame_of<B: AsRef<[u8]>>(f: &Frame<B>) -> Result<TokenFrame, ClientError> {
    let h = f.stream().ok_or(ClientError::Malformed(
        "a token frame without a stream header",
    ))?;
    let tokens = match f.tensors().next() {
        Some(t) => {
            if t.dtype != sluice_wire::DType::I64 {
                return Err(ClientError::Malformed("token tensor is not int64"));
            }
            f.tensor_data(&t)
                .chunks_exact(8)
                .map(|c| {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(c);
                    i64::from_le_bytes(b)
                })
                .collect()
        }
        None => Vec::new(),
    };
    Ok(TokenFrame {
        seq: h.seq,
        tokens,
        end: h.has(stream_flags::END).then_some(h.end_reason),
    })
}

impl<'c> TokenStream<'c> {
    /// Opens stream `id` (not 0) with `req`, whose one tensor is the
    /// prompt (int64 `[n]`, named as the model's token input). Waits for
    /// the first token frame (or the refusal).
    pub fn open(
        c: &'c mut Client,
        id: u64,
        req: Request<'_>,
        tokens_per_frame: u16,
        max_tokens: u32,
    ) -> Result<TokenStream<'c>, ClientError> {
        let (model, version) = (req.model.to_string(), req.model_version.to_string());
        let h = StreamHeader {
            stream_id: id.max(1),
            seq: 0,
            flags: stream_flags::OPEN,
            tokens_per_frame,
            max_tokens,
            ..StreamHeader::default()
        }
        .to_bytes();
        let req = req.extension(STREAM_EXT_KEY, &h);
        let first = c.call(&req)?;
        if first.frame().stream().is_none() {
            return Err(ClientError::Server {
                code: sluice_wire::ErrorCode::StreamUnsupported,
                message: "the answer carries no stream header: the appliance keeps no streams"
                    .into(),
                retryable: false,
            });
        }
        let request_id = first.request_id();
        Ok(TokenStream {
            c,
            id: id.max(1),
            model,
            version,
            request_id,
            next_seq: 0,
            first: Some(first),
            done: false,
            buf: vec![0u8; 65_536],
        })
    }

    /// The stream id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The remaining tokens, to the end of the stream.
    pub fn collect_tokens(&mut self) -> Result<(Vec<i64>, u8), ClientError> {
        let mut out = Vec::new();
        for f in self.by_ref() {
            let f = f?;
            out.extend(f.tokens);
            if let Some(r) = f.end {
                return Ok((out, r));
            }
        }
        Err(ClientError::Malformed("the stream ended without END"))
    }

    /// Cancels the stream: the appliance stops it before its next step and
    /// answers with the number of token frames it sent. Token frames still
    /// on the way are dropped. Returns that number.
    pub fn cancel(mut self) -> Result<u32, ClientError> {
        let h = StreamHeader {
            stream_id: self.id,
            seq: 1,
            flags: stream_flags::CANCEL,
            ..StreamHeader::default()
        }
        .to_bytes();
        let req = Request::new(&self.model, &self.version).extension(STREAM_EXT_KEY, &h);
        self.done = true;
        let r = self.c.call(&req)?;
        let h = r.frame().stream().ok_or(ClientError::Malformed(
            "a cancel answer without a stream header",
        ))?;
        if h.end_reason != EndReason::Cancelled as u8 {
            return Err(ClientError::Malformed("a cancel answer that is not one"));
        }
        Ok(h.seq)
    }

    fn read(&mut self) -> Result<TokenFrame, ClientError> {
        let wait = self.c.config().timeout;
        let until = Instant::now() + wait;
        let sock = self.c.socket();
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ClientError::Timeout);
            }
            sock.set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .map_err(ClientError::Io)?;
            let n = match sock.recv(&mut self.buf) {
                Ok(n) => n,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(ClientError::Timeout);
                }
                Err(e) => return Err(ClientError::Io(e)),
            };
            let Ok(f) = Frame::new_checked(&self.buf[..n]) else {
                continue;
            };
            if f.request_id() != self.request_id {
                continue; // a stray frame (a late answer of something else)
            }
            return frame_of(&f);
        }
    }
}

impl Iterator for TokenStream<'_> {
    type Item = Result<TokenFrame, ClientError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let got = match self.first.take() {
            Some(r) => frame_of(r.frame()),
            None => self.read(),
        };
        let f = match got {
            Ok(f) => f,
            Err(e) => {
                self.done = true;
                return Some(Err(e));
            }
        };
        if f.seq != self.next_seq {
            self.done = true;
            return Some(Err(ClientError::Malformed("a token frame was lost")));
        }
        self.next_seq += 1;
        self.done = f.end.is_some();
        Some(Ok(f))
    }
}
