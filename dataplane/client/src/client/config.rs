//! Client settings and counters.

use std::net::SocketAddr;
use std::time::Duration;

/// Which transport carries a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TransportMode {
    /// A frame that fits one datagram goes by UDP when the client knows a
    /// UDP address; any other frame by TCP when it knows a TCP address.
    #[default]
    Auto,
    /// UDP only: a frame larger than a datagram is refused.
    Udp,
    /// TCP only.
    Tcp,
}

/// Where the server listens: its UDP service address, its TCP address
/// (`io_uring.tcp_listen`), or both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Endpoints {
    /// UDP.
    pub udp: Option<SocketAddr>,
    /// TCP.
    pub tcp: Option<SocketAddr>,
}

/// How the client waits for answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PollMode {
    /// Sleep in the kernel until a datagram arrives (cheap on CPU; the
    /// wake-up costs tens of µs on a VM).
    #[default]
    Block,
    /// Spin on a non-blocking socket: lowest latency, burns a core.
    Spin,
}

/// Client settings. `Debug` does not print the key.
#[derive(Clone)]
pub struct ClientConfig {
    /// Tenant id written into every frame.
    pub tenant_id: u32,
    /// Tenant key; when set, every frame is signed, and signed answers other
    /// than error frames are verified (a bad tag drops the answer and counts
    /// it in `bad_tag`).
    pub key: Option<Vec<u8>>,
    /// How long to wait for the answer to one request.
    pub timeout: Duration,
    /// How often [`Client::call`](super::Client::call) resends after a retryable error code
    /// (`Busy`, `PeerDown`, ...). 0 never retries. Timeouts are not retried:
    /// inference is not assumed idempotent.
    pub retries_max: u32,
    /// Pause before each retry.
    pub retry_backoff: Duration,
    /// Blocking or spinning receive.
    pub poll: PollMode,
    /// Most requests in flight at once; `send` fails with
    /// `TooManyOutstanding` beyond it. Bounds the client's bookkeeping.
    pub outstanding_max: usize,
    /// Most cached schema negotiations; beyond it expired entries are
    /// dropped, and new answers are not cached while it stays full.
    pub schema_cache_max: usize,
    /// Which transport carries each request.
    pub transport: TransportMode,
    /// With a key: the furthest ahead a frame's deadline lies (requests
    /// with an earlier deadline keep theirs; negotiations and pings get
    /// exactly this). It must be within the appliance's
    /// `auth.freshness_window_ms`. Default 2 s.
    pub signed_deadline: Duration,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("tenant_id", &self.tenant_id)
            .field("key", &self.key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("retries_max", &self.retries_max)
            .field("retry_backoff", &self.retry_backoff)
            .field("poll", &self.poll)
            .field("outstanding_max", &self.outstanding_max)
            .field("schema_cache_max", &self.schema_cache_max)
            .field("transport", &self.transport)
            .field("signed_deadline", &self.signed_deadline)
            .finish()
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            tenant_id: 0,
            key: None,
            timeout: Duration::from_secs(1),
            retries_max: 0,
            retry_backoff: Duration::from_millis(1),
            poll: PollMode::Block,
            outstanding_max: 4096,
            schema_cache_max: 1024,
            transport: TransportMode::Auto,
            signed_deadline: crate::request::SIGNED_DEADLINE_DEFAULT,
        }
    }
}

/// Counters of what the client saw. Monotonic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Frames sent (requests, retries, negotiations, pings).
    pub sent: u64,
    /// Answers matched to an outstanding request.
    pub received: u64,
    /// Valid frames whose request id is not outstanding (late answers after
    /// a timeout, duplicates, foreign ids). Ignored.
    pub stale: u64,
    /// Datagrams that are not a valid frame. Ignored.
    pub malformed: u64,
    /// Signed answers whose tag did not verify. Ignored.
    pub bad_tag: u64,
    /// Requests that timed out.
    pub timeouts: u64,
    /// Resends after retryable errors.
    pub retries: u64,
    /// Schema negotiations answered from the cache.
    pub schema_cache_hits: u64,
    /// Frames sent over TCP (part of `sent`).
    pub tcp_sent: u64,
    /// TCP connections opened again after one was lost.
    pub tcp_reconnects: u64,
    /// TCP connections lost (closed or reset by the server, or not frames):
    /// their outstanding requests failed with `ConnectionLost`.
    pub connection_losses: u64,
    /// Answers copied whole out of a receive buffer into their own memory:
    /// every datagram answer, and TCP answers that fit the connection's
    /// read buffer (64 KiB). A larger TCP answer is read by the kernel
    /// straight into its own memory and is not counted.
    pub answers_copied: u64,
    /// Bytes copied so: those answers, plus the start of each large TCP
    /// answer that had arrived in the read buffer with the frame before it.
    pub answer_bytes_copied: u64,
    /// Large TCP answers read into memory given back with
    /// [`crate::Client::recycle`] (no fresh allocation, no page faults).
    pub answers_recycled: u64,
}
