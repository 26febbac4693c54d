//! ONNX Runtime models as handlers (feature `onnx`).

use crate::config::{Config, ModelCfg};
use crate::handler::Handler;

/// Makes an ONNX Runtime handler for one worker.
pub fn make(m: &ModelCfg, _cfg: &Config) -> Result<Box<dyn Handler>, String> {
    Err(format!(
        "model {} {}: kind \"onnx\" needs the ONNX Runtime stage, not built yet",
        m.name, m.version
    ))
}
