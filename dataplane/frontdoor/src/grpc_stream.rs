//! gRPC `ModelStreamInfer` (bidirectional), as Triton serves it: every
//! request on the call gets its answers on the call, with the request's
//! `id`; an error is a response with `error_message`, and the call goes on.
//!
//! - An ordinary model: one `ModelStreamInferResponse` per request, as
//!   ModelInfer would answer it.
//! - A generative model (`[models.stream.generate]`; Triton's decoupled
//!   mode): the request's prompt (the model's token input, INT64 `[n]`)
//!   opens a token stream; every token frame is a response carrying the
//!   frame's tokens (INT64 `[k]`) and the parameter `triton_final_response`
//!   (true on the last). The request parameter `max_tokens` (int64) caps the
//!   tokens, `tokens_per_frame` groups them; with
//!   `triton_enable_empty_final_response` the end comes as its own empty
//!   response when the last frame carries no token (EOS), else that empty
//!   response is left out, as Triton does.
//!
//! Requests run concurrently, at most [`CALL_INFLIGHT_MAX`] per call (then
//! the call's requests are not read until one finishes: HTTP/2 flow control
//! holds the client back). A call that ends (the client cancels it, or the
//! connection goes) cancels its token streams; a client that only half-closes
//! (done sending) still gets every answer.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use sluice_engine::config::GenerateCfg;
use sluice_wire::ErrorCode;
use tokio::sync::{Semaphore, mpsc};
use tonic::codegen::tokio_stream::Stream;
use tonic::{Request, Response, Status};

use crate::ctx::Stats;
use crate::errors::Refusal;
use crate::grpc::Service;
use crate::pb;
use crate::tokens::{self, Ask, ConnStreams};

/// Requests of one call running at once.
pub const CALL_INFLIGHT_MAX: usize = 32;

/// Responses buffered per call before the requests producing them wait
/// for the client to read.
const RESPONSES_BUFFERED: usize = 64;

const STREAM_PATH: &str = "/inference.GRPCInferenceService/ModelStreamInfer";

type Out = Result<pb::ModelStreamInferResponse, Status>;

/// The call's response stream.
pub struct Responses(mpsc::Receiver<Out>);

impl Stream for Responses {
    type Item = Out;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Out>> {
        self.0.poll_recv(cx)
    }
}

/// Serves one ModelStreamInfer call.
pub fn serve(
    svc: Service,
    req: Request<tonic::Streaming<pb::ModelInferRequest>>,
) -> Response<Responses> {
    let (meta, ext, mut inbound) = req.into_parts();
    let conn = ext.get::<ConnStreams>().cloned().unwrap_or_default();
    // Checked once for the call by the gate (with its first message).
    let auth = ext.get::<crate::semantic::Auth>().cloned().map(Arc::new);
    let (tx, rx) = mpsc::channel(RESPONSES_BUFFERED);
    tokio::spawn(async move {
        let inflight = Arc::new(Semaphore::new(CALL_INFLIGHT_MAX));
        loop {
            let permit = tokio::select! {
                p = Arc::clone(&inflight).acquire_owned() => p,
                _ = tx.closed() => break,
            };
            let Ok(permit) = permit else { break };
            let msg = tokio::select! {
                m = inbound.message() => m,
                _ = tx.closed() => break,
            };
            let msg = match msg {
                Ok(Some(m)) => m,
                // Half-closed: the running requests still answer.
                Ok(None) => break,
                Err(s) => {
                    log::debug!("ModelStreamInfer: {s}");
                    break;
                }
            };
            Stats::add(&svc.ctx().stats.grpc_requests, 1);
            let (svc, meta, tx, conn) = (svc.clone(), meta.clone(), tx.clone(), conn.clone());
            let auth = auth.clone();
            tokio::spawn(async move {
                one(&svc, meta, auth.as_deref(), msg, &tx, &conn).await;
                drop(permit);
            });
        }
    });
    Response::new(Responses(rx))
}

fn error_response(
    r: &Refusal,
    id: &str,
    model: &str,
    version: &str,
) -> pb::ModelStreamInferResponse {
    pb::ModelStreamInferResponse {
        error_message: r.message.to_string(),
        infer_response: Some(pb::ModelInferResponse {
            model_name: model.to_string(),
            model_version: version.to_string(),
            id: id.to_string(),
            ..Default::default()
        }),
    }
}

/// One request of the call.
async fn one(
    svc: &Service,
    meta: tonic::metadata::MetadataMap,
    auth: Option<&crate::semantic::Auth>,
    msg: pb::ModelInferRequest,
    tx: &mpsc::Sender<Out>,
    conn: &ConnStreams,
) {
    let ctx = svc.ctx();
    let (id, model, version) = (
        msg.id.clone(),
        msg.model_name.clone(),
        msg.model_version.clone(),
    );
    let sem = {
        let tables = ctx.tables();
        let call = crate::semantic::Call {
            method: "POST",
            path: STREAM_PATH,
            query: "",
            checked: auth,
        };
        crate::semantic::read(&meta, &ctx.env(&tables), &call, &model, &version)
    };
    let sem = match sem {
        Ok(s) => s,
        Err(r) => {
            ctx.stats.refusal(r.status);
            tokens::relay(ctx, tx, Ok(error_response(&r, &id, &model, &version))).await;
            return;
        }
    };
    if let Some(gcfg) = tokens::generative(ctx, &sem) {
        if let Err(r) = decoupled(svc, sem, &gcfg, &msg, tx, conn).await {
            ctx.stats.refusal(r.status);
            tokens::relay(ctx, tx, Ok(error_response(&r, &id, &model, &version))).await;
        }
        return;
    }
    let mut ext = tonic::Extensions::default();
    if let Some(a) = auth {
        ext.insert(a.clone());
    }
    let answer = svc.infer(Request::from_parts(meta, ext, msg)).await;
    let out = match answer {
        Ok(resp) => pb::ModelStreamInferResponse {
            error_message: String::new(),
            infer_response: Some(resp),
        },
        Err(r) => {
            ctx.stats.refusal(r.status);
            error_response(&r, &id, &model, &version)
        }
    };
    tokens::relay(ctx, tx, Ok(out)).await;
}

fn int_param(msg: &pb::ModelInferRequest, name: &str, max: u64) -> Result<u64, Refusal> {
    match msg
        .parameters
        .get(name)
        .and_then(|p| p.parameter_choice.as_ref())
    {
        None => Ok(0),
        Some(pb::infer_parameter::ParameterChoice::Int64Param(v)) => u64::try_from(*v)
            .ok()
            .filter(|v| *v <= max)
            .ok_or_else(|| Refusal::bad(format!("parameter {name}: 0 to {max}"))),
        Some(_) => Err(Refusal::bad(format!("parameter {name}: an int64"))),
    }
}

fn bool_param(msg: &pb::ModelInferRequest, name: &str) -> bool {
    matches!(
        msg.parameters
            .get(name)
            .and_then(|p| p.parameter_choice.as_ref()),
        Some(pb::infer_parameter::ParameterChoice::BoolParam(true))
    )
}

/// The prompt of a generate request: the model's token input, INT64 `[n]`.
fn prompt(gcfg: &GenerateCfg, msg: &pb::ModelInferRequest) -> Result<Vec<i64>, Refusal> {
    let want = || {
        Refusal::code(
            ErrorCode::BadTensor,
            format!(
                "a generative model takes one input, {}: INT64 [n], the prompt's tokens",
                gcfg.token_input
            ),
        )
    };
    let [input] = msg.inputs.as_slice() else {
        return Err(want());
    };
    if input.name != gcfg.token_input || input.datatype != "INT64" || input.shape.len() != 1 {
        return Err(want());
    }
    let n = usize::try_from(input.shape[0]).map_err(|_| want())?;
    let tokens: Vec<i64> = match (msg.raw_input_contents.first(), &input.contents) {
        (Some(raw), _) => {
            if raw.len() != 8 * n {
                return Err(Refusal::code(
                    ErrorCode::BadTensor,
                    format!(
                        "input {}: {} raw bytes for {n} INT64",
                        input.name,
                        raw.len()
                    ),
                ));
            }
            raw.chunks_exact(8)
                .map(|c| {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(c);
                    i64::from_le_bytes(b)
                })
                .collect()
        }
        (None, Some(c)) => c.int64_contents.clone(),
        (None, None) => return Err(Refusal::bad(format!("input {}: no contents", input.name))),
    };
    if tokens.len() != n {
        return Err(Refusal::code(
            ErrorCode::BadTensor,
            format!(
                "input {}: {} tokens, the shape says {n}",
                input.name,
                tokens.len()
            ),
        ));
    }
    Ok(tokens)
}

/// A generate request in Triton's decoupled mode: one response per token
/// frame.
async fn decoupled(
    svc: &Service,
    sem: crate::semantic::Semantic,
    gcfg: &GenerateCfg,
    msg: &pb::ModelInferRequest,
    tx: &mpsc::Sender<Out>,
    conn: &ConnStreams,
) -> Result<(), Refusal> {
    let ctx = svc.ctx();
    let ask = Ask {
        prompt: prompt(gcfg, msg)?,
        max_tokens: int_param(msg, "max_tokens", u64::from(u32::MAX))? as u32,
        tokens_per_frame: int_param(msg, "tokens_per_frame", u64::from(u16::MAX))? as u16,
    };
    let empty_final = bool_param(msg, "triton_enable_empty_final_response");
    let mut g = tokens::open(ctx, sem, gcfg, &ask, conn)?;
    let mut frames = 0u64;
    loop {
        let next = tokio::select! {
            n = g.next() => n,
            // The call is gone: dropping `g` cancels the stream.
            _ = tx.closed() => return Ok(()),
        };
        let Some(f) = next else { return Ok(()) };
        let f = f?;
        frames += 1;
        let last = f.end.is_some();
        let failed = tokens::after_frame(&f, frames);
        if f.tokens.is_empty() && last && !empty_final {
            return failed.map_or(Ok(()), Err);
        }
        let mut parameters = HashMap::new();
        parameters.insert(
            "triton_final_response".to_string(),
            pb::InferParameter {
                parameter_choice: Some(pb::infer_parameter::ParameterChoice::BoolParam(
                    last && failed.is_none(),
                )),
            },
        );
        let mut resp = pb::ModelInferResponse {
            model_name: g.model().to_string(),
            model_version: g.version().to_string(),
            id: msg.id.clone(),
            parameters,
            outputs: Vec::new(),
            raw_output_contents: Vec::new(),
        };
        if !f.tokens.is_empty() {
            resp.outputs
                .push(pb::model_infer_response::InferOutputTensor {
                    name: f.name.clone(),
                    datatype: "INT64".into(),
                    shape: vec![f.tokens.len() as i64],
                    parameters: HashMap::new(),
                    contents: None,
                });
            let raw: Vec<u8> = f.tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
            Stats::add(&ctx.stats.reply_bytes_copied, raw.len() as u64);
            resp.raw_output_contents.push(raw.into());
        }
        let resp = Ok(pb::ModelStreamInferResponse {
            error_message: String::new(),
            infer_response: Some(resp),
        });
        // A reader gone or stalled (write_timeout_ms): dropping `g` cancels
        // the stream and frees its slot.
        if tokens::relay(ctx, tx, resp).await != tokens::Sent::Ok {
            return Ok(());
        }
        if let Some(r) = failed {
            return Err(r);
        }
        if last {
            return Ok(());
        }
    }
}
