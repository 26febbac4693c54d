//! Token streams (server-driven, docs/wire.md "Streams"): one `OPEN` with
//! a prompt, then the appliance runs the model one step per worker loop
//! iteration for every active stream (iteration-level scheduling, as Orca
//! and vLLM do: new requests are admitted between steps, so a long
//! generation never holds up a short request) and sends a token frame per
//! `tokens_per_frame` tokens, the last one marked END.
//!
//! Each stream's state lives in its slot of the [`StreamTable`] (ping-pong
//! halves: a step reads one and writes the other in place); its prompt is
//! copied once into a per-slot buffer made at load. A step allocates
//! nothing.

use sluice_wire::{
    DType, EndReason, ErrorCode, ExtRepr, Frame, FrameRepr, Kind, Reject, StreamHeader, TensorRepr,
    TraceContext, stream_flags,
};

use super::table::{SlotId, StreamRefusal, StreamTable};
use crate::config::limits::GEN_TOKENS_PER_FRAME_MAX;
use crate::transport::RxPacket;

const TPF_MAX: usize = GEN_TOKENS_PER_FRAME_MAX as usize;

/// A generative model's limits (`[models.stream.generate]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenLimits {
    /// The end-of-sequence token, if any.
    pub eos: Option<i64>,
    /// Most tokens a stream generates.
    pub max_tokens: u32,
    /// Most prompt tokens.
    pub prompt_max: u32,
}

#[derive(Debug, Clone, Copy, Default)]
struct Gen {
    live: bool,
    slot: u32,
    tenant: u32,
    stream_id: u64,
    request_id: u64,
    trace: TraceContext,
    /// Where the token frames go: the `OPEN`'s sender and connection.
    route: RxPacket,
    /// The shard that admitted the `OPEN` (for per-shard metrics).
    shard: u8,
    deadline_us: u64,
    prompt_len: u32,
    /// Prompt tokens run so far.
    fed: u32,
    /// Tokens chosen so far.
    produced: u32,
    max_tokens: u32,
    tpf: u16,
    /// Tokens chosen and not sent yet (at most `tpf`).
    pending: u16,
    /// The token the next decode step takes.
    next: i64,
    /// The seq of the next token frame.
    seq_out: u32,
    /// Why it ended, while its END frame waits for a transmit buffer.
    ending: Option<EndReason>,
    opened_us: u64,
    last_token_us: u64,
}

/// What the worker does for a token stream: sends frames (a transmit
/// buffer for the stream's route, written by `write`) and records token
/// latencies. A failed send (no transmit buffer) leaves the tokens pending
/// and the stream waits a step (back-pressure, nothing lost).
pub trait TokenSink {
    /// Takes a transmit buffer for `route`, lets `write` build the frame in
    /// it and queues it; false when no buffer was free or `write` failed.
    fn send(
        &mut self,
        route: &RxPacket,
        write: &mut dyn FnMut(&mut [u8]) -> Result<usize, Reject>,
    ) -> bool;
    /// A token was chosen for `tenant`'s stream of `shard`: `first` (time
    /// to first token since the `OPEN`) or not (time since the previous
    /// token), µs.
    fn token(&mut self, tenant: u32, shard: usize, first: bool, latency_us: u64);
}

/// One iteration's work over a model's token streams.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GenTally {
    /// Decode (and prompt) steps run.
    pub steps: u64,
    /// Tokens chosen.
    pub tokens: u64,
    /// Token frames sent (END frames included).
    pub frames: u64,
    /// Streams ended, per reason (index: `EndReason as usize`).
    pub ended: [u64; 7],
    /// Streams active after the iteration.
    pub running: u64,
    /// Of those, streams still running their prompt (prefill).
    pub prefill: u64,
}

/// A model's token streams on one worker: per slot of the stream table,
/// what the generation has done.
pub struct Generator {
    limits: GenLimits,
    // Drop order: plain memory, no order needed.
    gens: Box<[Gen]>,
    /// `prompt_max` tokens per slot.
    prompts: Box<[i64]>,
    /// `TPF_MAX` pending tokens per slot.
    pending: Box<[i64]>,
    active: u32,
    /// Routes of streams ended since [`Generator::take_ended`] (capacity:
    /// one per slot).
    ended: Vec<RxPacket>,
    /// Model name and version the frames carry.
    model: String,
    version: String,
    token_name: String,
}

impl std::fmt::Debug for Generator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator")
            .field("limits", &self.limits)
            .field("active", &self.active)
            .finish()
    }
}

/// Messages of token-stream refusals.
mod msg {
    pub const PROMPT: &str = "a token stream's OPEN carries one tensor, the prompt: int64 [n], 1 <= n <= prompt_max, named as the model's token input";
    pub const DATAGRAM: &str =
        "token streams are served over UDP and the front door in this build (not TCP or RDMA)";
    pub const CONTINUE: &str =
        "a token stream takes no CONTINUE with tensors; send CANCEL to stop it";
}

fn refusal(code: ErrorCode, message: &'static str, seq: u32) -> StreamRefusal {
    StreamRefusal {
        reject: Reject::new(code, message),
        seq,
        ended: false,
    }
}

impl Generator {
    /// Makes the per-slot buffers for `slots` streams.
    pub fn new(
        limits: GenLimits,
        slots: usize,
        model: &str,
        version: &str,
        token_name: &str,
    ) -> Generator {
        Generator {
            limits,
            gens: vec![Gen::default(); slots].into_boxed_slice(),
            prompts: vec![0i64; slots * limits.prompt_max as usize].into_boxed_slice(),
            pending: vec![0i64; slots * TPF_MAX].into_boxed_slice(),
            active: 0,
            ended: Vec::with_capacity(slots),
            model: model.to_string(),
            version: version.to_string(),
            token_name: token_name.to_string(),
        }
    }

    /// Streams generating now.
    pub fn active(&self) -> usize {
        self.active as usize
    }

    /// Opens a token stream for `req` (an `OPEN` with its prompt): a slot
    /// of `table` (zero state), the prompt copied into the slot's buffer.
    /// Nothing is answered now: the token frames follow. Returns the prompt
    /// bytes copied.
    pub fn open(
        &mut self,
        table: &mut StreamTable,
        req: &Frame<&[u8]>,
        h: StreamHeader,
        route: RxPacket,
        shard: usize,
        now_us: u64,
    ) -> Result<u64, StreamRefusal> {
        if route.conn != crate::transport::CONN_DATAGRAM {
            return Err(refusal(ErrorCode::StreamUnsupported, msg::DATAGRAM, h.seq));
        }
        let mut prompt = None;
        for d in req.tensors() {
            let ok = prompt.is_none()
                && d.name == self.token_name
                && d.dtype == DType::I64
                && d.dims().len() == 1
                && (1..=u64::from(self.limits.prompt_max)).contains(&d.dims()[0]);
            if !ok {
                return Err(refusal(ErrorCode::BadTensor, msg::PROMPT, h.seq));
            }
            prompt = Some(d);
        }
        let Some(d) = prompt else {
            return Err(refusal(ErrorCode::BadTensor, msg::PROMPT, h.seq));
        };
        let slot = table.open_stream(req.tenant_id(), h.stream_id, h.seq, now_us)?;
        let i = slot.index();
        let pm = self.limits.prompt_max as usize;
        let data = req.tensor_data(&d);
        let dst = &mut self.prompts[i * pm..(i + 1) * pm];
        let mut n = 0;
        for (t, c) in dst.iter_mut().zip(data.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            *t = i64::from_le_bytes(b);
            n += 1;
        }
        let cap = self.limits.max_tokens;
        let max_tokens = if h.max_tokens == 0 {
            cap
        } else {
            h.max_tokens.min(cap)
        };
        let tpf = h.tokens_per_frame.clamp(1, GEN_TOKENS_PER_FRAME_MAX);
        self.gens[i] = Gen {
            live: true,
            slot: i as u32,
            tenant: req.tenant_id(),
            stream_id: h.stream_id,
            request_id: req.request_id(),
            trace: req.trace(),
            route,
            shard: shard as u8,
            deadline_us: req.deadline_us(),
            prompt_len: n,
            max_tokens,
            tpf,
            opened_us: now_us,
            ..Gen::default()
        };
        self.active += 1;
        Ok(data.len() as u64)
    }

    /// The refusal of a `CONTINUE` on a token stream. A `CONTINUE` without
    /// tensors is a keep-alive: it only restarts the idle clock.
    pub fn continue_frame(
        &mut self,
        table: &mut StreamTable,
        req: &Frame<&[u8]>,
        h: StreamHeader,
        now_us: u64,
    ) -> Result<(), StreamRefusal> {
        let slot = table.find_stream(req.tenant_id(), h.stream_id, h.seq)?;
        if req.tensors().next().is_some() {
            return Err(refusal(ErrorCode::BadTensor, msg::CONTINUE, h.seq));
        }
        table.touch(slot, now_us);
        Ok(())
    }

    /// Cancels a token stream (a `CANCEL` frame): the stream ends at once,
    /// before its next step, and the answer says how many token frames it
    /// sent (`seq`), with `end_reason` cancelled.
    pub fn cancel(
        &mut self,
        table: &mut StreamTable,
        req: &Frame<&[u8]>,
        h: StreamHeader,
        tx: &mut [u8],
    ) -> Result<usize, StreamRefusal> {
        let slot = table.find_stream(req.tenant_id(), h.stream_id, h.seq)?;
        let i = slot.index();
        let sent = if self.gens[i].live {
            self.gens[i].seq_out
        } else {
            0
        };
        table.end(slot);
        self.retire(i);
        super::write_end(req, h.stream_id, sent, EndReason::Cancelled, tx).map_err(|reject| {
            StreamRefusal {
                reject,
                seq: h.seq,
                ended: true,
            }
        })
    }

    /// Runs one step for every active stream: `step` runs the model on
    /// (token, current state half, other half) and returns the chosen
    /// token; the written half becomes current. Frames go out through
    /// `sink`. Streams the table no longer holds (cancelled, reclaimed
    /// after `idle_ms`) are dropped here, within one step.
    pub fn iteration<F>(
        &mut self,
        table: &mut StreamTable,
        now_us: u64,
        sink: &mut dyn TokenSink,
        mut step: F,
    ) -> GenTally
    where
        F: FnMut(i64, &[u8], &mut [u8]) -> Result<i64, Reject>,
    {
        let mut t = GenTally::default();
        if self.active == 0 {
            return t;
        }
        for i in 0..self.gens.len() {
            let g = self.gens[i];
            if !g.live {
                continue;
            }
            let slot = SlotId::new(g.slot);
            if !table.holds(slot, g.tenant, g.stream_id) {
                self.retire(i);
                continue;
            }
            if let Some(reason) = g.ending {
                self.finish(i, table, reason, sink, &mut t);
                continue;
            }
            if g.deadline_us != 0 && now_us > g.deadline_us {
                self.finish(i, table, EndReason::Deadline, sink, &mut t);
                continue;
            }
            if g.pending >= g.tpf {
                // The last full frame found no buffer: send it before
                // stepping again.
                if !self.flush(i, sink, false, 0, &mut t) {
                    continue;
                }
            }
            let pm = self.limits.prompt_max as usize;
            let prefill = g.fed < g.prompt_len;
            let token = if prefill {
                self.prompts[i * pm + g.fed as usize]
            } else {
                g.next
            };
            let (cur, next) = table.buffers(slot);
            let chosen = match step(token, cur, next) {
                Ok(c) => c,
                Err(_) => {
                    self.finish(i, table, EndReason::Error, sink, &mut t);
                    continue;
                }
            };
            table.flip(slot);
            t.steps += 1;
            let g = &mut self.gens[i];
            if prefill {
                g.fed += 1;
                if g.fed < g.prompt_len {
                    t.prefill += 1;
                    continue;
                }
            }
            if self.limits.eos == Some(chosen) {
                self.finish(i, table, EndReason::Eos, sink, &mut t);
                continue;
            }
            let first = g.produced == 0;
            let since = if first { g.opened_us } else { g.last_token_us };
            sink.token(
                g.tenant,
                usize::from(g.shard),
                first,
                now_us.saturating_sub(since),
            );
            g.last_token_us = now_us;
            self.pending[i * TPF_MAX + g.pending as usize] = chosen;
            g.pending += 1;
            g.produced += 1;
            g.next = chosen;
            t.tokens += 1;
            if g.produced >= g.max_tokens {
                self.finish(i, table, EndReason::MaxTokens, sink, &mut t);
                continue;
            }
            if g.pending >= g.tpf {
                self.flush(i, sink, false, 0, &mut t);
            }
        }
        t.running = u64::from(self.active);
        t
    }

    /// Sends the END frame (with the pending tokens) and ends the stream;
    /// without a transmit buffer it tries again at the next iteration.
    fn finish(
        &mut self,
        i: usize,
        table: &mut StreamTable,
        reason: EndReason,
        sink: &mut dyn TokenSink,
        t: &mut GenTally,
    ) {
        if self.flush(i, sink, true, reason as u8, t) {
            table.end(SlotId::new(self.gens[i].slot));
            t.ended[reason as usize] += 1;
            self.retire(i);
        } else {
            self.gens[i].ending = Some(reason);
        }
    }

    fn retire(&mut self, i: usize) {
        if self.gens[i].live {
            self.gens[i].live = false;
            self.active -= 1;
            // Drained after every iteration and every frame, so it holds
            // at most one route per slot: the push never grows it.
            self.ended.push(self.gens[i].route);
        }
    }

    /// Calls `f` with the route of every stream that ended since the last
    /// call (the transport frees what it kept for them: a front-door slot).
    pub fn take_ended(&mut self, f: &mut dyn FnMut(&RxPacket)) {
        for r in self.ended.drain(..) {
            f(&r);
        }
    }

    /// Ends every stream without a frame (the model was unloaded).
    pub fn clear(&mut self) {
        for i in 0..self.gens.len() {
            self.retire(i);
        }
    }

    /// Sends stream `i`'s pending tokens as one token frame (`end`: the
    /// last, with `reason`).
    fn flush(
        &mut self,
        i: usize,
        sink: &mut dyn TokenSink,
        end: bool,
        reason: u8,
        t: &mut GenTally,
    ) -> bool {
        let g = self.gens[i];
        let n = g.pending as usize;
        let mut data = [0u8; 8 * TPF_MAX];
        for (c, v) in data
            .chunks_exact_mut(8)
            .zip(&self.pending[i * TPF_MAX..i * TPF_MAX + n])
        {
            c.copy_from_slice(&v.to_le_bytes());
        }
        let sh = StreamHeader {
            stream_id: g.stream_id,
            seq: g.seq_out,
            flags: stream_flags::CONTINUE | if end { stream_flags::END } else { 0 },
            end_reason: if end { reason } else { 0 },
            tokens_per_frame: 0,
            max_tokens: 0,
        }
        .to_bytes();
        let ext = [ExtRepr::stream(&sh)];
        let dims = [n as u64];
        let tensors = [TensorRepr {
            name: &self.token_name,
            dtype: DType::I64,
            dims: &dims,
            data: Some(&data[..8 * n]),
        }];
        let repr = FrameRepr {
            model: &self.model,
            model_version: &self.version,
            extensions: &ext,
            tensors: &tensors,
            ..FrameRepr::answer(Kind::Response, g.request_id, g.tenant, g.trace)
        };
        let sent = sink.send(&g.route, &mut |tx| {
            repr.emit(tx).map(|l| l.frame_len).map_err(|_| {
                Reject::new(
                    ErrorCode::ResponseTooLarge,
                    "token frame does not fit the reply buffer",
                )
            })
        });
        if sent {
            let g = &mut self.gens[i];
            g.pending = 0;
            g.seq_out += 1;
            t.frames += 1;
        }
        sent
    }
}
