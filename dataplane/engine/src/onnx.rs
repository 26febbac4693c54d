//! ONNX Runtime models as handlers (feature `onnx`): one session per worker
//! per model version, inputs read in place from the receive buffer, outputs
//! written in place into the transmit buffer.

use crate::config::{Config, ModelCfg};
use crate::handler::Handler;

/// Makes an ONNX Runtime handler for one worker. Loads the runtime library
/// on first use; a missing or incompatible library is an error, not a panic.
#[cfg(feature = "onnx")]
pub fn make(m: &ModelCfg, cfg: &Config) -> Result<Box<dyn Handler>, String> {
    use sluice_infer::{AdapterSpec, ModelSpec, OrtModel};
    let configured = cfg.onnxruntime.library.as_deref().map(|p| cfg.resolve(p));
    let lib = sluice_infer::library_path(configured.as_deref()).ok_or_else(|| {
        format!(
            "no ONNX Runtime library: set [onnxruntime] library or {}",
            sluice_infer::LIBRARY_ENV
        )
    })?;
    sluice_infer::init(&lib).map_err(|e| e.to_string())?;
    let path = m.path.as_deref().ok_or("an onnx model needs a path")?;
    let spec = ModelSpec {
        name: m.name.clone(),
        version: m.version.clone(),
        path: cfg.resolve(path),
        adapters: m
            .adapters
            .iter()
            .map(|a| AdapterSpec {
                id: a.id.clone(),
                path: cfg.resolve(&a.path),
            })
            .collect(),
    };
    let model = OrtModel::load(&spec).map_err(|e| e.to_string())?;
    Ok(Box::new(OrtHandler {
        model,
        stats: sluice_infer::RunStats::default(),
    }))
}

/// Without the `onnx` feature, onnx models are refused at load.
#[cfg(not(feature = "onnx"))]
pub fn make(m: &ModelCfg, _cfg: &Config) -> Result<Box<dyn Handler>, String> {
    Err(format!(
        "model {} {}: this binary was built without the `onnx` feature",
        m.name, m.version
    ))
}

#[cfg(feature = "onnx")]
struct OrtHandler {
    model: sluice_infer::OrtModel,
    stats: sluice_infer::RunStats,
}

#[cfg(feature = "onnx")]
impl Handler for OrtHandler {
    fn handle(
        &mut self,
        req: &sluice_wire::Frame<&[u8]>,
        adapter: Option<&str>,
        tx: &mut [u8],
        acct: &mut crate::handler::RunAccount,
    ) -> Result<usize, crate::handler::Reject> {
        let before = self.stats.payload_bytes_copied;
        let r = self.model.run_into(req, adapter, tx, &mut self.stats);
        acct.payload_bytes_copied += self.stats.payload_bytes_copied - before;
        r
    }
}
