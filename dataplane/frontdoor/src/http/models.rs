//! `GET /v2/models/{m}[/versions/{v}]`, `.../ready` and `.../config`.

use std::sync::Arc;

use http::{HeaderMap, Response, StatusCode};

use super::body::Chunks;
use super::{ModelOp, json};
use crate::ctx::Ctx;
use crate::errors::Refusal;
use crate::models;

/// Serves a model metadata, readiness or configuration request.
pub fn serve(
    ctx: &Arc<Ctx>,
    headers: &HeaderMap,
    call: &crate::semantic::Call<'_>,
    name: &str,
    version: &str,
    what: ModelOp,
) -> Result<Response<Chunks>, Refusal> {
    let tables = ctx.tables();
    let found = models::find(&ctx.meta, &ctx.env(&tables), headers, call, name, version);
    match what {
        ModelOp::Ready => {
            // 200 means ready; a 4xx means not (KServe v2).
            let f = found?;
            let ready = ctx.ready();
            let status = if ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            Ok(json(
                status,
                &serde_json::json!({
                    "name": f.meta.name,
                    "version": f.version().version,
                    "ready": ready,
                }),
            ))
        }
        ModelOp::Metadata => Ok(json(StatusCode::OK, &models::metadata_json(&found?))),
        ModelOp::Config => Ok(json(
            StatusCode::OK,
            &models::config_json(&found?, ctx.workers),
        )),
        ModelOp::Infer | ModelOp::Generate | ModelOp::GenerateStream => {
            Err(Refusal::bad("infer and generate are POSTs"))
        }
    }
}
