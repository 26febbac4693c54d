//! Request mixes: weighted request templates read from `perf/mixes/*.toml`.
//!
//! ```toml
//! [[request]]
//! weight = 3                 # relative frequency, >= 1
//! model = "mlp"
//! version = "1.0.0"
//! adapter = "formal"         # optional
//! intent = "chat"            # optional
//! tenant_id = 1
//! key = "hex:73756963..."    # optional; "hex:..." or plain text
//! deadline_offset_us = 20000 # optional; 0 = no deadline
//! token_count = 0            # optional
//! schema_id = 0              # optional
//! schema_version = 0         # optional
//! [[request.tensors]]
//! name = "x"
//! dtype = "f32"
//! shape = [1, 4]
//! fill = 0.5                 # optional; every element gets this value
//! ```

use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use sluice_client::{Deadline, Request, TenantKey};
use sluice_wire::DType;

/// Most entries in one mix.
pub const MIX_ENTRY_COUNT_MAX: usize = 1024;
/// Largest weight of one entry.
pub const MIX_WEIGHT_MAX: u32 = 1_000_000;

/// Why a mix file was rejected.
#[derive(Debug)]
pub enum MixError {
    /// The file could not be read.
    Io(std::io::Error),
    /// The TOML is invalid or has unknown keys.
    Toml(toml::de::Error),
    /// An entry is invalid; the index counts from 0.
    Entry {
        /// Index of the entry.
        index: usize,
        /// What is wrong.
        why: String,
    },
    /// The mix has no entries, or too many.
    Count(usize),
}

impl fmt::Display for MixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MixError::Io(e) => write!(f, "cannot read mix: {e}"),
            MixError::Toml(e) => write!(f, "invalid mix: {e}"),
            MixError::Entry { index, why } => write!(f, "mix entry {index}: {why}"),
            MixError::Count(n) => {
                write!(f, "a mix needs 1..={MIX_ENTRY_COUNT_MAX} entries, got {n}")
            }
        }
    }
}

impl std::error::Error for MixError {}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MixFile {
    #[serde(default)]
    request: Vec<EntryFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryFile {
    #[serde(default = "one")]
    weight: u32,
    model: String,
    version: String,
    #[serde(default)]
    adapter: String,
    #[serde(default)]
    intent: String,
    tenant_id: u32,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    deadline_offset_us: u64,
    #[serde(default)]
    token_count: u32,
    #[serde(default)]
    schema_id: u32,
    #[serde(default)]
    schema_version: u32,
    /// A W3C trace context on every request of this entry (a fixed trace
    /// id and caller span) with these trace flags (1: sampled); none when
    /// absent.
    #[serde(default)]
    trace_flags: Option<u8>,
    #[serde(default)]
    tensors: Vec<TensorFile>,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TensorFile {
    name: String,
    dtype: String,
    shape: Vec<u64>,
    #[serde(default)]
    fill: f64,
}

/// One request template, ready to send.
#[derive(Debug)]
pub struct MixEntry {
    /// Relative frequency.
    pub weight: u32,
    /// Model name.
    pub model: String,
    /// Model version.
    pub version: String,
    /// Adapter id; empty for none.
    pub adapter: String,
    /// Intent; empty for none.
    pub intent: String,
    /// Tenant id.
    pub tenant_id: u32,
    /// Tenant key.
    pub key: Option<TenantKey>,
    /// Deadline relative to each send; zero for none.
    pub deadline_offset: Duration,
    /// Token count.
    pub token_count: u32,
    /// Schema id and version.
    pub schema: (u32, u32),
    /// Tensors: name, dtype, shape, little-endian data.
    pub tensors: Vec<(String, DType, Vec<u64>, Vec<u8>)>,
    /// Trace context, when the entry carries one.
    pub trace: Option<sluice_wire::TraceContext>,
}

impl MixEntry {
    /// The request this entry describes, borrowing from the entry.
    pub fn request(&self) -> Request<'_> {
        let mut r = Request::new(&self.model, &self.version)
            .adapter(&self.adapter)
            .intent(&self.intent)
            .token_count(self.token_count)
            .schema(self.schema.0, self.schema.1)
            .tenant(self.tenant_id, self.key.as_ref());
        if !self.deadline_offset.is_zero() {
            r = r.deadline(Deadline::After(self.deadline_offset));
        }
        if let Some(t) = self.trace {
            r = r.trace(t);
        }
        for (name, dtype, dims, data) in &self.tensors {
            r = r.tensor_raw(name, *dtype, dims, data);
        }
        r
    }
}

/// A weighted set of request templates.
#[derive(Debug)]
pub struct Mix {
    /// The entries.
    pub entries: Vec<MixEntry>,
    cumulative: Vec<u64>,
}

impl Mix {
    /// Reads a mix file.
    pub fn load(path: &Path) -> Result<Mix, MixError> {
        let text = std::fs::read_to_string(path).map_err(MixError::Io)?;
        Mix::parse(&text)
    }

    /// Parses a mix from TOML text.
    pub fn parse(text: &str) -> Result<Mix, MixError> {
        let file: MixFile = toml::from_str(text).map_err(MixError::Toml)?;
        let n = file.request.len();
        if n == 0 || n > MIX_ENTRY_COUNT_MAX {
            return Err(MixError::Count(n));
        }
        let entries = file
            .request
            .into_iter()
            .enumerate()
            .map(|(index, e)| entry(e).map_err(|why| MixError::Entry { index, why }))
            .collect::<Result<Vec<_>, _>>()?;
        let mix = Mix::new(entries);
        // Build every request once so that wire-limit errors show at load
        // (frames larger than a datagram are for TCP).
        for (index, e) in mix.entries.iter().enumerate() {
            let why = |err: sluice_wire::Error| MixError::Entry {
                index,
                why: err.to_string(),
            };
            let r = e.request();
            let mut buf = vec![0u8; r.encoded_len().map_err(why)?];
            let len = r.encode(&mut buf, 1, 0, None).map_err(why)?;
            debug_assert!(len <= buf.len());
        }
        Ok(mix)
    }

    fn new(entries: Vec<MixEntry>) -> Mix {
        let mut total = 0u64;
        let cumulative = entries
            .iter()
            .map(|e| {
                total += u64::from(e.weight);
                total
            })
            .collect();
        Mix {
            entries,
            cumulative,
        }
    }

    /// Picks an entry index for a uniform random `r`.
    pub fn pick(&self, r: u64) -> usize {
        let total = *self.cumulative.last().unwrap_or(&1);
        let x = r % total;
        self.cumulative.partition_point(|&c| c <= x)
    }
}

fn entry(e: EntryFile) -> Result<MixEntry, String> {
    if e.weight == 0 || e.weight > MIX_WEIGHT_MAX {
        return Err(format!("weight must be 1..={MIX_WEIGHT_MAX}"));
    }
    let key = match e.key.as_deref() {
        None => None,
        Some(k) => Some(TenantKey::new(&parse_key(k)?)),
    };
    let mut tensors = Vec::new();
    for t in e.tensors {
        let dtype = DType::parse(&t.dtype)
            .ok_or_else(|| format!("tensor {}: unknown dtype {:?}", t.name, t.dtype))?;
        let len = dtype
            .byte_len(&t.shape)
            .filter(|&l| l <= sluice_wire::limits::FRAME_LEN_MAX)
            .ok_or_else(|| {
                format!(
                    "tensor {}: shape {:?} is larger than a frame (256 MiB)",
                    t.name, t.shape
                )
            })?;
        if dtype == DType::F16 && t.fill != 0.0 {
            return Err(format!(
                "tensor {}: f16 tensors can only be filled with 0",
                t.name
            ));
        }
        let data = fill(dtype, len / dtype.size_bytes(), t.fill);
        tensors.push((t.name, dtype, t.shape, data));
    }
    Ok(MixEntry {
        weight: e.weight,
        model: e.model,
        version: e.version,
        adapter: e.adapter,
        intent: e.intent,
        tenant_id: e.tenant_id,
        key,
        deadline_offset: Duration::from_micros(e.deadline_offset_us),
        token_count: e.token_count,
        schema: (e.schema_id, e.schema_version),
        tensors,
        trace: e.trace_flags.map(|flags| sluice_wire::TraceContext {
            trace_id: [0x42; 16],
            parent_id: [0x17; 8],
            flags,
        }),
    })
}

/// Parses a key given as "hex:..." or as plain text (the same form as the
/// engine's config).
pub fn parse_key(k: &str) -> Result<Vec<u8>, String> {
    let Some(hex) = k.strip_prefix("hex:") else {
        return Ok(k.as_bytes().to_vec());
    };
    if hex.len() % 2 != 0 {
        return Err("hex key has an odd number of digits".into());
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&hex[i..i + 2], 16)
                .map_err(|_| "hex key has a non-hex digit".to_string())
        })
        .collect()
}

fn fill(dtype: DType, n: usize, v: f64) -> Vec<u8> {
    let one: Vec<u8> = match dtype {
        DType::F32 => (v as f32).to_le_bytes().to_vec(),
        DType::F64 => v.to_le_bytes().to_vec(),
        DType::I64 => (v as i64).to_le_bytes().to_vec(),
        DType::I32 => (v as i32).to_le_bytes().to_vec(),
        DType::U64 => (v as u64).to_le_bytes().to_vec(),
        DType::U32 => (v as u32).to_le_bytes().to_vec(),
        DType::I16 => (v as i16).to_le_bytes().to_vec(),
        DType::U16 => (v as u16).to_le_bytes().to_vec(),
        DType::I8 => (v as i8).to_le_bytes().to_vec(),
        DType::U8 => vec![v as u8],
        DType::Bool => vec![u8::from(v != 0.0)],
        // bf16 is the top half of the f32 (truncated); f16 only takes 0.
        DType::BF16 => ((v as f32).to_bits() >> 16).to_le_bytes()[..2].to_vec(),
        DType::F16 => vec![0, 0],
    };
    one.repeat(n)
}
