//! The Sluice data plane.
//!
//! Each configured core runs one [`worker::Worker`], pinned, run to
//! completion: receive a burst, parse it as zero-copy views, authenticate,
//! validate, route, admit, run the model, send a burst. The hot path takes no
//! lock and makes no allocation; control changes reach workers at burst
//! boundaries through [`rcu::Rcu`] and per-worker rings.
#![deny(unsafe_code)]

pub mod auth;
pub mod config;
pub mod engine;
#[cfg(feature = "fault-hooks")]
pub mod fault;
pub mod handler;
pub mod load;
pub mod meta;
pub mod onnx;
pub mod pending;
pub mod pool;
pub mod rcu;
pub mod route;
pub mod schema;
pub mod stats;
pub mod streams;
pub mod sys;
pub mod tables;
pub mod trace;
pub mod transform;
pub mod transport;
pub mod vocab;
pub mod worker;

pub use config::{Config, ConfigError};
pub use engine::{Engine, EngineError, EngineOptions, Status};
pub use stats::StatsSnapshot;
pub use tables::LiveConfig;
