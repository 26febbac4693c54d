//! The token-load heatmap, read in one batched call: every worker's ring
//! of one-second buckets, merged, for a range of seconds and a dimension.

use std::ffi::c_char;

use sluice_engine::load::{Dim, LOAD_BUCKETS, MODEL_NONE, MODEL_OTHER};

use super::*;

/// Seconds of load a worker keeps (the widest range one read covers).
pub const SLUICE_LOAD_SECONDS_MAX: u32 = 900;
/// Key of the cell of tenants past the ones a worker tells apart.
pub const SLUICE_LOAD_TENANT_OTHER: u64 = u64::MAX;
/// Model key of requests no local model ran (forwarded, refused).
pub const SLUICE_LOAD_MODEL_NONE: u64 = u64::MAX;
/// Model key of the cell of model slots past the ones a worker tells apart.
pub const SLUICE_LOAD_MODEL_OTHER: u64 = u64::MAX - 1;
/// Bytes of a model name in a row ("name@version", cut, NUL padded).
pub const SLUICE_LOAD_NAME_BYTES: usize = 48;

const _: () = assert!(SLUICE_LOAD_SECONDS_MAX as usize == LOAD_BUCKETS);
const _: () =
    assert!(SLUICE_LOAD_MODEL_NONE == MODEL_NONE && SLUICE_LOAD_MODEL_OTHER == MODEL_OTHER);

/// One second of one key (shard, model slot or tenant), summed over the
/// workers. Layout checked by tests.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SluiceLoadRow {
    /// Second since the Unix epoch.
    pub second: u64,
    /// Shard index, model slot, or tenant id (by `by`).
    pub key: u64,
    /// Tokens (declared by requests, plus generated ones).
    pub tokens: u64,
    /// Requests.
    pub requests: u64,
    /// Error frames.
    pub errors: u64,
    /// Highest queue depth seen at admission.
    pub queue_depth_max: u32,
    /// Zero.
    pub reserved: u32,
    /// For `by` = 1 (model): "name@version" of the slot, NUL padded;
    /// empty for other dimensions and for slots no model holds now.
    pub name: [u8; SLUICE_LOAD_NAME_BYTES],
}

/// Reads the load of seconds `from_s..=to_s` (since the Unix epoch; at most
/// [`SLUICE_LOAD_SECONDS_MAX`] of them) keyed by `by` (0 shard, 1 model,
/// 2 tenant), merged over workers, in (second, key) order; cells with no
/// counts are left out. Writes up to `cap` rows into `out` and the number
/// of rows there are into `n`: when `*n > cap`, call again with room for
/// `*n`.
///
/// # Safety
/// `e` is a live handle; `out` points to `cap` writable `SluiceLoadRow`s
/// (may be null when `cap` is 0); `n` is writable; `err` points to
/// `err_cap` bytes.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn sluice_engine_load(
    e: *mut SluiceEngine,
    from_s: u64,
    to_s: u64,
    by: u32,
    out: *mut SluiceLoadRow,
    cap: usize,
    n: *mut usize,
    err: *mut c_char,
    err_cap: usize,
) -> i32 {
    guard(err, err_cap, || {
        if n.is_null() || (out.is_null() && cap != 0) {
            return Err(bad_arg("null out pointer"));
        }
        let Some(dim) = Dim::from_u32(by) else {
            return Err(bad_arg(format!(
                "by {by}: want 0 (shard), 1 (model) or 2 (tenant)"
            )));
        };
        if to_s < from_s || to_s - from_s >= u64::from(SLUICE_LOAD_SECONDS_MAX) {
            return Err(bad_arg(format!(
                "seconds {from_s}..={to_s}: want from <= to, at most {SLUICE_LOAD_SECONDS_MAX} seconds"
            )));
        }
        let eng = read(handle(e)?);
        let rows = eng.load(from_s, to_s, dim);
        let names = if dim == Dim::Model {
            eng.model_slots()
        } else {
            Vec::new()
        };
        for (k, r) in rows.iter().take(cap).enumerate() {
            let mut name = [0u8; SLUICE_LOAD_NAME_BYTES];
            if let Some((_, m, v)) = names.iter().find(|(s, _, _)| *s as u64 == r.key) {
                let s = format!("{m}@{v}");
                let b = s.as_bytes();
                let l = b.len().min(SLUICE_LOAD_NAME_BYTES);
                name[..l].copy_from_slice(&b[..l]);
            }
            let row = SluiceLoadRow {
                second: r.second,
                key: r.key,
                tokens: r.tokens,
                requests: r.requests,
                errors: r.errors,
                queue_depth_max: r.queue_depth_max,
                reserved: 0,
                name,
            };
            // SAFETY: k < cap and `out` points to `cap` rows.
            unsafe { out.add(k).write(row) };
        }
        // SAFETY: `n` is non-null and writable.
        unsafe { *n = rows.len() };
        Ok(())
    })
}
