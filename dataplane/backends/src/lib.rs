//! Backends: pools of model servers that shards dispatch to, beside local
//! execution in ONNX Runtime (docs/backends.md).
//!
//! A pool (`[[backends]]`) is a set of endpoints speaking one protocol
//! (OpenAI's HTTP API, KServe v2 over HTTP), with labels matched against a
//! shard's, the models they serve (configured or discovered), and limits:
//! `max_concurrency` per endpoint, `queue_depth` per pool. This crate picks
//! an endpoint ([`pool`]), sends with retries before the first byte
//! ([`dispatch`]), relays event streams as they arrive ([`relay`]), checks
//! health and discovers models on its own thread ([`health`]), and counts
//! everything per pool, endpoint and model ([`stats`]). It runs on the front
//! door's threads, never on a worker core.

pub mod client;
pub mod dispatch;
pub mod endpoint;
pub mod health;
pub mod hist;
pub mod pool;
pub mod relay;
pub mod stats;

pub use dispatch::{Answer, Body, Call, Failure, send};
pub use pool::{Backends, EndpointError, Lease, NoEndpoint};
pub use stats::Cause;
