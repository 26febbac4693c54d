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
    /// Where the token frames go: the `OPEN`'s sender and connection (on
    /// TCP: the connection and the `OPEN`'s place in its order; each token
    /// frame takes a new place at send).
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
    /// Whether `route`'s connection is gone (a TCP client that closed):
    /// its streams end and free their slots.
    fn gone(&self, route: &RxPacket) -> bool;
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
    /// Streams ended because their connection closed (no END frame: there
    /// is nobody to send it to).
    pub conn_closed: u64,
    /// Streams active after the iteration.
    pub running: u64,
    /// Of those, streams still running their prompt (prefill).
    pub prefill: u64,
    /// Model calls run (one per stream without batching, one per batch
    /// of up to `rows_max` streams with it).
    pub runs: u64,
    /// State bytes gathered into and scattered from batch buffers (the
    /// copy a batched step costs; 0 without batching: in place).
    pub state_bytes_copied: u64,
}

/// How a model runs decode steps: one stream at a time in its slot
/// (`step`), or a batch of up to `rows_max` streams (`gather` each row,
/// `run` once, `scatter` each row back).
pub trait DecodeStep {
    /// Rows one batched call takes; 1: no batching.
    fn rows_max(&self) -> usize;
    /// One stream's step: `token` and the current state `cur` in, the new
    /// state into `next` in place; returns the chosen token.
    fn step(&mut self, token: i64, cur: &[u8], next: &mut [u8]) -> Result<i64, Reject>;
    /// Puts a stream's token and state into batch row `row`; returns the
    /// state bytes copied.
    fn gather(&mut self, row: usize, token: i64, cur: &[u8]) -> u64;
    /// Runs the first `rows` rows in one call.
    fn run(&mut self, rows: usize) -> Result<(), Reject>;
    /// Row `row`'s chosen token, its new state written into `next`;
    /// returns the token and the state bytes copied.
    fn scatter(&mut self, row: usize, next: &mut [u8]) -> (i64, u64);
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
    /// The streams of the batch being gathered (indices into `gens`).
    rows: Box<[u32]>,
    /// Streams cancelled since the last iteration (tallied there, under
    /// `ended` reason `cancelled`).
    cancelled: u64,
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
    pub const DATAGRAM: &str = "token streams are served over UDP, io_uring TCP and the front door in this build (not RDMA)";
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
            rows: vec![0u32; slots].into_boxed_slice(),
            cancelled: 0,
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
    /// Nothing is answered now: the token frames follow to `route`, which
    /// must be `pushable` (the transport can send frames there on its
    /// own). Returns the prompt bytes copied.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        &mut self,
        table: &mut StreamTable,
        req: &Frame<&[u8]>,
        h: StreamHeader,
        route: RxPacket,
        pushable: bool,
        shard: usize,
        now_us: u64,
    ) -> Result<u64, StreamRefusal> {
        if !pushable {
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
            self.cancelled += 1;
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

    /// Runs one step for every active stream through `dec`: with a batch
    /// (`dec.rows_max() > 1`) the streams' tokens and states are gathered
    /// into one call of up to `rows_max` rows and scattered back (a copy of
    /// the state, counted in `state_bytes_copied`); else each stream runs
    /// its own call on its slot in place. The written half becomes
    /// current. Frames go out through `sink`. Streams the table no longer
    /// holds (cancelled, reclaimed after `idle_ms`) are dropped here,
    /// within one step.
    pub fn iteration(
        &mut self,
        table: &mut StreamTable,
        now_us: u64,
        sink: &mut dyn TokenSink,
        dec: &mut dyn DecodeStep,
    ) -> GenTally {
        let mut t = GenTally::default();
        t.ended[EndReason::Cancelled as usize] = std::mem::take(&mut self.cancelled);
        if self.active == 0 {
            return t;
        }
        let rows_max = dec.rows_max().min(self.rows.len());
        let mut rows = 0;
        for i in 0..self.gens.len() {
            let Some(token) = self.ready(i, table, now_us, sink, &mut t) else {
                continue;
            };
            let slot = SlotId::new(self.gens[i].slot);
            if rows_max > 1 {
                let (cur, _) = table.buffers(slot);
                t.state_bytes_copied += dec.gather(rows, token, cur);
                self.rows[rows] = i as u32;
                rows += 1;
                if rows == rows_max {
                    self.run_rows(rows, table, now_us, sink, dec, &mut t);
                    rows = 0;
                }
                continue;
            }
            let (cur, next) = table.buffers(slot);
            t.runs += 1;
            match dec.step(token, cur, next) {
                Ok(chosen) => {
                    table.flip(slot);
                    self.stepped(i, chosen, table, now_us, sink, &mut t);
                }
                Err(_) => self.finish(i, table, EndReason::Error, sink, &mut t),
            }
        }
        if rows > 0 {
            self.run_rows(rows, table, now_us, sink, dec, &mut t);
        }
        t.running = u64::from(self.active);
        t
    }

    /// Whether stream `i` takes a step now, and with which token: ends
    /// streams that are gone, ending, past their deadline, and holds back
    /// a stream whose last full frame found no transmit buffer.
    fn ready(
        &mut self,
        i: usize,
        table: &mut StreamTable,
        now_us: u64,
        sink: &mut dyn TokenSink,
        t: &mut GenTally,
    ) -> Option<i64> {
        let g = self.gens[i];
        if !g.live {
            return None;
        }
        if !table.holds(SlotId::new(g.slot), g.tenant, g.stream_id) {
            self.retire(i);
            return None;
        }
        if sink.gone(&g.route) {
            table.end(SlotId::new(g.slot));
            t.conn_closed += 1;
            self.retire(i);
            return None;
        }
        if let Some(reason) = g.ending {
            self.finish(i, table, reason, sink, t);
            return None;
        }
        if g.deadline_us != 0 && now_us > g.deadline_us {
            self.finish(i, table, EndReason::Deadline, sink, t);
            return None;
        }
        // The last full frame found no buffer: send it before stepping
        // again.
        if g.pending >= g.tpf && !self.flush(i, sink, false, 0, t) {
            return None;
        }
        let pm = self.limits.prompt_max as usize;
        Some(if g.fed < g.prompt_len {
            self.prompts[i * pm + g.fed as usize]
        } else {
            g.next
        })
    }

    /// Runs the `rows` gathered streams in one call and scatters the
    /// results back; a failed call ends them all with `error`.
    fn run_rows(
        &mut self,
        rows: usize,
        table: &mut StreamTable,
        now_us: u64,
        sink: &mut dyn TokenSink,
        dec: &mut dyn DecodeStep,
        t: &mut GenTally,
    ) {
        t.runs += 1;
        let ok = dec.run(rows).is_ok();
        for r in 0..rows {
            let i = self.rows[r] as usize;
            if !ok {
                self.finish(i, table, EndReason::Error, sink, t);
                continue;
            }
            let slot = SlotId::new(self.gens[i].slot);
            let (_, next) = table.buffers(slot);
            let (chosen, copied) = dec.scatter(r, next);
            t.state_bytes_copied += copied;
            table.flip(slot);
            self.stepped(i, chosen, table, now_us, sink, t);
        }
    }

    /// Stream `i` took a step that chose `chosen`: a prompt step feeds the
    /// next prompt token; else the token is kept, sent per frame, and the
    /// stream ends at EOS or `max_tokens`.
    fn stepped(
        &mut self,
        i: usize,
        chosen: i64,
        table: &mut StreamTable,
        now_us: u64,
        sink: &mut dyn TokenSink,
        t: &mut GenTally,
    ) {
        t.steps += 1;
        let g = &mut self.gens[i];
        if g.fed < g.prompt_len {
            g.fed += 1;
            if g.fed < g.prompt_len {
                t.prefill += 1;
                return;
            }
        }
        if self.limits.eos == Some(chosen) {
            self.finish(i, table, EndReason::Eos, sink, t);
            return;
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
            self.finish(i, table, EndReason::MaxTokens, sink, t);
            return;
        }
        if g.pending >= g.tpf {
            self.flush(i, sink, false, 0, t);
        }
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

    /// Ends every stream with a last frame whose end reason is `error`
    /// (the worker restarts after a panic): its pending tokens go with it;
    /// a stream whose frame finds no buffer ends without one.
    pub fn fail_all(&mut self, table: &mut StreamTable, sink: &mut dyn TokenSink) -> GenTally {
        let mut t = GenTally::default();
        for i in 0..self.gens.len() {
            if !self.gens[i].live {
                continue;
            }
            if self.flush(i, sink, true, EndReason::Error as u8, &mut t) {
                t.ended[EndReason::Error as usize] += 1;
            }
            table.end(SlotId::new(self.gens[i].slot));
            self.retire(i);
        }
        t
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::streams::StreamLimits;
    use sluice_wire::{DType, Kind};

    /// A model whose state is one i64 counter: the next token is the
    /// token plus the counter, the counter counts steps. Batched or not.
    struct Counter {
        rows_max: usize,
        fail: bool,
        batch: Vec<(i64, i64)>,
        runs: usize,
    }

    fn read(b: &[u8]) -> i64 {
        i64::from_le_bytes(b[..8].try_into().unwrap())
    }

    impl DecodeStep for Counter {
        fn rows_max(&self) -> usize {
            self.rows_max
        }
        fn step(&mut self, token: i64, cur: &[u8], next: &mut [u8]) -> Result<i64, Reject> {
            self.runs += 1;
            let c = read(cur) + 1;
            next[..8].copy_from_slice(&c.to_le_bytes());
            Ok(token + c)
        }
        fn gather(&mut self, row: usize, token: i64, cur: &[u8]) -> u64 {
            self.batch.truncate(row);
            self.batch.push((token, read(cur)));
            8
        }
        fn run(&mut self, _rows: usize) -> Result<(), Reject> {
            self.runs += 1;
            if self.fail {
                return Err(Reject::new(ErrorCode::InferenceFailed, "no"));
            }
            Ok(())
        }
        fn scatter(&mut self, row: usize, next: &mut [u8]) -> (i64, u64) {
            let (t, c) = self.batch[row];
            next[..8].copy_from_slice(&(c + 1).to_le_bytes());
            (t + c + 1, 8)
        }
    }

    #[derive(Default)]
    struct Frames {
        /// (stream id from the request id, tokens, end reason).
        got: Vec<(u64, Vec<i64>, u8)>,
        gone: bool,
    }

    impl TokenSink for Frames {
        fn send(
            &mut self,
            _route: &RxPacket,
            write: &mut dyn FnMut(&mut [u8]) -> Result<usize, Reject>,
        ) -> bool {
            let mut buf = vec![0u8; 4096];
            let n = write(&mut buf).unwrap();
            let f = Frame::new_checked(&buf[..n]).unwrap();
            let h = f.stream().unwrap();
            let toks = f
                .tensor("token")
                .map(|t| f.tensor_data(&t).chunks(8).map(read).collect::<Vec<_>>())
                .unwrap_or_default();
            self.got.push((f.request_id(), toks, h.end_reason));
            true
        }
        fn token(&mut self, _: u32, _: usize, _: bool, _: u64) {}
        fn gone(&self, _route: &RxPacket) -> bool {
            self.gone
        }
    }

    fn open_frame(id: u64, prompt: &[i64]) -> Vec<u8> {
        let data: Vec<u8> = prompt.iter().flat_map(|t| t.to_le_bytes()).collect();
        let dims = [prompt.len() as u64];
        let t = [TensorRepr {
            name: "token",
            dtype: DType::I64,
            dims: &dims,
            data: Some(&data),
        }];
        let sh = StreamHeader {
            stream_id: id,
            flags: stream_flags::OPEN,
            tokens_per_frame: 1,
            max_tokens: 3,
            ..StreamHeader::default()
        }
        .to_bytes();
        let ext = [ExtRepr::stream(&sh)];
        let repr = FrameRepr {
            kind: Kind::Request,
            request_id: id,
            tenant_id: 7,
            model: "m",
            model_version: "1",
            extensions: &ext,
            tensors: &t,
            ..FrameRepr::default()
        };
        let mut buf = vec![0u8; 1024];
        let n = repr.emit(&mut buf).unwrap().frame_len;
        buf.truncate(n);
        buf
    }

    /// Four streams run to their end; returns their frames.
    fn generate(rows_max: usize, fail: bool, gone: bool) -> (Frames, GenTally, usize) {
        let limits = StreamLimits {
            per_worker: 8,
            per_tenant: 8,
            idle_us: 1_000_000,
            frames_max: 100,
        };
        let mut table = StreamTable::new(limits, 8);
        let gl = GenLimits {
            eos: None,
            max_tokens: 3,
            prompt_max: 4,
        };
        let mut g = Generator::new(gl, 8, "m", "1", "token");
        for id in 1..=4u64 {
            let f = open_frame(id, &[10 * id as i64, 1]);
            let req = Frame::new_checked(f.as_slice()).unwrap();
            let h = req.stream().unwrap();
            g.open(&mut table, &req, h, RxPacket::default(), true, 0, 0)
                .unwrap();
        }
        let mut dec = Counter {
            rows_max,
            fail,
            batch: Vec::new(),
            runs: 0,
        };
        let mut sink = Frames {
            gone,
            ..Frames::default()
        };
        let mut total = GenTally::default();
        for _ in 0..10 {
            let t = g.iteration(&mut table, 1, &mut sink, &mut dec);
            total.steps += t.steps;
            total.runs += t.runs;
            total.conn_closed += t.conn_closed;
            total.state_bytes_copied += t.state_bytes_copied;
        }
        assert_eq!(g.active(), 0);
        assert_eq!(table.open(), 0, "every slot freed");
        (sink, total, dec.runs)
    }

    #[test]
    fn batched_steps_equal_one_at_a_time() {
        let (one, t1, _) = generate(1, false, false);
        let (many, t4, _) = generate(4, false, false);
        assert_eq!(one.got, many.got);
        // Prompt of 2 (2 steps, the second chooses token 1), then 2 more.
        assert_eq!(t1.steps, 4 * 4);
        assert_eq!((t1.runs, t1.state_bytes_copied), (16, 0));
        assert_eq!((t4.runs, t4.state_bytes_copied), (4, 16 * 16));
        // Stream 1: counter 1, 2, 3, 4: tokens 1+2, 3+3, 6+4.
        let s1: Vec<i64> = one
            .got
            .iter()
            .filter(|f| f.0 == 1)
            .flat_map(|f| f.1.clone())
            .collect();
        assert_eq!(s1, vec![3, 6, 10]);
    }

    #[test]
    fn a_failed_batch_ends_its_streams_with_error() {
        let (f, t, runs) = generate(4, true, false);
        assert_eq!((runs, t.steps), (1, 0));
        assert_eq!(f.got.len(), 4);
        assert!(
            f.got
                .iter()
                .all(|g| g.2 == EndReason::Error as u8 && g.1.is_empty())
        );
    }

    #[test]
    fn a_closed_connection_ends_its_streams_without_frames() {
        let (f, t, runs) = generate(4, false, true);
        assert_eq!((runs, t.conn_closed), (0, 4));
        assert!(f.got.is_empty());
    }
}
