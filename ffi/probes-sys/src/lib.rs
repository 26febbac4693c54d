//! USDT probes of the Sluice engine: provider `sluice`, one probe per stage
//! of the data path (`scripts/trace/*.bt` attach to them with bpftrace).
//!
//! Each probe has a semaphore the tracer increments while it is attached.
//! A probe call tests it and returns: one load and a branch. Only when a
//! tracer is attached does it build the arguments (the closure) and call
//! the C shim, whose body is the `DTRACE_PROBE` site. Built without
//! sys/sdt.h the semaphores never move (see `build.rs`).
#![allow(unsafe_code)]
// this crate is the probe ABI; every block has a SAFETY note

use core::ptr::{addr_of, read_volatile};

/// Whether probes are compiled in (sys/sdt.h was found at build time).
pub fn compiled_in() -> bool {
    cfg!(sluice_probes)
}

macro_rules! probes {
    ($( $(#[$doc:meta])* $name:ident => $sem:ident, $shim:ident ( $($arg:ident : $ty:ty),* ); )*) => {
        unsafe extern "C" {
            $( static $sem: u16; fn $shim($($arg: $ty),*); )*
        }
        $(
            $(#[$doc])*
            #[inline(always)]
            pub fn $name(args: impl FnOnce() -> ($($ty,)*)) {
                // SAFETY: the semaphore is a u16 defined by the shim and
                // only ever written by the kernel's uprobe code (the
                // tracer); a volatile read of it is always valid.
                if unsafe { read_volatile(addr_of!($sem)) } != 0 {
                    let ($($arg,)*) = args();
                    // SAFETY: a plain C function of scalar arguments.
                    unsafe { $shim($($arg),*) }
                }
            }
        )*
        /// Whether any tracer is attached to any probe.
        pub fn any_attached() -> bool {
            // SAFETY: as in each probe: volatile reads of the semaphores.
            false $(|| unsafe { read_volatile(addr_of!($sem)) } != 0)*
        }
        /// Whether a tracer is attached to every probe (a tracer attaches
        /// them one by one).
        pub fn all_attached() -> bool {
            // SAFETY: as in each probe: volatile reads of the semaphores.
            true $(&& unsafe { read_volatile(addr_of!($sem)) } != 0)*
        }
    };
}

probes! {
    /// A frame parsed: request id, tenant id, frame length.
    parse => sluice_parse_semaphore, sl_probe_parse(rid: u64, tenant: u32, len: u32);
    /// Authentication: request id, tenant id, 1 if it passed.
    auth => sluice_auth_semaphore, sl_probe_auth(rid: u64, tenant: u32, ok: u32);
    /// Validated against a schema: request id, schema id (0: none).
    validate => sluice_validate_semaphore, sl_probe_validate(rid: u64, schema_id: u32);
    /// Routed: request id, shard index.
    route => sluice_route_semaphore, sl_probe_route(rid: u64, shard: u32);
    /// Admitted into a shard's queue: request id, shard, depth after.
    admit => sluice_admit_semaphore, sl_probe_admit(rid: u64, shard: u32, depth: u32);
    /// The model starts: request id, shard.
    infer_start => sluice_infer_start_semaphore, sl_probe_infer_start(rid: u64, shard: u32);
    /// The model ends: request id, shard, wire error code (0: response).
    infer_end => sluice_infer_end_semaphore, sl_probe_infer_end(rid: u64, shard: u32, code: u32);
    /// A burst of answers handed to the transport: frames, bytes.
    send => sluice_send_semaphore, sl_probe_send(frames: u32, bytes: u64);
    /// A transmit buffer taken: its index.
    pool_alloc => sluice_pool_alloc_semaphore, sl_probe_pool_alloc(buf: u32);
    /// A transmit buffer returned unsent: its index.
    pool_free => sluice_pool_free_semaphore, sl_probe_pool_free(buf: u32);
    /// An error frame: request id, tenant id, wire error code.
    error => sluice_error_semaphore, sl_probe_error(rid: u64, tenant: u32, code: u32);
}

#[cfg(test)]
mod tests {
    #[test]
    fn unattached_probes_do_not_build_their_arguments() {
        let mut built = false;
        super::parse(|| {
            built = true;
            (1, 2, 3)
        });
        assert!(!built, "no tracer: the closure must not run");
        assert!(!super::any_attached());
    }
}
