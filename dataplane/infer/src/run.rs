//! The per-request path: check and bind the inputs, run, lay the reply out.
//!
//! The reply's tensor table lists the outputs whose shape is known before
//! the run first (model order; ORT writes into tensors made over the reply),
//! then the allocator-placed ones, whose shapes ORT decides during the run.
//! Their header entries do not depend on their sizes (rank and name are
//! fixed), so the header length is known up front; their data offsets are
//! written after the run from the actual shapes.

use std::ffi::c_char;

use sluice_wire::limits::{RANK_MAX, TENSOR_COUNT_MAX};
use sluice_wire::{
    DType, Error as WireError, ErrorCode, Frame, FrameRepr, Kind, TensorDesc, TensorRepr,
};

use crate::Reject;
use crate::error::bad_tensor;
use crate::model::{InputBinding, OrtModel, RunStats, ort_failed};
use crate::ports::{DimRule, Placement, Port};
use crate::raw::alloc::ReplyTail;
use crate::raw::{self, Values};

/// Messages of request rejections.
pub(crate) mod msg {
    pub const NOT_REQUEST: &str = "only request frames can be run";
    pub const UNKNOWN_ADAPTER: &str = "LoRA adapter not loaded for this model";
    pub const UNEXPECTED_INPUT: &str = "tensor is not an input of the model";
    pub const DUPLICATE_INPUT: &str = "input tensor sent twice";
    pub const MISSING_INPUT: &str = "a model input is missing";
    pub const WRONG_DTYPE: &str = "input dtype does not match the model";
    pub const WRONG_RANK: &str = "input rank does not match the model";
    pub const WRONG_DIM: &str = "input dimension does not match the model";
    pub const INCONSISTENT_DIM: &str = "inputs disagree on a shared dimension (e.g. batch)";
    pub const DIM_TOO_LARGE: &str = "input dimension too large";
    pub const MISALIGNED: &str = "input data not aligned for its dtype";
    pub const BAD_BOOL: &str = "bool tensor holds a byte other than 0 or 1";
    pub const SHORT_PAYLOAD: &str = "input data shorter than its shape";
    pub const RESPONSE_TOO_LARGE: &str = "response does not fit the reply buffer";
    pub const RESPONSE_HEADER: &str = "cannot build the response header";
    pub const TX_MISALIGNED: &str = "reply buffer not aligned for the output dtype";
    pub const ORT_FAILED: &str = "ONNX Runtime run failed";
    pub const OUTPUT_TYPE: &str = "an output's type or rank differs from what the model declares";
    pub const NOT_BATCHABLE: &str = "the model cannot batch";
    pub const NOT_STACKED: &str = "the request is not in the last batch run";
    pub const BATCH_OUTPUT_PLACE: &str = "a batch output does not fit the batch buffer";
}

type Descs<'r> = [Option<TensorDesc<'r>>; TENSOR_COUNT_MAX];
type Bound = [Option<u64>; TENSOR_COUNT_MAX * RANK_MAX];

pub(crate) fn too_large(needed_len: usize) -> Reject {
    Reject::too_large(msg::RESPONSE_TOO_LARGE, needed_len)
}

pub(crate) fn header_err(e: WireError, needed_len: usize) -> Reject {
    match e {
        WireError::BufferTooSmall | WireError::TooLarge | WireError::SizeOverflow => {
            too_large(needed_len)
        }
        _ => Reject::new(ErrorCode::Internal, msg::RESPONSE_HEADER),
    }
}

/// Whether `p` is aligned for `dtype` (element sizes are powers of two).
fn is_aligned(p: *const u8, dtype: DType) -> bool {
    (p as usize) & (dtype.size_bytes() - 1) == 0
}

const fn align_up(v: usize) -> usize {
    (v + sluice_wire::TENSOR_ALIGN - 1) & !(sluice_wire::TENSOR_ALIGN - 1)
}

impl OrtModel {
    /// Runs the model on a request and writes the response frame into `tx`.
    ///
    /// `req` is a checked request frame whose buffer the engine keeps for the
    /// call. `adapter` selects a LoRA adapter by id (`None` or `Some("")`: the
    /// base model); the engine passes the frame's adapter field after its own
    /// policy checks. ONNX Runtime reads the input tensors where they lie in
    /// `req`'s buffer and writes the outputs into `tx`; returns the response
    /// frame length (`tx[..len]` is the frame). The response echoes the
    /// request id, tenant and trace and names the model version that ran.
    ///
    /// Input data must be aligned for its dtype (the engine's buffers are
    /// 64-byte aligned and frames align tensors to 64): misaligned data is
    /// rejected, never copied. `tx` must be 64-byte aligned too.
    pub fn run_into(
        &mut self,
        req: &Frame<&[u8]>,
        adapter: Option<&str>,
        tx: &mut [u8],
        stats: &mut RunStats,
    ) -> Result<usize, Reject> {
        let r = self.run_inner(req, adapter, tx, stats);
        match &r {
            Ok(_) => {
                stats.runs += 1;
                if self.arena_countdown > 0 {
                    self.arena_countdown -= 1;
                    self.arena_on = self.arena_countdown == 0;
                }
            }
            Err(e) if e.code == ErrorCode::InferenceFailed => stats.failures += 1,
            Err(_) => stats.rejects += 1,
        }
        r
    }

    /// Checks `req` as [`OrtModel::run_into`] would and creates its ONNX
    /// Runtime input values, then reports, per input the request sent (model
    /// order), where the request bytes are and where ORT's tensor reads from.
    /// Diagnostic (tests prove zero copy with it); allocates the result.
    pub fn probe_inputs(&mut self, req: &Frame<&[u8]>) -> Result<Vec<InputBinding>, Reject> {
        let mut shapes = [[0i64; RANK_MAX]; TENSOR_COUNT_MAX];
        let (descs, _) = self.bind(req, &mut shapes)?;
        let mut values = Values::new();
        let mut out = Vec::with_capacity(self.inputs.len());
        for (i, port) in self.inputs.iter().enumerate() {
            let Some(d) = descs[i] else { continue };
            let data = req.tensor_data(&d);
            let ort_ptr = values
                .push_input(&self.memory, data, &shapes[i][..port.rank], port.dtype)
                .map_err(|e| ort_failed(&mut self.last_error, e))?;
            out.push(InputBinding {
                buffer_ptr: data.as_ptr() as usize,
                ort_ptr: ort_ptr as usize,
                len: data.len(),
            });
        }
        Ok(out)
    }

    /// Matches the request's tensors to the model inputs and checks dtype,
    /// rank, dimensions and alignment. Fills `shapes` (inputs' i64 shapes)
    /// and returns the descriptors in model input order (optional inputs the
    /// request left out are `None`) plus the bound symbolic sizes.
    pub(crate) fn bind<'r>(
        &self,
        req: &'r Frame<&[u8]>,
        shapes: &mut [[i64; RANK_MAX]; TENSOR_COUNT_MAX],
    ) -> Result<(Descs<'r>, Bound), Reject> {
        if req.kind() != Kind::Request {
            return Err(Reject::new(ErrorCode::UnsupportedKind, msg::NOT_REQUEST));
        }
        let mut descs: Descs<'r> = [None; TENSOR_COUNT_MAX];
        for t in req.tensors() {
            let Some(i) = self.inputs.iter().position(|p| p.name == t.name) else {
                // The structured section is for validation and routing;
                // the model sees it only if it declares an input so named.
                if t.name == sluice_wire::SECTION_TENSOR_NAME {
                    continue;
                }
                return Err(bad_tensor(msg::UNEXPECTED_INPUT));
            };
            if descs[i].replace(t).is_some() {
                return Err(bad_tensor(msg::DUPLICATE_INPUT));
            }
        }
        // Required inputs come first, so every symbol is bound before an
        // optional input is checked against it.
        let mut bound = [None; TENSOR_COUNT_MAX * RANK_MAX];
        for (i, port) in self.inputs.iter().enumerate() {
            let Some(d) = descs[i].as_ref() else {
                if port.optional {
                    continue;
                }
                return Err(bad_tensor(msg::MISSING_INPUT));
            };
            if d.dtype != port.dtype {
                return Err(bad_tensor(msg::WRONG_DTYPE));
            }
            let dims = d.dims();
            if dims.len() != port.rank {
                return Err(bad_tensor(msg::WRONG_RANK));
            }
            for (k, (&have, rule)) in dims.iter().zip(&port.dims).enumerate() {
                match *rule {
                    DimRule::Fixed(want) if have != want => {
                        return Err(bad_tensor(msg::WRONG_DIM));
                    }
                    DimRule::Sym(s) => match bound[s as usize] {
                        None => bound[s as usize] = Some(have),
                        Some(v) if v != have => {
                            return Err(bad_tensor(msg::INCONSISTENT_DIM));
                        }
                        Some(_) => {}
                    },
                    _ => {}
                }
                shapes[i][k] = i64::try_from(have).map_err(|_| bad_tensor(msg::DIM_TOO_LARGE))?;
            }
            let data = req.tensor_data(d);
            // A checked frame guarantees this; it guards ORT from reading
            // past the buffer should a caller pass an unchecked frame.
            if port.dtype.byte_len(dims) != Some(data.len()) {
                return Err(bad_tensor(msg::SHORT_PAYLOAD));
            }
            if !is_aligned(data.as_ptr(), port.dtype) {
                return Err(bad_tensor(msg::MISALIGNED));
            }
            // ORT reads bool tensors as C++ `bool`; any byte but 0 or 1 is
            // undefined behaviour there, so it never reaches ORT.
            if port.dtype == DType::Bool && data.iter().any(|&b| b > 1) {
                return Err(bad_tensor(msg::BAD_BOOL));
            }
        }
        Ok((descs, bound))
    }

    fn run_inner(
        &mut self,
        req: &Frame<&[u8]>,
        adapter: Option<&str>,
        tx: &mut [u8],
        stats: &mut RunStats,
    ) -> Result<usize, Reject> {
        let options = match adapter {
            None | Some("") => &self.default_options,
            Some(id) => {
                &self
                    .adapters
                    .iter()
                    .find(|a| a.id == id)
                    .ok_or(Reject::new(ErrorCode::UnknownAdapter, msg::UNKNOWN_ADAPTER))?
                    .options
            }
        };
        let mut in_shapes = [[0i64; RANK_MAX]; TENSOR_COUNT_MAX];
        let (descs, bound) = self.bind(req, &mut in_shapes)?;
        let n_out = self.outputs.len();

        // Table order: preallocated outputs, then allocator-placed ones.
        let mut order = [0usize; TENSOR_COUNT_MAX];
        let mut n_pre = 0;
        for (o, p) in self.outputs.iter().enumerate() {
            if p.placement == Placement::Preallocated {
                order[n_pre] = o;
                n_pre += 1;
            }
        }
        let mut k = n_pre;
        for (o, p) in self.outputs.iter().enumerate() {
            if p.placement == Placement::Allocator {
                order[k] = o;
                k += 1;
            }
        }

        // Shapes known before the run: fixed sizes and symbols bound by
        // inputs (compile checked every dimension of these is one of those).
        let mut out_dims = [[0u64; RANK_MAX]; TENSOR_COUNT_MAX];
        let mut out_shapes = [[0i64; RANK_MAX]; TENSOR_COUNT_MAX];
        for &o in &order[..n_pre] {
            let port = &self.outputs[o];
            for k in 0..port.rank {
                let v = match port.dims[k] {
                    DimRule::Fixed(v) => Some(v),
                    DimRule::Sym(s) => bound[s as usize],
                    DimRule::Any => None,
                }
                .ok_or(Reject::new(ErrorCode::Internal, msg::RESPONSE_HEADER))?;
                out_dims[o][k] = v;
                out_shapes[o][k] = v as i64; // bounded by an input dim, itself checked ≤ i64::MAX
            }
        }
        let layout0 = response(
            &self.outputs,
            &self.name,
            &self.version,
            req,
            adapter,
            &order[..n_out],
            &out_dims,
        )
        .layout();
        let layout0 = layout0.map_err(|e| header_err(e, 0))?;
        if layout0.frame_len > tx.len() {
            return Err(too_large(layout0.frame_len));
        }
        let tail_start = align_up(layout0.frame_len).min(tx.len());
        let tx_len = tx.len();

        let (head, tail) = tx.split_at_mut(tail_start);
        // Declared before the values: it must be dropped (disarmed) after
        // every ORT value of this run is released.
        let mut tail = ReplyTail::new(&mut self.arena, tail, self.arena_on);
        let (_, heap_before) = tail.counts();

        // Inputs: values over the request's bytes.
        let mut inputs = Values::new();
        let mut in_names = [core::ptr::null::<c_char>(); TENSOR_COUNT_MAX];
        let mut n_in = 0;
        let mut in_bytes = 0u64;
        let mut copied = 0u64;
        for (i, port) in self.inputs.iter().enumerate() {
            let Some(d) = descs[i] else { continue };
            let data = req.tensor_data(&d);
            let got =
                match inputs.push_input(&self.memory, data, &in_shapes[i][..port.rank], port.dtype)
                {
                    Ok(p) => p,
                    Err(e) => return Err(ort_failed(&mut self.last_error, e)),
                };
            if data.is_empty() || got == data.as_ptr() {
                in_bytes += data.len() as u64;
            } else {
                copied += data.len() as u64;
            }
            in_names[n_in] = port.c_name.as_ptr();
            n_in += 1;
        }

        // Outputs, in table order: values over the reply's tensor regions,
        // then empty slots ORT fills through the reply allocator.
        let mut outputs = Values::new();
        let mut out_names = [core::ptr::null::<c_char>(); TENSOR_COUNT_MAX];
        let mut out_ptrs = [core::ptr::null::<u8>(); TENSOR_COUNT_MAX];
        let mut rest: &mut [u8] = head;
        let mut consumed = 0usize;
        for (t, &o) in order[..n_out].iter().enumerate() {
            let port = &self.outputs[o];
            out_names[t] = port.c_name.as_ptr();
            if t >= n_pre {
                if let Err(e) = outputs.push_empty() {
                    return Err(ort_failed(&mut self.last_error, e));
                }
                continue;
            }
            let off = layout0.tensor_offsets[t];
            let len = port.dtype.byte_len(&out_dims[o][..port.rank]).unwrap_or(0);
            let (_, after) = std::mem::take(&mut rest).split_at_mut(off - consumed);
            let (region, after) = after.split_at_mut(len);
            rest = after;
            consumed = off + len;
            if !is_aligned(region.as_ptr(), port.dtype) {
                return Err(Reject::new(ErrorCode::Internal, msg::TX_MISALIGNED));
            }
            out_ptrs[t] = region.as_ptr();
            if let Err(e) = outputs.push_output(
                &self.memory,
                region,
                &out_shapes[o][..port.rank],
                port.dtype,
            ) {
                return Err(ort_failed(&mut self.last_error, e));
            }
        }

        if let Err(e) = raw::run(
            &mut self.session,
            options,
            &in_names[..n_in],
            &inputs,
            &out_names[..n_out],
            &mut outputs,
        ) {
            return Err(ort_failed(&mut self.last_error, e));
        }
        let mut out_bytes = 0u64;
        for (t, &want) in out_ptrs.iter().enumerate().take(n_pre) {
            let o = order[t];
            let len = self.outputs[o]
                .dtype
                .byte_len(&out_dims[o][..self.outputs[o].rank])
                .unwrap_or(0) as u64;
            match outputs.data_ptr(t) {
                Ok(p) if p == want || len == 0 => {
                    out_bytes += len;
                    self.output_stats[o].bytes_in_place += len;
                }
                Ok(_) => copied += len,
                Err(e) => return Err(ort_failed(&mut self.last_error, e)),
            }
        }

        // Allocator-placed outputs: read their shapes, then put them where
        // the frame wants them (ascending in the tail, then the rest).
        let mut vidx = [0usize; TENSOR_COUNT_MAX];
        let mut src = [None::<usize>; TENSOR_COUNT_MAX];
        for t in n_pre..n_out {
            vidx[t] = t;
            let port = &self.outputs[order[t]];
            let mut shape = [0i64; RANK_MAX];
            let (ty, rank) = match outputs.shape(t, &mut shape) {
                Ok(v) => v,
                Err(e) => return Err(ort_failed(&mut self.last_error, e)),
            };
            if ty != raw::onnx_type(port.dtype) || rank != port.rank || shape.iter().any(|&d| d < 0)
            {
                // Exporters do declare wrong ranks (ddddocr's OCR declares
                // [1, seqlen] and returns rank 3). The load-time warm-up
                // learns the rank the model really returns; after load it
                // is an error.
                if self.learning && ty == raw::onnx_type(port.dtype) {
                    let o = order[t];
                    self.outputs[o].rank = rank;
                    self.outputs[o].dims = [DimRule::Any; RANK_MAX];
                }
                self.last_error = msg::OUTPUT_TYPE.into();
                return Err(Reject::new(ErrorCode::InferenceFailed, msg::ORT_FAILED));
            }
            for k in 0..rank {
                out_dims[order[t]][k] = shape[k] as u64;
            }
            src[t] = match outputs.data_ptr(t) {
                Ok(p) => tail.offset_of(p),
                Err(_) => None, // an empty tensor may have no data
            };
        }
        // Insertion sort by tail offset (those in the tail first): a move
        // then always goes down, never over an output not yet moved.
        for t in (n_pre + 1)..n_out {
            let mut j = t;
            while j > n_pre && key(src[j - 1]) > key(src[j]) {
                order.swap(j - 1, j);
                vidx.swap(j - 1, j);
                src.swap(j - 1, j);
                j -= 1;
            }
        }
        let layout = response(
            &self.outputs,
            &self.name,
            &self.version,
            req,
            adapter,
            &order[..n_out],
            &out_dims,
        )
        .layout();
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
        for t in n_pre..n_out {
            let o = order[t];
            let len = self.outputs[o]
                .dtype
                .byte_len(&out_dims[o][..self.outputs[o].rank])
                .unwrap_or(0);
            let dst = layout.tensor_offsets[t] - tail_start;
            let bytes = tail.bytes();
            match src[t] {
                _ if len == 0 => {}
                Some(s) if s == dst => {
                    out_bytes += len as u64;
                    self.output_stats[o].bytes_in_place += len as u64;
                }
                Some(s) => {
                    bytes.copy_within(s..s + len, dst);
                    copied += len as u64;
                    self.output_stats[o].bytes_copied += len as u64;
                }
                None => {
                    if let Err(e) = outputs.copy_to(vidx[t], &mut bytes[dst..dst + len]) {
                        return Err(ort_failed(&mut self.last_error, e));
                    }
                    copied += len as u64;
                    self.output_stats[o].bytes_copied += len as u64;
                }
            }
        }
        outputs.release();
        drop(outputs);
        drop(inputs);
        let (live, heap_after) = tail.counts();
        stats.heap_allocs += heap_after - heap_before;
        if live != 0 {
            // ORT kept arena memory past the run: from now on its memory
            // comes from the heap (this reply is complete and stays valid).
            self.arena_on = false;
        }
        drop(tail);

        let repr = response(
            &self.outputs,
            &self.name,
            &self.version,
            req,
            adapter,
            &order[..n_out],
            &out_dims,
        );
        repr.emit(tx).map_err(|e| header_err(e, needed))?;
        stats.payload_bytes_in_place += in_bytes;
        stats.output_bytes_in_place += out_bytes;
        stats.payload_bytes_copied += copied;
        Ok(layout.frame_len)
    }
}

/// The response frame with outputs in `order` and their `dims`.
pub(crate) fn response<'a>(
    outputs: &'a [Port],
    name: &'a str,
    version: &'a str,
    req: &'a Frame<&[u8]>,
    adapter: Option<&'a str>,
    order: &[usize],
    dims: &'a [[u64; RANK_MAX]; TENSOR_COUNT_MAX],
) -> ResponseRepr<'a> {
    let mut tensors = [TensorRepr {
        name: "",
        dtype: DType::U8,
        dims: &[],
        data: None,
    }; TENSOR_COUNT_MAX];
    for (t, &o) in order.iter().enumerate() {
        let port = &outputs[o];
        tensors[t] = TensorRepr {
            name: &port.name,
            dtype: port.dtype,
            dims: &dims[o][..port.rank],
            data: None,
        };
    }
    ResponseRepr {
        tensors,
        n: order.len(),
        request_id: req.request_id(),
        tenant_id: req.tenant_id(),
        trace: req.trace(),
        model: name,
        model_version: version,
        adapter: adapter.unwrap_or(""),
        token_count: req.token_count(),
    }
}

/// Sort key: outputs in the reply tail by offset, then the others.
fn key(src: Option<usize>) -> (u8, usize) {
    match src {
        Some(s) => (0, s),
        None => (1, 0),
    }
}

/// The parts of a response frame, kept so a `FrameRepr` can borrow them.
pub(crate) struct ResponseRepr<'a> {
    pub(crate) tensors: [TensorRepr<'a>; TENSOR_COUNT_MAX],
    n: usize,
    request_id: u64,
    tenant_id: u32,
    trace: sluice_wire::TraceContext,
    model: &'a str,
    model_version: &'a str,
    adapter: &'a str,
    token_count: u32,
}

impl ResponseRepr<'_> {
    fn repr(&self) -> FrameRepr<'_> {
        FrameRepr {
            kind: Kind::Response,
            request_id: self.request_id,
            tenant_id: self.tenant_id,
            trace: self.trace,
            model: self.model,
            model_version: self.model_version,
            adapter: self.adapter,
            token_count: self.token_count,
            tensors: &self.tensors[..self.n],
            ..FrameRepr::default()
        }
    }

    pub(crate) fn layout(&self) -> Result<sluice_wire::Layout, WireError> {
        self.repr().layout()
    }

    pub(crate) fn emit(&self, tx: &mut [u8]) -> Result<sluice_wire::Layout, WireError> {
        self.repr().emit(tx)
    }
}
