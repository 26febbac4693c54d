//! The front door: KServe v2 / Open Inference Protocol (and Triton's model
//! configuration) over HTTP/1.1, HTTP/2 and gRPC, on the engine's workers.
//!
//! It runs on its own threads, never on a worker core. Each request
//! becomes a Sluice frame built in a 64-byte aligned slot and goes to a
//! worker through a per-worker SPSC ring; the worker classifies, admits
//! and runs it like any other frame (same routes, shards, admission,
//! deadlines, tenants, models, statistics) and writes the answer into the
//! slot's reply region, which comes back on a reply ring. See
//! docs/frontdoor.md.
#![deny(unsafe_code)]

mod conn;
mod ctx;
mod dispatch;
pub mod dtype;
pub mod errors;
mod frames;
mod grpc;
mod grpc_gate;
mod grpc_stream;
mod http;
mod models;
pub mod openai;
pub mod semantic;
mod server;
pub mod signing;
pub mod tokens;

pub use server::start;

/// Generated from `proto/` (see proto/README.md).
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("inference");
}
