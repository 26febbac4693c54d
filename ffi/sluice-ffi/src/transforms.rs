//! Schema transforms through the C ABI: load or replace one, remove one.

use std::ffi::c_char;

use super::*;

/// Loads or replaces the schema transform of `subject` from version `from`
/// to `to`: `wasm` is a component of the `sluice:transform@1.0.0` world,
/// checked and compiled here; every worker moves to it at a burst boundary
/// and the old module is dropped once none runs it. `INVALID_ARGUMENT`
/// names what is wrong with a refused module; `NOT_FOUND` when a version is
/// not a registered schema of the subject. Writes the epoch of the table
/// that names it to `*epoch` (if not null).
///
/// # Safety
/// `e` is a live handle; `subject` is NUL-terminated; `wasm` points to
/// `len` bytes; `epoch` is null or writable; `err` points to `err_cap` bytes.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments, reason = "a flat C signature")]
pub unsafe extern "C" fn sluice_engine_put_transform(
    e: *mut SluiceEngine,
    subject: *const c_char,
    from: u32,
    to: u32,
    wasm: *const u8,
    len: usize,
    epoch: *mut u64,
    err: *mut c_char,
    err_cap: usize,
) -> i32 {
    guard(err, err_cap, || {
        let subject = cstr(subject, "subject")?;
        let module = bytes(wasm, len)?;
        let put = read(handle(e)?)
            .put_transform(subject, from, to, module)
            .map_err(fail)?;
        if !epoch.is_null() {
            // SAFETY: the caller promises `epoch` is null or writable.
            unsafe { *epoch = put.epoch };
        }
        Ok(())
    })
}

/// Removes the schema transform of `subject` from `from` to `to`: requests
/// it served are refused with schema_mismatch from the next burst on.
///
/// # Safety
/// `e` is a live handle; `subject` is NUL-terminated; `err` points to
/// `err_cap` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_engine_remove_transform(
    e: *mut SluiceEngine,
    subject: *const c_char,
    from: u32,
    to: u32,
    err: *mut c_char,
    err_cap: usize,
) -> i32 {
    guard(err, err_cap, || {
        let subject = cstr(subject, "subject")?;
        read(handle(e)?)
            .remove_transform(subject, from, to)
            .map(drop)
            .map_err(fail)
    })
}
