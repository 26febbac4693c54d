//! Hard limits on what a config may ask for.

/// Most workers (pinned cores).
pub const WORKER_COUNT_MAX: usize = 64;
/// Largest receive burst.
pub const RX_BURST_MAX: usize = 256;
/// Most shards.
pub const SHARD_COUNT_MAX: usize = 32;
/// Most stream slots per worker and model.
pub const STREAMS_PER_WORKER_MAX: u32 = 4096;
/// Longest stream idle time, ms.
pub const STREAM_IDLE_MS_MAX: u32 = 3_600_000;
/// Largest `max_tokens` of a generative model.
pub const GEN_MAX_TOKENS_MAX: u32 = 1 << 20;
/// Largest `prompt_max` of a generative model (tokens per slot).
pub const GEN_PROMPT_MAX: u32 = 4096;
/// Most tokens per token frame (`tokens_per_frame` is cut to it).
pub const GEN_TOKENS_PER_FRAME_MAX: u16 = 64;
/// Most routes.
pub const ROUTE_COUNT_MAX: usize = 16_384;
/// Most tenants.
pub const TENANT_COUNT_MAX: usize = 4096;
/// Most loaded model versions (slots).
/// Each slot costs every worker about 250 B whether used or not (counters,
/// handler, batch timing).
pub const MODEL_SLOT_COUNT_MAX: usize = 4096;
/// Most aliases of one model version.
pub const ALIAS_COUNT_MAX: usize = 1024;
/// Most adapters per model (configured; each worker loads at most
/// `sluice_infer::ADAPTER_CACHE_MAX` of them at once, the rest on demand).
/// A configured adapter costs each worker its id and path (about 200 B)
/// until it is loaded.
pub const ADAPTER_COUNT_MAX: usize = 4096;
/// Most peers.
pub const PEER_COUNT_MAX: usize = 256;
/// Largest shard queue depth.
pub const QUEUE_DEPTH_MAX: u32 = 65_536;
/// Largest max_concurrency.
pub const CONCURRENCY_MAX: u32 = 4096;
/// Buffers per pool, per worker.
pub const POOL_BUFFERS_MAX: u32 = 32_768;
/// Smallest and largest buffer, bytes.
pub const BUFFER_SIZE_MIN: u32 = 2048;
/// Largest buffer, bytes.
pub const BUFFER_SIZE_MAX: u32 = 1 << 20;
/// Longest spin before an adaptive worker sleeps.
pub const SPIN_US_MAX: u32 = 1_000_000;
/// Most TCP connections per worker.
pub const TCP_CONNECTIONS_MAX: u32 = 4096;
/// Most requests in flight on one TCP connection.
pub const TCP_PIPELINE_MAX: u32 = 1024;
/// Most TCP slot classes.
pub const TCP_SLOT_CLASSES_MAX: usize = 4;
/// Most slots of one class, per worker.
pub const TCP_SLOT_COUNT_MAX: u32 = 4096;
/// Smallest TCP slot, bytes; slot sizes are multiples of it.
pub const TCP_SLOT_SIZE_MIN: u32 = 4096;
/// Largest TCP slot: the largest frame the wire allows.
pub const TCP_SLOT_SIZE_MAX: u32 = sluice_wire::limits::FRAME_LEN_MAX as u32;
/// Most memory one worker's TCP slots (receive and reply) may take.
pub const TCP_POOL_BYTES_MAX: u64 = 16 << 30;
/// Longest TCP idle timeout.
pub const TCP_IDLE_TIMEOUT_MS_MAX: u32 = 3_600_000;
/// Shortest TCP frame and send timeout (the longest is
/// `TCP_IDLE_TIMEOUT_MS_MAX`).
pub const TCP_TIMEOUT_MS_MIN: u32 = 10;
/// Largest share of the smallest TCP slot class kept for verified frames:
/// unverified frames always keep some.
pub const TCP_VERIFIED_RESERVE_PCT_MAX: u32 = 90;
/// Most rows one batched run stacks (`batch_max`).
pub const BATCH_MAX: u32 = 256;
/// Longest a request may wait for others to batch with (`batch_delay_us`).
pub const BATCH_DELAY_US_MAX: u32 = 1_000_000;
/// Fewest and most io_uring submission queue entries (a power of two).
pub const RING_ENTRIES_MIN: u32 = 8;
/// Most io_uring submission queue entries.
pub const RING_ENTRIES_MAX: u32 = 32_768;
/// Fewest buffers per pool, per worker.
pub const POOL_BUFFERS_MIN: u32 = 8;
/// Buffers are a multiple of this many bytes (tensor alignment).
pub const BUFFER_ALIGN: u32 = 64;
/// Longest shard, route, tenant and peer name, in bytes.
pub const NAME_LEN_MAX: usize = 64;
/// Shortest tenant key, in bytes.
pub const TENANT_KEY_LEN_MIN: usize = 16;
/// Longest wait for a forwarded request's answer.
pub const FORWARD_TIMEOUT_MS_MAX: u32 = 60_000;
/// Most content conditions per route.
pub const CONTENT_CONDITIONS_MAX: usize = crate::route::CONTENT_CONDITIONS_MAX;
/// Most path segments in a content condition.
pub const CONTENT_PATH_SEGMENTS_MAX: usize = sluice_validate::json::PATH_SEGMENTS_MAX;
/// Most trie nodes of every content path of a route table.
pub const CONTENT_PATH_NODES_MAX: usize = sluice_validate::json::PATH_NODES_MAX;
/// Bounds of `engine.negotiation_ttl_ms`: 1 s to 1 h.
pub const NEGOTIATION_TTL_MS_MIN: u32 = 1_000;
/// See `NEGOTIATION_TTL_MS_MIN`.
pub const NEGOTIATION_TTL_MS_MAX: u32 = 3_600_000;
pub use crate::auth::config::limits::*;
