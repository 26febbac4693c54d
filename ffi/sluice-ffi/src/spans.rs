//! Span records of traced requests, drained in batches: one call moves up
//! to a caller-sized array of fixed records out of every worker's ring.

use std::ffi::c_char;

use sluice_engine::trace::{SPAN_ADAPTER_BYTES, SPAN_MODEL_BYTES, SPAN_VERSION_BYTES, SpanRecord};

use super::*;

/// Most records one [`sluice_engine_spans`] call returns.
pub const SLUICE_SPANS_BATCH_MAX: u32 = 4096;

/// One traced request on this appliance. Timestamps are ns since the Unix
/// epoch; 0 for a stage the request did not reach. Layout checked by tests.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SluiceSpan {
    /// W3C trace id.
    pub trace_id: [u8; 16],
    /// The caller's span; all zero when the request starts the trace.
    pub parent_id: [u8; 8],
    /// This request's span.
    pub span_id: [u8; 8],
    /// The burst carrying it was received.
    pub recv_ns: u64,
    /// Parsed and authenticated.
    pub auth_ns: u64,
    /// Validated.
    pub validate_ns: u64,
    /// Routed.
    pub route_ns: u64,
    /// The model started (end of the queue wait).
    pub run_start_ns: u64,
    /// The model finished.
    pub run_end_ns: u64,
    /// Answers of its burst handed to the transport.
    pub send_ns: u64,
    /// Request id.
    pub request_id: u64,
    /// Tenant id.
    pub tenant_id: u32,
    /// Declared token count.
    pub token_count: u32,
    /// Wire error code of the answer; 0 for a response.
    pub outcome: u16,
    /// Shard index; 65535 when not routed.
    pub shard: u16,
    /// Worker index.
    pub worker: u16,
    /// 0: run here; 1: forwarded to a peer.
    pub kind: u8,
    /// Trace flags of the request.
    pub flags: u8,
    /// Model, NUL padded.
    pub model: [u8; 32],
    /// Version, NUL padded.
    pub version: [u8; 16],
    /// Adapter, NUL padded.
    pub adapter: [u8; 32],
}

const _: () =
    assert!(SPAN_MODEL_BYTES == 32 && SPAN_VERSION_BYTES == 16 && SPAN_ADAPTER_BYTES == 32);

impl From<&SpanRecord> for SluiceSpan {
    fn from(r: &SpanRecord) -> SluiceSpan {
        let t = &r.times;
        SluiceSpan {
            trace_id: r.trace_id,
            parent_id: r.parent_id,
            span_id: r.span_id,
            recv_ns: t.recv_ns,
            auth_ns: t.auth_ns,
            validate_ns: t.validate_ns,
            route_ns: t.route_ns,
            run_start_ns: t.run_start_ns,
            run_end_ns: t.run_end_ns,
            send_ns: t.send_ns,
            request_id: r.request_id,
            tenant_id: r.tenant_id,
            token_count: r.token_count,
            outcome: r.outcome,
            shard: r.shard,
            worker: r.worker,
            kind: r.kind,
            flags: r.flags,
            model: r.model,
            version: r.version,
            adapter: r.adapter,
        }
    }
}

/// Moves up to `cap` (at most [`SLUICE_SPANS_BATCH_MAX`]) span records out
/// of the workers' rings into `out`; writes how many to `n`. Never blocks a
/// worker: the rings are lock-free.
///
/// # Safety
/// `e` is a live handle; `out` points to `cap` writable `SluiceSpan`s; `n`
/// is writable; `err` points to `err_cap` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_engine_spans(
    e: *mut SluiceEngine,
    out: *mut SluiceSpan,
    cap: usize,
    n: *mut usize,
    err: *mut c_char,
    err_cap: usize,
) -> i32 {
    guard(err, err_cap, || {
        if out.is_null() || n.is_null() {
            return Err(bad_arg("null out pointer"));
        }
        let cap = cap.min(SLUICE_SPANS_BATCH_MAX as usize);
        let eng = read(handle(e)?);
        let mut recs = [SpanRecord::default(); 64];
        let mut done = 0;
        while done < cap {
            let want = (cap - done).min(recs.len());
            let got = eng.drain_spans(&mut recs[..want]);
            for (k, r) in recs[..got].iter().enumerate() {
                // SAFETY: done + k < cap and `out` points to `cap` records.
                unsafe { out.add(done + k).write(SluiceSpan::from(r)) };
            }
            done += got;
            if got < want {
                break;
            }
        }
        // SAFETY: `n` is non-null and writable.
        unsafe { *n = done };
        Ok(())
    })
}
