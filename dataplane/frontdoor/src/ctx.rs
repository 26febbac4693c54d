//! What every front-door thread shares: the config, the engine's tables
//! and run state, counters.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use sluice_engine::config::FrontdoorCfg;
use sluice_engine::tables::Tables;
use sluice_engine::worker::{Shared, state};

/// Front-door counters (relaxed atomics; read by status and tests).
#[derive(Debug, Default)]
pub struct Stats {
    /// HTTP requests.
    pub http_requests: AtomicU64,
    /// gRPC calls.
    pub grpc_requests: AtomicU64,
    /// Inference requests handed to workers.
    pub submitted: AtomicU64,
    /// Answers received from workers.
    pub answered: AtomicU64,
    /// Requests refused with a 4xx.
    pub refused_4xx: AtomicU64,
    /// Requests answered with a 5xx.
    pub failed_5xx: AtomicU64,
    /// Tensor payload bytes copied into slots (binary data: one copy from
    /// the HTTP/2 or HTTP/1 stack's buffers).
    pub payload_bytes_copied: AtomicU64,
    /// Tensor bytes converted from JSON numbers into slots.
    pub json_bytes_converted: AtomicU64,
    /// Output bytes copied into gRPC messages (prost encodes them into
    /// tonic's buffer; HTTP sends them from the reply slot).
    pub reply_bytes_copied: AtomicU64,
    /// Connections closed at accept (frontdoor.connections_max).
    pub connections_refused: AtomicU64,
    /// Connections closed at accept: `connections_per_source_max`.
    pub refused_per_source: AtomicU64,
    /// Connections closed at accept: `sources_max` sources tracked.
    pub refused_sources_full: AtomicU64,
    /// Connections closed by `handshake_timeout_ms`.
    pub closed_handshake_timeout: AtomicU64,
    /// Connections closed by `idle_timeout_ms`.
    pub closed_idle_timeout: AtomicU64,
    /// Connections closed by `header_timeout_ms`.
    pub closed_header_timeout: AtomicU64,
    /// Connections closed by `body_timeout_ms` (an HTTP/2 DATA frame).
    pub closed_body_timeout: AtomicU64,
    /// Connections closed by `write_timeout_ms`.
    pub closed_write_timeout: AtomicU64,
    /// Connections closed at `connections_max` to make room for a new one:
    /// the one with no request in flight for the longest.
    pub closed_evicted: AtomicU64,
    /// Clients cut off for sending a body too slowly (HTTP 408, gRPC
    /// DEADLINE_EXCEEDED).
    pub slow_clients: AtomicU64,
    /// gRPC calls refused on their metadata (credentials) before any of
    /// the message was read.
    pub grpc_refused_unread: AtomicU64,
    /// gRPC request bytes read (message framing included).
    pub grpc_bytes_read: AtomicU64,
    /// Token streams opened (generate, generate_stream, ModelStreamInfer).
    pub streams_opened: AtomicU64,
    /// Token streams open now.
    pub streams_open: AtomicU64,
    /// Token streams cancelled because their client went away or closed
    /// its stream before the end.
    pub streams_cancelled: AtomicU64,
    /// Token frames received from workers.
    pub stream_frames: AtomicU64,
    /// Token-frame bytes copied out of reply slots (one copy per frame).
    pub stream_bytes_copied: AtomicU64,
    /// Token streams (and ModelStreamInfer answers) given up because their
    /// client read nothing for `write_timeout_ms`.
    pub streams_slow_reader: AtomicU64,
    /// `Sluice-HMAC-v2` headers refused as malformed.
    pub hmac_malformed: AtomicU64,
    /// ... with a timestamp outside `hmac_skew_ms`.
    pub hmac_stale: AtomicU64,
    /// ... for an unknown tenant or a wrong signature.
    pub hmac_bad_signature: AtomicU64,
    /// ... for a nonce already used.
    pub hmac_replayed: AtomicU64,
    /// ... because the nonce set was full (`hmac_nonces_max`; 503).
    pub hmac_nonces_full: AtomicU64,
    /// ... because the body did not match its signed digest.
    pub hmac_body_mismatch: AtomicU64,
    /// v1 `Sluice-HMAC` headers refused.
    pub hmac_old_format: AtomicU64,
    /// OpenAI API requests (`/v1/...`).
    pub openai_requests: AtomicU64,
    /// ... whose body went upstream re-encoded (a field changed: the
    /// model's upstream name): one copy each.
    pub openai_bodies_reencoded: AtomicU64,
    /// Bytes of those bodies.
    pub openai_bytes_reencoded: AtomicU64,
    /// ... whose body arrived in several chunks and was joined: one copy.
    pub openai_bodies_joined: AtomicU64,
    /// Event streams relayed.
    pub openai_streams: AtomicU64,
}

impl Stats {
    /// Every counter, for status pages and tests.
    pub fn to_json(&self) -> serde_json::Value {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        serde_json::json!({
            "http_requests": g(&self.http_requests),
            "grpc_requests": g(&self.grpc_requests),
            "submitted": g(&self.submitted),
            "answered": g(&self.answered),
            "refused_4xx": g(&self.refused_4xx),
            "failed_5xx": g(&self.failed_5xx),
            "payload_bytes_copied": g(&self.payload_bytes_copied),
            "json_bytes_converted": g(&self.json_bytes_converted),
            "reply_bytes_copied": g(&self.reply_bytes_copied),
            "connections_refused": g(&self.connections_refused),
            "refused_per_source": g(&self.refused_per_source),
            "refused_sources_full": g(&self.refused_sources_full),
            "closed_handshake_timeout": g(&self.closed_handshake_timeout),
            "closed_idle_timeout": g(&self.closed_idle_timeout),
            "closed_header_timeout": g(&self.closed_header_timeout),
            "closed_body_timeout": g(&self.closed_body_timeout),
            "closed_write_timeout": g(&self.closed_write_timeout),
            "closed_evicted": g(&self.closed_evicted),
            "slow_clients": g(&self.slow_clients),
            "grpc_refused_unread": g(&self.grpc_refused_unread),
            "grpc_bytes_read": g(&self.grpc_bytes_read),
            "streams_opened": g(&self.streams_opened),
            "streams_open": g(&self.streams_open),
            "streams_cancelled": g(&self.streams_cancelled),
            "stream_frames": g(&self.stream_frames),
            "stream_bytes_copied": g(&self.stream_bytes_copied),
            "streams_slow_reader": g(&self.streams_slow_reader),
            "hmac_malformed": g(&self.hmac_malformed),
            "hmac_stale": g(&self.hmac_stale),
            "hmac_bad_signature": g(&self.hmac_bad_signature),
            "hmac_replayed": g(&self.hmac_replayed),
            "hmac_nonces_full": g(&self.hmac_nonces_full),
            "hmac_body_mismatch": g(&self.hmac_body_mismatch),
            "hmac_old_format": g(&self.hmac_old_format),
            "openai_requests": g(&self.openai_requests),
            "openai_bodies_reencoded": g(&self.openai_bodies_reencoded),
            "openai_bytes_reencoded": g(&self.openai_bytes_reencoded),
            "openai_bodies_joined": g(&self.openai_bodies_joined),
            "openai_streams": g(&self.openai_streams),
        })
    }

    /// Adds to a counter.
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts a connection closed by a timer.
    pub fn closed(&self, c: crate::conn::timers::Cause) {
        use crate::conn::timers::Cause;
        Stats::add(
            match c {
                Cause::Handshake => &self.closed_handshake_timeout,
                Cause::Idle => &self.closed_idle_timeout,
                Cause::Header => &self.closed_header_timeout,
                Cause::Body => &self.closed_body_timeout,
                Cause::Write => &self.closed_write_timeout,
                Cause::Evicted => &self.closed_evicted,
            },
            1,
        );
    }

    /// Counts a refused signature by cause.
    pub fn signature_refused(&self, c: crate::signing::Cause) {
        use crate::signing::Cause;
        Stats::add(
            match c {
                Cause::Malformed => &self.hmac_malformed,
                Cause::Stale => &self.hmac_stale,
                Cause::BadSignature => &self.hmac_bad_signature,
                Cause::Replayed => &self.hmac_replayed,
                Cause::NoncesFull => &self.hmac_nonces_full,
                Cause::BodyMismatch => &self.hmac_body_mismatch,
                Cause::OldFormat => &self.hmac_old_format,
            },
            1,
        );
    }

    /// Counts a refusal by status class.
    pub fn refusal(&self, status: http::StatusCode) {
        if status.is_server_error() {
            Stats::add(&self.failed_5xx, 1);
        } else if status.is_client_error() {
            Stats::add(&self.refused_4xx, 1);
        }
    }
}

/// Shared by all front-door threads.
pub struct Ctx {
    /// `[frontdoor]`.
    pub cfg: FrontdoorCfg,
    /// The engine's tables and run state.
    pub shared: Arc<Shared>,
    /// Model metadata.
    pub meta: crate::models::Meta,
    /// Workers.
    pub workers: usize,
    /// Round-robin cursor for worker choice.
    pub rr: AtomicUsize,
    /// Counters.
    pub stats: Stats,
    /// Open connections by source, all threads.
    pub sources: crate::conn::Sources,
    /// `Sluice-HMAC-v2` checks and the nonces seen, all threads.
    pub signer: crate::signing::Signer,
    /// The pools OpenAI requests dispatch to (none configured: `None`).
    pub backends: Option<Arc<sluice_backends::Backends>>,
    /// `[openai]`.
    pub openai: sluice_engine::config::OpenaiCfg,
    /// Where backend-hop span records go.
    pub spans: Arc<sluice_engine::trace::SpanRing>,
    /// Which requests' hops are traced (`tracing.sample_ratio`).
    pub sampler: sluice_engine::trace::Sampler,
    /// The TLS certificate in use; `None`: cleartext.
    pub tls: Option<Arc<crate::conn::tls::Certs>>,
}

impl Ctx {
    /// The tables as of now.
    pub fn tables(&self) -> Arc<Tables> {
        self.shared.tables.load().1
    }

    /// What requests are authenticated and timed with, on `tables`.
    pub fn env<'a>(&'a self, tables: &'a Tables) -> crate::semantic::Env<'a> {
        crate::semantic::Env {
            tables,
            signer: &self.signer,
            stats: &self.stats,
            request_timeout: std::time::Duration::from_millis(u64::from(
                self.cfg.request_timeout_ms,
            )),
        }
    }

    /// Whether the engine accepts new requests.
    pub fn ready(&self) -> bool {
        self.shared.state.load(Ordering::Acquire) == state::RUNNING
    }
}
