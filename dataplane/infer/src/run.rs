//! The per-request path: check and bind the inputs, run, lay the reply out.
//!
//! The reply's tensor table lists the outputs whose shape is known before
//! the run first (model order; ORT writes into tensors made over the reply),
//! then the allocator-placed ones, whose shapes ORT decides during the run.
//! Their header entries do not depend on their sizes (rank and name are
//! fixed), so the header length is known up front; their data offsets are
//! written after the run from the actual shapes.

use sluice_wire::limits::{RANK_MAX, TENSOR_COUNT_MAX};
use sluice_wire::{
    DType, Error as WireError, ErrorCode, ExtRepr, Frame, FrameRepr, Kind, TensorDesc, TensorRepr,
};

use crate::Reject;
use crate::error::bad_tensor;
use crate::model::{InputBinding, OrtModel, RunStats, ort_failed};
use crate::ports::{DimRule, Port};
use crate::raw::alloc::ReplyTail;
use crate::raw::{self, Values};

pub(crate) mod steps;
mod stream;
mod token;
mod token_batch;
use steps::{
    Table, Tally, adapter_slot, check_relayout, count_preallocated, feed_inputs, place_allocated,
    prepare_outputs, read_placed, run_options,
};
pub use stream::{StatePair, StateSpec};
pub use token::TokenSpec;
pub use token_batch::TokenBatch;

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
        self.bind_with(req, shapes, 0)
    }

    /// [`OrtModel::bind`] where the inputs of the `external` bit mask come
    /// from elsewhere (a stream's state): the request must not send them.
    pub(crate) fn bind_with<'r>(
        &self,
        req: &'r Frame<&[u8]>,
        shapes: &mut [[i64; RANK_MAX]; TENSOR_COUNT_MAX],
        external: u32,
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
            if external & (1 << i) != 0 {
                return Err(bad_tensor(stream::smsg::STATE_INPUT));
            }
            if descs[i].replace(t).is_some() {
                return Err(bad_tensor(msg::DUPLICATE_INPUT));
            }
        }
        // Required inputs come first, so every symbol is bound before an
        // optional input is checked against it.
        let mut bound = [None; TENSOR_COUNT_MAX * RANK_MAX];
        for (i, port) in self.inputs.iter().enumerate() {
            let Some(d) = descs[i].as_ref() else {
                if port.optional || external & (1 << i) != 0 {
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
        let slot = adapter_slot(&mut self.adapters, adapter)?;
        let options = run_options(&self.default_options, &self.adapters, slot);
        let mut in_shapes = [[0i64; RANK_MAX]; TENSOR_COUNT_MAX];
        let (descs, bound) = self.bind(req, &mut in_shapes)?;
        let mut table = Table::plan(&self.outputs, &bound)?;
        let echo = Echo {
            name: &self.name,
            version: &self.version,
            req,
            adapter,
        };
        let (layout0, tail_start) = first_layout(echo.response(&self.outputs, &table), tx.len())?;
        let tx_len = tx.len();

        let (head, tail) = tx.split_at_mut(tail_start);
        // Declared before the values: it must be dropped (disarmed) after
        // every ORT value of this run is released.
        let mut tail = ReplyTail::new(&mut self.arena, tail, self.arena_on);
        let (_, heap_before) = tail.counts();
        let mut tally = Tally::new(&mut self.output_stats);

        let mut inputs = Values::new();
        let fed = feed_inputs(
            &self.inputs,
            &self.memory,
            req,
            &descs,
            &in_shapes,
            &mut inputs,
        )
        .map_err(|e| ort_failed(&mut self.last_error, e))?;
        tally.add_inputs(&fed);

        let mut outputs = Values::new();
        let slots = prepare_outputs(
            &self.outputs,
            &self.memory,
            &table,
            &layout0,
            head,
            &mut outputs,
            &mut self.last_error,
        )?;

        raw::run(
            &mut self.session,
            options,
            &fed.names[..fed.n],
            &inputs,
            &slots.names[..table.n_out],
            &mut outputs,
        )
        .map_err(|e| ort_failed(&mut self.last_error, e))?;
        count_preallocated(&self.outputs, &table, &slots.ptrs, &outputs, &mut tally)
            .map_err(|e| ort_failed(&mut self.last_error, e))?;

        let placed = read_placed(
            &mut self.outputs,
            self.learning,
            &mut self.last_error,
            &mut table,
            &outputs,
            (&tail, tail_start),
        )?;
        let layout = echo.response(&self.outputs, &table).layout();
        let (layout, needed) = check_relayout(layout, &layout0, table.n_pre, tx_len)?;
        place_allocated(
            &self.outputs,
            &table,
            &placed,
            &layout,
            &mut tail,
            &outputs,
            &mut tally,
        )
        .map_err(|e| ort_failed(&mut self.last_error, e))?;
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

        let repr = echo.response(&self.outputs, &table);
        repr.emit(tx).map_err(|e| header_err(e, needed))?;
        tally.add_to(stats);
        Ok(layout.frame_len)
    }
}

/// The layout with the shapes known before the run, and where the reply's
/// free tail starts after it (aligned; the reply allocator's space).
fn first_layout(
    repr: ResponseRepr<'_>,
    tx_len: usize,
) -> Result<(sluice_wire::Layout, usize), Reject> {
    let layout0 = repr.layout().map_err(|e| header_err(e, 0))?;
    if layout0.frame_len > tx_len {
        return Err(too_large(layout0.frame_len));
    }
    Ok((layout0, align_up(layout0.frame_len).min(tx_len)))
}

/// What a response echoes of its request, and the model version that ran.
struct Echo<'a> {
    name: &'a str,
    version: &'a str,
    req: &'a Frame<&'a [u8]>,
    adapter: Option<&'a str>,
}

impl<'a> Echo<'a> {
    /// The response with `table`'s outputs, order and dims.
    fn response(&self, outputs: &'a [Port], table: &'a Table) -> ResponseRepr<'a> {
        let order = &table.order[..table.n_out];
        response(
            outputs,
            self.name,
            self.version,
            self.req,
            self.adapter,
            order,
            &table.dims,
        )
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
        extensions: &[],
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
    /// Extension headers of the response (a stream's header).
    pub(crate) extensions: &'a [ExtRepr<'a>],
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
            extensions: self.extensions,
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
