//! The engine's shared words: refusal causes and messages, the errors a
//! handler answers with, copy paths. Every module may import these, and this
//! module imports nothing of the engine, so sharing a word never ties two
//! modules into a loop (docs/design.md, "Layout").

mod copy;
mod refusal;

pub use copy::{COPY_PATHS, CopyPath};
pub use refusal::{CAUSE_COUNT, Cause, Refusal, msg};
pub use sluice_wire::Reject;
