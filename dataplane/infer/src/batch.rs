//! Dynamic batching: requests for one model version stacked along dimension
//! 0 into one ONNX Runtime run, and the outputs split back into each
//! request's reply.
//!
//! A model can batch when dimension 0 of every required input and every
//! output is declared with one and the same symbol (`batch`), and that
//! symbol appears nowhere else; rows are then independent by the model's own
//! declaration. Requests stack when they agree on every other dimension and
//! on the adapter (the engine groups them by [`BatchKey`]).
//!
//! What it costs: the inputs of a batch are gathered into the caller's
//! batch input buffer (one copy of every input byte), and the outputs, which
//! ONNX Runtime writes into the batch output buffer (preallocated, or placed
//! there by the reply allocator), are written straight into each reply by the
//! frame emitter (one copy of every output byte). Both are counted in
//! [`RunStats`]. A batch of one never comes here: it takes the zero-copy
//! path of [`OrtModel::run_into`].

use std::ffi::c_char;

use sluice_wire::limits::{RANK_MAX, TENSOR_COUNT_MAX};
pub use sluice_wire::{BatchKey, BatchSlot};
use sluice_wire::{ErrorCode, Frame, Kind};

use crate::model::{OrtModel, RunStats, ort_failed};
use crate::ports::{DimRule, Placement, Port};
use crate::raw::alloc::ReplyTail;
use crate::raw::{self, Values};
use crate::run::{header_err, msg, response, too_large};
use crate::{BATCH_ROWS_MAX, Reject};

/// One output of the last batch run: where its rows are in the batch output
/// buffer and the shape of one row.
#[derive(Debug, Clone, Copy, Default)]
struct OutRows {
    off: usize,
    row_bytes: usize,
    /// Dimensions 1.. (dimension 0 is each request's rows).
    dims: [u64; RANK_MAX],
}

/// What pass 1 of a batch gathered: the rows, the first request's shapes
/// and bound symbols, and where each input's rows are in the batch input
/// buffer.
struct Gathered {
    total: usize,
    ref_shapes: [[i64; RANK_MAX]; TENSOR_COUNT_MAX],
    ref_bound: [Option<u64>; TENSOR_COUNT_MAX * RANK_MAX],
    row_in: [usize; TENSOR_COUNT_MAX],
    in_off: [usize; TENSOR_COUNT_MAX],
    /// Input bytes copied.
    bytes: u64,
}

/// Per model: the batch symbol, decided at load, and the last run's layout.
#[derive(Debug)]
pub(crate) struct BatchState {
    /// Symbol of dimension 0, when the model can batch.
    pub(crate) sym: Option<u8>,
    /// Why it cannot, otherwise.
    pub(crate) refusal: String,
    rows: usize,
    outs: [OutRows; TENSOR_COUNT_MAX],
}

impl BatchState {
    pub(crate) fn of(inputs: &[Port], required: usize, outputs: &[Port]) -> BatchState {
        let (sym, refusal) = match batch_symbol(&inputs[..required], outputs) {
            Ok(s) => (Some(s), String::new()),
            Err(why) => (None, why),
        };
        BatchState {
            sym,
            refusal,
            rows: 0,
            outs: [OutRows::default(); TENSOR_COUNT_MAX],
        }
    }
}

/// The symbol every input and output declares at dimension 0, or why there
/// is none.
fn batch_symbol(inputs: &[Port], outputs: &[Port]) -> Result<u8, String> {
    let mut sym = None;
    for (what, p) in inputs
        .iter()
        .map(|p| ("input", p))
        .chain(outputs.iter().map(|p| ("output", p)))
    {
        let s = match (p.rank, p.dims[0]) {
            (0, _) => return Err(format!("{what} {:?} is a scalar", p.name)),
            (_, DimRule::Sym(s)) => s,
            (_, DimRule::Fixed(v)) => {
                return Err(format!("{what} {:?} has a fixed dimension 0 ({v})", p.name));
            }
            (_, DimRule::Any) => {
                return Err(format!(
                    "{what} {:?} dimension 0 is not named by an input symbol",
                    p.name
                ));
            }
        };
        match sym {
            None => sym = Some(s),
            Some(t) if t != s => {
                return Err(format!(
                    "{what} {:?} names dimension 0 differently from the first input",
                    p.name
                ));
            }
            Some(_) => {}
        }
    }
    let Some(s) = sym else {
        return Err("the model has no inputs".into());
    };
    for p in inputs.iter().chain(outputs) {
        if p.dims[1..p.rank.max(1)].contains(&DimRule::Sym(s)) {
            return Err(format!(
                "{:?} uses the batch dimension's symbol past dimension 0",
                p.name
            ));
        }
    }
    Ok(s)
}

const fn align_up(v: usize) -> usize {
    (v + sluice_wire::TENSOR_ALIGN - 1) & !(sluice_wire::TENSOR_ALIGN - 1)
}

/// FNV-1a, 64 bits: the key only groups candidates, run_batch checks.
fn fnv(h: u64, bytes: &[u8]) -> u64 {
    let mut h = h;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl OrtModel {
    /// Whether requests for this model can be stacked into one run; the
    /// reason when not (dimension 0 not declared with one symbol).
    pub fn batchable(&self) -> Result<(), &str> {
        match self.batch.sym {
            Some(_) => Ok(()),
            None => Err(&self.batch.refusal),
        }
    }

    /// The rows `req` would add to a batch and the key that must match,
    /// or `None` when it cannot join one (the model cannot batch, the
    /// request sends an optional input, or it is malformed: it then runs on
    /// its own and gets its precise error there). Allocation-free.
    pub fn batch_key(&self, req: &Frame<&[u8]>, adapter: Option<&str>) -> Option<BatchKey> {
        self.batch.sym?;
        if req.kind() != Kind::Request {
            return None;
        }
        let mut h = fnv(0xcbf2_9ce4_8422_2325, adapter.unwrap_or("").as_bytes());
        let mut rows = None;
        let mut seen = 0usize;
        for t in req.tensors() {
            if t.name == sluice_wire::SECTION_TENSOR_NAME {
                continue;
            }
            let i = self.inputs[..self.required]
                .iter()
                .position(|p| p.name == t.name)?;
            let dims = t.dims();
            let &d0 = dims.first()?;
            if *rows.get_or_insert(d0) != d0 {
                return None;
            }
            h = fnv(h, &(i as u32).to_le_bytes());
            for d in &dims[1..] {
                h = fnv(h, &d.to_le_bytes());
            }
            seen += 1;
        }
        if seen != self.required {
            return None;
        }
        let rows = u32::try_from(rows?).ok()?;
        (rows >= 1).then_some(BatchKey {
            rows,
            key: h.max(1),
        })
    }

    /// Runs the requests `reqs` (checked request frames, all for this
    /// model version and `adapter`) as one batch: gathers their inputs into
    /// `input`, runs once, leaves the outputs in `output`. `slots[i]` says
    /// what became of `reqs[i]`; answer each stacked one with
    /// [`OrtModel::batch_reply`] before the next batch run. Returns the rows
    /// run (0: nothing was stacked, no run).
    ///
    /// Both buffers must be 64-byte aligned. An error means the run itself
    /// failed (ONNX Runtime, an unknown adapter, an output that did not land
    /// in `output`): no request was answered, and the caller runs them one
    /// by one so each gets its own answer.
    pub fn run_batch(
        &mut self,
        reqs: &[&[u8]],
        adapter: Option<&str>,
        input: &mut [u8],
        output: &mut [u8],
        slots: &mut [BatchSlot],
        stats: &mut RunStats,
    ) -> Result<usize, Reject> {
        let r = self.run_batch_inner(reqs, adapter, input, output, slots, stats);
        match &r {
            Ok(0) => {}
            Ok(_) => stats.batch_runs += 1,
            Err(e) if e.code == ErrorCode::InferenceFailed => stats.failures += 1,
            Err(_) => {}
        }
        for s in slots.iter().take(reqs.len()) {
            if let BatchSlot::Refused(_) = s {
                stats.rejects += 1;
            }
        }
        if r.is_err() {
            self.batch.rows = 0;
        }
        r
    }

    fn run_batch_inner(
        &mut self,
        reqs: &[&[u8]],
        adapter: Option<&str>,
        input: &mut [u8],
        output: &mut [u8],
        slots: &mut [BatchSlot],
        stats: &mut RunStats,
    ) -> Result<usize, Reject> {
        self.batch.rows = 0;
        let n = reqs.len().min(slots.len());
        slots[..n].fill(BatchSlot::Left);
        let Some(b) = self.batch.sym else {
            return Err(Reject::new(ErrorCode::Internal, msg::NOT_BATCHABLE));
        };
        let slot = crate::run::steps::adapter_slot(&mut self.adapters, adapter)?;
        let options = crate::run::steps::run_options(&self.default_options, &self.adapters, slot);
        let (n_in, n_out) = (self.required, self.outputs.len());
        let inputs = &self.inputs[..n_in];

        let g = self.gather(b, &reqs[..n], input, output.len(), &mut slots[..n]);
        if g.total == 0 {
            return Ok(0);
        }
        let Gathered {
            total,
            ref_shapes,
            ref_bound,
            row_in,
            in_off,
            bytes: gathered,
        } = g;

        // Output regions for the outputs whose shape is known before the
        // run; the rest of `output` is the reply allocator's tail.
        let (mut outs, out_shapes, end) = preallocated(&self.outputs, total, &ref_bound);
        if end > output.len() {
            return Err(too_large(end));
        }
        let (head, tail) = output.split_at_mut(end);
        let tail_base = end;
        // Declared before the values: dropped (disarmed) after all of them.
        let mut tail = ReplyTail::new(&mut self.arena, tail, self.arena_on);
        let (_, heap_before) = tail.counts();

        let mut in_values = Values::new();
        let mut in_names = [core::ptr::null::<c_char>(); TENSOR_COUNT_MAX];
        let input: &[u8] = input;
        for (k, p) in inputs.iter().enumerate() {
            let mut shape = ref_shapes[k];
            shape[0] = total as i64;
            let data = &input[in_off[k]..in_off[k] + total * row_in[k]];
            if let Err(e) = in_values.push_input(&self.memory, data, &shape[..p.rank], p.dtype) {
                return Err(ort_failed(&mut self.last_error, e));
            }
            in_names[k] = p.c_name.as_ptr();
        }
        let mut out_values = Values::new();
        let mut out_names = [core::ptr::null::<c_char>(); TENSOR_COUNT_MAX];
        let mut rest: &mut [u8] = head;
        let mut consumed = 0usize;
        for (o, p) in self.outputs.iter().enumerate() {
            out_names[o] = p.c_name.as_ptr();
            if p.placement != Placement::Preallocated {
                if let Err(e) = out_values.push_empty() {
                    return Err(ort_failed(&mut self.last_error, e));
                }
                continue;
            }
            let len = p.dtype.byte_len(&outs[o].dims[..p.rank]).unwrap_or(0);
            let (_, after) = std::mem::take(&mut rest).split_at_mut(outs[o].off - consumed);
            let (region, after) = after.split_at_mut(len);
            rest = after;
            consumed = outs[o].off + len;
            if let Err(e) =
                out_values.push_output(&self.memory, region, &out_shapes[o][..p.rank], p.dtype)
            {
                return Err(ort_failed(&mut self.last_error, e));
            }
        }

        if let Err(e) = raw::run(
            &mut self.session,
            options,
            &in_names[..n_in],
            &in_values,
            &out_names[..n_out],
            &mut out_values,
        ) {
            return Err(ort_failed(&mut self.last_error, e));
        }

        // Allocator-placed outputs: ORT chose their shapes; they must hold
        // `total` rows and lie in the batch output buffer's tail.
        let moved = place_allocated(
            &self.outputs,
            &out_values,
            &mut tail,
            tail_base,
            total,
            &mut outs,
            &mut self.last_error,
        )?;
        out_values.release();
        drop(out_values);
        drop(in_values);
        let (live, heap_after) = tail.counts();
        stats.heap_allocs += heap_after - heap_before;
        if live != 0 {
            self.arena_on = false;
        }
        drop(tail);
        // The arena is reset: ORT's output blocks in the tail are free for
        // the next run, but their bytes stay until then.
        self.batch.rows = total;
        self.batch.outs = outs;
        stats.payload_bytes_copied += gathered + moved;
        stats.batch_input_bytes_copied += gathered;
        stats.batch_output_bytes_copied += moved;
        Ok(total)
    }

    /// Pass 1 of a batch: checks each request as `run_into` would (a refusal
    /// goes into its slot), and gathers the inputs of those that fit (same
    /// shapes past dimension 0 as the first, within the row and buffer
    /// limits) into per-input regions of `input`.
    fn gather(
        &self,
        b: u8,
        reqs: &[&[u8]],
        input: &mut [u8],
        output_len: usize,
        slots: &mut [BatchSlot],
    ) -> Gathered {
        let n_in = self.required;
        let inputs = &self.inputs[..n_in];
        let mut ref_shapes = [[0i64; RANK_MAX]; TENSOR_COUNT_MAX];
        let mut ref_bound = [None; TENSOR_COUNT_MAX * RANK_MAX];
        let mut row_in = [0usize; TENSOR_COUNT_MAX];
        let mut in_off = [0usize; TENSOR_COUNT_MAX];
        let mut cap_rows = 0usize;
        let mut total = 0usize;
        let mut gathered = 0u64;
        for i in 0..reqs.len().min(slots.len()) {
            let req = Frame::new_unchecked(reqs[i]);
            let mut shapes = [[0i64; RANK_MAX]; TENSOR_COUNT_MAX];
            let (descs, bound) = match self.bind(&req, &mut shapes) {
                Ok(v) => v,
                Err(e) => {
                    slots[i] = BatchSlot::Refused(e);
                    continue;
                }
            };
            // Optional inputs are not stacked: such a request runs alone.
            if descs[n_in..self.inputs.len()].iter().any(Option::is_some) {
                continue;
            }
            let rows = bound[b as usize].unwrap_or(0) as usize;
            if rows == 0 {
                continue;
            }
            if total == 0 {
                ref_shapes = shapes;
                ref_bound = bound;
                let mut in_row_sum = 0usize;
                for (k, p) in inputs.iter().enumerate() {
                    let d: [u64; RANK_MAX] = core::array::from_fn(|j| shapes[k][j] as u64);
                    row_in[k] = p.dtype.byte_len(&d[1..p.rank]).unwrap_or(usize::MAX);
                    in_row_sum = in_row_sum.saturating_add(row_in[k]);
                }
                let out_row_sum = self.out_row_sum(&bound);
                let slack = sluice_wire::TENSOR_ALIGN * TENSOR_COUNT_MAX;
                let fit = |len: usize, per_row: usize| {
                    len.saturating_sub(slack)
                        .checked_div(per_row)
                        .unwrap_or(BATCH_ROWS_MAX)
                };
                // Half the output buffer stays free for allocator-placed
                // outputs and ORT's intermediate tensors.
                cap_rows = fit(input.len(), in_row_sum)
                    .min(fit(output_len / 2, out_row_sum))
                    .min(BATCH_ROWS_MAX);
                let mut off = 0usize;
                for k in 0..n_in {
                    in_off[k] = off;
                    off = align_up(off + cap_rows * row_in[k]);
                }
            } else if !same_shapes(inputs, &shapes, &ref_shapes) {
                continue;
            }
            if total + rows > cap_rows {
                continue;
            }
            for (k, d) in descs[..n_in].iter().enumerate() {
                let Some(d) = d else { continue };
                let data = req.tensor_data(d);
                let at = in_off[k] + total * row_in[k];
                input[at..at + data.len()].copy_from_slice(data);
                gathered += data.len() as u64;
            }
            slots[i] = BatchSlot::Stacked {
                row: total as u32,
                rows: rows as u32,
            };
            total += rows;
        }

        Gathered {
            total,
            ref_shapes,
            ref_bound,
            row_in,
            in_off,
            bytes: gathered,
        }
    }

    /// Bytes of one row over the outputs whose shape is known before the
    /// run (allocator-placed ones are not known: they count 0 here).
    fn out_row_sum(&self, bound: &[Option<u64>; TENSOR_COUNT_MAX * RANK_MAX]) -> usize {
        let mut sum = 0usize;
        for p in &self.outputs {
            if p.placement != Placement::Preallocated {
                continue;
            }
            let d: [u64; RANK_MAX] = core::array::from_fn(|k| match p.dims[k] {
                DimRule::Fixed(v) => v,
                DimRule::Sym(s) => bound[s as usize].unwrap_or(0),
                DimRule::Any => 0,
            });
            sum = sum.saturating_add(p.dtype.byte_len(&d[1..p.rank.max(1)]).unwrap_or(usize::MAX));
        }
        sum
    }

    /// Writes the reply of a request stacked in the last batch run (`slot`
    /// as [`OrtModel::run_batch`] reported it) into `tx`: the response
    /// header, then its rows of every output copied from `output`, the
    /// buffer the run used. Returns the frame length.
    pub fn batch_reply(
        &mut self,
        req: &Frame<&[u8]>,
        adapter: Option<&str>,
        slot: BatchSlot,
        output: &[u8],
        tx: &mut [u8],
        stats: &mut RunStats,
    ) -> Result<usize, Reject> {
        let r = self.batch_reply_inner(req, adapter, slot, output, tx, stats);
        match &r {
            Ok(_) => stats.runs += 1,
            Err(_) => stats.rejects += 1,
        }
        r
    }

    fn batch_reply_inner(
        &mut self,
        req: &Frame<&[u8]>,
        adapter: Option<&str>,
        slot: BatchSlot,
        output: &[u8],
        tx: &mut [u8],
        stats: &mut RunStats,
    ) -> Result<usize, Reject> {
        let BatchSlot::Stacked { row, rows } = slot else {
            return Err(Reject::new(ErrorCode::Internal, msg::NOT_STACKED));
        };
        let (row, rows) = (row as usize, rows as usize);
        if row + rows > self.batch.rows {
            return Err(Reject::new(ErrorCode::Internal, msg::NOT_STACKED));
        }
        let n_out = self.outputs.len();
        // The order of run_into: preallocated outputs, then the others.
        let mut order = [0usize; TENSOR_COUNT_MAX];
        let mut k = 0;
        for pre in [true, false] {
            for (o, p) in self.outputs.iter().enumerate() {
                if (p.placement == Placement::Preallocated) == pre {
                    order[k] = o;
                    k += 1;
                }
            }
        }
        let mut dims = [[0u64; RANK_MAX]; TENSOR_COUNT_MAX];
        for (o, out) in self.batch.outs.iter().enumerate().take(n_out) {
            dims[o] = out.dims;
            dims[o][0] = rows as u64;
        }
        let mut repr = response(
            &self.outputs,
            &self.name,
            &self.version,
            req,
            adapter,
            &order[..n_out],
            &dims,
        );
        let layout = repr.layout().map_err(|e| header_err(e, 0))?;
        if layout.frame_len > tx.len() {
            return Err(too_large(layout.frame_len));
        }
        // The frame emitter copies each output's rows straight into the
        // reply: the one copy of the split.
        let mut copied = 0u64;
        for (t, &o) in order[..n_out].iter().enumerate() {
            let out = &self.batch.outs[o];
            let start = out.off + row * out.row_bytes;
            let len = rows * out.row_bytes;
            let data = output
                .get(start..start + len)
                .ok_or(Reject::new(ErrorCode::Internal, msg::NOT_STACKED))?;
            repr.tensors[t].data = Some(data);
            copied += len as u64;
            self.output_stats[o].bytes_copied += len as u64;
        }
        repr.emit(tx).map_err(|e| header_err(e, layout.frame_len))?;
        stats.payload_bytes_copied += copied;
        stats.batch_output_bytes_copied += copied;
        Ok(layout.frame_len)
    }
}

/// Where the outputs whose shape is known before a batch run of `total`
/// rows go in the batch output buffer, their shapes, and where they end.
#[allow(clippy::type_complexity)]
fn preallocated(
    outputs: &[Port],
    total: usize,
    bound: &[Option<u64>; TENSOR_COUNT_MAX * RANK_MAX],
) -> (
    [OutRows; TENSOR_COUNT_MAX],
    [[i64; RANK_MAX]; TENSOR_COUNT_MAX],
    usize,
) {
    let mut shapes = [[0i64; RANK_MAX]; TENSOR_COUNT_MAX];
    let mut outs = [OutRows::default(); TENSOR_COUNT_MAX];
    let mut end = 0usize;
    for (o, p) in outputs.iter().enumerate() {
        if p.placement != Placement::Preallocated {
            continue;
        }
        let d: [u64; RANK_MAX] = core::array::from_fn(|k| match p.dims[k] {
            _ if k == 0 => total as u64,
            _ if k >= p.rank => 0,
            DimRule::Fixed(v) => v,
            DimRule::Sym(s) => bound[s as usize].unwrap_or(0),
            DimRule::Any => 0,
        });
        for (sh, &v) in shapes[o].iter_mut().zip(&d).take(p.rank) {
            *sh = v as i64;
        }
        let len = p.dtype.byte_len(&d[..p.rank]).unwrap_or(usize::MAX);
        let row_bytes = p.dtype.byte_len(&d[1..p.rank]).unwrap_or(0);
        outs[o] = OutRows {
            off: end,
            row_bytes,
            dims: d,
        };
        end = align_up(end.saturating_add(len));
    }
    (outs, shapes, end)
}

/// Reads the shape and place of each allocator-placed output of a batch
/// run: it must be of the declared type and rank and hold `total` rows.
/// One ONNX Runtime put in the batch output buffer's tail (`tail_base`
/// bytes into it) stays there; one it put elsewhere (the tail filled up with
/// the run's intermediate tensors, so scratch or the heap) is copied into
/// the tail past the others, once; returns the bytes so copied.
#[allow(clippy::too_many_arguments)]
fn place_allocated(
    outputs: &[Port],
    values: &Values<'_>,
    tail: &mut ReplyTail<'_>,
    tail_base: usize,
    total: usize,
    outs: &mut [OutRows; TENSOR_COUNT_MAX],
    last_error: &mut String,
) -> Result<u64, Reject> {
    let mut away = [false; TENSOR_COUNT_MAX];
    let mut lens = [0usize; TENSOR_COUNT_MAX];
    let mut high = 0usize;
    for (o, p) in outputs.iter().enumerate() {
        if p.placement == Placement::Preallocated {
            continue;
        }
        let mut shape = [0i64; RANK_MAX];
        let (ty, rank) = match values.shape(o, &mut shape) {
            Ok(v) => v,
            Err(e) => return Err(ort_failed(last_error, e)),
        };
        if ty != raw::onnx_type(p.dtype)
            || rank != p.rank
            || shape[0] != total as i64
            || shape.iter().any(|&d| d < 0)
        {
            *last_error = msg::OUTPUT_TYPE.into();
            return Err(Reject::new(ErrorCode::InferenceFailed, msg::ORT_FAILED));
        }
        let d: [u64; RANK_MAX] = core::array::from_fn(|k| shape[k] as u64);
        let row_bytes = p.dtype.byte_len(&d[1..rank]).unwrap_or(0);
        lens[o] = row_bytes.saturating_mul(total);
        let off = if row_bytes == 0 {
            Some(0)
        } else {
            values.data_ptr(o).ok().and_then(|ptr| tail.offset_of(ptr))
        };
        match off {
            Some(off) => high = high.max(off + lens[o]),
            None => away[o] = true,
        }
        outs[o] = OutRows {
            off: tail_base + off.unwrap_or(0),
            row_bytes,
            dims: d,
        };
    }
    let mut copied = 0u64;
    for (o, _) in outputs.iter().enumerate().filter(|&(o, _)| away[o]) {
        let at = align_up(high);
        let bytes = tail.bytes();
        let Some(dst) = bytes.get_mut(at..at + lens[o]) else {
            return Err(Reject::new(ErrorCode::Internal, msg::BATCH_OUTPUT_PLACE));
        };
        if let Err(e) = values.copy_to(o, dst) {
            return Err(ort_failed(last_error, e));
        }
        outs[o].off = tail_base + at;
        high = at + lens[o];
        copied += lens[o] as u64;
    }
    Ok(copied)
}

/// Whether two requests' input shapes agree past dimension 0.
fn same_shapes(
    inputs: &[Port],
    a: &[[i64; RANK_MAX]; TENSOR_COUNT_MAX],
    b: &[[i64; RANK_MAX]; TENSOR_COUNT_MAX],
) -> bool {
    inputs
        .iter()
        .enumerate()
        .all(|(k, p)| a[k][1..p.rank] == b[k][1..p.rank])
}
