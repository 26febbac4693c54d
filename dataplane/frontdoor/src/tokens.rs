//! Token streams through the front door: a generate request (HTTP
//! `generate`/`generate_stream`, a gRPC ModelStreamInfer request for a
//! generative model) becomes one `OPEN` frame with the prompt, in a slot
//! that stays with the worker while the stream runs. Each token frame is
//! lent back through the answer ring, copied once out of the reply region
//! (counted in `stream_bytes_copied`) and handed to the request; the slot
//! comes back when the stream has ended. A request dropped before the end
//! (the client went away, its stream was closed) sends a `CANCEL`, so the
//! worker frees the stream's state and the slot within one step.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sluice_engine::config::GenerateCfg;
use sluice_wire::{DType, EndReason, ErrorCode, ExtRepr, Frame, Kind, StreamHeader, stream_flags};
use tokio::sync::mpsc;

use crate::ctx::{Ctx, Stats};
use crate::dispatch::StreamMsg;
use crate::errors::Refusal;
use crate::frames::{self, Input};
use crate::semantic::Semantic;

/// Most token streams open at once on one client connection (HTTP/1,
/// HTTP/2 or gRPC, every ModelStreamInfer call of it together); the next
/// is refused `stream_limit` (429 / RESOURCE_EXHAUSTED). The engine's own
/// `[streams]` limits (per worker, per tenant) apply as well.
pub const STREAMS_PER_CONNECTION_MAX: usize = 16;

/// Most tries to find a free slot for a `CANCEL`, 10 ms apart; past them
/// the stream ends by itself (max_tokens, deadline or `streams.idle_ms`).
const CANCEL_TRIES_MAX: u32 = 100;

/// The token streams open on one connection.
#[derive(Debug, Clone, Default)]
pub struct ConnStreams(Arc<AtomicUsize>);

/// One of a connection's token streams; gives its place back when dropped.
#[derive(Debug)]
pub struct Permit(Option<Arc<AtomicUsize>>);

impl ConnStreams {
    /// A place for one more stream, or `stream_limit`.
    pub fn take(&self) -> Result<Permit, Refusal> {
        let n = self.0.fetch_add(1, Ordering::AcqRel);
        if n >= STREAMS_PER_CONNECTION_MAX {
            self.0.fetch_sub(1, Ordering::AcqRel);
            return Err(Refusal::code(
                ErrorCode::StreamLimit,
                format!(
                    "at most {STREAMS_PER_CONNECTION_MAX} token streams open at once per connection"
                ),
            ));
        }
        Ok(Permit(Some(Arc::clone(&self.0))))
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            c.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// What a generate request asks for.
#[derive(Debug, Clone)]
pub struct Ask {
    /// The prompt's tokens.
    pub prompt: Vec<i64>,
    /// Most tokens (0: the model's `max_tokens`).
    pub max_tokens: u32,
    /// Tokens per frame (0: 1).
    pub tokens_per_frame: u16,
}

/// One token frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenFrame {
    /// Its seq (0, 1, 2, … per stream).
    pub seq: u32,
    /// Its tokens (none in a last frame that ends at EOS).
    pub tokens: Vec<i64>,
    /// Why the stream ended, in the last frame.
    pub end: Option<EndReason>,
    /// The tensor name the frames carry.
    pub name: String,
    /// The exact model version the frame names.
    pub version: String,
}

/// A running token stream.
pub struct Generation {
    ctx: Arc<Ctx>,
    sem: Semantic,
    worker: usize,
    stream_id: u64,
    rx: mpsc::Receiver<StreamMsg>,
    /// The slot the stream's frames come through (for their credits).
    slot: u32,
    /// The last frame (or the end) was seen: nothing to cancel.
    over: bool,
    /// The model name and version the frames carry.
    model: String,
    version: String,
    _permit: Permit,
}

impl std::fmt::Debug for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generation")
            .field("stream_id", &self.stream_id)
            .field("worker", &self.worker)
            .field("over", &self.over)
            .finish()
    }
}

/// The generative config of `sem`'s model version, or `None`.
pub fn generative(ctx: &Ctx, sem: &Semantic) -> Option<GenerateCfg> {
    let tables = ctx.tables();
    let version = tables
        .models
        .resolve(&sem.model, &sem.version)?
        .version
        .clone();
    let meta = ctx.meta.get(&sem.model).ok()?;
    meta.versions
        .into_iter()
        .find(|v| v.version == version)
        .and_then(|v| v.generate)
}

/// Opens a token stream of `gcfg`'s model for `ask`.
pub fn open(
    ctx: &Arc<Ctx>,
    mut sem: Semantic,
    gcfg: &GenerateCfg,
    ask: &Ask,
    conn: &ConnStreams,
) -> Result<Generation, Refusal> {
    if !ctx.ready() {
        return Err(Refusal::code(
            ErrorCode::ShuttingDown,
            "appliance is shutting down",
        ));
    }
    if ask.prompt.is_empty() || ask.prompt.len() > gcfg.prompt_max as usize {
        return Err(Refusal::code(
            ErrorCode::BadTensor,
            format!(
                "the prompt has {} tokens; the model takes 1 to {} (prompt_max)",
                ask.prompt.len(),
                gcfg.prompt_max
            ),
        ));
    }
    let permit = conn.take()?;
    // A stream is not a request's answer: frontdoor.request_timeout_ms
    // does not bound it (docs/frontdoor.md, Streaming).
    sem.deadline_us = crate::semantic::stream_deadline_us(sem.timeout, &ctx.tables());
    let (mut f, rid) = crate::dispatch::alloc()?;
    let h = StreamHeader {
        stream_id: rid,
        seq: 0,
        flags: stream_flags::OPEN,
        end_reason: 0,
        tokens_per_frame: ask.tokens_per_frame,
        max_tokens: ask.max_tokens,
    }
    .to_bytes();
    let ext = [ExtRepr::stream(&h)];
    let input = Input {
        name: gcfg.token_input.clone(),
        dtype: DType::I64,
        dims: vec![ask.prompt.len() as u64],
    };
    let layout = frames::emit_with(&mut f, &sem, rid, std::slice::from_ref(&input), &ext)?;
    let off = layout.tensor_offsets[0];
    let out = &mut f.request_mut()[off..off + 8 * ask.prompt.len()];
    for (c, t) in out.chunks_exact_mut(8).zip(&ask.prompt) {
        c.copy_from_slice(&t.to_le_bytes());
    }
    Stats::add(&ctx.stats.payload_bytes_copied, 8 * ask.prompt.len() as u64);
    let tables = ctx.tables();
    let w = crate::dispatch::pick_worker(&tables, &sem, ctx.workers, &ctx.rr);
    drop(tables);
    let (rx, slot) = crate::dispatch::submit_stream(f, layout.frame_len, w)?;
    Stats::add(&ctx.stats.submitted, 1);
    Stats::add(&ctx.stats.streams_opened, 1);
    Stats::add(&ctx.stats.streams_open, 1);
    Ok(Generation {
        ctx: Arc::clone(ctx),
        model: sem.model.clone(),
        version: sem.version.clone(),
        sem,
        worker: w,
        stream_id: rid,
        rx,
        slot,
        over: false,
        _permit: permit,
    })
}

/// The refusal for a stream that ended for `reason` before its end was
/// what the client asked for.
fn end_refusal(reason: EndReason, tokens: u64) -> Option<Refusal> {
    match reason {
        EndReason::Deadline => Some(Refusal::code(
            ErrorCode::DeadlineExceeded,
            format!("deadline (X-AI-Timeout) passed mid-stream, after {tokens} token frames"),
        )),
        EndReason::Error => Some(Refusal::code(
            ErrorCode::InferenceFailed,
            format!("the model failed mid-stream, after {tokens} token frames"),
        )),
        _ => None,
    }
}

impl Generation {
    /// The model name the frames carry.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The model version the frames carry (exact once a frame came).
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The next frame; `None` once the stream is over. A deadline or a
    /// failure mid-stream is an `Err` after the frames that came before.
    pub async fn next(&mut self) -> Option<Result<TokenFrame, Refusal>> {
        if self.over {
            return None;
        }
        let msg = match self.rx.recv().await {
            Some(m) => m,
            None => {
                self.finish();
                return Some(Err(Refusal::code(
                    ErrorCode::ShuttingDown,
                    "the front door is stopping",
                )));
            }
        };
        match msg {
            StreamMsg::Frame(bytes) => {
                // Room in the queue again: the worker may lend the next.
                crate::dispatch::credit(self.slot);
                Stats::add(&self.ctx.stats.stream_frames, 1);
                Stats::add(&self.ctx.stats.stream_bytes_copied, bytes.len() as u64);
                let f = match parse(&bytes) {
                    Ok(f) => f,
                    Err(r) => return Some(Err(r)),
                };
                if self.version != f.version {
                    self.version.clone_from(&f.version);
                }
                if let Some(reason) = f.end {
                    self.finish();
                    if let Some(r) = end_refusal(reason, u64::from(f.seq)) {
                        // Its tokens (if any) still go out first.
                        if f.tokens.is_empty() {
                            return Some(Err(r));
                        }
                    }
                }
                Some(Ok(f))
            }
            StreamMsg::End(done) => {
                self.finish();
                Stats::add(&self.ctx.stats.answered, 1);
                if done.reply().is_empty() {
                    return Some(Err(Refusal::code(
                        ErrorCode::Internal,
                        "the token stream ended without its last frame (reclaimed after streams.idle_ms, or its model was unloaded)",
                    )));
                }
                // The OPEN's own answer: a refusal.
                Some(match frames::answer(done) {
                    Err(r) => Err(r),
                    Ok(_) => Err(Refusal::code(
                        ErrorCode::Internal,
                        "a token stream's OPEN was answered with tensors",
                    )),
                })
            }
        }
    }

    fn finish(&mut self) {
        if !self.over {
            self.over = true;
            self.ctx.stats.streams_open.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A deadline or failure that ended the stream in a frame with tokens:
/// the error the caller reports after sending them.
pub fn after_frame(f: &TokenFrame, tokens: u64) -> Option<Refusal> {
    f.end.and_then(|r| end_refusal(r, tokens))
}

impl Drop for Generation {
    fn drop(&mut self) {
        // Nobody reads the queue any more: a held credit goes back so the
        // worker can end the stream.
        crate::dispatch::credit(self.slot);
        if self.over {
            return;
        }
        self.finish();
        Stats::add(&self.ctx.stats.streams_cancelled, 1);
        // The client is gone before the end: cancel, so the worker frees
        // the stream (and the slot comes back, to be dropped by the drainer).
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (sem, w, id) = (self.sem.clone(), self.worker, self.stream_id);
            rt.spawn(cancel(sem, w, id));
        }
    }
}

/// How a send to a token stream's reader went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// Queued.
    Ok,
    /// The reader is gone (the client closed its stream or connection).
    Gone,
    /// No room for `write_timeout_ms`: the client stopped reading.
    Stalled,
}

/// Sends `v` towards a token stream's client, waiting at most
/// `frontdoor.write_timeout_ms` for room. The socket's own write timer
/// does not see a client that stops reading one HTTP/2 stream (flow
/// control stops the writes, not the socket), so a stream whose reader
/// takes nothing for that long is given up here, counted in
/// `streams_slow_reader`: its caller drops the generation, which cancels
/// it and frees its slot.
pub async fn relay<T>(ctx: &Ctx, tx: &mpsc::Sender<T>, v: T) -> Sent {
    let wait = Duration::from_millis(u64::from(ctx.cfg.write_timeout_ms));
    match tokio::time::timeout(wait, tx.send(v)).await {
        Ok(Ok(())) => Sent::Ok,
        Ok(Err(_)) => Sent::Gone,
        Err(_) => {
            Stats::add(&ctx.stats.streams_slow_reader, 1);
            Sent::Stalled
        }
    }
}

/// Sends a `CANCEL` for stream `id` to worker `w`.
async fn cancel(mut sem: Semantic, w: usize, id: u64) {
    // A fresh deadline: a signed frame needs one within the freshness
    // window, and the OPEN's may have passed.
    sem.deadline_us = crate::semantic::now_us() + 1_000_000;
    for _ in 0..CANCEL_TRIES_MAX {
        let sent = (|| {
            let (mut f, rid) = crate::dispatch::alloc()?;
            let h = StreamHeader {
                stream_id: id,
                seq: 1,
                flags: stream_flags::CANCEL,
                ..StreamHeader::default()
            }
            .to_bytes();
            let ext = [ExtRepr::stream(&h)];
            let layout = frames::emit_with(&mut f, &sem, rid, &[], &ext)?;
            crate::dispatch::submit(f, layout.frame_len, w)
        })();
        match sent {
            Ok(rx) => {
                // The answer (cancelled, or unknown_stream when the stream
                // ended meanwhile) says nothing the client waits for.
                let _ = rx.await;
                return;
            }
            Err(r) if r.retryable() => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(_) => return,
        }
    }
}

/// Reads a token frame.
fn parse(bytes: &[u8]) -> Result<TokenFrame, Refusal> {
    let frame = Frame::new_checked(bytes)
        .map_err(|e| Refusal::code(ErrorCode::Internal, format!("bad token frame: {e}")))?;
    if frame.kind() == Kind::Error {
        let b = frame.error_body();
        let code = b.and_then(|b| b.code()).unwrap_or(ErrorCode::Internal);
        return Err(Refusal::code(
            code,
            b.map_or("error", |b| b.message).to_string(),
        ));
    }
    let h = frame.stream().ok_or_else(|| {
        Refusal::code(
            ErrorCode::Internal,
            "a token frame without its stream header",
        )
    })?;
    let mut tokens = Vec::new();
    let mut name = String::new();
    for d in frame.tensors() {
        if d.dtype != DType::I64 {
            continue;
        }
        name = d.name.to_string();
        for c in frame.tensor_data(&d).chunks_exact(8) {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            tokens.push(i64::from_le_bytes(b));
        }
    }
    let end = h
        .has(stream_flags::END)
        .then(|| EndReason::from_u8(h.end_reason).unwrap_or(EndReason::Error));
    Ok(TokenFrame {
        seq: h.seq,
        tokens,
        end,
        name,
        version: frame.model_version().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_holds_at_most_its_streams() {
        let c = ConnStreams::default();
        let held: Vec<Permit> = (0..STREAMS_PER_CONNECTION_MAX)
            .map(|_| c.take().unwrap())
            .collect();
        let r = c.take().unwrap_err();
        assert_eq!(r.status, http::StatusCode::TOO_MANY_REQUESTS);
        drop(held);
        assert!(c.take().is_ok());
    }

    #[test]
    fn deadline_and_failure_are_errors_other_ends_are_not() {
        assert!(end_refusal(EndReason::Deadline, 3).is_some());
        assert!(end_refusal(EndReason::Error, 3).is_some());
        assert!(end_refusal(EndReason::Eos, 3).is_none());
        assert!(end_refusal(EndReason::MaxTokens, 3).is_none());
    }
}
