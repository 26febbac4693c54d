//! The steps of one run, in the order `run_inner` takes them: run options,
//! the tensor table, input values, output slots (over the reply, or empty
//! for the reply allocator), then accounting and placing the outputs ORT
//! allocated. Everything is on the stack: the path allocates nothing.

use std::ffi::c_char;

use ort::memory::MemoryInfo;
use ort::session::RunOptions;
use sluice_wire::limits::{RANK_MAX, TENSOR_COUNT_MAX};
use sluice_wire::{Error as WireError, ErrorCode, Frame};

use super::{Bound, Descs, header_err, is_aligned, msg, too_large};
use crate::Reject;
use crate::adapters::AdapterCache;
use crate::model::{OutputStats, RunStats, ort_failed};
use crate::ports::{DimRule, Placement, Port};
use crate::raw::alloc::ReplyTail;
use crate::raw::{self, OrtFailure, Values};

/// The adapter cache slot for `adapter` (`None` or `Some("")`: the base
/// model, no slot), loading it on a miss.
pub(crate) fn adapter_slot(
    adapters: &mut AdapterCache,
    adapter: Option<&str>,
) -> Result<Option<usize>, Reject> {
    match adapter {
        None | Some("") => Ok(None),
        Some(id) => adapters.select(id).map(Some),
    }
}

/// The run options of a slot from [`adapter_slot`].
pub(crate) fn run_options<'m>(
    default: &'m RunOptions,
    adapters: &'m AdapterCache,
    slot: Option<usize>,
) -> &'m RunOptions {
    match slot.and_then(|i| adapters.loaded.get(i)) {
        Some(a) => &a.options,
        None => default,
    }
}

/// The reply's tensor table: output indices in table order (preallocated
/// outputs, then allocator-placed ones) and every output's dims (known
/// before the run for the preallocated ones, read after it for the rest).
pub(super) struct Table {
    pub(super) order: [usize; TENSOR_COUNT_MAX],
    pub(super) n_pre: usize,
    pub(super) n_out: usize,
    pub(super) dims: [[u64; RANK_MAX]; TENSOR_COUNT_MAX],
    /// The preallocated outputs' shapes as ORT takes them.
    shapes: [[i64; RANK_MAX]; TENSOR_COUNT_MAX],
}

impl Table {
    pub(super) fn plan(outputs: &[Port], bound: &Bound) -> Result<Table, Reject> {
        // Table order: preallocated outputs, then allocator-placed ones.
        let mut order = [0usize; TENSOR_COUNT_MAX];
        let mut n_pre = 0;
        for (o, p) in outputs.iter().enumerate() {
            if p.placement == Placement::Preallocated {
                order[n_pre] = o;
                n_pre += 1;
            }
        }
        let mut k = n_pre;
        for (o, p) in outputs.iter().enumerate() {
            if p.placement == Placement::Allocator {
                order[k] = o;
                k += 1;
            }
        }

        // Shapes known before the run: fixed sizes and symbols bound by
        // inputs (compile checked every dimension of these is one of those).
        let mut dims = [[0u64; RANK_MAX]; TENSOR_COUNT_MAX];
        let mut shapes = [[0i64; RANK_MAX]; TENSOR_COUNT_MAX];
        for &o in &order[..n_pre] {
            let port = &outputs[o];
            for k in 0..port.rank {
                let v = match port.dims[k] {
                    DimRule::Fixed(v) => Some(v),
                    DimRule::Sym(s) => bound[s as usize],
                    DimRule::Any => None,
                }
                .ok_or(Reject::new(ErrorCode::Internal, msg::RESPONSE_HEADER))?;
                dims[o][k] = v;
                shapes[o][k] = v as i64; // bounded by an input dim, itself checked ≤ i64::MAX
            }
        }
        Ok(Table {
            order,
            n_pre,
            n_out: outputs.len(),
            dims,
            shapes,
        })
    }

    /// Byte length of the output at table position `t`.
    pub(super) fn byte_len(&self, outputs: &[Port], t: usize) -> usize {
        let o = self.order[t];
        outputs[o]
            .dtype
            .byte_len(&self.dims[o][..outputs[o].rank])
            .unwrap_or(0)
    }
}

/// Payload bytes of one run, added to the model's stats when it succeeds
/// (per-output counts go straight to the outputs' stats).
pub(super) struct Tally<'s> {
    in_place: u64,
    out_in_place: u64,
    copied: u64,
    outputs: &'s mut [OutputStats],
}

impl<'s> Tally<'s> {
    pub(super) fn new(outputs: &'s mut [OutputStats]) -> Tally<'s> {
        Tally {
            in_place: 0,
            out_in_place: 0,
            copied: 0,
            outputs,
        }
    }

    pub(super) fn output_in_place(&mut self, o: usize, len: u64) {
        self.out_in_place += len;
        self.outputs[o].bytes_in_place += len;
    }

    pub(super) fn output_copied(&mut self, o: usize, len: u64) {
        self.copied += len;
        self.outputs[o].bytes_copied += len;
    }

    pub(super) fn add_inputs(&mut self, fed: &Fed) {
        self.in_place += fed.in_place;
        self.copied += fed.copied;
    }

    pub(super) fn add_to(&self, stats: &mut RunStats) {
        stats.payload_bytes_in_place += self.in_place;
        stats.output_bytes_in_place += self.out_in_place;
        stats.payload_bytes_copied += self.copied;
    }
}

/// The input values of a run and the names ORT binds them by.
pub(super) struct Fed {
    pub(super) names: [*const c_char; TENSOR_COUNT_MAX],
    pub(super) n: usize,
    in_place: u64,
    copied: u64,
}

/// Inputs: values over the request's bytes, in model order.
pub(super) fn feed_inputs<'r>(
    ports: &[Port],
    memory: &MemoryInfo<'static>,
    req: &'r Frame<&[u8]>,
    descs: &Descs<'_>,
    shapes: &[[i64; RANK_MAX]; TENSOR_COUNT_MAX],
    values: &mut Values<'r>,
) -> Result<Fed, OrtFailure> {
    let mut fed = Fed {
        names: [core::ptr::null::<c_char>(); TENSOR_COUNT_MAX],
        n: 0,
        in_place: 0,
        copied: 0,
    };
    for (i, port) in ports.iter().enumerate() {
        let Some(d) = descs[i] else { continue };
        let data = req.tensor_data(&d);
        let got = values.push_input(memory, data, &shapes[i][..port.rank], port.dtype)?;
        if data.is_empty() || got == data.as_ptr() {
            fed.in_place += data.len() as u64;
        } else {
            fed.copied += data.len() as u64;
        }
        fed.names[fed.n] = port.c_name.as_ptr();
        fed.n += 1;
    }
    Ok(fed)
}

/// The output slots of a run: names in table order and, for preallocated
/// outputs, where in the reply ORT is to write.
pub(super) struct Slots {
    pub(super) names: [*const c_char; TENSOR_COUNT_MAX],
    pub(super) ptrs: [*const u8; TENSOR_COUNT_MAX],
}

/// Outputs, in table order: values over the reply's tensor regions, then
/// empty slots ORT fills through the reply allocator.
pub(super) fn prepare_outputs<'t>(
    ports: &[Port],
    memory: &MemoryInfo<'static>,
    table: &Table,
    layout0: &sluice_wire::Layout,
    head: &'t mut [u8],
    values: &mut Values<'t>,
    last_error: &mut String,
) -> Result<Slots, Reject> {
    let mut slots = Slots {
        names: [core::ptr::null::<c_char>(); TENSOR_COUNT_MAX],
        ptrs: [core::ptr::null::<u8>(); TENSOR_COUNT_MAX],
    };
    let mut rest: &mut [u8] = head;
    let mut consumed = 0usize;
    for (t, &o) in table.order[..table.n_out].iter().enumerate() {
        let port = &ports[o];
        slots.names[t] = port.c_name.as_ptr();
        if t >= table.n_pre {
            if let Err(e) = values.push_empty() {
                return Err(ort_failed(last_error, e));
            }
            continue;
        }
        let off = layout0.tensor_offsets[t];
        let len = port
            .dtype
            .byte_len(&table.dims[o][..port.rank])
            .unwrap_or(0);
        let (_, after) = std::mem::take(&mut rest).split_at_mut(off - consumed);
        let (region, after) = after.split_at_mut(len);
        rest = after;
        consumed = off + len;
        if !is_aligned(region.as_ptr(), port.dtype) {
            return Err(Reject::new(ErrorCode::Internal, msg::TX_MISALIGNED));
        }
        slots.ptrs[t] = region.as_ptr();
        if let Err(e) =
            values.push_output(memory, region, &table.shapes[o][..port.rank], port.dtype)
        {
            return Err(ort_failed(last_error, e));
        }
    }
    Ok(slots)
}

/// Counts the preallocated outputs: in place when ORT wrote where the
/// reply wants them.
pub(super) fn count_preallocated(
    ports: &[Port],
    table: &Table,
    want: &[*const u8; TENSOR_COUNT_MAX],
    values: &Values<'_>,
    tally: &mut Tally<'_>,
) -> Result<(), OrtFailure> {
    for (t, &want) in want.iter().enumerate().take(table.n_pre) {
        let o = table.order[t];
        let len = table.byte_len(ports, t) as u64;
        match values.data_ptr(t)? {
            p if p == want || len == 0 => tally.output_in_place(o, len),
            _ => tally.copied += len,
        }
    }
    Ok(())
}

/// Where the allocator-placed outputs lie after the run: per table position,
/// the index of its ORT value and its offset in the reply tail (`None`:
/// outside it, or no data).
pub(super) struct Placed {
    vidx: [usize; TENSOR_COUNT_MAX],
    src: [Option<usize>; TENSOR_COUNT_MAX],
    /// Offset of the tail in the reply buffer.
    tail_start: usize,
}

impl Placed {
    /// Insertion sort by tail offset (those in the tail first): a move
    /// then always goes down, never over an output not yet moved.
    fn sort(&mut self, table: &mut Table) {
        for t in (table.n_pre + 1)..table.n_out {
            let mut j = t;
            while j > table.n_pre && key(self.src[j - 1]) > key(self.src[j]) {
                table.order.swap(j - 1, j);
                self.vidx.swap(j - 1, j);
                self.src.swap(j - 1, j);
                j -= 1;
            }
        }
    }
}

/// Allocator-placed outputs: reads their types and shapes into `table` and
/// where ORT put them (`tail` starts at `tail_start` in the reply), then
/// sorts them into the order they are moved in.
pub(super) fn read_placed(
    ports: &mut [Port],
    learning: bool,
    last_error: &mut String,
    table: &mut Table,
    values: &Values<'_>,
    (tail, tail_start): (&ReplyTail<'_>, usize),
) -> Result<Placed, Reject> {
    let mut placed = Placed {
        vidx: [0usize; TENSOR_COUNT_MAX],
        src: [None::<usize>; TENSOR_COUNT_MAX],
        tail_start,
    };
    for t in table.n_pre..table.n_out {
        placed.vidx[t] = t;
        let o = table.order[t];
        let port = &ports[o];
        let mut shape = [0i64; RANK_MAX];
        let (ty, rank) = match values.shape(t, &mut shape) {
            Ok(v) => v,
            Err(e) => return Err(ort_failed(last_error, e)),
        };
        if ty != raw::onnx_type(port.dtype) || rank != port.rank || shape.iter().any(|&d| d < 0) {
            // Exporters do declare wrong ranks (ddddocr's OCR declares
            // [1, seqlen] and returns rank 3). The load-time warm-up
            // learns the rank the model really returns; after load it
            // is an error.
            if learning && ty == raw::onnx_type(port.dtype) {
                ports[o].rank = rank;
                ports[o].dims = [DimRule::Any; RANK_MAX];
            }
            *last_error = msg::OUTPUT_TYPE.into();
            return Err(Reject::new(ErrorCode::InferenceFailed, msg::ORT_FAILED));
        }
        for (d, &s) in table.dims[o].iter_mut().zip(&shape[..rank]) {
            *d = s as u64; // checked non-negative above
        }
        placed.src[t] = match values.data_ptr(t) {
            Ok(p) => tail.offset_of(p),
            Err(_) => None, // an empty tensor may have no data
        };
    }
    placed.sort(table);
    Ok(placed)
}

/// The layout with the run's shapes must fit and keep the header and the
/// preallocated outputs where the first layout put them.
/// Returns it and the frame length a too-small reply buffer needed.
pub(super) fn check_relayout(
    layout: Result<sluice_wire::Layout, WireError>,
    layout0: &sluice_wire::Layout,
    n_pre: usize,
    tx_len: usize,
) -> Result<(sluice_wire::Layout, usize), Reject> {
    let needed = layout.map_or(0, |l| l.frame_len);
    let layout = layout.map_err(|e| header_err(e, needed))?;
    if layout.frame_len > tx_len {
        return Err(too_large(layout.frame_len));
    }
    if layout.header_len != layout0.header_len
        || layout.tensor_offsets[..n_pre] != layout0.tensor_offsets[..n_pre]
    {
        return Err(Reject::new(ErrorCode::Internal, msg::RESPONSE_HEADER));
    }
    Ok((layout, needed))
}

/// Puts the allocator-placed outputs where the frame wants them: left in
/// place, moved down within the tail, or copied in from outside it.
pub(super) fn place_allocated(
    ports: &[Port],
    table: &Table,
    placed: &Placed,
    layout: &sluice_wire::Layout,
    tail: &mut ReplyTail<'_>,
    values: &Values<'_>,
    tally: &mut Tally<'_>,
) -> Result<(), OrtFailure> {
    for t in table.n_pre..table.n_out {
        let o = table.order[t];
        let len = table.byte_len(ports, t);
        let dst = layout.tensor_offsets[t] - placed.tail_start;
        let bytes = tail.bytes();
        match placed.src[t] {
            _ if len == 0 => {}
            Some(s) if s == dst => tally.output_in_place(o, len as u64),
            Some(s) => {
                bytes.copy_within(s..s + len, dst);
                tally.output_copied(o, len as u64);
            }
            None => {
                values.copy_to(placed.vidx[t], &mut bytes[dst..dst + len])?;
                tally.output_copied(o, len as u64);
            }
        }
    }
    Ok(())
}

/// Sort key: outputs in the reply tail by offset, then the others.
fn key(src: Option<usize>) -> (u8, usize) {
    match src {
        Some(s) => (0, s),
        None => (1, 0),
    }
}
