//! `inference.GRPCInferenceService`, generated from the vendored .proto
//! files. ModelInfer takes `raw_input_contents` (or typed `contents`) and
//! answers with `raw_output_contents`; ModelStreamInfer is in
//! `grpc_stream`.
//!
//! Copies per request: tonic gathers the HTTP/2 DATA frames into its decode
//! buffer (inside tonic); prost's `bytes` fields are views of it; Sluice
//! copies each input once into the aligned slot (counted). Outputs are views
//! of the reply slot that prost copies once into tonic's encode buffer
//! (counted as reply_bytes_copied).

use std::collections::HashMap;
use std::sync::Arc;

use sluice_wire::{DType, ErrorCode};
use tonic::{Request, Response, Status};

use crate::ctx::{Ctx, Stats};
use crate::dtype;
use crate::errors::Refusal;
use crate::frames::{self, Input};
use crate::models;
use crate::pb;
use crate::pb::grpc_inference_service_server::{GrpcInferenceService, GrpcInferenceServiceServer};

/// The service.
#[derive(Clone)]
pub struct Service {
    ctx: Arc<Ctx>,
}

/// The tower service a gRPC listener serves.
pub fn service(ctx: Arc<Ctx>) -> GrpcInferenceServiceServer<Service> {
    let max = ctx.cfg.body_bytes_max as usize + 64 * 1024;
    GrpcInferenceServiceServer::new(Service { ctx })
        .max_decoding_message_size(max)
        .max_encoding_message_size(usize::MAX)
}

fn refused(ctx: &Ctx, r: Refusal) -> Status {
    ctx.stats.refusal(r.status);
    r.to_status()
}

const INFER_PATH: &str = "/inference.GRPCInferenceService/ModelInfer";

fn tensor_meta(
    ts: &[sluice_engine::meta::TensorMeta],
) -> Vec<pb::model_metadata_response::TensorMetadata> {
    ts.iter()
        .map(|t| pb::model_metadata_response::TensorMetadata {
            name: t.name.clone(),
            datatype: t.datatype.to_string(),
            shape: t.shape.clone(),
        })
        .collect()
}

/// The values a narrow integer dtype holds (typed contents carry them in
/// 32-bit fields).
fn int_range(dt: DType) -> (i64, i64) {
    match dt {
        DType::I8 => (i8::MIN.into(), i8::MAX.into()),
        DType::I16 => (i16::MIN.into(), i16::MAX.into()),
        DType::I32 => (i32::MIN.into(), i32::MAX.into()),
        DType::U8 => (0, u8::MAX.into()),
        DType::U16 => (0, u16::MAX.into()),
        _ => (0, u32::MAX.into()),
    }
}

/// Refuses a value its dtype cannot hold, rather than wrapping it.
fn in_range(name: &str, dt: DType, i: usize, v: i64, lo: i64, hi: i64) -> Result<(), Refusal> {
    if v < lo || v > hi {
        return Err(Refusal::code(
            ErrorCode::BadTensor,
            format!(
                "input {name}: element {i} is {v}, out of range for {} ({lo}..={hi})",
                dt.kserve_name()
            ),
        ));
    }
    Ok(())
}

/// Writes typed `contents` into a tensor region.
fn typed_contents(
    name: &str,
    dt: DType,
    c: &pb::InferTensorContents,
    out: &mut [u8],
) -> Result<(), Refusal> {
    let n = out.len() / dt.size_bytes();
    let count = |got: usize| -> Result<(), Refusal> {
        if got != n {
            return Err(Refusal::code(
                ErrorCode::BadTensor,
                format!("input {name}: contents hold {got} elements, the shape needs {n}"),
            ));
        }
        Ok(())
    };
    let sz = dt.size_bytes();
    let mut put = |i: usize, b: &[u8]| out[i * sz..(i + 1) * sz].copy_from_slice(&b[..sz]);
    match dt {
        DType::F32 => {
            count(c.fp32_contents.len())?;
            for (i, v) in c.fp32_contents.iter().enumerate() {
                put(i, &v.to_le_bytes());
            }
        }
        DType::F64 => {
            count(c.fp64_contents.len())?;
            for (i, v) in c.fp64_contents.iter().enumerate() {
                put(i, &v.to_le_bytes());
            }
        }
        DType::I8 | DType::I16 | DType::I32 => {
            count(c.int_contents.len())?;
            let (lo, hi) = int_range(dt);
            for (i, v) in c.int_contents.iter().enumerate() {
                in_range(name, dt, i, i64::from(*v), lo, hi)?;
                // Little-endian: an in-range value's low bytes are it.
                put(i, &v.to_le_bytes());
            }
        }
        DType::U8 | DType::U16 | DType::U32 => {
            count(c.uint_contents.len())?;
            let (lo, hi) = int_range(dt);
            for (i, v) in c.uint_contents.iter().enumerate() {
                in_range(name, dt, i, i64::from(*v), lo, hi)?;
                put(i, &v.to_le_bytes());
            }
        }
        DType::I64 => {
            count(c.int64_contents.len())?;
            for (i, v) in c.int64_contents.iter().enumerate() {
                put(i, &v.to_le_bytes());
            }
        }
        DType::U64 => {
            count(c.uint64_contents.len())?;
            for (i, v) in c.uint64_contents.iter().enumerate() {
                put(i, &v.to_le_bytes());
            }
        }
        DType::Bool => {
            count(c.bool_contents.len())?;
            for (i, v) in c.bool_contents.iter().enumerate() {
                put(i, &[u8::from(*v)]);
            }
        }
        DType::F16 | DType::BF16 => {
            return Err(Refusal::bad(format!(
                "input {name}: {} travels in raw_input_contents only",
                dt.kserve_name()
            )));
        }
    }
    Ok(())
}

impl Service {
    /// The shared context.
    pub fn ctx(&self) -> &Arc<Ctx> {
        &self.ctx
    }

    /// ModelInfer's work, for ModelInfer and ModelStreamInfer alike.
    pub(crate) async fn infer(
        &self,
        req: Request<pb::ModelInferRequest>,
    ) -> Result<pb::ModelInferResponse, Refusal> {
        let ctx = &self.ctx;
        let (meta, ext, msg) = req.into_parts();
        let tables = ctx.tables();
        let call = crate::semantic::Call {
            method: "POST",
            path: INFER_PATH,
            query: "",
            checked: ext.get::<crate::semantic::Auth>(),
        };
        let sem = crate::semantic::read(
            &meta,
            &ctx.env(&tables),
            &call,
            &msg.model_name,
            &msg.model_version,
        )?;
        if tables.models.resolve(&sem.model, &sem.version).is_none() {
            return Err(Refusal::code(
                ErrorCode::UnknownModel,
                "unknown model or version",
            ));
        }
        if !ctx.ready() {
            return Err(Refusal::code(
                ErrorCode::ShuttingDown,
                "appliance is shutting down",
            ));
        }
        let raw = !msg.raw_input_contents.is_empty();
        if raw && msg.raw_input_contents.len() != msg.inputs.len() {
            return Err(Refusal::bad(format!(
                "{} inputs but {} raw_input_contents",
                msg.inputs.len(),
                msg.raw_input_contents.len()
            )));
        }
        let mut inputs = Vec::with_capacity(msg.inputs.len());
        for i in &msg.inputs {
            let dt = DType::from_kserve(&i.datatype).ok_or_else(|| {
                Refusal::code(
                    ErrorCode::BadTensor,
                    format!("input {}: datatype {} is not supported", i.name, i.datatype),
                )
            })?;
            let input = Input {
                name: i.name.clone(),
                dtype: dt,
                dims: frames::dims_of(&i.name, &i.shape)?,
            };
            let len = input.byte_len()?;
            if raw {
                let got = msg.raw_input_contents[inputs.len()].len();
                if got != len {
                    return Err(Refusal::code(
                        ErrorCode::BadTensor,
                        format!(
                            "input {}: {got} raw bytes but shape and datatype make {len}",
                            i.name
                        ),
                    ));
                }
            } else if i.contents.is_none() {
                return Err(Refusal::bad(format!("input {}: no contents", i.name)));
            }
            inputs.push(input);
        }
        let (mut f, rid) = crate::dispatch::alloc()?;
        let layout = frames::emit(&mut f, &sem, rid, &inputs)?;
        let slot = f.request_mut();
        let mut copied = 0u64;
        for (k, input) in inputs.iter().enumerate() {
            let off = layout.tensor_offsets[k];
            let len = input.byte_len()?;
            let out = &mut slot[off..off + len];
            if raw {
                out.copy_from_slice(&msg.raw_input_contents[k]);
                copied += len as u64;
            } else if let Some(c) = &msg.inputs[k].contents {
                typed_contents(&input.name, input.dtype, c, out)?;
            }
        }
        Stats::add(&ctx.stats.payload_bytes_copied, copied);
        let wanted: Vec<String> = msg.outputs.iter().map(|o| o.name.clone()).collect();
        let id = msg.id.clone();
        drop(msg);
        let w = crate::dispatch::pick_worker(&tables, &sem, ctx.workers, &ctx.rr);
        drop(tables);
        let rx = crate::dispatch::submit(f, layout.frame_len, w)?;
        Stats::add(&ctx.stats.submitted, 1);
        let done = rx
            .await
            .map_err(|_| Refusal::code(ErrorCode::ShuttingDown, "the front door is stopping"))?;
        Stats::add(&ctx.stats.answered, 1);
        let a = frames::answer(done)?;
        let chosen: Vec<&frames::Output> = if wanted.is_empty() {
            a.outputs.iter().collect()
        } else {
            wanted
                .iter()
                .map(|n| {
                    a.outputs
                        .iter()
                        .find(|o| &o.name == n)
                        .ok_or_else(|| Refusal::bad(format!("the model has no output {n}")))
                })
                .collect::<Result<_, _>>()?
        };
        let mut resp = pb::ModelInferResponse {
            model_name: a.model.clone(),
            model_version: a.version.clone(),
            id,
            parameters: HashMap::new(),
            outputs: Vec::with_capacity(chosen.len()),
            raw_output_contents: Vec::with_capacity(chosen.len()),
        };
        let mut reply_bytes = 0u64;
        for o in chosen {
            resp.outputs
                .push(pb::model_infer_response::InferOutputTensor {
                    name: o.name.clone(),
                    datatype: o.dtype.kserve_name().to_string(),
                    shape: o.dims.iter().map(|&d| d as i64).collect(),
                    parameters: HashMap::new(),
                    contents: None,
                });
            reply_bytes += o.range.len() as u64;
            resp.raw_output_contents.push(a.bytes_of(o));
        }
        Stats::add(&ctx.stats.reply_bytes_copied, reply_bytes);
        Ok(resp)
    }

    fn find(
        &self,
        meta: &tonic::metadata::MetadataMap,
        checked: Option<&crate::semantic::Auth>,
        path: &str,
        name: &str,
        version: &str,
    ) -> Result<models::Found, Status> {
        let tables = self.ctx.tables();
        let call = crate::semantic::Call {
            method: "POST",
            path,
            query: "",
            checked,
        };
        models::find(
            &self.ctx.meta,
            &self.ctx.env(&tables),
            meta,
            &call,
            name,
            version,
        )
        .map_err(|r| refused(&self.ctx, r))
    }
}

#[tonic::async_trait]
impl GrpcInferenceService for Service {
    async fn server_live(
        &self,
        _req: Request<pb::ServerLiveRequest>,
    ) -> Result<Response<pb::ServerLiveResponse>, Status> {
        Stats::add(&self.ctx.stats.grpc_requests, 1);
        Ok(Response::new(pb::ServerLiveResponse { live: true }))
    }

    async fn server_ready(
        &self,
        _req: Request<pb::ServerReadyRequest>,
    ) -> Result<Response<pb::ServerReadyResponse>, Status> {
        Stats::add(&self.ctx.stats.grpc_requests, 1);
        Ok(Response::new(pb::ServerReadyResponse {
            ready: self.ctx.ready(),
        }))
    }

    async fn model_ready(
        &self,
        req: Request<pb::ModelReadyRequest>,
    ) -> Result<Response<pb::ModelReadyResponse>, Status> {
        Stats::add(&self.ctx.stats.grpc_requests, 1);
        let m = req.metadata().clone();
        let auth = req.extensions().get::<crate::semantic::Auth>().cloned();
        let r = req.into_inner();
        let ready = match self.find(
            &m,
            auth.as_ref(),
            "/inference.GRPCInferenceService/ModelReady",
            &r.name,
            &r.version,
        ) {
            Ok(_) => self.ctx.ready(),
            Err(s) if s.code() == tonic::Code::NotFound => false,
            Err(s) => return Err(s),
        };
        Ok(Response::new(pb::ModelReadyResponse { ready }))
    }

    async fn server_metadata(
        &self,
        _req: Request<pb::ServerMetadataRequest>,
    ) -> Result<Response<pb::ServerMetadataResponse>, Status> {
        Stats::add(&self.ctx.stats.grpc_requests, 1);
        Ok(Response::new(pb::ServerMetadataResponse {
            name: models::SERVER_NAME.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            extensions: models::EXTENSIONS.iter().map(|s| s.to_string()).collect(),
        }))
    }

    async fn model_metadata(
        &self,
        req: Request<pb::ModelMetadataRequest>,
    ) -> Result<Response<pb::ModelMetadataResponse>, Status> {
        Stats::add(&self.ctx.stats.grpc_requests, 1);
        let m = req.metadata().clone();
        let auth = req.extensions().get::<crate::semantic::Auth>().cloned();
        let r = req.into_inner();
        let f = self.find(
            &m,
            auth.as_ref(),
            "/inference.GRPCInferenceService/ModelMetadata",
            &r.name,
            &r.version,
        )?;
        let v = f.version();
        let mut inputs = tensor_meta(&v.inputs);
        inputs.extend(tensor_meta(&v.optional_inputs));
        Ok(Response::new(pb::ModelMetadataResponse {
            name: f.meta.name.clone(),
            versions: f.meta.versions.iter().map(|v| v.version.clone()).collect(),
            platform: v.platform.to_string(),
            inputs,
            outputs: tensor_meta(&v.outputs),
        }))
    }

    async fn model_infer(
        &self,
        req: Request<pb::ModelInferRequest>,
    ) -> Result<Response<pb::ModelInferResponse>, Status> {
        Stats::add(&self.ctx.stats.grpc_requests, 1);
        self.infer(req)
            .await
            .map(Response::new)
            .map_err(|r| refused(&self.ctx, r))
    }

    async fn model_stream_infer(
        &self,
        req: Request<tonic::Streaming<pb::ModelInferRequest>>,
    ) -> Result<Response<tonic::codegen::BoxStream<pb::ModelStreamInferResponse>>, Status> {
        Stats::add(&self.ctx.stats.grpc_requests, 1);
        let r = crate::grpc_stream::serve(self.clone(), req);
        Ok(r.map(|s| Box::pin(s) as tonic::codegen::BoxStream<_>))
    }

    async fn model_config(
        &self,
        req: Request<pb::ModelConfigRequest>,
    ) -> Result<Response<pb::ModelConfigResponse>, Status> {
        Stats::add(&self.ctx.stats.grpc_requests, 1);
        let m = req.metadata().clone();
        let auth = req.extensions().get::<crate::semantic::Auth>().cloned();
        let r = req.into_inner();
        let f = self.find(
            &m,
            auth.as_ref(),
            "/inference.GRPCInferenceService/ModelConfig",
            &r.name,
            &r.version,
        )?;
        let v = f.version();
        let batching = f.batch.is_some();
        let io_in = |t: &sluice_engine::meta::TensorMeta, optional: bool| pb::ModelInput {
            name: t.name.clone(),
            data_type: models::dtype_of(t).map_or(0, dtype::triton_type),
            dims: models::config_dims(t, batching),
            optional,
            ..Default::default()
        };
        let mut input: Vec<pb::ModelInput> = v.inputs.iter().map(|t| io_in(t, false)).collect();
        input.extend(v.optional_inputs.iter().map(|t| io_in(t, true)));
        let output = v
            .outputs
            .iter()
            .map(|t| pb::ModelOutput {
                name: t.name.clone(),
                data_type: models::dtype_of(t).map_or(0, dtype::triton_type),
                dims: models::config_dims(t, batching),
                ..Default::default()
            })
            .collect();
        let config = pb::ModelConfig {
            name: f.meta.name.clone(),
            platform: v.platform.to_string(),
            backend: if v.platform == "onnxruntime_onnx" {
                "onnxruntime".into()
            } else {
                "sluice".into()
            },
            max_batch_size: f.batch.map_or(0, |b| b.max as i32),
            input,
            output,
            scheduling_choice: f.batch.map(|b| {
                pb::model_config::SchedulingChoice::DynamicBatching(pb::ModelDynamicBatching {
                    preferred_batch_size: vec![b.max as i32],
                    max_queue_delay_microseconds: b.delay_us as u64,
                    ..Default::default()
                })
            }),
            instance_group: vec![pb::ModelInstanceGroup {
                name: f.meta.name.clone(),
                kind: pb::model_instance_group::Kind::Cpu as i32,
                count: self.ctx.workers as i32,
                ..Default::default()
            }],
            ..Default::default()
        };
        Ok(Response::new(pb::ModelConfigResponse {
            config: Some(config),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_typed_contents_are_range_checked() {
        let c = |ints: Vec<i32>, uints: Vec<u32>| pb::InferTensorContents {
            int_contents: ints,
            uint_contents: uints,
            ..Default::default()
        };
        let mut out = [0u8; 2];
        let e = typed_contents("x", DType::I8, &c(vec![1, 200], vec![]), &mut out);
        let msg = e.err().map(|r| r.message).unwrap_or_default();
        assert!(
            msg.contains("input x: element 1 is 200, out of range for INT8"),
            "{msg}"
        );
        assert!(typed_contents("x", DType::U8, &c(vec![], vec![255, 256]), &mut out).is_err());
        assert!(typed_contents("x", DType::I8, &c(vec![-128, 127], vec![]), &mut out).is_ok());
        assert_eq!(out, [0x80, 0x7f]);
        let mut out = [0u8; 4];
        assert!(typed_contents("x", DType::I16, &c(vec![-32769, 0], vec![]), &mut out).is_err());
        assert!(typed_contents("x", DType::U16, &c(vec![], vec![65535, 65536]), &mut out).is_err());
        assert!(typed_contents("x", DType::U16, &c(vec![], vec![65535, 1]), &mut out).is_ok());
        assert_eq!(out, [0xff, 0xff, 1, 0]);
    }
}
