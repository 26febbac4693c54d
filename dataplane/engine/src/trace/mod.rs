//! Request tracing on the data path: which requests are traced, the fixed
//! record a worker writes for each, and the per-worker ring that carries
//! them to the control side (which turns them into OpenTelemetry spans; see
//! docs/observability.md).
//!
//! An untraced request costs a flag test: [`Sampler::decide`] reads the
//! frame's trace flags and returns. A traced one costs a few clock reads
//! and one push of a fixed-size record into a preallocated ring; a full
//! ring drops the record and counts it. Nothing here allocates after
//! start-up.

use crossbeam_queue::ArrayQueue;
use sluice_wire::TraceContext;

/// Most records a worker's ring holds (`tracing.ring_spans`).
pub const RING_SPANS_MAX: u32 = 65_536;
/// Default ring size.
pub const RING_SPANS_DEFAULT: u32 = 4096;

/// Bytes kept of a model name in a record (longer names are cut).
pub const SPAN_MODEL_BYTES: usize = 32;
/// Bytes kept of a version.
pub const SPAN_VERSION_BYTES: usize = 16;
/// Bytes kept of an adapter name.
pub const SPAN_ADAPTER_BYTES: usize = 32;

/// What became of a traced request.
pub mod kind {
    /// Run here (answered with a response or an error frame).
    pub const LOCAL: u8 = 0;
    /// Forwarded to a peer; its span is the parent of the peer's.
    pub const FORWARD: u8 = 1;
    /// Sent to a model-server backend by the front door; its span is the
    /// parent of the backend's (the `traceparent` sent upstream names it).
    /// Times: `validate_ns` the body read, `route_ns` placed, `run_start_ns`
    /// sent upstream, `run_end_ns` the answer's first byte, `send_ns` its
    /// last byte relayed; `outcome` is the HTTP status when not 2xx.
    pub const BACKEND: u8 = 2;
}

/// Timestamps of one request's stages, in ns since the Unix epoch; 0 for a
/// stage the request never reached.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpanTimes {
    /// The burst that carried it was received.
    pub recv_ns: u64,
    /// Parsed and authenticated.
    pub auth_ns: u64,
    /// Validated against its schema.
    pub validate_ns: u64,
    /// Routed (and admitted to its shard's queue, or forwarded).
    pub route_ns: u64,
    /// Left the queue: the model started.
    pub run_start_ns: u64,
    /// The model finished.
    pub run_end_ns: u64,
    /// The burst's answers were handed to the transport.
    pub send_ns: u64,
}

/// One traced request, as a worker writes it: fixed size, no pointers.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanRecord {
    /// W3C trace id.
    pub trace_id: [u8; 16],
    /// The caller's span (all zero: the request starts the trace).
    pub parent_id: [u8; 8],
    /// This request's span on this appliance.
    pub span_id: [u8; 8],
    /// Stage timestamps.
    pub times: SpanTimes,
    /// Request id.
    pub request_id: u64,
    /// Tenant id of the frame.
    pub tenant_id: u32,
    /// Declared token count of the frame.
    pub token_count: u32,
    /// Wire error code of the answer (0: a response).
    pub outcome: u16,
    /// Shard index (`u16::MAX`: not routed).
    pub shard: u16,
    /// Worker index.
    pub worker: u16,
    /// [`kind`].
    pub kind: u8,
    /// Trace flags of the frame.
    pub flags: u8,
    /// Model name, NUL padded.
    pub model: [u8; SPAN_MODEL_BYTES],
    /// Model version, NUL padded.
    pub version: [u8; SPAN_VERSION_BYTES],
    /// Adapter, NUL padded.
    pub adapter: [u8; SPAN_ADAPTER_BYTES],
}

impl Default for SpanRecord {
    fn default() -> Self {
        SpanRecord {
            trace_id: [0; 16],
            parent_id: [0; 8],
            span_id: [0; 8],
            times: SpanTimes::default(),
            request_id: 0,
            tenant_id: 0,
            token_count: 0,
            outcome: 0,
            shard: u16::MAX,
            worker: 0,
            kind: kind::LOCAL,
            flags: 0,
            model: [0; SPAN_MODEL_BYTES],
            version: [0; SPAN_VERSION_BYTES],
            adapter: [0; SPAN_ADAPTER_BYTES],
        }
    }
}

/// Copies `s` into `out`, cut to its size, the rest NUL.
pub fn put_str(out: &mut [u8], s: &str) {
    let n = s.len().min(out.len());
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
    out[n..].fill(0);
}

/// Which requests are traced: the caller's sampled bit; for a trace id with
/// no decision (trace flags 0 and no parent span: the caller did not
/// decide), a ratio of trace ids; never a request without a trace id.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sampler {
    /// Trace ids whose last 8 bytes (big endian) fall below this are
    /// sampled when undecided; 0 samples none, `u64::MAX` all.
    threshold: u64,
}

impl Sampler {
    /// Samples `ratio` (0..=1) of undecided trace ids.
    pub fn new(ratio: f64) -> Sampler {
        let threshold = if ratio >= 1.0 {
            u64::MAX
        } else if ratio <= 0.0 || ratio.is_nan() {
            0
        } else {
            (ratio * u64::MAX as f64) as u64
        };
        Sampler { threshold }
    }

    /// Whether a request with these trace flags is traced. The common case
    /// (flags 0, no head sampling) is one test.
    #[inline]
    pub fn decide(&self, flags: u8, trace: impl FnOnce() -> TraceContext) -> bool {
        if flags & 1 == 1 {
            return trace().is_set();
        }
        if self.threshold == 0 {
            return false;
        }
        let t = trace();
        if !t.is_set() || t.parent_id != [0; 8] {
            return false; // no trace, or the caller decided: not sampled
        }
        // The same decision on every appliance a request passes through.
        let mut low = [0u8; 8];
        low.copy_from_slice(&t.trace_id[8..]);
        self.threshold == u64::MAX || u64::from_be_bytes(low) < self.threshold
    }
}

/// The span id an appliance gives a request it forwards: derived from the
/// trace context and request id, so that the peer, which sees the same
/// (signed, unchanged) frame marked FORWARDED, names the same span as its
/// parent without the frame being rewritten.
pub fn forward_span_id(t: &TraceContext, request_id: u64) -> [u8; 8] {
    // FNV-1a over the fields, then a 64-bit finaliser (splitmix64).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in t
        .trace_id
        .iter()
        .chain(t.parent_id.iter())
        .chain(request_id.to_le_bytes().iter())
    {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let id = mix(h).max(1); // a span id is never all zero
    id.to_be_bytes()
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// New span ids for one worker: a counter through a 64-bit mixer, seeded
/// per worker at start (unique, not a secret).
#[derive(Debug, Clone, Copy)]
pub struct SpanIds {
    state: u64,
}

impl SpanIds {
    /// Seeded from the clock and the worker index.
    pub fn new(worker: usize) -> SpanIds {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        SpanIds {
            state: mix(t ^ ((worker as u64) << 56)),
        }
    }

    /// The next id (never all zero).
    #[inline]
    pub fn next_id(&mut self) -> [u8; 8] {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.state).max(1).to_be_bytes()
    }
}

/// A worker's ring of span records: preallocated, pushed by the worker,
/// drained by the control side in batches.
#[derive(Debug)]
pub struct SpanRing {
    q: ArrayQueue<SpanRecord>,
}

impl SpanRing {
    /// A ring of `n` records (at least 1).
    pub fn new(n: u32) -> SpanRing {
        SpanRing {
            q: ArrayQueue::new(n.clamp(1, RING_SPANS_MAX) as usize),
        }
    }

    /// Worker side: false when full (the caller counts the drop).
    #[inline]
    pub fn push(&self, r: SpanRecord) -> bool {
        self.q.push(r).is_ok()
    }

    /// Control side: moves up to `out.len()` records into `out`.
    pub fn drain(&self, out: &mut [SpanRecord]) -> usize {
        let mut n = 0;
        while n < out.len() {
            match self.q.pop() {
                Some(r) => {
                    out[n] = r;
                    n += 1;
                }
                None => break,
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(flags: u8, parent: u8, last: u8) -> TraceContext {
        let mut trace_id = [7u8; 16];
        trace_id[8..].fill(last);
        TraceContext {
            trace_id,
            parent_id: [parent; 8],
            flags,
        }
    }

    #[test]
    fn sampling_rules() {
        let none = Sampler::new(0.0);
        let all = Sampler::new(1.0);
        let half = Sampler::new(0.5);
        // The caller's sampled bit wins; no trace id, no span.
        assert!(none.decide(1, || ctx(1, 3, 0)));
        assert!(!none.decide(1, TraceContext::default));
        assert!(!all.decide(0, TraceContext::default));
        // Undecided (flags 0, no parent): the ratio, by trace id.
        assert!(!none.decide(0, || ctx(0, 0, 0)));
        assert!(all.decide(0, || ctx(0, 0, 0xff)));
        assert!(half.decide(0, || ctx(0, 0, 0x10)));
        assert!(!half.decide(0, || ctx(0, 0, 0xf0)));
        // Decided against by a caller (a parent, bit clear): never.
        assert!(!all.decide(0, || ctx(0, 3, 0)));
    }

    #[test]
    fn forward_ids_are_stable_and_distinct() {
        let a = ctx(1, 3, 4);
        assert_eq!(forward_span_id(&a, 9), forward_span_id(&a, 9));
        assert_ne!(forward_span_id(&a, 9), forward_span_id(&a, 10));
        assert_ne!(forward_span_id(&a, 9), [0; 8]);
        let mut ids = SpanIds::new(0);
        assert_ne!(ids.next_id(), ids.next_id());
    }

    #[test]
    fn a_full_ring_refuses_and_drains_in_order() {
        let r = SpanRing::new(2);
        let rec = |id| SpanRecord {
            request_id: id,
            ..SpanRecord::default()
        };
        assert!(r.push(rec(1)) && r.push(rec(2)));
        assert!(!r.push(rec(3)), "full: dropped");
        let mut out = [SpanRecord::default(); 4];
        assert_eq!(r.drain(&mut out), 2);
        assert_eq!((out[0].request_id, out[1].request_id), (1, 2));
        let mut m = [0u8; 4];
        put_str(&mut m, "resnet50");
        assert_eq!(&m, b"resn");
    }
}
