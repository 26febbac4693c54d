//! Decode steps of several token streams in one ONNX Runtime call (issue
//! 18: "batched across streams where the model takes a batch dim"). The
//! streams' states live in their own slots (ping-pong halves, not one
//! after another), so a batched step copies: each stream's token and state
//! are gathered into row `r` of a preallocated batch input, ONNX Runtime
//! writes the batch's next tokens and states into a preallocated batch
//! output in place, and each row's new state is scattered back into its
//! slot's other half. That copy is the state's bytes twice per stream and
//! step (the decoder's: 64 + 64 bytes); the engine counts it. Nothing is
//! allocated per step.

use sluice_wire::limits::TENSOR_COUNT_MAX;
use sluice_wire::{DType, ErrorCode};

use super::steps::run_options;
use super::stream::{StateSpec, smsg};
use super::token::TokenSpec;
use crate::Reject;
use crate::model::{OrtModel, RunStats, ort_failed};
use crate::ports::DimRule;
use crate::raw::alloc::ReplyTail;
use crate::raw::{self, Values};

const ALIGN: usize = sluice_wire::TENSOR_ALIGN;

/// One state tensor's place: `len` bytes at `src` in a slot half, rows of
/// `len` bytes from `at` in the batch buffers.
#[derive(Debug, Clone, Copy)]
struct Region {
    src: usize,
    len: usize,
    at: usize,
}

/// `len` zero bytes starting at a multiple of 64 (an index range into
/// `mem`).
#[derive(Debug)]
struct Buf {
    mem: Vec<u8>,
    start: usize,
}

impl Buf {
    fn new(len: usize) -> Buf {
        let mem = vec![0u8; len + ALIGN];
        let start = mem.as_ptr().align_offset(ALIGN).min(ALIGN);
        Buf { mem, start }
    }
    fn bytes(&self) -> &[u8] {
        &self.mem[self.start..]
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.mem[self.start..]
    }
}

/// The batch buffers of one generative model on one worker, made at load
/// for `rows_max` streams: tokens (i64 rows from 0), then each state's rows,
/// every region at a multiple of 64.
#[derive(Debug)]
pub struct TokenBatch {
    rows_max: usize,
    // Drop order: plain memory; the regions are offsets into it.
    input: Buf,
    output: Buf,
    states: Vec<Region>,
}

fn round_up(v: usize) -> usize {
    v.div_ceil(ALIGN) * ALIGN
}

impl TokenBatch {
    /// Streams one call takes.
    pub fn rows_max(&self) -> usize {
        self.rows_max
    }

    /// Puts stream `row`'s `token` and current state (a slot half laid
    /// out as the spec says) into the batch input. Returns the state bytes
    /// copied.
    pub fn gather(&mut self, row: usize, token: i64, state: &[u8]) -> u64 {
        assert!(row < self.rows_max, "batch row out of range");
        let b = self.input.bytes_mut();
        b[row * 8..row * 8 + 8].copy_from_slice(&token.to_le_bytes());
        let mut n = 0;
        for r in &self.states {
            let d = r.at + row * r.len;
            b[d..d + r.len].copy_from_slice(&state[r.src..r.src + r.len]);
            n += r.len as u64;
        }
        n
    }

    /// Stream `row`'s chosen token, its new state written into `state`
    /// (the slot's other half). Returns the token and the bytes copied.
    pub fn scatter(&self, row: usize, state: &mut [u8]) -> (i64, u64) {
        assert!(row < self.rows_max, "batch row out of range");
        let b = self.output.bytes();
        let mut n = 0;
        for r in &self.states {
            let s = r.at + row * r.len;
            state[r.src..r.src + r.len].copy_from_slice(&b[s..s + r.len]);
            n += r.len as u64;
        }
        let mut t = [0u8; 8];
        t.copy_from_slice(&b[row * 8..row * 8 + 8]);
        (i64::from_le_bytes(t), n)
    }
}

impl OrtModel {
    /// Batch buffers for decode steps of up to `rows_max` streams in one
    /// call, or why the model cannot take them: the token input and output
    /// and every state input and output must have a free first dimension
    /// (the batch), and every configured state shape must start with 1.
    pub fn token_batch(
        &self,
        spec: &StateSpec,
        tok: TokenSpec,
        rows_max: usize,
    ) -> Result<TokenBatch, String> {
        let free = |d: &DimRule| !matches!(d, DimRule::Fixed(_));
        let (ti, to) = (&self.inputs[tok.input], &self.outputs[tok.output]);
        if !free(&ti.dims[0]) || !free(&to.dims[0]) {
            return Err(format!(
                "token input {:?} or output {:?} has a fixed first dimension",
                ti.name, to.name
            ));
        }
        if rows_max == 0 || rows_max > crate::BATCH_ROWS_MAX {
            return Err(format!("1 to {} rows", crate::BATCH_ROWS_MAX));
        }
        let mut states = Vec::with_capacity(spec.states.len());
        let mut at = round_up(rows_max * 8);
        for s in &spec.states {
            let (i, o) = (&self.inputs[s.input], &self.outputs[s.output]);
            if s.rank == 0 || s.shape[0] != 1 || !free(&i.dims[0]) || !free(&o.dims[0]) {
                return Err(format!(
                    "state {:?} has no batch dimension (a free first dimension, configured as 1)",
                    i.name
                ));
            }
            states.push(Region {
                src: s.offset,
                len: s.len,
                at,
            });
            at += round_up(rows_max * s.len);
        }
        Ok(TokenBatch {
            rows_max,
            input: Buf::new(at),
            output: Buf::new(at),
            states,
        })
    }

    /// Runs one decode step for the first `rows` rows of `batch` (gathered
    /// by [`TokenBatch::gather`]) in one call: ONNX Runtime writes the next
    /// tokens and states into the batch output, in place (checked).
    pub fn run_token_batch(
        &mut self,
        spec: &StateSpec,
        tok: TokenSpec,
        batch: &mut TokenBatch,
        rows: usize,
        stats: &mut RunStats,
    ) -> Result<(), Reject> {
        let r = self.token_batch_inner(spec, tok, batch, rows, stats);
        match &r {
            Ok(()) => stats.runs += 1,
            Err(e) if e.code == ErrorCode::InferenceFailed => stats.failures += 1,
            Err(_) => stats.rejects += 1,
        }
        r
    }

    fn token_batch_inner(
        &mut self,
        spec: &StateSpec,
        tok: TokenSpec,
        batch: &mut TokenBatch,
        rows: usize,
        stats: &mut RunStats,
    ) -> Result<(), Reject> {
        if rows == 0 || rows > batch.rows_max || batch.states.len() != spec.states.len() {
            return Err(Reject::new(ErrorCode::Internal, smsg::STATE_PLACE));
        }
        let options = run_options(&self.default_options, &self.adapters, None);
        // Declared before the values: dropped (disarmed) after them.
        let mut no_tail: [u8; 0] = [];
        let tail = ReplyTail::new(&mut self.arena, &mut no_tail, self.arena_on);
        let (_, heap_before) = tail.counts();
        let mut names_in = [core::ptr::null(); TENSOR_COUNT_MAX];
        let mut names_out = [core::ptr::null(); TENSOR_COUNT_MAX];
        let mut shape = [0i64; sluice_wire::limits::RANK_MAX];
        let tok_shape = [rows as i64];
        let inb = batch.input.bytes();
        let mut inputs = Values::new();
        inputs
            .push_input(&self.memory, &inb[..rows * 8], &tok_shape, DType::I64)
            .map_err(|e| ort_failed(&mut self.last_error, e))?;
        names_in[0] = self.inputs[tok.input].c_name.as_ptr();
        for (k, (s, r)) in spec.states.iter().zip(&batch.states).enumerate() {
            shape[..s.rank].copy_from_slice(&s.shape[..s.rank]);
            shape[0] = rows as i64;
            inputs
                .push_input(
                    &self.memory,
                    &inb[r.at..r.at + rows * r.len],
                    &shape[..s.rank],
                    s.dtype,
                )
                .map_err(|e| ort_failed(&mut self.last_error, e))?;
            names_in[k + 1] = self.inputs[s.input].c_name.as_ptr();
        }
        let mut want = [core::ptr::null::<u8>(); TENSOR_COUNT_MAX];
        let mut outputs = Values::new();
        let (head, mut rest) = batch.output.bytes_mut().split_at_mut(batch.states[0].at);
        outputs
            .push_output(&self.memory, &mut head[..rows * 8], &tok_shape, DType::I64)
            .map_err(|e| ort_failed(&mut self.last_error, e))?;
        names_out[0] = self.outputs[tok.output].c_name.as_ptr();
        let mut consumed = batch.states[0].at;
        for (k, (s, r)) in spec.states.iter().zip(&batch.states).enumerate() {
            let (_, after) = std::mem::take(&mut rest).split_at_mut(r.at - consumed);
            let (region, after) = after.split_at_mut(rows * r.len);
            rest = after;
            consumed = r.at + rows * r.len;
            want[k] = region.as_ptr();
            shape[..s.rank].copy_from_slice(&s.shape[..s.rank]);
            shape[0] = rows as i64;
            names_out[k + 1] = self.outputs[s.output].c_name.as_ptr();
            outputs
                .push_output(&self.memory, region, &shape[..s.rank], s.dtype)
                .map_err(|e| ort_failed(&mut self.last_error, e))?;
        }
        let n = spec.states.len() + 1;
        raw::run(
            &mut self.session,
            options,
            &names_in[..n],
            &inputs,
            &names_out[..n],
            &mut outputs,
        )
        .map_err(|e| ort_failed(&mut self.last_error, e))?;
        for (k, w) in want.iter().take(spec.states.len()).enumerate() {
            let got = outputs
                .data_ptr(k + 1)
                .map_err(|e| ort_failed(&mut self.last_error, e))?;
            if got != *w {
                return Err(Reject::new(ErrorCode::Internal, smsg::STATE_PLACE));
            }
        }
        outputs.release();
        drop(outputs);
        drop(inputs);
        let (live, heap_after) = tail.counts();
        stats.heap_allocs += heap_after - heap_before;
        if live != 0 {
            // ORT kept arena memory past the run: from now on its memory
            // comes from the heap.
            self.arena_on = false;
        }
        drop(tail);
        Ok(())
    }
}
