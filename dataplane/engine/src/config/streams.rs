//! `[streams]` and `[models.stream]` (docs/wire.md "Streams").

use serde::{Deserialize, Serialize};

/// `[models.stream]`: the state a stream keeps between steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelStreamCfg {
    /// The state pairs (1 to 8).
    pub state: Vec<StatePairCfg>,
    /// A generative model: the appliance runs it step by step and answers
    /// one `OPEN` with a run of token frames (server-driven streams).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generate: Option<GenerateCfg>,
}

/// `[models.stream.generate]`: how a generative model takes its token and
/// gives the next one (docs/wire.md "Streams").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateCfg {
    /// The input that takes each step's token (i64 `[1]`); the prompt of an
    /// `OPEN` is a tensor of this name, i64 `[n]`.
    pub token_input: String,
    /// The output that gives the greedy next token (i64 `[1]`).
    pub token_output: String,
    /// The end-of-sequence token: generation ends when it is chosen (not
    /// sent). None: only `max_tokens`, the deadline or a cancel end it.
    #[serde(default)]
    pub eos: Option<i64>,
    /// Most tokens one stream generates (an `OPEN` may ask for fewer).
    pub max_tokens: u32,
    /// Most prompt tokens (the prompt buffer is preallocated per slot).
    #[serde(default = "default_prompt_max")]
    pub prompt_max: u32,
    /// Most streams one batched decode step runs (when the model takes a
    /// batch dimension); 1 runs each stream's step on its own.
    #[serde(default = "default_step_batch_max")]
    pub step_batch_max: u32,
}

fn default_step_batch_max() -> u32 {
    64
}

fn default_prompt_max() -> u32 {
    256
}

/// One state pair: `output` of a step feeds `input` of the next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatePairCfg {
    /// Model input that takes the state.
    pub input: String,
    /// Model output that gives the next state.
    pub output: String,
    /// The state's shape.
    pub shape: Vec<u64>,
}

/// `[streams]`: limits of the streams each worker keeps.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StreamsCfg {
    /// Slots per worker and stream model (preallocated at load).
    pub per_worker: u32,
    /// Open streams per tenant and worker.
    pub per_tenant: u32,
    /// A stream with no frame for this long is reclaimed.
    pub idle_ms: u32,
    /// Frames per stream.
    pub frames_max: u32,
}

impl Default for StreamsCfg {
    fn default() -> Self {
        StreamsCfg {
            per_worker: 64,
            per_tenant: 64,
            idle_ms: 10_000,
            frames_max: 1 << 20,
        }
    }
}

impl StreamsCfg {
    /// The limits of one worker's table.
    pub fn limits(&self) -> crate::streams::StreamLimits {
        crate::streams::StreamLimits {
            per_worker: self.per_worker,
            per_tenant: self.per_tenant,
            idle_us: u64::from(self.idle_ms) * 1000,
            frames_max: self.frames_max,
        }
    }
}
