//! One step of a stateful stream (docs/wire.md "Streams"): the request
//! carries the step's inputs without the state; ONNX Runtime reads the
//! state from the stream's slot (the current half of its ping-pong pair)
//! and writes the new state into the other half, in place, so a step copies
//! no state and allocates nothing. The response carries the other outputs.

use sluice_wire::limits::{RANK_MAX, TENSOR_COUNT_MAX};
use sluice_wire::{DType, ErrorCode, ExtRepr, Frame};

use super::steps::{
    Table, Tally, adapter_slot, count_preallocated, feed_inputs, prepare_outputs, run_options,
};
use super::{align_up, header_err, is_aligned, response};
use crate::Reject;
use crate::model::{OrtModel, RunStats, ort_failed};
use crate::ports::{DimRule, Placement};
use crate::raw::{self, Values};

/// One output that feeds one input at the next step, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatePair {
    /// The input that takes the state (Silero VAD: `state`).
    pub input: String,
    /// The output that gives the next state (Silero VAD: `stateN`).
    pub output: String,
    /// The state's shape (Silero VAD: `[2, 1, 128]`).
    pub dims: Vec<u64>,
}

/// Where each state tensor lies in a slot half, resolved against a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateSpec {
    pub(super) states: Vec<StateTensor>,
    /// Bytes of one half (every tensor starts at a multiple of 64).
    pub half_len: usize,
    /// Model input indices the state feeds (bit i: input i).
    pub(super) external: u32,
    /// Outputs the response carries, in model order.
    pub(super) reply: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StateTensor {
    pub(super) input: usize,
    pub(super) output: usize,
    pub(super) dtype: DType,
    pub(super) rank: usize,
    pub(super) shape: [i64; RANK_MAX],
    pub(super) offset: usize,
    pub(super) len: usize,
}

impl StateSpec {
    /// Whether another spec keeps state of the same names, dtypes and
    /// shapes, so a stream may go on with a new model version (an alias
    /// switch) on the state it has.
    pub fn same_shapes(&self, other: &StateSpec, a: &OrtModel, b: &OrtModel) -> bool {
        self.half_len == other.half_len
            && self.states.len() == other.states.len()
            && self.states.iter().zip(&other.states).all(|(x, y)| {
                x.dtype == y.dtype
                    && x.shape[..x.rank] == y.shape[..y.rank]
                    && x.offset == y.offset
                    && a.inputs[x.input].name == b.inputs[y.input].name
                    && a.outputs[x.output].name == b.outputs[y.output].name
            })
    }
}

impl StateSpec {
    /// A signature of the state (input and output names, dtypes, shapes,
    /// layout) for `model`: two versions with equal signatures can carry
    /// on each other's streams (FNV-1a over the fields).
    pub fn signature(&self, model: &OrtModel) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |b: &[u8]| {
            for &x in b {
                h = (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3);
            }
            h = (h ^ 0xff).wrapping_mul(0x0100_0000_01b3);
        };
        for s in &self.states {
            eat(model.inputs[s.input].name.as_bytes());
            eat(model.outputs[s.output].name.as_bytes());
            eat(&[s.dtype as u8]);
            for d in &s.shape[..s.rank] {
                eat(&d.to_le_bytes());
            }
            eat(&(s.offset as u64).to_le_bytes());
        }
        h
    }
}

/// Messages of stream refusals.
pub(crate) mod smsg {
    pub const STATE_INPUT: &str =
        "a state input is kept by the appliance; send only the step's inputs";
    pub const STATE_PLACE: &str = "ONNX Runtime did not write the state in place";
}

impl OrtModel {
    /// Resolves a stream's state pairs against this model (at load): every
    /// pair names an input and an output of equal dtype whose declared
    /// dims admit the configured shape; every other output's shape must be
    /// known from the inputs (the reply is laid out before the run).
    pub fn state_spec(&self, pairs: &[StatePair]) -> Result<StateSpec, String> {
        if pairs.is_empty() || pairs.len() > TENSOR_COUNT_MAX / 2 {
            return Err(format!(
                "a stream declares 1 to {} state pairs",
                TENSOR_COUNT_MAX / 2
            ));
        }
        let mut states = Vec::with_capacity(pairs.len());
        let mut external = 0u32;
        let mut offset = 0usize;
        let mut state_outputs = Vec::with_capacity(pairs.len());
        for p in pairs {
            let input = self
                .inputs
                .iter()
                .position(|x| x.name == p.input)
                .ok_or_else(|| format!("state input {:?} is not an input of the model", p.input))?;
            let output = self
                .outputs
                .iter()
                .position(|x| x.name == p.output)
                .ok_or_else(|| {
                    format!("state output {:?} is not an output of the model", p.output)
                })?;
            let (i, o) = (&self.inputs[input], &self.outputs[output]);
            if i.dtype != o.dtype {
                return Err(format!(
                    "state {} and {} differ in dtype",
                    p.input, p.output
                ));
            }
            if p.dims.len() != i.rank || p.dims.len() != o.rank || p.dims.len() > RANK_MAX {
                return Err(format!(
                    "state shape {:?} does not have the rank of {} and {}",
                    p.dims, p.input, p.output
                ));
            }
            let mut shape = [0i64; RANK_MAX];
            for (k, &d) in p.dims.iter().enumerate() {
                for rule in [i.dims[k], o.dims[k]] {
                    if let DimRule::Fixed(v) = rule
                        && v != d
                    {
                        return Err(format!(
                            "state shape {:?}: dimension {k} is {v} in the model",
                            p.dims
                        ));
                    }
                }
                shape[k] = i64::try_from(d).map_err(|_| "state dimension too large".to_string())?;
            }
            let len = i
                .dtype
                .byte_len(&p.dims)
                .ok_or_else(|| "state too large".to_string())?;
            external |= 1 << input;
            state_outputs.push(output);
            states.push(StateTensor {
                input,
                output,
                dtype: i.dtype,
                rank: i.rank,
                shape,
                offset,
                len,
            });
            offset = align_up(offset + len);
        }
        let mut reply = Vec::new();
        for (o, port) in self.outputs.iter().enumerate() {
            if state_outputs.contains(&o) {
                continue;
            }
            if port.placement != Placement::Preallocated {
                return Err(format!(
                    "output {:?} has a shape only the run decides; a stream model's other \
                     outputs must have shapes known from its inputs",
                    port.name
                ));
            }
            reply.push(o);
        }
        Ok(StateSpec {
            states,
            half_len: offset.max(64),
            external,
            reply,
        })
    }

    /// Runs one step of a stateful stream: `req`'s tensors and the state
    /// in `state_in` (the slot's current half) in, the new state into
    /// `state_out` (its other half) and the response, carrying `extensions`
    /// (the stream header), into `tx`. Returns the response length.
    #[allow(clippy::too_many_arguments)]
    pub fn run_step(
        &mut self,
        req: &Frame<&[u8]>,
        adapter: Option<&str>,
        spec: &StateSpec,
        state_in: &[u8],
        state_out: &mut [u8],
        extensions: &[ExtRepr<'_>],
        tx: &mut [u8],
        stats: &mut RunStats,
    ) -> Result<usize, Reject> {
        let r = self.step_inner(
            req, adapter, spec, state_in, state_out, extensions, tx, stats,
        );
        match &r {
            Ok(_) => stats.runs += 1,
            Err(e) if e.code == ErrorCode::InferenceFailed => stats.failures += 1,
            Err(_) => stats.rejects += 1,
        }
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn step_inner(
        &mut self,
        req: &Frame<&[u8]>,
        adapter: Option<&str>,
        spec: &StateSpec,
        state_in: &[u8],
        state_out: &mut [u8],
        extensions: &[ExtRepr<'_>],
        tx: &mut [u8],
        stats: &mut RunStats,
    ) -> Result<usize, Reject> {
        if state_in.len() < spec.half_len || state_out.len() < spec.half_len {
            return Err(Reject::new(ErrorCode::Internal, smsg::STATE_PLACE));
        }
        let slot = adapter_slot(&mut self.adapters, adapter)?;
        let options = run_options(&self.default_options, &self.adapters, slot);
        let mut in_shapes = [[0i64; RANK_MAX]; TENSOR_COUNT_MAX];
        let (descs, bound) = self.bind_with(req, &mut in_shapes, spec.external)?;
        // The reply's outputs: every output but the state ones, all
        // preallocated (checked at load).
        let mut table = Table::plan(&self.outputs, &bound)?;
        table.order[..spec.reply.len()].copy_from_slice(&spec.reply);
        table.n_pre = spec.reply.len();
        table.n_out = spec.reply.len();
        let mut repr = response(
            &self.outputs,
            &self.name,
            &self.version,
            req,
            adapter,
            &table.order[..table.n_out],
            &table.dims,
        );
        repr.extensions = extensions;
        let layout0 = repr.layout().map_err(|e| header_err(e, 0))?;
        if layout0.frame_len > tx.len() {
            return Err(super::too_large(layout0.frame_len));
        }
        let mut tally = Tally::new(&mut self.output_stats);

        let mut inputs = Values::new();
        let mut fed = feed_inputs(
            &self.inputs,
            &self.memory,
            req,
            &descs,
            &in_shapes,
            &mut inputs,
        )
        .map_err(|e| ort_failed(&mut self.last_error, e))?;
        tally.add_inputs(&fed);
        for s in &spec.states {
            let data = &state_in[s.offset..s.offset + s.len];
            if !is_aligned(data.as_ptr(), s.dtype) {
                return Err(Reject::new(ErrorCode::Internal, smsg::STATE_PLACE));
            }
            inputs
                .push_input(&self.memory, data, &s.shape[..s.rank], s.dtype)
                .map_err(|e| ort_failed(&mut self.last_error, e))?;
            fed.names[fed.n] = self.inputs[s.input].c_name.as_ptr();
            fed.n += 1;
        }

        let mut outputs = Values::new();
        let mut slots = prepare_outputs(
            &self.outputs,
            &self.memory,
            &table,
            &layout0,
            &mut tx[..layout0.frame_len],
            &mut outputs,
            &mut self.last_error,
        )?;
        let n_reply = table.n_out;
        let mut rest: &mut [u8] = state_out;
        let mut consumed = 0;
        let mut want = [core::ptr::null::<u8>(); TENSOR_COUNT_MAX];
        for (k, s) in spec.states.iter().enumerate() {
            let (_, after) = std::mem::take(&mut rest).split_at_mut(s.offset - consumed);
            let (region, after) = after.split_at_mut(s.len);
            rest = after;
            consumed = s.offset + s.len;
            want[k] = region.as_ptr();
            slots.names[n_reply + k] = self.outputs[s.output].c_name.as_ptr();
            outputs
                .push_output(&self.memory, region, &s.shape[..s.rank], s.dtype)
                .map_err(|e| ort_failed(&mut self.last_error, e))?;
        }
        let n_names = n_reply + spec.states.len();
        raw::run(
            &mut self.session,
            options,
            &fed.names[..fed.n],
            &inputs,
            &slots.names[..n_names],
            &mut outputs,
        )
        .map_err(|e| ort_failed(&mut self.last_error, e))?;
        count_preallocated(&self.outputs, &table, &slots.ptrs, &outputs, &mut tally)
            .map_err(|e| ort_failed(&mut self.last_error, e))?;
        for (k, _) in spec.states.iter().enumerate() {
            let got = outputs
                .data_ptr(n_reply + k)
                .map_err(|e| ort_failed(&mut self.last_error, e))?;
            if got != want[k] {
                return Err(Reject::new(ErrorCode::Internal, smsg::STATE_PLACE));
            }
        }
        outputs.release();
        drop(outputs);
        drop(inputs);
        repr.emit(tx)
            .map_err(|e| header_err(e, layout0.frame_len))?;
        tally.add_to(stats);
        Ok(layout0.frame_len)
    }
}
