//! `[tracing]`: which requests are traced and where spans go.

use serde::{Deserialize, Serialize};

/// `[tracing]`: which requests the workers trace (the engine) and where
/// their spans go (the Go daemon exports them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TracingCfg {
    /// Share (0 to 1) of requests with a trace id but no sampling decision
    /// (trace flags 0, no parent span) that are traced. Requests with the
    /// sampled bit are always traced, requests without a trace id never.
    pub sample_ratio: f64,
    /// Span records each worker's ring holds; a full ring drops and counts.
    pub ring_spans: u32,
    /// OTLP/HTTP endpoint the daemon exports to (`http://host:4318`); none:
    /// records are drained and counted, not exported. Read by sluiced.
    pub endpoint: Option<String>,
    /// How often the daemon drains the rings, in ms. Read by sluiced.
    pub export_interval_ms: u32,
    /// `service.name` of the exported spans. Read by sluiced.
    pub service_name: Option<String>,
}

impl Default for TracingCfg {
    fn default() -> Self {
        TracingCfg {
            sample_ratio: 0.0,
            ring_spans: crate::trace::RING_SPANS_DEFAULT,
            endpoint: None,
            export_interval_ms: 200,
            service_name: None,
        }
    }
}
