//! Sluice client: inference requests over UDP, TCP, or both.
//!
//! ```no_run
//! use std::time::Duration;
//! use sluice_client::{Client, ClientConfig, Request};
//!
//! let mut client = Client::connect("127.0.0.1:7070", ClientConfig {
//!     tenant_id: 1,
//!     key: Some(b"secret".to_vec()),
//!     timeout: Duration::from_millis(100),
//!     ..ClientConfig::default()
//! })?;
//! let input = [0.5f32; 4];
//! let req = Request::new("mlp", "1.0.0").intent("chat").tensor_f32("input", &[1, 4], &input);
//! let resp = client.call(&req)?;
//! let out = resp.tensor("output").expect("model has an output").to_f32_vec()?;
//! # Ok::<(), sluice_client::ClientError>(())
//! ```
//!
//! One frame per datagram over UDP; over TCP frames follow each other on
//! one connection, pipelined, answered in request order, of any size up to
//! the server's `tcp_frame_len_max` (raw tensor bytes are written from the
//! caller's memory, large answers read straight into their own buffer).
//! With both addresses ([`Client::connect_endpoints`]) a frame that fits a
//! datagram goes by UDP and a larger one over TCP; a lost TCP connection
//! fails its outstanding requests with [`ClientError::ConnectionLost`] and
//! is opened again by the next send. Requests are signed with the tenant
//! key when one is configured, and a signed frame always carries a deadline
//! at most [`ClientConfig::signed_deadline`] (2 s) ahead, as the
//! appliance's freshness rule wants (docs/wire.md, "Clients"); every frame
//! and every retry takes a new request id, so the appliance never takes one
//! for a replay. Answers are matched by request id; late, duplicate,
//! foreign and garbled frames are ignored and counted in [`ClientStats`].
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod client;
mod error;
mod request;
mod response;
mod streams;
mod tcp;
mod tokens;

pub use client::{
    Answer, Client, ClientConfig, ClientStats, DATAGRAM_LEN_MAX, Endpoints, PollMode,
    TransportMode, random_sender_id,
};
pub use error::ClientError;
pub use request::{Deadline, Request, SIGNED_DEADLINE_DEFAULT, TensorData, TensorInput};
pub use response::{NegotiatedSchema, Response, TensorView};
pub use sluice_wire::{DType, ErrorCode, SchemaType, TenantKey, TraceContext};
pub use streams::StateStream;
pub use tokens::{TokenFrame, TokenStream};
