//! The C ABI of the Sluice engine.
//!
//! The Go control plane links this crate as a static library. Every call
//! returns a [`SluiceStatus`]; on failure a NUL-terminated reason is written
//! into the caller's `err` buffer. No panic crosses the boundary: each entry
//! point runs under `catch_unwind` and turns a panic into
//! [`SluiceStatus::Panic`]. Calls are control-plane calls (batched, never per
//! packet); the data plane runs on the engine's own pinned threads.
//!
//! Memory: handles are created and freed here; JSON answers are allocated
//! here and released with [`sluice_buf_free`]. Nothing keeps a pointer to
//! caller memory after a call returns.
#![allow(unsafe_code)]
// this crate is the ABI boundary; every block has a SAFETY note
// What crosses the ABI is never silently narrowed.
#![deny(clippy::cast_possible_truncation)]

use std::ffi::{CStr, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::RwLock;
use std::time::Duration;

use sluice_engine::config::{ModelCfg, PeerCfg};
use sluice_engine::{Config, Engine, EngineError, EngineOptions};

mod conns;
mod spans;
pub use spans::{SLUICE_SPANS_BATCH_MAX, SluiceSpan, sluice_engine_spans};
mod load;
mod transforms;
pub use load::{
    SLUICE_LOAD_MODEL_NONE, SLUICE_LOAD_MODEL_OTHER, SLUICE_LOAD_NAME_BYTES,
    SLUICE_LOAD_SECONDS_MAX, SLUICE_LOAD_TENANT_OTHER, SluiceLoadRow, sluice_engine_load,
};
pub use transforms::{sluice_engine_put_transform, sluice_engine_remove_transform};

/// Version of this ABI; bumped on any incompatible change.
pub const SLUICE_ABI_VERSION: u32 = 1;

// The engine's limits, for a control plane to check configs against (the Go
// daemon takes them from this header, so it accepts exactly what the engine
// does). The values are the engine's own constants: the assertions below
// fail the build when either side changes alone.

/// Most workers (pinned cores).
pub const SLUICE_WORKERS_MAX: u32 = 64;
/// Largest `engine.rx_burst_max`.
pub const SLUICE_RX_BURST_MAX: u32 = 256;
/// Largest `engine.spin_us`.
pub const SLUICE_SPIN_US_MAX: u32 = 1_000_000;
/// Largest `engine.forward_timeout_ms`.
pub const SLUICE_FORWARD_TIMEOUT_MS_MAX: u32 = 60_000;
/// Fewest `io_uring.ring_entries`.
pub const SLUICE_RING_ENTRIES_MIN: u32 = 8;
/// Most `io_uring.ring_entries`.
pub const SLUICE_RING_ENTRIES_MAX: u32 = 32_768;
/// Fewest buffers per pool, per worker.
pub const SLUICE_POOL_BUFFERS_MIN: u32 = 8;
/// Most buffers per pool, per worker.
pub const SLUICE_POOL_BUFFERS_MAX: u32 = 32_768;
/// Smallest buffer, bytes.
pub const SLUICE_BUFFER_SIZE_MIN: u32 = 2048;
/// Largest buffer, bytes.
pub const SLUICE_BUFFER_SIZE_MAX: u32 = 1 << 20;
/// Buffers are a multiple of this many bytes.
pub const SLUICE_BUFFER_ALIGN: u32 = 64;
/// Most shards.
pub const SLUICE_SHARDS_MAX: u32 = 32;
/// Most routes.
pub const SLUICE_ROUTES_MAX: u32 = 16_384;
/// Most content conditions per route.
pub const SLUICE_CONTENT_CONDITIONS_MAX: u32 = 8;
/// Most path segments in a content condition.
pub const SLUICE_CONTENT_PATH_SEGMENTS_MAX: u32 = 8;
/// Most nodes in the trie of every content path of a route table (the root
/// and each distinct path prefix).
pub const SLUICE_CONTENT_PATH_NODES_MAX: u32 = 512;
/// Most tenants.
pub const SLUICE_TENANTS_MAX: u32 = 4096;
/// Most loaded model versions.
pub const SLUICE_MODELS_MAX: u32 = 4096;
/// Most adapters per model (configured; loaded on demand into a bounded
/// per-worker cache).
pub const SLUICE_ADAPTERS_MAX: u32 = 4096;
/// Most peers.
pub const SLUICE_PEERS_MAX: u32 = 256;
/// Largest shard `max_concurrency`.
pub const SLUICE_CONCURRENCY_MAX: u32 = 4096;
/// Largest shard `queue_depth`.
pub const SLUICE_QUEUE_DEPTH_MAX: u32 = 65_536;
/// Largest `batch_max` (rows per batched run), shard or model.
pub const SLUICE_BATCH_MAX: u32 = 256;
/// Largest `batch_delay_us`, shard or model.
pub const SLUICE_BATCH_DELAY_US_MAX: u32 = 1_000_000;
/// Longest shard, route, tenant and peer name, bytes.
pub const SLUICE_NAME_LEN_MAX: u32 = 64;
/// Longest model name, bytes (the wire format's limit).
pub const SLUICE_MODEL_NAME_LEN_MAX: u32 = 64;
/// Longest model version or alias, bytes.
pub const SLUICE_MODEL_VERSION_LEN_MAX: u32 = 32;
/// Longest adapter id, bytes.
pub const SLUICE_ADAPTER_LEN_MAX: u32 = 64;
/// Shortest tenant key, bytes.
pub const SLUICE_TENANT_KEY_LEN_MIN: u32 = 16;
/// Shortest `engine.negotiation_ttl_ms`.
pub const SLUICE_NEGOTIATION_TTL_MS_MIN: u32 = 1_000;
/// Longest `engine.negotiation_ttl_ms`.
pub const SLUICE_NEGOTIATION_TTL_MS_MAX: u32 = 3_600_000;
/// Longest drain [`sluice_engine_stop`] waits.
pub const SLUICE_DRAIN_MS_MAX: u32 = 10_000;
/// Most `io_uring.tcp_connections_max`.
pub const SLUICE_TCP_CONNECTIONS_MAX: u32 = 4096;
/// Most `io_uring.tcp_pipeline_max`.
pub const SLUICE_TCP_PIPELINE_MAX: u32 = 1024;
/// Longest `io_uring.tcp_idle_timeout_ms`.
pub const SLUICE_TCP_IDLE_TIMEOUT_MS_MAX: u32 = 3_600_000;
/// Most `io_uring.tcp_slots` classes.
pub const SLUICE_TCP_SLOT_CLASSES_MAX: u32 = 4;
/// Most slots of one class, per worker.
pub const SLUICE_TCP_SLOT_COUNT_MAX: u32 = 4096;
/// Smallest TCP slot, bytes; sizes are multiples of it.
pub const SLUICE_TCP_SLOT_SIZE_MIN: u32 = 4096;
/// Largest TCP slot, bytes (the largest frame).
pub const SLUICE_TCP_SLOT_SIZE_MAX: u32 = 256 << 20;
/// Most TCP slot memory (receive and reply) per worker, bytes.
pub const SLUICE_TCP_POOL_BYTES_MAX: u64 = 17_179_869_184; // 16 GiB, written out: C would overflow `16 << 30`
/// Most patterns in each of a tenant's lists (models, adapters, routes,
/// subjects).
pub const SLUICE_TENANT_PATTERNS_MAX: u32 = 16_384;
/// Most general globs (not `*`, `name*` or `*name`) in one of a tenant's
/// lists.
pub const SLUICE_TENANT_GLOBS_MAX: u32 = 16;
/// Most aliases of one model version.
pub const SLUICE_ALIASES_MAX: u32 = 1024;
/// Longest schema subject (a tenant's `subjects` patterns too).
pub const SLUICE_SUBJECT_LEN_MAX: u32 = 255;
/// Shortest `auth.freshness_window_ms`.
pub const SLUICE_FRESHNESS_WINDOW_MS_MIN: u32 = 100;
/// Longest `auth.freshness_window_ms`.
pub const SLUICE_FRESHNESS_WINDOW_MS_MAX: u32 = 300_000;
/// Fewest `auth.replay_entries` (one bucket of the replay table).
pub const SLUICE_REPLAY_ENTRIES_MIN: u32 = 8;
/// Most `auth.replay_entries`.
pub const SLUICE_REPLAY_ENTRIES_MAX: u32 = 1 << 22;
/// Fewest `auth.replay_senders` (one bucket of replay windows).
pub const SLUICE_REPLAY_SENDERS_MIN: u32 = 4;
/// Most `auth.replay_senders`.
pub const SLUICE_REPLAY_SENDERS_MAX: u32 = 1 << 17;
/// Fewest `auth.replay_window_ids` (one 64-bit word).
pub const SLUICE_REPLAY_WINDOW_IDS_MIN: u32 = 64;
/// Most `auth.replay_window_ids`.
pub const SLUICE_REPLAY_WINDOW_IDS_MAX: u32 = 8192;

mod limits_check {
    use sluice_engine::config::limits as l;
    use sluice_wire::limits as w;

    use super::*;

    const fn eq(a: u32, b: usize) -> bool {
        a as usize == b
    }

    const _: () = assert!(eq(SLUICE_WORKERS_MAX, l::WORKER_COUNT_MAX));
    const _: () = assert!(eq(SLUICE_RX_BURST_MAX, l::RX_BURST_MAX));
    const _: () = assert!(SLUICE_SPIN_US_MAX == l::SPIN_US_MAX);
    const _: () = assert!(SLUICE_FORWARD_TIMEOUT_MS_MAX == l::FORWARD_TIMEOUT_MS_MAX);
    const _: () = assert!(SLUICE_RING_ENTRIES_MIN == l::RING_ENTRIES_MIN);
    const _: () = assert!(SLUICE_RING_ENTRIES_MAX == l::RING_ENTRIES_MAX);
    const _: () = assert!(SLUICE_POOL_BUFFERS_MIN == l::POOL_BUFFERS_MIN);
    const _: () = assert!(SLUICE_POOL_BUFFERS_MAX == l::POOL_BUFFERS_MAX);
    const _: () = assert!(SLUICE_BUFFER_SIZE_MIN == l::BUFFER_SIZE_MIN);
    const _: () = assert!(SLUICE_BUFFER_SIZE_MAX == l::BUFFER_SIZE_MAX);
    const _: () = assert!(SLUICE_BUFFER_ALIGN == l::BUFFER_ALIGN);
    const _: () = assert!(eq(SLUICE_SHARDS_MAX, l::SHARD_COUNT_MAX));
    const _: () = assert!(eq(SLUICE_ROUTES_MAX, l::ROUTE_COUNT_MAX));
    const _: () = assert!(eq(SLUICE_CONTENT_CONDITIONS_MAX, l::CONTENT_CONDITIONS_MAX));
    const _: () = assert!(eq(
        SLUICE_CONTENT_PATH_SEGMENTS_MAX,
        l::CONTENT_PATH_SEGMENTS_MAX
    ));
    const _: () = assert!(eq(SLUICE_CONTENT_PATH_NODES_MAX, l::CONTENT_PATH_NODES_MAX));
    const _: () = assert!(eq(SLUICE_TENANTS_MAX, l::TENANT_COUNT_MAX));
    const _: () = assert!(eq(SLUICE_MODELS_MAX, l::MODEL_SLOT_COUNT_MAX));
    const _: () = assert!(eq(SLUICE_ADAPTERS_MAX, l::ADAPTER_COUNT_MAX));
    const _: () = assert!(eq(SLUICE_PEERS_MAX, l::PEER_COUNT_MAX));
    const _: () = assert!(SLUICE_CONCURRENCY_MAX == l::CONCURRENCY_MAX);
    const _: () = assert!(SLUICE_QUEUE_DEPTH_MAX == l::QUEUE_DEPTH_MAX);
    const _: () = assert!(SLUICE_BATCH_MAX == l::BATCH_MAX);
    const _: () = assert!(SLUICE_BATCH_DELAY_US_MAX == l::BATCH_DELAY_US_MAX);
    const _: () = assert!(eq(SLUICE_NAME_LEN_MAX, l::NAME_LEN_MAX));
    const _: () = assert!(eq(SLUICE_MODEL_NAME_LEN_MAX, w::MODEL_NAME_LEN_MAX));
    const _: () = assert!(eq(SLUICE_MODEL_VERSION_LEN_MAX, w::MODEL_VERSION_LEN_MAX));
    const _: () = assert!(eq(SLUICE_ADAPTER_LEN_MAX, w::ADAPTER_LEN_MAX));
    const _: () = assert!(eq(SLUICE_TENANT_KEY_LEN_MIN, l::TENANT_KEY_LEN_MIN));
    const _: () = assert!(SLUICE_NEGOTIATION_TTL_MS_MIN == l::NEGOTIATION_TTL_MS_MIN);
    const _: () = assert!(SLUICE_NEGOTIATION_TTL_MS_MAX == l::NEGOTIATION_TTL_MS_MAX);
    const _: () = assert!(SLUICE_TCP_CONNECTIONS_MAX == l::TCP_CONNECTIONS_MAX);
    const _: () = assert!(SLUICE_TCP_PIPELINE_MAX == l::TCP_PIPELINE_MAX);
    const _: () = assert!(SLUICE_TCP_IDLE_TIMEOUT_MS_MAX == l::TCP_IDLE_TIMEOUT_MS_MAX);
    const _: () = assert!(eq(SLUICE_TCP_SLOT_CLASSES_MAX, l::TCP_SLOT_CLASSES_MAX));
    const _: () = assert!(SLUICE_TCP_SLOT_COUNT_MAX == l::TCP_SLOT_COUNT_MAX);
    const _: () = assert!(SLUICE_TCP_SLOT_SIZE_MIN == l::TCP_SLOT_SIZE_MIN);
    const _: () = assert!(SLUICE_TCP_SLOT_SIZE_MAX == l::TCP_SLOT_SIZE_MAX);
    const _: () = assert!(SLUICE_TCP_POOL_BYTES_MAX == l::TCP_POOL_BYTES_MAX);
    const _: () = assert!(eq(SLUICE_TENANT_PATTERNS_MAX, l::TENANT_PATTERN_COUNT_MAX));
    const _: () = assert!(eq(SLUICE_TENANT_GLOBS_MAX, l::TENANT_GLOB_COUNT_MAX));
    const _: () = assert!(eq(SLUICE_ALIASES_MAX, l::ALIAS_COUNT_MAX));
    const _: () = assert!(eq(SLUICE_SUBJECT_LEN_MAX, w::SUBJECT_LEN_MAX));
    const _: () = assert!(SLUICE_FRESHNESS_WINDOW_MS_MIN == l::FRESHNESS_WINDOW_MS_MIN);
    const _: () = assert!(SLUICE_FRESHNESS_WINDOW_MS_MAX == l::FRESHNESS_WINDOW_MS_MAX);
    const _: () = assert!(SLUICE_REPLAY_ENTRIES_MIN == l::REPLAY_ENTRIES_MIN);
    const _: () = assert!(SLUICE_REPLAY_ENTRIES_MAX == l::REPLAY_ENTRIES_MAX);
    const _: () = assert!(SLUICE_REPLAY_SENDERS_MIN == l::REPLAY_SENDERS_MIN);
    const _: () = assert!(SLUICE_REPLAY_SENDERS_MAX == l::REPLAY_SENDERS_MAX);
    const _: () = assert!(SLUICE_REPLAY_WINDOW_IDS_MIN == l::REPLAY_WINDOW_IDS_MIN);
    const _: () = assert!(SLUICE_REPLAY_WINDOW_IDS_MAX == l::REPLAY_WINDOW_IDS_MAX);
}

/// Status of every call. The numbers are stable and map one-to-one to the Go
/// sentinel errors of `go-control/internal/errs`.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SluiceStatus {
    /// Success.
    Ok = 0,
    /// A call argument is malformed (null pointer, bad UTF-8, bad JSON).
    InvalidArgument = 1,
    /// A config set was refused whole; the message says why.
    InvalidConfig = 2,
    /// A model, version, alias or peer is unknown.
    NotFound = 3,
    /// A model version or peer already exists; or the engine already started.
    AlreadyExists = 4,
    /// A conflicting operation is in progress.
    Busy = 5,
    /// The engine is draining.
    ShuttingDown = 6,
    /// The engine is not running.
    NotRunning = 7,
    /// A feature is not built in.
    Unsupported = 8,
    /// An OS call failed (bind, mmap, hugepages, model file).
    Io = 9,
    /// A deadline passed.
    Timeout = 10,
    /// A broken invariant.
    Internal = 11,
    /// A Rust panic was caught at the boundary.
    Panic = 12,
}

/// What [`sluice_engine_query`] returns, as JSON.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SluiceQuery {
    /// The statistics snapshot (per worker, per shard, latency percentiles).
    Stats = 1,
    /// Status: workers, transport, hugepages, models, epoch.
    Status = 2,
    /// Loaded models.
    Models = 3,
    /// Peers.
    Peers = 4,
    /// The live tables (shards, routes, models, tenants without keys, peers).
    Live = 5,
    /// Connections of connection-oriented transports (RDMA, and TCP on
    /// io_uring with `tcp_listen`), with counters: an array of objects with
    /// id, transport ("rdma" or "tcp"), role, listen, worker, peer, device,
    /// state, rx/tx frames and bytes, rx/tx_large (RDMA: frames by RDMA
    /// WRITE into a slot; TCP: frames a datagram could not carry) and
    /// errors. Empty for UDP-only io_uring and for DPDK.
    Connections = 6,
    /// Per-worker connection counters since start (closed connections
    /// included, so they only grow): an array of objects with transport,
    /// listen, worker, open, accepted, closed, rx/tx frames and bytes,
    /// rx/tx_large and errors (TCP adds its own counters and slot use).
    /// Empty where [`SluiceQuery::Connections`] is.
    ConnectionTotals = 7,
    /// Schema transforms (docs/transforms.md): an array of objects with
    /// subject, from, to, digest, bytes, loaded_unix_ms, slot and the
    /// workers' counters summed (calls, ok, refused, traps, timeouts,
    /// out_of_memory, bad_outputs, rejected_quarantined, quarantines,
    /// recycles, quarantined_workers, bytes_in, bytes_out, last_fault).
    Transforms = 8,
}

impl SluiceQuery {
    /// The query numbered `v`, if there is one.
    pub const fn from_i32(v: i32) -> Option<SluiceQuery> {
        Some(match v {
            1 => SluiceQuery::Stats,
            2 => SluiceQuery::Status,
            3 => SluiceQuery::Models,
            4 => SluiceQuery::Peers,
            5 => SluiceQuery::Live,
            6 => SluiceQuery::Connections,
            7 => SluiceQuery::ConnectionTotals,
            8 => SluiceQuery::Transforms,
            _ => return None,
        })
    }
}

/// Counters summed over workers and the merged latency, as a fixed struct:
/// the cheapest read for a scrape. Layout checked by tests on both sides.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SluiceTotals {
    /// [`SLUICE_ABI_VERSION`] of the library that filled it.
    pub abi_version: u32,
    /// Workers.
    pub workers: u32,
    /// Responses sent.
    pub ok: u64,
    /// Error frames sent.
    pub errors: u64,
    /// Pings answered.
    pub pings: u64,
    /// Foreign datagrams dropped.
    pub not_sluice: u64,
    /// Frames received.
    pub rx_frames: u64,
    /// Frames sent.
    pub tx_frames: u64,
    /// Receives lost for lack of buffers.
    pub rx_no_buffers: u64,
    /// Frames dropped for lack of a transmit buffer.
    pub tx_no_buffers: u64,
    /// Payload bytes copied by handlers.
    pub payload_bytes_copied: u64,
    /// Buffer allocations that reused a buffer.
    pub buffer_reuses: u64,
    /// Snapshot epoch published.
    pub epoch: u64,
    /// Latency samples.
    pub latency_count: u64,
    /// Median receive-to-reply latency.
    pub latency_p50_ns: u64,
    /// 99th percentile.
    pub latency_p99_ns: u64,
    /// 99.9th percentile.
    pub latency_p999_ns: u64,
    /// Maximum.
    pub latency_max_ns: u64,
}

/// An engine handle.
pub struct SluiceEngine {
    engine: RwLock<Engine>,
}

type Outcome = Result<(), (SluiceStatus, String)>;

fn status_of(e: &EngineError) -> SluiceStatus {
    match e {
        EngineError::Config(_) | EngineError::Model(_) => SluiceStatus::InvalidConfig,
        EngineError::Start(_) => SluiceStatus::Io,
        EngineError::NotRunning => SluiceStatus::NotRunning,
        EngineError::AlreadyRunning | EngineError::AlreadyExists(_) => SluiceStatus::AlreadyExists,
        EngineError::Unsupported(_) => SluiceStatus::Unsupported,
        EngineError::NotFound(_) => SluiceStatus::NotFound,
        EngineError::InvalidArgument(_) => SluiceStatus::InvalidArgument,
        EngineError::Timeout(_) => SluiceStatus::Timeout,
    }
}

fn fail(e: EngineError) -> (SluiceStatus, String) {
    (status_of(&e), e.to_string())
}

fn bad_arg(msg: impl Into<String>) -> (SluiceStatus, String) {
    (SluiceStatus::InvalidArgument, msg.into())
}

/// Writes `msg` as a NUL-terminated string into `err[..cap]`, truncated.
fn write_err(err: *mut c_char, cap: usize, msg: &str) {
    if err.is_null() || cap == 0 {
        return;
    }
    let n = msg.len().min(cap - 1);
    // SAFETY: the caller promises `err` points to `cap` writable bytes; we
    // write n + 1 <= cap bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(msg.as_ptr(), err.cast::<u8>(), n);
        *err.add(n) = 0;
    }
}

/// Runs `f` with panics caught; maps the outcome to a status.
fn guard(err: *mut c_char, cap: usize, f: impl FnOnce() -> Outcome) -> i32 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => {
            write_err(err, cap, "");
            SluiceStatus::Ok as i32
        }
        Ok(Err((st, msg))) => {
            write_err(err, cap, &msg);
            st as i32
        }
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            write_err(err, cap, &format!("panic in engine: {msg}"));
            SluiceStatus::Panic as i32
        }
    }
}

fn bytes<'a>(p: *const u8, len: usize) -> Result<&'a [u8], (SluiceStatus, String)> {
    if p.is_null() {
        return if len == 0 {
            Ok(&[])
        } else {
            Err(bad_arg("null buffer"))
        };
    }
    // SAFETY: the caller promises `p` points to `len` readable bytes that
    // stay valid for the duration of the call.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

fn cstr<'a>(p: *const c_char, what: &str) -> Result<&'a str, (SluiceStatus, String)> {
    if p.is_null() {
        return Err(bad_arg(format!("{what}: null")));
    }
    // SAFETY: the caller promises a NUL-terminated string valid for the call.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| bad_arg(format!("{what}: not UTF-8")))
}

fn handle<'a>(e: *const SluiceEngine) -> Result<&'a SluiceEngine, (SluiceStatus, String)> {
    if e.is_null() {
        return Err(bad_arg("null engine handle"));
    }
    // SAFETY: non-null handles come from sluice_engine_open* and stay valid
    // until sluice_engine_free, which the caller must not race with calls.
    Ok(unsafe { &*e })
}

fn read(e: &SluiceEngine) -> std::sync::RwLockReadGuard<'_, Engine> {
    e.engine.read().unwrap_or_else(|p| p.into_inner())
}

fn write(e: &SluiceEngine) -> std::sync::RwLockWriteGuard<'_, Engine> {
    e.engine.write().unwrap_or_else(|p| p.into_inner())
}

/// Hands `json` to the caller as a buffer it releases with
/// [`sluice_buf_free`]. The out pointers are checked non-null by the caller.
fn json_out(json: Vec<u8>, out: *mut *mut u8, out_len: *mut usize) -> Outcome {
    let boxed = json.into_boxed_slice();
    let len = boxed.len();
    let p = Box::into_raw(boxed) as *mut u8;
    // SAFETY: both out pointers are non-null and writable (the caller
    // checked them before doing any work).
    unsafe {
        *out = p;
        *out_len = len;
    }
    Ok(())
}

fn open(cfg: Config, out: *mut *mut SluiceEngine) -> Outcome {
    if out.is_null() {
        return Err(bad_arg("null out pointer"));
    }
    let opts = EngineOptions {
        // [frontdoor] in the config starts the KServe v2 / Triton front door.
        frontdoor: Some(sluice_frontdoor::start),
        ..EngineOptions::default()
    };
    let engine = Engine::new(cfg, opts).map_err(fail)?;
    let h = Box::new(SluiceEngine {
        engine: RwLock::new(engine),
    });
    // SAFETY: `out` is non-null and points to a writable handle slot.
    unsafe { *out = Box::into_raw(h) };
    Ok(())
}

/// The ABI version of this library.
#[unsafe(no_mangle)]
pub extern "C" fn sluice_abi_version() -> u32 {
    SLUICE_ABI_VERSION
}

/// Creates an engine from a config file (TOML). Nothing runs until start.
///
/// # Safety
/// `path` is a NUL-terminated string; `out` points to a handle slot; `err`
/// points to `err_cap` writable bytes (or is null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_engine_open_file(
    path: *const c_char,
    out: *mut *mut SluiceEngine,
    err: *mut c_char,
    err_cap: usize,
) -> i32 {
    guard(err, err_cap, || {
        let p = cstr(path, "path")?;
        let cfg = Config::load(std::path::Path::new(p))
            .map_err(|e| (SluiceStatus::InvalidConfig, e.to_string()))?;
        open(cfg, out)
    })
}

/// Creates an engine from a config as JSON (the TOML keys; relative paths
/// resolve against the working directory).
///
/// # Safety
/// `json` points to `len` bytes; `out` to a handle slot; `err` to `err_cap` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_engine_open(
    json: *const u8,
    len: usize,
    out: *mut *mut SluiceEngine,
    err: *mut c_char,
    err_cap: usize,
) -> i32 {
    guard(err, err_cap, || {
        let mut cfg: Config = serde_json::from_slice(bytes(json, len)?)
            .map_err(|e| (SluiceStatus::InvalidConfig, format!("config: {e}")))?;
        cfg.base_dir = std::env::current_dir().unwrap_or_default();
        cfg.validate()
            .map_err(|e| (SluiceStatus::InvalidConfig, e.to_string()))?;
        open(cfg, out)
    })
}

/// Starts the workers.
///
/// # Safety
/// `e` is a live handle; `err` points to `err_cap` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_engine_start(
    e: *mut SluiceEngine,
    err: *mut c_char,
    err_cap: usize,
) -> i32 {
    guard(err, err_cap, || write(handle(e)?).start().map_err(fail))
}

/// Stops: answers new requests `shutting_down` for up to `drain_ms` (capped
/// at `timeout_ms`), then the workers finish their burst and exit.
///
/// # Safety
/// `e` is a live handle; `err` points to `err_cap` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_engine_stop(
    e: *mut SluiceEngine,
    drain_ms: u64,
    err: *mut c_char,
    err_cap: usize,
) -> i32 {
    guard(err, err_cap, || {
        let h = handle(e)?;
        let mut eng = write(h);
        if !eng.is_running() {
            return Err((SluiceStatus::NotRunning, "engine is not running".into()));
        }
        eng.stop(Duration::from_millis(
            drain_ms.min(u64::from(SLUICE_DRAIN_MS_MAX)),
        ));
        Ok(())
    })
}

/// Frees a handle (stopping the engine if it runs). Null is ignored.
///
/// # Safety
/// `e` came from `sluice_engine_open*` and is not used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_engine_free(e: *mut SluiceEngine) {
    if e.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the pointer came from Box::into_raw in `open` and the
        // caller gives up ownership here.
        drop(unsafe { Box::from_raw(e) });
    }));
}

/// Replaces any of the sections shards, routes, models, tenants, peers and
/// schemas given in a JSON object, atomically: refused whole with a reason,
/// or applied at the next burst boundary of every worker.
///
/// # Safety
/// `e` is a live handle; `json` points to `len` bytes; `err` to `err_cap` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_engine_apply(
    e: *mut SluiceEngine,
    json: *const u8,
    len: usize,
    err: *mut c_char,
    err_cap: usize,
) -> i32 {
    guard(err, err_cap, || {
        let doc = bytes(json, len)?;
        read(handle(e)?).apply_json(doc).map(drop).map_err(fail)
    })
}

/// Points `alias` of `model` at a loaded `version`.
///
/// # Safety
/// `e` is a live handle; strings are NUL-terminated; `err` points to `err_cap` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_engine_set_alias(
    e: *mut SluiceEngine,
    model: *const c_char,
    alias: *const c_char,
    version: *const c_char,
    err: *mut c_char,
    err_cap: usize,
) -> i32 {
    guard(err, err_cap, || {
        let (m, a, v) = (
            cstr(model, "model")?,
            cstr(alias, "alias")?,
            cstr(version, "version")?,
        );
        read(handle(e)?).set_alias(m, a, v).map(drop).map_err(fail)
    })
}

/// Loads one more model version, given as JSON (a `[[models]]` entry).
///
/// # Safety
/// `e` is a live handle; `json` points to `len` bytes; `err` to `err_cap` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_engine_load_model(
    e: *mut SluiceEngine,
    json: *const u8,
    len: usize,
    err: *mut c_char,
    err_cap: usize,
) -> i32 {
    guard(err, err_cap, || {
        let m: ModelCfg = serde_json::from_slice(bytes(json, len)?)
            .map_err(|e| bad_arg(format!("model: {e}")))?;
        read(handle(e)?).load_model(m).map(drop).map_err(fail)
    })
}

/// Adds a peer, given as JSON (a `[[peers]]` entry).
///
/// # Safety
/// `e` is a live handle; `json` points to `len` bytes; `err` to `err_cap` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_engine_add_peer(
    e: *mut SluiceEngine,
    json: *const u8,
    len: usize,
    err: *mut c_char,
    err_cap: usize,
) -> i32 {
    guard(err, err_cap, || {
        let p: PeerCfg =
            serde_json::from_slice(bytes(json, len)?).map_err(|e| bad_arg(format!("peer: {e}")))?;
        read(handle(e)?).add_peer(p).map(drop).map_err(fail)
    })
}

/// Adds, drains, undrains or removes a backend pool's endpoint, given as
/// JSON (`{"pool","url","action"}`, docs/backends.md). `NOT_FOUND` for an
/// unknown pool or endpoint, `ALREADY_EXISTS` for an endpoint in its pool.
///
/// # Safety
/// `e` is a live handle; `json` points to `len` bytes; `err` to `err_cap` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_engine_backend_endpoint(
    e: *mut SluiceEngine,
    json: *const u8,
    len: usize,
    err: *mut c_char,
    err_cap: usize,
) -> i32 {
    guard(err, err_cap, || {
        let op: sluice_engine::config::backends::EndpointOp =
            serde_json::from_slice(bytes(json, len)?)
                .map_err(|e| bad_arg(format!("endpoint change: {e}")))?;
        read(handle(e)?).backend_endpoint(&op).map_err(fail)
    })
}

/// Removes a peer by name.
///
/// # Safety
/// `e` is a live handle; `name` is NUL-terminated; `err` points to `err_cap` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_engine_remove_peer(
    e: *mut SluiceEngine,
    name: *const c_char,
    err: *mut c_char,
    err_cap: usize,
) -> i32 {
    guard(err, err_cap, || {
        let n = cstr(name, "name")?;
        read(handle(e)?).remove_peer(n).map(drop).map_err(fail)
    })
}

/// Closes a connection by the id [`SluiceQuery::Connections`] lists: the
/// peer is disconnected, its requests in flight fail on its side with a
/// retryable connection loss (TCP: the stream ends), and the connection
/// leaves the list once its worker has let go of it. `NOT_FOUND` for an id
/// this engine does not serve (always on DPDK and UDP-only io_uring).
///
/// # Safety
/// `e` is a live handle; `err` points to `err_cap` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_engine_close_connection(
    e: *mut SluiceEngine,
    id: u64,
    err: *mut c_char,
    err_cap: usize,
) -> i32 {
    guard(err, err_cap, || conns::close(&read(handle(e)?), id))
}

/// Answers a query as JSON in a buffer allocated here; release it with
/// [`sluice_buf_free`].
///
/// # Safety
/// `e` is a live handle; `out` and `out_len` point to writable slots; `err`
/// points to `err_cap` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_engine_query(
    e: *mut SluiceEngine,
    what: i32,
    out: *mut *mut u8,
    out_len: *mut usize,
    err: *mut c_char,
    err_cap: usize,
) -> i32 {
    guard(err, err_cap, || {
        if out.is_null() || out_len.is_null() {
            return Err(bad_arg("null out pointer"));
        }
        let eng = read(handle(e)?);
        let Some(query) = SluiceQuery::from_i32(what) else {
            return Err(bad_arg(format!("unknown query {what}")));
        };
        let json = match query {
            SluiceQuery::Stats => serde_json::to_vec(&eng.stats()),
            SluiceQuery::Status => serde_json::to_vec(&eng.status()),
            SluiceQuery::Models => serde_json::to_vec(&eng.status().models),
            SluiceQuery::Peers => serde_json::to_vec(&eng.live().peers),
            SluiceQuery::Live => {
                let mut live = eng.live();
                for t in &mut live.tenants {
                    t.key = "(hidden)".into();
                }
                serde_json::to_vec(&live)
            }
            SluiceQuery::Connections => conns::list_json(&eng),
            SluiceQuery::ConnectionTotals => conns::totals_json(&eng),
            SluiceQuery::Transforms => serde_json::to_vec(&eng.transforms()),
        }
        .map_err(|e| (SluiceStatus::Internal, format!("encode: {e}")))?;
        json_out(json, out, out_len)
    })
}

/// Metadata of every loaded version of model `name` (inputs, outputs with
/// symbolic dimensions and placements, platform, aliases, adapters, the
/// file's own metadata) as JSON in a buffer allocated here; release it with
/// [`sluice_buf_free`]. `SLUICE_NOT_FOUND` when no version of `name` is
/// loaded. The first call per model file loads a session (off the hot path).
///
/// # Safety
/// `e` is a live handle; `name` is NUL-terminated; `out` and `out_len` point
/// to writable slots; `err` points to `err_cap` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_engine_model_meta(
    e: *mut SluiceEngine,
    name: *const c_char,
    out: *mut *mut u8,
    out_len: *mut usize,
    err: *mut c_char,
    err_cap: usize,
) -> i32 {
    guard(err, err_cap, || {
        if out.is_null() || out_len.is_null() {
            return Err(bad_arg("null out pointer"));
        }
        let name = cstr(name, "name")?;
        let meta = read(handle(e)?).model_meta(name).map_err(fail)?;
        let json = serde_json::to_vec(&meta)
            .map_err(|e| (SluiceStatus::Internal, format!("encode: {e}")))?;
        json_out(json, out, out_len)
    })
}

/// Releases a buffer returned by [`sluice_engine_query`]. Null is ignored.
///
/// # Safety
/// `p` and `len` are exactly what a query returned, and `p` is not used again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_buf_free(p: *mut u8, len: usize) {
    if p.is_null() {
        return;
    }
    // SAFETY: `p`/`len` describe a Box<[u8]> leaked by sluice_engine_query.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, len)) });
}

/// Fills `out` with counters summed over workers and the merged latency.
///
/// # Safety
/// `e` is a live handle; `out` points to a writable `SluiceTotals`; `err`
/// points to `err_cap` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sluice_engine_totals(
    e: *mut SluiceEngine,
    out: *mut SluiceTotals,
    err: *mut c_char,
    err_cap: usize,
) -> i32 {
    guard(err, err_cap, || {
        if out.is_null() {
            return Err(bad_arg("null out pointer"));
        }
        let eng = read(handle(e)?);
        let (epoch, s, lat) = eng.totals();
        let t = SluiceTotals {
            abi_version: SLUICE_ABI_VERSION,
            // At most SLUICE_WORKERS_MAX: the config refuses more.
            workers: u32::try_from(eng.status_workers()).unwrap_or(u32::MAX),
            ok: s.ok,
            errors: s.errors,
            pings: s.pings,
            not_sluice: s.not_sluice,
            rx_frames: s.rx_frames,
            tx_frames: s.tx_frames,
            rx_no_buffers: s.rx_no_buffers,
            tx_no_buffers: s.tx_no_buffers,
            payload_bytes_copied: s.payload_bytes_copied,
            buffer_reuses: s.buffer_reuses,
            epoch,
            latency_count: lat.count,
            latency_p50_ns: lat.p50_ns,
            latency_p99_ns: lat.p99_ns,
            latency_p999_ns: lat.p999_ns,
            latency_max_ns: lat.max_ns,
        };
        // SAFETY: `out` is non-null and points to a writable SluiceTotals.
        unsafe { *out = t };
        Ok(())
    })
}
