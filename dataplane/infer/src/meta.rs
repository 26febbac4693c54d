//! What a model file says about itself, read once at load.

use ort::session::Session;

/// Model metadata from the ONNX file (`ModelProto` fields and
/// `metadata_props`), for clients and the control plane.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModelInfo {
    /// Producer (`pytorch`, `tf2onnx`, ...).
    pub producer: String,
    /// Graph name.
    pub graph_name: String,
    /// Model domain.
    pub domain: String,
    /// Description (doc string).
    pub description: String,
    /// The model's own version number (`model_version`); 0 when unset.
    pub model_version: i64,
    /// `metadata_props`, sorted by key; at most [`ModelInfo::CUSTOM_MAX`].
    pub custom: Vec<(String, String)>,
}

impl ModelInfo {
    /// Custom metadata entries kept.
    pub const CUSTOM_MAX: usize = 32;
    /// Longest string kept per field (longer ones are cut at a character
    /// boundary).
    pub const FIELD_LEN_MAX: usize = 1024;

    pub(crate) fn read(session: &Session) -> ModelInfo {
        let Ok(m) = session.metadata() else {
            return ModelInfo::default();
        };
        let clip = |s: Option<String>| {
            let mut s = s.unwrap_or_default();
            if s.len() > Self::FIELD_LEN_MAX {
                let mut end = Self::FIELD_LEN_MAX;
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                s.truncate(end);
            }
            s
        };
        let mut custom: Vec<(String, String)> = m
            .custom_keys()
            .unwrap_or_default()
            .into_iter()
            .take(Self::CUSTOM_MAX)
            .map(|k| {
                let v = clip(m.custom(&k));
                (clip(Some(k)), v)
            })
            .collect();
        custom.sort();
        ModelInfo {
            producer: clip(m.producer()),
            graph_name: clip(m.name()),
            domain: clip(m.domain()),
            description: clip(m.description()),
            // ONNX leaves it unset as i64::MAX in some exporters' output.
            model_version: m.version().filter(|&v| v != i64::MAX).unwrap_or(0),
            custom,
        }
    }
}
