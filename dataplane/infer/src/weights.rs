//! Weights shared across workers: one copy of a model version's large
//! initializers per process, however many workers run it.
//!
//! Each worker keeps its own ONNX Runtime session (runs take `&mut`), but
//! every session of the same model file is given the same initializer
//! values through `AddInitializer`: tensors made by
//! `CreateTensorWithDataAsOrtValue` over one process-wide buffer, which ORT
//! uses instead of deserializing its own copy from the file. Kernels that
//! pre-pack a constant weight (MatMul's B) store the packed form in the
//! process-wide pre-packed weights container (`env`), keyed by the shared
//! initializer, so the packed copy is made once too.
//!
//! The buffers are read from the file once, at the first load of a model
//! version, by the small protobuf reader below (ModelProto → GraphProto →
//! TensorProto; only what an initializer needs). Shared: tensors of at least
//! [`SHARE_BYTES_MIN`] held in `raw_data` inside the file, of a numeric type
//! Rust has (f32, f64, i8, u8, i32, i64). Others (small ones, f16, external
//! data) stay per session as before.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::SystemTime;

use ort::value::{DynValue, Tensor};

/// Smallest initializer shared: below this the per-session copy is cheaper
/// than the bookkeeping.
pub const SHARE_BYTES_MIN: usize = 64 << 10;
/// Most initializers of one model shared (a limit like every other; a
/// model with more keeps the rest per session).
pub const SHARED_INITIALIZERS_MAX: usize = 4096;
/// Largest model file whose initializers are read for sharing (the file is
/// read whole, once per process per version).
pub const MODEL_FILE_BYTES_MAX: u64 = 16 << 30;

/// One model file's shared initializer values. Sessions hold an `Arc` (ort
/// keeps one per value too), so the buffers outlive every session using
/// them; the registry holds a `Weak` and drops nothing itself.
#[derive(Debug)]
pub(crate) struct SharedWeights {
    pub(crate) values: Vec<(String, Arc<DynValue>)>,
    /// Bytes of initializer data shared.
    pub(crate) bytes: usize,
}

/// Which file: path plus what changes when it is rewritten.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct FileKey {
    path: PathBuf,
    len: u64,
    modified: Option<SystemTime>,
}

static REGISTRY: Mutex<Option<HashMap<FileKey, Weak<SharedWeights>>>> = Mutex::new(None);

/// The shared initializers of the model at `path`, read once per process
/// per file version. `Ok(None)` when nothing is worth sharing.
pub(crate) fn for_model(path: &Path) -> Result<Option<Arc<SharedWeights>>, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    let key = FileKey {
        path: std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
        len: meta.len(),
        modified: meta.modified().ok(),
    };
    // Held while reading: two workers loading the same version at once
    // read it once. Loads happen off the hot path.
    let mut guard = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    let map = guard.get_or_insert_with(HashMap::new);
    map.retain(|_, w| w.strong_count() > 0);
    if let Some(w) = map.get(&key).and_then(Weak::upgrade) {
        return Ok(Some(w));
    }
    if meta.len() > MODEL_FILE_BYTES_MAX {
        return Ok(None);
    }
    let file = std::fs::read(path).map_err(|e| e.to_string())?;
    let tensors = initializers(&file).map_err(|e| format!("reading initializers: {e}"))?;
    let mut values = Vec::new();
    let mut bytes = 0;
    for t in tensors {
        if values.len() == SHARED_INITIALIZERS_MAX {
            break;
        }
        if let Some(v) = t.value()? {
            bytes += t.raw.len();
            values.push((t.name.to_string(), Arc::new(v)));
        }
    }
    if values.is_empty() {
        return Ok(None);
    }
    let shared = Arc::new(SharedWeights { values, bytes });
    map.insert(key, Arc::downgrade(&shared));
    Ok(Some(shared))
}

/// Bytes of initializer data currently shared across the process's sessions.
pub fn shared_weight_bytes() -> usize {
    let guard = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    guard
        .iter()
        .flat_map(|m| m.values())
        .filter_map(Weak::upgrade)
        .map(|s| s.bytes)
        .sum()
}

/// An initializer as the file holds it.
struct RawTensor<'a> {
    name: &'a str,
    dims: Vec<i64>,
    data_type: i64,
    raw: &'a [u8],
    external: bool,
}

impl RawTensor<'_> {
    /// The shared value, or `None` when this tensor stays per session.
    fn value(&self) -> Result<Option<DynValue>, String> {
        if self.external || self.raw.len() < SHARE_BYTES_MIN || self.dims.iter().any(|&d| d < 0) {
            return Ok(None);
        }
        let elems: u128 = self.dims.iter().map(|&d| d as u128).product();
        // TensorProto.DataType: FLOAT=1 UINT8=2 INT8=3 INT32=6 INT64=7 DOUBLE=11.
        let v = match self.data_type {
            1 => self.make::<f32, 4>(elems, f32::from_le_bytes),
            2 => self.make::<u8, 1>(elems, u8::from_le_bytes),
            3 => self.make::<i8, 1>(elems, i8::from_le_bytes),
            6 => self.make::<i32, 4>(elems, i32::from_le_bytes),
            7 => self.make::<i64, 8>(elems, i64::from_le_bytes),
            11 => self.make::<f64, 8>(elems, f64::from_le_bytes),
            _ => return Ok(None),
        };
        v.map_err(|e| format!("initializer {}: {e}", self.name))
    }

    fn make<T, const N: usize>(
        &self,
        elems: u128,
        from: fn([u8; N]) -> T,
    ) -> Result<Option<DynValue>, String>
    where
        T: ort::value::PrimitiveTensorElementType + Clone + std::fmt::Debug + 'static,
    {
        if elems * N as u128 != self.raw.len() as u128 {
            return Err("raw_data length does not match its shape".into());
        }
        let data: Vec<T> = self
            .raw
            .chunks_exact(N)
            .map(|c| {
                let mut a = [0u8; N];
                a.copy_from_slice(c);
                from(a)
            })
            .collect();
        let t = Tensor::from_array((self.dims.clone(), data)).map_err(|e| e.to_string())?;
        Ok(Some(t.into_dyn()))
    }
}

/// The initializers of a serialized ModelProto (graph = 7; GraphProto
/// initializer = 5, input = 11 (ValueInfoProto name = 1); TensorProto
/// dims = 1, data_type = 2, name = 8, raw_data = 9, external_data = 13,
/// data_location = 14 with EXTERNAL = 1). Initializers that are also graph
/// inputs (overridable ones: LoRA parameters a request or adapter may
/// replace) are left out: they stay per session.
fn initializers(model: &[u8]) -> Result<Vec<RawTensor<'_>>, &'static str> {
    let mut out = Vec::new();
    let mut inputs: Vec<&[u8]> = Vec::new();
    for (field, v) in Fields(model) {
        if let (7, Value::Bytes(graph)) = (field?, v) {
            for (field, v) in Fields(graph) {
                match (field?, v) {
                    (5, Value::Bytes(t)) => out.push(tensor(t)?),
                    (11, Value::Bytes(vi)) => {
                        for (field, v) in Fields(vi) {
                            if let (1, Value::Bytes(name)) = (field?, v) {
                                inputs.push(name);
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    out.retain(|t| !inputs.contains(&t.name.as_bytes()));
    Ok(out)
}

fn tensor(b: &[u8]) -> Result<RawTensor<'_>, &'static str> {
    let mut t = RawTensor {
        name: "",
        dims: Vec::new(),
        data_type: 0,
        raw: &[],
        external: false,
    };
    for (field, v) in Fields(b) {
        match (field?, v) {
            (1, Value::Int(d)) => t.dims.push(d as i64),
            (1, Value::Bytes(packed)) => {
                let mut p = packed;
                while !p.is_empty() {
                    t.dims.push(varint(&mut p)? as i64);
                }
            }
            (2, Value::Int(d)) => t.data_type = d as i64,
            (8, Value::Bytes(n)) => t.name = std::str::from_utf8(n).map_err(|_| "name")?,
            (9, Value::Bytes(r)) => t.raw = r,
            (13, _) => t.external = true,
            (14, Value::Int(1)) => t.external = true,
            _ => {}
        }
    }
    Ok(t)
}

enum Value<'a> {
    Int(u64),
    Bytes(&'a [u8]),
    Other,
}

/// Iterates a message's fields; a malformed one ends it with an error.
struct Fields<'a>(&'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = (Result<u64, &'static str>, Value<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let r = (|| {
            let key = varint(&mut self.0)?;
            let v = match key & 7 {
                0 => Value::Int(varint(&mut self.0)?),
                1 => {
                    self.0 = self.0.get(8..).ok_or("truncated")?;
                    Value::Other
                }
                2 => {
                    let n = usize::try_from(varint(&mut self.0)?).map_err(|_| "length")?;
                    let (head, tail) = self.0.split_at_checked(n).ok_or("truncated")?;
                    self.0 = tail;
                    Value::Bytes(head)
                }
                5 => {
                    self.0 = self.0.get(4..).ok_or("truncated")?;
                    Value::Other
                }
                _ => return Err("unsupported wire type"),
            };
            Ok((key >> 3, v))
        })();
        match r {
            Ok((f, v)) => Some((Ok(f), v)),
            Err(e) => {
                self.0 = &[];
                Some((Err(e), Value::Other))
            }
        }
    }
}

fn varint(b: &mut &[u8]) -> Result<u64, &'static str> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = b.split_first().ok_or("truncated varint")?;
        *b = rest;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("varint too long")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_initializers_the_model_writer_writes() {
        let model = sluice_models::bundled::large_model().encode();
        let ts = initializers(&model).unwrap();
        let names: Vec<&str> = ts.iter().map(|t| t.name).collect();
        assert_eq!(names, ["half", "quarter", "axes"]);
        assert_eq!(ts[2].dims, [1]);
        assert_eq!(ts[2].data_type, 7);
        assert_eq!(ts[2].raw, 1i64.to_le_bytes());
        assert_eq!(ts[0].raw, sluice_models::bundled::LARGE_SCALE.to_le_bytes());
    }

    #[test]
    fn overridable_initializers_are_not_shared() {
        // The MLP's LoRA parameters are graph inputs with initializers.
        let model = sluice_models::bundled::mlp_model().encode();
        let ts = initializers(&model).unwrap();
        assert!(!ts.is_empty());
        for t in &ts {
            assert_ne!(t.name, sluice_models::bundled::LORA_A);
            assert_ne!(t.name, sluice_models::bundled::LORA_B);
        }
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let model = sluice_models::bundled::mlp_model().encode();
        for cut in 0..model.len() {
            let _ = initializers(&model[..cut]);
        }
        assert!(initializers(&[0x3a, 0xff, 0xff, 0xff, 0xff, 0x0f]).is_err());
        assert!(initializers(&[0xff; 11]).is_err());
    }
}
