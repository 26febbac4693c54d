//! The run path: a request's inputs bound in place, outputs written in
//! place into the reply, one ORT run, and the accounting of what was copied.

use std::ffi::c_char;

use ort::memory::MemoryInfo;
use sluice_wire::limits::{RANK_MAX, TENSOR_COUNT_MAX};
use sluice_wire::{
    DType, Error as WireError, ErrorCode, Frame, FrameRepr, Kind, Layout, TensorDesc, TensorRepr,
};

use crate::Reject;
use crate::error::bad_tensor;
use crate::raw::{self, Values};

use super::*;

impl OrtModel {
    /// Runs the model on a request and writes the response frame into `tx`.
    ///
    /// `req` is a checked request frame whose buffer the engine keeps for the
    /// call. `adapter` selects a LoRA adapter by id (`None` or `Some("")`: the
    /// base model); the engine passes the frame's adapter field after its own
    /// policy checks. ONNX Runtime reads the input tensors where they lie in
    /// `req`'s buffer and writes the outputs where they lie in `tx`; returns
    /// the response frame length (`tx[..len]` is the frame). The response
    /// echoes the request id, tenant and trace and names the model version
    /// that actually ran.
    ///
    /// Input data must be aligned for its dtype (the engine's buffers are
    /// 64-byte aligned and frames align tensors to 64): misaligned data is
    /// rejected, never copied. `tx` must be aligned the same way.
    pub fn run_into(
        &mut self,
        req: &Frame<&[u8]>,
        adapter: Option<&str>,
        tx: &mut [u8],
        stats: &mut RunStats,
    ) -> Result<usize, Reject> {
        let r = self.run_inner(req, adapter, tx, stats);
        match &r {
            Ok(_) => stats.runs += 1,
            Err(e) if e.code == ErrorCode::InferenceFailed => stats.failures += 1,
            Err(_) => stats.rejects += 1,
        }
        r
    }

    /// Checks `req` as [`OrtModel::run_into`] would and creates its ONNX
    /// Runtime input values, then reports, per model input, where the request
    /// bytes are and where ORT's tensor reads from. Diagnostic (tests prove
    /// zero copy with it); allocates the returned vector.
    pub fn probe_inputs(&mut self, req: &Frame<&[u8]>) -> Result<Vec<InputBinding>, Reject> {
        let mut shapes = [[0i64; RANK_MAX]; TENSOR_COUNT_MAX];
        let (descs, _) = self.bind(req, &mut shapes)?;
        let mut values = Values::new();
        let mut out = Vec::with_capacity(self.inputs.len());
        for (i, port) in self.inputs.iter().enumerate() {
            let data = descs[i].map(|d| req.tensor_data(&d)).unwrap_or(&[]);
            let ort_ptr = values
                .push_input(&self.memory, data, &shapes[i][..port.rank], port.dtype)
                .map_err(|e| {
                    self.last_error = e.0;
                    Reject {
                        code: ErrorCode::InferenceFailed,
                        message: msg::ORT_FAILED,
                    }
                })?;
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
    /// and returns the descriptors in model input order plus the bound
    /// symbolic sizes.
    #[allow(clippy::type_complexity)]
    fn bind<'r>(
        &self,
        req: &'r Frame<&[u8]>,
        shapes: &mut [[i64; RANK_MAX]; TENSOR_COUNT_MAX],
    ) -> Result<
        (
            [Option<TensorDesc<'r>>; TENSOR_COUNT_MAX],
            [Option<u64>; TENSOR_COUNT_MAX * RANK_MAX],
        ),
        Reject,
    > {
        if req.kind() != Kind::Request {
            return Err(Reject {
                code: ErrorCode::UnsupportedKind,
                message: msg::NOT_REQUEST,
            });
        }
        let mut descs: [Option<TensorDesc<'r>>; TENSOR_COUNT_MAX] = [None; TENSOR_COUNT_MAX];
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
        let mut bound = [None; TENSOR_COUNT_MAX * RANK_MAX];
        for (i, port) in self.inputs.iter().enumerate() {
            let d = descs[i].as_ref().ok_or(bad_tensor(msg::MISSING_INPUT))?;
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
        let adapter_ix = match adapter {
            None | Some("") => None,
            Some(id) => Some(
                self.adapters
                    .iter()
                    .position(|a| a.id == id)
                    .ok_or(Reject {
                        code: ErrorCode::UnknownAdapter,
                        message: msg::UNKNOWN_ADAPTER,
                    })?,
            ),
        };
        let mut in_shapes = [[0i64; RANK_MAX]; TENSOR_COUNT_MAX];
        let (descs, bound) = self.bind(req, &mut in_shapes)?;
        let (out_dims, out_shapes) = self.output_dims(&bound)?;
        let mut reprs = [TensorRepr {
            name: "",
            dtype: DType::U8,
            dims: &[],
            data: None,
        }; TENSOR_COUNT_MAX];
        for (o, port) in self.outputs.iter().enumerate() {
            reprs[o] = TensorRepr {
                name: &port.name,
                dtype: port.dtype,
                dims: &out_dims[o][..port.rank],
                data: None,
            };
        }
        let repr = FrameRepr {
            model: &self.name,
            model_version: &self.version,
            adapter: adapter.unwrap_or(""),
            tensors: &reprs[..self.outputs.len()],
            ..FrameRepr::response_to(req)
        };
        let layout = repr.emit(tx).map_err(|e| match e {
            WireError::BufferTooSmall | WireError::TooLarge | WireError::SizeOverflow => Reject {
                code: ErrorCode::ResponseTooLarge,
                message: msg::RESPONSE_TOO_LARGE,
            },
            _ => Reject {
                code: ErrorCode::Internal,
                message: msg::RESPONSE_HEADER,
            },
        })?;

        let mut inputs = Values::new();
        let mut in_names = [core::ptr::null::<c_char>(); TENSOR_COUNT_MAX];
        let (in_bytes, mut copied) = Self::push_inputs(
            &self.inputs,
            &self.memory,
            &mut self.last_error,
            req,
            &descs,
            &in_shapes,
            &mut inputs,
            &mut in_names,
        )?;
        let mut outputs = Values::new();
        let mut out_names = [core::ptr::null::<c_char>(); TENSOR_COUNT_MAX];
        let mut out_ptrs = [core::ptr::null::<u8>(); TENSOR_COUNT_MAX];
        let out_bytes = Self::push_outputs(
            &self.outputs,
            &self.memory,
            &mut self.last_error,
            &mut tx[..layout.frame_len],
            &layout,
            &reprs,
            &out_shapes,
            &mut outputs,
            &mut out_names,
            &mut out_ptrs,
        )?;

        let options = match adapter_ix {
            None => &self.default_options,
            Some(i) => &self.adapters[i].options,
        };
        let (n_in, n_out) = (self.inputs.len(), self.outputs.len());
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
        for (o, &want) in out_ptrs.iter().enumerate().take(n_out) {
            match outputs.data_ptr(o) {
                Ok(p) if p == want || reprs[o].dims.contains(&0) => {}
                Ok(_) => copied += reprs[o].dtype.byte_len(reprs[o].dims).unwrap_or(0) as u64,
                Err(e) => return Err(ort_failed(&mut self.last_error, e)),
            }
        }
        stats.payload_bytes_in_place += in_bytes;
        stats.output_bytes_in_place += out_bytes;
        stats.payload_bytes_copied += copied;
        Ok(layout.frame_len)
    }

    /// Output shapes follow from fixed sizes and symbols bound by inputs
    /// (checked at load that every output dimension is one of those).
    #[allow(clippy::type_complexity)]
    fn output_dims(
        &self,
        bound: &[Option<u64>; TENSOR_COUNT_MAX * RANK_MAX],
    ) -> Result<
        (
            [[u64; RANK_MAX]; TENSOR_COUNT_MAX],
            [[i64; RANK_MAX]; TENSOR_COUNT_MAX],
        ),
        Reject,
    > {
        let mut out_dims = [[0u64; RANK_MAX]; TENSOR_COUNT_MAX];
        let mut out_shapes = [[0i64; RANK_MAX]; TENSOR_COUNT_MAX];
        for (o, port) in self.outputs.iter().enumerate() {
            for k in 0..port.rank {
                let v = match port.dims[k] {
                    DimRule::Fixed(v) => v,
                    DimRule::Sym(s) => bound[s as usize].ok_or(Reject {
                        code: ErrorCode::Internal,
                        message: msg::RESPONSE_HEADER,
                    })?,
                    DimRule::Any => {
                        return Err(Reject {
                            code: ErrorCode::Internal,
                            message: msg::RESPONSE_HEADER,
                        });
                    }
                };
                out_dims[o][k] = v;
                out_shapes[o][k] = v as i64; // bounded by an input dim, itself checked ≤ i64::MAX
            }
        }
        Ok((out_dims, out_shapes))
    }

    /// Inputs: values over the request's bytes, in the model's input order.
    /// Returns the bytes ORT reads in place and the bytes it copied.
    #[allow(clippy::too_many_arguments)]
    fn push_inputs<'r>(
        ports: &[Port],
        memory: &MemoryInfo<'static>,
        last_error: &mut String,
        req: &'r Frame<&[u8]>,
        descs: &[Option<TensorDesc<'_>>; TENSOR_COUNT_MAX],
        in_shapes: &[[i64; RANK_MAX]; TENSOR_COUNT_MAX],
        inputs: &mut Values<'r>,
        in_names: &mut [*const c_char; TENSOR_COUNT_MAX],
    ) -> Result<(u64, u64), Reject> {
        let mut in_bytes = 0u64;
        let mut copied = 0u64;
        for (i, port) in ports.iter().enumerate() {
            let Some(d) = descs[i] else {
                return Err(bad_tensor(msg::MISSING_INPUT));
            };
            let data = req.tensor_data(&d);
            let got = match inputs.push_input(memory, data, &in_shapes[i][..port.rank], port.dtype)
            {
                Ok(p) => p,
                Err(e) => return Err(ort_failed(last_error, e)),
            };
            if data.is_empty() || got == data.as_ptr() {
                in_bytes += data.len() as u64;
            } else {
                copied += data.len() as u64;
            }
            in_names[i] = port.c_name.as_ptr();
        }
        Ok((in_bytes, copied))
    }

    /// Outputs: values over the response's tensor regions in `frame` (the
    /// emitted response). Returns the bytes ORT will write in place.
    #[allow(clippy::too_many_arguments)]
    fn push_outputs<'t>(
        ports: &[Port],
        memory: &MemoryInfo<'static>,
        last_error: &mut String,
        frame: &'t mut [u8],
        layout: &Layout,
        reprs: &[TensorRepr<'_>; TENSOR_COUNT_MAX],
        out_shapes: &[[i64; RANK_MAX]; TENSOR_COUNT_MAX],
        outputs: &mut Values<'t>,
        out_names: &mut [*const c_char; TENSOR_COUNT_MAX],
        out_ptrs: &mut [*const u8; TENSOR_COUNT_MAX],
    ) -> Result<u64, Reject> {
        let mut out_bytes = 0u64;
        let mut rest: &mut [u8] = frame;
        let mut consumed = 0usize;
        for (o, port) in ports.iter().enumerate() {
            let off = layout.tensor_offsets[o];
            let len = reprs[o].dtype.byte_len(reprs[o].dims).unwrap_or(0);
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(off - consumed);
            let (region, tail) = tail.split_at_mut(len);
            rest = tail;
            consumed = off + len;
            if !is_aligned(region.as_ptr(), port.dtype) {
                return Err(Reject {
                    code: ErrorCode::Internal,
                    message: msg::TX_MISALIGNED,
                });
            }
            out_ptrs[o] = region.as_ptr();
            out_bytes += len as u64;
            if let Err(e) =
                outputs.push_output(memory, region, &out_shapes[o][..port.rank], port.dtype)
            {
                return Err(ort_failed(last_error, e));
            }
            out_names[o] = port.c_name.as_ptr();
        }
        Ok(out_bytes)
    }
}

/// Whether `p` is aligned for `dtype` (element sizes are powers of two).
fn is_aligned(p: *const u8, dtype: DType) -> bool {
    (p as usize) & (dtype.size_bytes() - 1) == 0
}

/// Records ORT's message and turns a failure into the request's answer.
fn ort_failed(last_error: &mut String, e: raw::OrtFailure) -> Reject {
    *last_error = e.0;
    Reject {
        code: ErrorCode::InferenceFailed,
        message: msg::ORT_FAILED,
    }
}
