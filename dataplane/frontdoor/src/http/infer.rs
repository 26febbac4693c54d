//! `POST /v2/models/{m}[/versions/{v}]/infer`: JSON tensors and the binary
//! tensor extension (`Inference-Header-Content-Length`,
//! `binary_data_size`, outputs with `binary_data: true`).
//!
//! Copies per request: binary input data once, from the HTTP stack's
//! buffers into the 64-byte aligned slot (counted); JSON input numbers are
//! converted straight into the slot; the worker's model reads the slot in
//! place and writes its outputs into the reply slot; binary outputs go to
//! the socket from there (no copy in Sluice), JSON outputs are printed
//! from there.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use serde::Deserialize;
use serde_json::value::RawValue;
use sluice_wire::{DType, ErrorCode};

use super::body::{Chunks, Received};
use crate::ctx::{Ctx, Stats};
use crate::dtype;
use crate::errors::Refusal;
use crate::frames::{self, Answer, Input};

/// KServe's header naming the JSON part's length in a binary request.
pub const HEADER_LEN: &str = "inference-header-content-length";

/// `parameters` of a request, input or output (unknown keys ignored).
#[derive(Debug, Default, Deserialize)]
pub struct Params {
    /// Input: bytes of binary data for it.
    #[serde(default)]
    pub binary_data_size: Option<u64>,
    /// Output: send it as binary data.
    #[serde(default)]
    pub binary_data: Option<bool>,
    /// Request: send every output as binary data.
    #[serde(default)]
    pub binary_data_output: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct InferInput<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    shape: Vec<i64>,
    #[serde(borrow)]
    datatype: Cow<'a, str>,
    #[serde(default)]
    parameters: Option<Params>,
    #[serde(default, borrow)]
    data: Option<&'a RawValue>,
}

#[derive(Debug, Deserialize)]
struct InferOutput<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default)]
    parameters: Option<Params>,
}

#[derive(Debug, Deserialize)]
struct InferRequest<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default)]
    parameters: Option<Params>,
    #[serde(borrow)]
    inputs: Vec<InferInput<'a>>,
    #[serde(default, borrow)]
    outputs: Option<Vec<InferOutput<'a>>>,
}

/// Where each input's data comes from.
enum Source<'a> {
    /// Bytes `[off, off + len)` of the body.
    Binary(usize),
    /// A JSON `data` value.
    Json(&'a RawValue),
}

/// Which outputs to send, and how.
pub struct Wanted {
    /// Request id to echo.
    pub id: Option<String>,
    /// `(name, binary)` of each requested output; empty: all.
    pub outputs: Vec<(String, bool)>,
    /// Binary for outputs not listed.
    pub binary_default: bool,
}

/// The JSON header's length, from `Inference-Header-Content-Length`.
pub fn header_len(h: &HeaderMap, body_len: Option<usize>) -> Result<Option<usize>, Refusal> {
    let Some(v) = h.get(HEADER_LEN) else {
        return Ok(None);
    };
    let n: usize = v
        .to_str()
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| Refusal::bad("Inference-Header-Content-Length: not a number"))?;
    if let Some(b) = body_len
        && n > b
    {
        return Err(Refusal::bad(
            "Inference-Header-Content-Length exceeds the body's length",
        ));
    }
    Ok(Some(n))
}

/// Builds the request frame in `f` from the body; returns its length and
/// what the answer must contain.
pub fn build(
    ctx: &Ctx,
    sem: &crate::semantic::Semantic,
    body: &Received,
    json_len: Option<usize>,
    mut f: sluice_engine::transport::ingress::Filling,
    request_id: u64,
) -> Result<(sluice_engine::transport::ingress::Filling, usize, Wanted), Refusal> {
    let json_len = json_len.unwrap_or(body.len);
    if json_len > body.len {
        return Err(Refusal::bad(
            "Inference-Header-Content-Length exceeds the body's length",
        ));
    }
    let text = body.prefix(json_len);
    let req: InferRequest<'_> =
        serde_json::from_slice(&text).map_err(|e| Refusal::bad(format!("request JSON: {e}")))?;
    let mut inputs = Vec::with_capacity(req.inputs.len());
    let mut sources = Vec::with_capacity(req.inputs.len());
    let mut bin_off = json_len;
    for i in &req.inputs {
        let dt = DType::from_kserve(&i.datatype).ok_or_else(|| {
            Refusal::code(
                ErrorCode::BadTensor,
                format!("input {}: datatype {} is not supported", i.name, i.datatype),
            )
        })?;
        let input = Input {
            name: i.name.to_string(),
            dtype: dt,
            dims: frames::dims_of(&i.name, &i.shape)?,
        };
        let len = input.byte_len()?;
        let bin = i.parameters.as_ref().and_then(|p| p.binary_data_size);
        let src = match (bin, i.data) {
            (Some(_), Some(_)) => {
                return Err(Refusal::bad(format!(
                    "input {}: both data and binary_data_size",
                    i.name
                )));
            }
            (Some(n), None) => {
                if n != len as u64 {
                    return Err(Refusal::code(
                        ErrorCode::BadTensor,
                        format!(
                            "input {}: binary_data_size {n} but shape and datatype make {len} bytes",
                            i.name
                        ),
                    ));
                }
                let s = Source::Binary(bin_off);
                bin_off += len;
                s
            }
            (None, Some(d)) => Source::Json(d),
            (None, None) => {
                return Err(Refusal::bad(format!("input {}: no data", i.name)));
            }
        };
        inputs.push(input);
        sources.push(src);
    }
    if bin_off != body.len {
        return Err(Refusal::bad(format!(
            "the body holds {} bytes of binary data, the inputs declare {}",
            body.len - json_len,
            bin_off - json_len
        )));
    }
    let layout = frames::emit(&mut f, sem, request_id, &inputs)?;
    let slot = f.request_mut();
    let (mut copied, mut converted) = (0u64, 0u64);
    for (k, (input, src)) in inputs.iter().zip(&sources).enumerate() {
        let off = layout.tensor_offsets[k];
        let len = input.byte_len()?;
        let out = &mut slot[off..off + len];
        match src {
            Source::Binary(from) => {
                body.copy_range(*from, out);
                copied += len as u64;
            }
            Source::Json(raw) => {
                dtype::parse_json_data(raw.get(), input.dtype, out).map_err(|e| {
                    Refusal::code(ErrorCode::BadTensor, format!("input {}: {e}", input.name))
                })?;
                converted += len as u64;
            }
        }
    }
    Stats::add(&ctx.stats.payload_bytes_copied, copied);
    Stats::add(&ctx.stats.json_bytes_converted, converted);
    let binary_default = req
        .parameters
        .as_ref()
        .and_then(|p| p.binary_data_output)
        .unwrap_or(false);
    let outputs = req
        .outputs
        .unwrap_or_default()
        .into_iter()
        .map(|o| {
            let b = o
                .parameters
                .as_ref()
                .and_then(|p| p.binary_data)
                .unwrap_or(binary_default);
            (o.name.into_owned(), b)
        })
        .collect();
    Ok((
        f,
        layout.frame_len,
        Wanted {
            id: req.id.map(Cow::into_owned),
            outputs,
            binary_default,
        },
    ))
}

/// The KServe response: JSON, or JSON followed by binary outputs.
pub fn respond(a: &Answer, w: &Wanted) -> Result<Response<Chunks>, Refusal> {
    let mut chosen = Vec::with_capacity(a.outputs.len());
    if w.outputs.is_empty() {
        for o in &a.outputs {
            chosen.push((o, w.binary_default));
        }
    } else {
        for (name, bin) in &w.outputs {
            let o = a
                .outputs
                .iter()
                .find(|o| &o.name == name)
                .ok_or_else(|| Refusal::bad(format!("the model has no output {name}")))?;
            chosen.push((o, *bin));
        }
    }
    let mut j = Vec::with_capacity(256);
    j.extend_from_slice(b"{\"model_name\":");
    push_str(&mut j, &a.model);
    j.extend_from_slice(b",\"model_version\":");
    push_str(&mut j, &a.version);
    if let Some(id) = &w.id {
        j.extend_from_slice(b",\"id\":");
        push_str(&mut j, id);
    }
    j.extend_from_slice(b",\"outputs\":[");
    let mut any_binary = false;
    for (k, (o, bin)) in chosen.iter().enumerate() {
        if k > 0 {
            j.push(b',');
        }
        j.extend_from_slice(b"{\"name\":");
        push_str(&mut j, &o.name);
        j.extend_from_slice(b",\"datatype\":\"");
        j.extend_from_slice(o.dtype.kserve_name().as_bytes());
        j.extend_from_slice(b"\",\"shape\":[");
        for (d, v) in o.dims.iter().enumerate() {
            if d > 0 {
                j.push(b',');
            }
            j.extend_from_slice(itoa::Buffer::new().format(*v).as_bytes());
        }
        j.push(b']');
        if *bin {
            any_binary = true;
            j.extend_from_slice(b",\"parameters\":{\"binary_data_size\":");
            j.extend_from_slice(itoa::Buffer::new().format(o.range.len()).as_bytes());
            j.push(b'}');
        } else {
            j.extend_from_slice(b",\"data\":");
            dtype::write_json_data(&mut j, o.dtype, a.slice(o));
        }
        j.push(b'}');
    }
    j.extend_from_slice(b"]}");
    let json_len = j.len();
    let mut body = Chunks::one(Bytes::from(j));
    let mut resp = Response::builder().status(StatusCode::OK);
    if any_binary {
        for (o, bin) in &chosen {
            if *bin {
                body.push(a.bytes_of(o));
            }
        }
        resp = resp
            .header(http::header::CONTENT_TYPE, "application/octet-stream")
            .header(HEADER_LEN, HeaderValue::from(json_len));
    } else {
        resp = resp.header(http::header::CONTENT_TYPE, "application/json");
    }
    resp.body(body)
        .map_err(|e| Refusal::code(ErrorCode::Internal, e.to_string()))
}

/// Appends `s` as a JSON string.
pub fn push_str(out: &mut Vec<u8>, s: &str) {
    // serde_json escapes exactly as JSON needs; writing to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// Runs one inference request end to end.
pub async fn run(
    ctx: &Arc<Ctx>,
    sem: crate::semantic::Semantic,
    headers: &HeaderMap,
    body: Received,
) -> Result<Response<Chunks>, Refusal> {
    let json_len = header_len(headers, Some(body.len))?;
    let (filling, rid) = crate::dispatch::alloc()?;
    let (filling, len, wanted) = build(ctx, &sem, &body, json_len, filling, rid)?;
    drop(body);
    let tables = ctx.tables();
    let w = crate::dispatch::pick_worker(&tables, &sem, ctx.workers, &ctx.rr);
    drop(tables);
    let rx = crate::dispatch::submit(filling, len, w)?;
    Stats::add(&ctx.stats.submitted, 1);
    let done = rx
        .await
        .map_err(|_| Refusal::code(ErrorCode::ShuttingDown, "the front door is stopping"))?;
    Stats::add(&ctx.stats.answered, 1);
    let a = frames::answer(done)?;
    respond(&a, &wanted)
}
