//! One decode step of a token stream (docs/wire.md "Streams",
//! server-driven): no request frame, the appliance feeds the step. The
//! token goes in and the chosen token comes out through a 64-byte aligned
//! scratch on the stack; the state is read from the stream's slot (its
//! current half) and written by ONNX Runtime into the other half, in
//! place, as for a stateful stream. Nothing is allocated and nothing is
//! copied but the two 8-byte tokens.

use sluice_wire::limits::TENSOR_COUNT_MAX;
use sluice_wire::{DType, ErrorCode};

use super::is_aligned;
use super::steps::run_options;
use super::stream::{StateSpec, smsg};
use crate::Reject;
use crate::model::{OrtModel, RunStats, ort_failed};
use crate::ports::DimRule;
use crate::raw::alloc::ReplyTail;
use crate::raw::{self, Values};

/// Where a generative model takes its token and gives the next one,
/// resolved against the model at load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenSpec {
    pub(super) input: usize,
    pub(super) output: usize,
}

/// The token in and out of one step, on the stack, aligned for i64.
#[repr(C, align(64))]
struct TokenIo([u8; 16]);

impl OrtModel {
    /// Resolves a generative stream: `input` (i64, `[1]` or `[batch]`)
    /// takes the step's token and `output` (i64, the same) gives the greedy
    /// next one; every other input and output must be a state of `spec`.
    pub fn token_spec(
        &self,
        spec: &StateSpec,
        input: &str,
        output: &str,
    ) -> Result<TokenSpec, String> {
        let i = self
            .inputs
            .iter()
            .position(|p| p.name == input)
            .ok_or_else(|| format!("token input {input:?} is not an input of the model"))?;
        let o = self
            .outputs
            .iter()
            .position(|p| p.name == output)
            .ok_or_else(|| format!("token output {output:?} is not an output of the model"))?;
        for (what, p) in [("input", &self.inputs[i]), ("output", &self.outputs[o])] {
            let one = p.rank == 1 && !matches!(p.dims[0], DimRule::Fixed(v) if v != 1);
            if p.dtype != DType::I64 || !one {
                return Err(format!(
                    "token {what} {:?} must be int64 of shape [1] or [batch]",
                    p.name
                ));
            }
        }
        let others = (0..self.inputs.len()).filter(|&k| k != i && spec.external & (1 << k) == 0);
        if let Some(k) = others.into_iter().next() {
            return Err(format!(
                "input {:?} is neither the token nor a state: a generative stream feeds only those",
                self.inputs[k].name
            ));
        }
        if spec.reply != [o] {
            return Err(format!(
                "a generative model's outputs are the token {output:?} and the states only"
            ));
        }
        Ok(TokenSpec {
            input: i,
            output: o,
        })
    }

    /// Runs one decode step: `token` and the state in `state_in` in, the
    /// new state into `state_out` in place; returns the chosen token.
    #[allow(clippy::too_many_arguments)]
    pub fn run_token_step(
        &mut self,
        spec: &StateSpec,
        tok: TokenSpec,
        token: i64,
        state_in: &[u8],
        state_out: &mut [u8],
        stats: &mut RunStats,
    ) -> Result<i64, Reject> {
        let r = self.token_inner(spec, tok, token, state_in, state_out, stats);
        match &r {
            Ok(_) => stats.runs += 1,
            Err(e) if e.code == ErrorCode::InferenceFailed => stats.failures += 1,
            Err(_) => stats.rejects += 1,
        }
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn token_inner(
        &mut self,
        spec: &StateSpec,
        tok: TokenSpec,
        token: i64,
        state_in: &[u8],
        state_out: &mut [u8],
        stats: &mut RunStats,
    ) -> Result<i64, Reject> {
        if state_in.len() < spec.half_len || state_out.len() < spec.half_len {
            return Err(Reject::new(ErrorCode::Internal, smsg::STATE_PLACE));
        }
        let options = run_options(&self.default_options, &self.adapters, None);
        // The model's intermediate tensors come from its scratch arena, as
        // in every run (no reply tail here: the outputs are preallocated).
        // Declared before the values: dropped (disarmed) after them.
        let mut no_tail: [u8; 0] = [];
        let tail = ReplyTail::new(&mut self.arena, &mut no_tail, self.arena_on);
        let (_, heap_before) = tail.counts();
        let mut io = TokenIo([0; 16]);
        let (tin, tout) = io.0.split_at_mut(8);
        tin.copy_from_slice(&token.to_le_bytes());
        let mut names_in = [core::ptr::null(); TENSOR_COUNT_MAX];
        let mut names_out = [core::ptr::null(); TENSOR_COUNT_MAX];
        let mut inputs = Values::new();
        inputs
            .push_input(&self.memory, tin, &[1], DType::I64)
            .map_err(|e| ort_failed(&mut self.last_error, e))?;
        names_in[0] = self.inputs[tok.input].c_name.as_ptr();
        for (k, s) in spec.states.iter().enumerate() {
            let data = &state_in[s.offset..s.offset + s.len];
            if !is_aligned(data.as_ptr(), s.dtype) {
                return Err(Reject::new(ErrorCode::Internal, smsg::STATE_PLACE));
            }
            inputs
                .push_input(&self.memory, data, &s.shape[..s.rank], s.dtype)
                .map_err(|e| ort_failed(&mut self.last_error, e))?;
            names_in[k + 1] = self.inputs[s.input].c_name.as_ptr();
        }
        let mut outputs = Values::new();
        outputs
            .push_output(&self.memory, tout, &[1], DType::I64)
            .map_err(|e| ort_failed(&mut self.last_error, e))?;
        names_out[0] = self.outputs[tok.output].c_name.as_ptr();
        let mut want = [core::ptr::null::<u8>(); TENSOR_COUNT_MAX];
        let mut rest: &mut [u8] = state_out;
        let mut consumed = 0;
        for (k, s) in spec.states.iter().enumerate() {
            let (_, after) = std::mem::take(&mut rest).split_at_mut(s.offset - consumed);
            let (region, after) = after.split_at_mut(s.len);
            rest = after;
            consumed = s.offset + s.len;
            want[k] = region.as_ptr();
            names_out[k + 1] = self.outputs[s.output].c_name.as_ptr();
            outputs
                .push_output(&self.memory, region, &s.shape[..s.rank], s.dtype)
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
        let mut b = [0u8; 8];
        b.copy_from_slice(&io.0[8..16]);
        Ok(i64::from_le_bytes(b))
    }
}
