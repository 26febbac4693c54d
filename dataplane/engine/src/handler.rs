//! What runs a request: models behind one trait, one instance per worker.

use sluice_wire::{ErrorCode, Frame, FrameRepr, TensorDesc, TensorRepr, limits};

/// Why a handler refused a request: the wire crate's one refusal type.
pub use sluice_wire::Reject;

/// Per-run accounting a handler reports to the worker.
#[derive(Debug, Default, Clone, Copy)]
pub struct RunAccount {
    /// Payload bytes copied (0 on the zero-copy path).
    pub payload_bytes_copied: u64,
    /// Where they were copied, for the per-path counters.
    pub copy_path: crate::vocab::CopyPath,
}

/// The batch words are the wire crate's, shared with the ONNX runtime crate.
pub use sluice_wire::{BatchKey, BatchSlot};

const NO_BATCH: Reject = Reject::new(ErrorCode::Internal, "this model does not batch");

/// The refusal of a stream frame to a model that keeps no streams.
pub const NO_STREAMS: Reject =
    Reject::new(ErrorCode::StreamUnsupported, "this model keeps no streams");

/// Runs requests for one model version on one worker. Owned by that worker:
/// no lock, no sharing.
pub trait Handler: Send {
    /// Runs `req` and writes the whole response frame at the start of `tx`;
    /// returns its length.
    fn handle(
        &mut self,
        req: &Frame<&[u8]>,
        adapter: Option<&str>,
        tx: &mut [u8],
        acct: &mut RunAccount,
    ) -> Result<usize, Reject>;

    /// Whether `req` can join a batch, and where; `None` (the default): it
    /// runs on its own through [`Handler::handle`].
    fn batch_key(&self, _req: &Frame<&[u8]>, _adapter: Option<&str>) -> Option<BatchKey> {
        None
    }

    /// Runs `reqs` (checked request frames with equal batch keys) as one
    /// batch: inputs gathered into `input`, outputs left in `output` (both
    /// 64-byte aligned, the worker's batch pool). Fills `slots`; returns the
    /// rows run. An error means no request was answered by the run.
    fn run_batch(
        &mut self,
        _reqs: &[&[u8]],
        _adapter: Option<&str>,
        _input: &mut [u8],
        _output: &mut [u8],
        _slots: &mut [BatchSlot],
        _acct: &mut RunAccount,
    ) -> Result<usize, Reject> {
        Err(NO_BATCH)
    }

    /// Runs a frame of a stream (`req` carries the stream header `h`):
    /// opens, steps, ends or cancels the stream in the handler's table and
    /// writes the answer into `tx`; returns its length. The default keeps
    /// no streams.
    fn handle_stream(
        &mut self,
        _req: &Frame<&[u8]>,
        h: sluice_wire::StreamHeader,
        _adapter: Option<&str>,
        _now_us: u64,
        _tx: &mut [u8],
        _acct: &mut RunAccount,
    ) -> Result<usize, crate::streams::StreamRefusal> {
        Err(crate::streams::StreamRefusal {
            reject: NO_STREAMS,
            seq: h.seq,
            ended: false,
        })
    }

    /// Opens a token stream (server-driven) for an `OPEN` frame: `None`,
    /// the default, when the model is not generative (the frame goes to
    /// [`Handler::handle_stream`]). Token frames go to `route` later, from
    /// [`Handler::token_iteration`] (`pushable`: the transport can send
    /// frames there on its own, else `stream_unsupported`); nothing is
    /// answered now.
    #[allow(clippy::too_many_arguments)]
    fn token_open(
        &mut self,
        _req: &Frame<&[u8]>,
        _h: sluice_wire::StreamHeader,
        _route: &crate::transport::RxPacket,
        _pushable: bool,
        _shard: usize,
        _now_us: u64,
        _acct: &mut RunAccount,
    ) -> Option<Result<(), crate::streams::StreamRefusal>> {
        None
    }

    /// Token streams generating now.
    fn token_active(&self) -> usize {
        0
    }

    /// Calls `f` with the route of every token stream that ended since the
    /// last call (`all`: ends every stream first, the handler is going).
    fn token_ended(&mut self, _all: bool, _f: &mut dyn FnMut(&crate::transport::RxPacket)) {}

    /// Ends every token stream with a last frame saying `error`, sent
    /// through `sink` (the worker restarts after a panic). The default has
    /// none.
    fn fail_token_streams(
        &mut self,
        _sink: &mut dyn crate::streams::TokenSink,
    ) -> Option<crate::streams::GenTally> {
        None
    }

    /// Ends every stream the handler holds, token streams and stateful
    /// ones, without a frame: the worker restarts after a panic that may
    /// have left one half-written. `f` gets each token stream's route. The
    /// default ends the token streams.
    fn end_streams(&mut self, f: &mut dyn FnMut(&crate::transport::RxPacket)) {
        self.token_ended(true, f);
    }

    /// Runs one decode step of every active token stream, sending frames
    /// through `sink`. `None`: the model is not generative.
    fn token_iteration(
        &mut self,
        _now_us: u64,
        _sink: &mut dyn crate::streams::TokenSink,
    ) -> Option<crate::streams::GenTally> {
        None
    }

    /// The model name and a signature of its stream state (state names,
    /// dtypes, shapes); `None`: the handler keeps no streams.
    fn stream_identity(&self) -> Option<(&str, u64)> {
        None
    }

    /// Whether the handler holds stream (`tenant`, `stream_id`).
    fn holds_stream(&self, _tenant: u32, _stream_id: u64) -> bool {
        false
    }

    /// Removes a stream: its next seq and its current state (valid until
    /// the handler is used again).
    fn take_stream(&mut self, _tenant: u32, _stream_id: u64) -> Option<(u32, &[u8])> {
        None
    }

    /// Takes over a stream another version of the model held (an alias
    /// switch): copies its state into a slot of this handler's table.
    fn adopt_stream(
        &mut self,
        _tenant: u32,
        _stream_id: u64,
        _next_seq: u32,
        _state: &[u8],
        _now_us: u64,
    ) -> bool {
        false
    }

    /// Reclaims idle streams (a bounded scan) and returns the stream
    /// counts since the last call, with the streams open now.
    fn stream_tick(&mut self, _now_us: u64) -> Option<(crate::streams::TableCounts, usize)> {
        None
    }

    /// Writes the reply of a request stacked in the last batch run into
    /// `tx` from `output`; returns the frame length.
    fn batch_reply(
        &mut self,
        _req: &Frame<&[u8]>,
        _adapter: Option<&str>,
        _slot: BatchSlot,
        _output: &[u8],
        _tx: &mut [u8],
        _acct: &mut RunAccount,
    ) -> Result<usize, Reject> {
        Err(NO_BATCH)
    }
}

/// Collects a request's input tensors into a fixed array.
fn descs<'a>(req: &'a Frame<&[u8]>) -> ([Option<TensorDesc<'a>>; limits::TENSOR_COUNT_MAX], usize) {
    let mut out = [None; limits::TENSOR_COUNT_MAX];
    let mut n = 0;
    // The structured section is request metadata, not a model input.
    let inputs = req
        .tensors()
        .filter(|d| d.name != sluice_wire::SECTION_TENSOR_NAME);
    for (slot, d) in out.iter_mut().zip(inputs) {
        *slot = Some(d);
        n += 1;
    }
    (out, n)
}

fn emit_like_inputs(
    req: &Frame<&[u8]>,
    tx: &mut [u8],
    copy_data: bool,
    acct: &mut RunAccount,
) -> Result<usize, Reject> {
    let (descs, n) = descs(req);
    let empty = TensorRepr {
        name: "_",
        dtype: sluice_wire::DType::U8,
        dims: &[],
        data: None,
    };
    let mut reprs = [empty; limits::TENSOR_COUNT_MAX];
    for (r, d) in reprs.iter_mut().zip(descs.iter().take(n).flatten()) {
        *r = TensorRepr {
            name: d.name,
            dtype: d.dtype,
            dims: d.dims(),
            data: copy_data.then(|| req.tensor_data(d)),
        };
    }
    let repr = FrameRepr {
        tensors: &reprs[..n],
        ..FrameRepr::response_to(req)
    };
    let layout = repr.emit(tx).map_err(|e| match e {
        sluice_wire::Error::BufferTooSmall => Reject::new(
            ErrorCode::ResponseTooLarge,
            "response does not fit the reply buffer",
        ),
        _ => Reject::new(ErrorCode::Internal, "response could not be built"),
    })?;
    for (i, d) in descs.iter().take(n).flatten().enumerate() {
        let off = layout.tensor_offsets[i];
        if copy_data {
            acct.payload_bytes_copied += d.data_len as u64;
            acct.copy_path = crate::vocab::CopyPath::EchoReply;
        } else {
            tx[off..off + d.data_len].fill(0);
        }
    }
    Ok(layout.frame_len)
}

/// Answers with zeros shaped like the inputs: the engine measured alone.
#[derive(Debug, Default)]
pub struct NullHandler;

impl Handler for NullHandler {
    fn handle(
        &mut self,
        req: &Frame<&[u8]>,
        _adapter: Option<&str>,
        tx: &mut [u8],
        acct: &mut RunAccount,
    ) -> Result<usize, Reject> {
        emit_like_inputs(req, tx, false, acct)
    }
}

/// A model served by backends (`kind = "backend"`) as a native frame
/// reaches it: refused with a clear code. Its requests go to model servers
/// through the front door (docs/backends.md); native-wire dispatch is not
/// built yet.
#[derive(Debug, Default)]
pub struct BackendOnlyHandler;

impl Handler for BackendOnlyHandler {
    fn handle(
        &mut self,
        _req: &Frame<&[u8]>,
        _adapter: Option<&str>,
        _tx: &mut [u8],
        _acct: &mut RunAccount,
    ) -> Result<usize, Reject> {
        Err(Reject::new(
            ErrorCode::UnsupportedKind,
            "this model is served by backends: send it to the OpenAI API (/v1) of the front door",
        ))
    }
}

/// Answers with the inputs. This copies the payload, by definition, and
/// counts it.
#[derive(Debug, Default)]
pub struct EchoHandler;

impl Handler for EchoHandler {
    fn handle(
        &mut self,
        req: &Frame<&[u8]>,
        _adapter: Option<&str>,
        tx: &mut [u8],
        acct: &mut RunAccount,
    ) -> Result<usize, Reject> {
        emit_like_inputs(req, tx, true, acct)
    }
}
