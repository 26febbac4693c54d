//! The one place the hot path runs foreign code: a request whose schema
//! version is not the one its route or model accepts goes through this
//! worker's instance of the registered transform, then the rebuilt request
//! is checked and validated at the target version before the model sees it.

use std::time::Instant;

use sluice_transform::{Fault, Instance};
use sluice_wire::{ErrorCode, Frame};

use crate::stats::{WorkerCounters, bump};
use crate::tables::Tables;
use crate::transform::TransformRef;
use crate::vocab::Reject;

/// The answer code of a fault: a refusal is about the request's payload
/// (schema_mismatch); a module fault ends the request (inference_failed);
/// a quarantined or missing instance may be retried later (internal).
fn code_of(f: Fault) -> ErrorCode {
    if f.is_refusal() {
        ErrorCode::SchemaMismatch
    } else if f.is_module_fault() {
        ErrorCode::InferenceFailed
    } else {
        ErrorCode::Internal
    }
}

/// Runs `tr` on `req`; returns the rebuilt request (in the instance's
/// aligned buffer, valid until its next call). Allocates nothing unless the
/// instance is recycled after a fault.
pub(super) fn run<'a>(
    transforms: &'a mut [Option<Box<Instance>>],
    tables: &Tables,
    counters: &WorkerCounters,
    req: &Frame<&[u8]>,
    tr: TransformRef,
    now: Instant,
) -> Result<&'a [u8], Reject> {
    let Some(inst) = transforms
        .get_mut(tr.slot as usize)
        .and_then(Option::as_mut)
    else {
        return Err(Reject::new(
            ErrorCode::Internal,
            "the schema transform this request was admitted for is no longer installed on this worker (replaced while the request waited in its queue); retry",
        ));
    };
    let stats = inst.stats().clone();
    let (bytes, cost) = inst
        .run(req, tr.input, tr.from, tr.to, tr.target, now)
        .map_err(|f| Reject::new(code_of(f), f.message()))?;
    bump(&counters.payload_bytes_copied, cost.bytes_copied);
    let bad = |m| {
        bump(&stats.bad_outputs, 1);
        Reject::new(ErrorCode::SchemaMismatch, m)
    };
    let out = Frame::new_checked(bytes)
        .map_err(|_| bad("the schema transform's output is not a well-formed request"))?;
    tables.schemas.validate(&out).map_err(|_| {
        bad("the schema transform's output is not valid at the version the route accepts")
    })?;
    Ok(bytes)
}
