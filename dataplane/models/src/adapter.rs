//! ONNX Runtime LoRA adapter files (`.onnx_adapter`), written by hand.
//!
//! The format is a FlatBuffer with file identifier `TORT` and this schema
//! (onnxruntime `lora/adapter_format/adapter_schema.fbs`, format version 1):
//!
//! ```text
//! table Parameter { name:string; dims:[int64]; data_type:TensorDataType (int32);
//!                   raw_data:[uint8] (force_align: 8); }
//! table Adapter   { format_version:int; adapter_version:int; model_version:int;
//!                   parameters:[Parameter]; }
//! ```
//!
//! FlatBuffers builders usually write back to front; this writer lays the
//! buffer out front to back (every offset points forward, as unsigned offsets
//! must), which is equally valid and easier to follow. ONNX Runtime maps the
//! parameters in place, so `raw_data` and `dims` are 8-byte aligned.

/// The adapter format version ONNX Runtime 1.31 reads.
pub const ADAPTER_FORMAT_VERSION: i32 = 1;
/// FlatBuffers file identifier of adapter files.
pub const ADAPTER_FILE_ID: &[u8; 4] = b"TORT";

/// One named parameter: an initializer that the adapter overrides.
#[derive(Debug, Clone, PartialEq)]
pub struct AdapterParam {
    /// Name of the model's overridable initializer.
    pub name: String,
    /// Shape.
    pub dims: Vec<i64>,
    /// ONNX element type code.
    pub elem_type: i32,
    /// Little-endian element bytes.
    pub raw: Vec<u8>,
}

impl AdapterParam {
    /// An f32 parameter.
    pub fn f32(name: &str, dims: &[i64], data: &[f32]) -> AdapterParam {
        debug_assert_eq!(dims.iter().product::<i64>() as usize, data.len());
        AdapterParam {
            name: name.to_string(),
            dims: dims.to_vec(),
            elem_type: crate::onnx::elem::FLOAT,
            raw: data.iter().flat_map(|v| v.to_le_bytes()).collect(),
        }
    }
}

struct Fb {
    buf: Vec<u8>,
}

impl Fb {
    fn pad_to(&mut self, align: usize, rem: usize) {
        while self.buf.len() % align != rem {
            self.buf.push(0);
        }
    }
    fn pos(&self) -> usize {
        self.buf.len()
    }
    fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    fn i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    fn put_u32_at(&mut self, at: usize, v: u32) {
        self.buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }
    /// Points the uoffset slot at `slot` to `target` (which lies after it).
    fn link(&mut self, slot: usize, target: usize) {
        self.put_u32_at(slot, (target - slot) as u32);
    }
    /// A vtable for a table of `n` 4-byte fields laid out in order after the
    /// table's soffset. Returns the vtable position.
    fn vtable(&mut self, n: u16) -> usize {
        self.pad_to(2, 0);
        let at = self.pos();
        self.u16(4 + 2 * n);
        self.u16(4 + 4 * n);
        for i in 0..n {
            self.u16(4 + 4 * i);
        }
        at
    }
    /// Starts a table using `vtable`; returns the table position.
    fn table(&mut self, vtable: usize) -> usize {
        self.pad_to(4, 0);
        let at = self.pos();
        self.i32((at - vtable) as i32);
        at
    }
    /// A vector with a u32 length followed by data aligned to `align`.
    fn vector(&mut self, len: usize, data: &[u8], align: usize) -> usize {
        self.pad_to(align.max(4), (align.max(4) - 4) % align.max(4));
        let at = self.pos();
        self.u32(len as u32);
        self.buf.extend_from_slice(data);
        at
    }
}

/// Encodes an adapter file.
pub fn encode_adapter(
    adapter_version: i32,
    model_version: i32,
    params: &[AdapterParam],
) -> Vec<u8> {
    let mut fb = Fb { buf: Vec::new() };
    fb.u32(0); // root uoffset, linked below
    fb.buf.extend_from_slice(ADAPTER_FILE_ID);

    let adapter_vt = fb.vtable(4);
    let adapter = fb.table(adapter_vt);
    fb.link(0, adapter);
    fb.i32(ADAPTER_FORMAT_VERSION);
    fb.i32(adapter_version);
    fb.i32(model_version);
    let params_slot = fb.pos();
    fb.u32(0);

    let params_vec = fb.vector(params.len(), &vec![0; 4 * params.len()], 4);
    fb.link(params_slot, params_vec);

    for (i, p) in params.iter().enumerate() {
        let vt = fb.vtable(4);
        let table = fb.table(vt);
        fb.link(params_vec + 4 + 4 * i, table);
        let (name_slot, dims_slot, raw_slot) = (table + 4, table + 8, table + 16);
        fb.u32(0);
        fb.u32(0);
        fb.i32(p.elem_type);
        fb.u32(0);

        let mut name = p.name.as_bytes().to_vec();
        name.push(0); // strings are NUL-terminated, not counted in the length
        let s = fb.vector(p.name.len(), &name, 4);
        fb.link(name_slot, s);

        let dims: Vec<u8> = p.dims.iter().flat_map(|d| d.to_le_bytes()).collect();
        let d = fb.vector(p.dims.len(), &dims, 8);
        fb.link(dims_slot, d);

        let r = fb.vector(p.raw.len(), &p.raw, 8);
        fb.link(raw_slot, r);
    }
    fb.pad_to(8, 0);
    fb.buf
}

/// A parameter read back from an adapter file.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedParam {
    /// Name.
    pub name: String,
    /// Shape.
    pub dims: Vec<i64>,
    /// Element type code.
    pub elem_type: i32,
    /// Data bytes.
    pub raw: Vec<u8>,
    /// Offset of the data in the file (ONNX Runtime maps it in place).
    pub raw_offset: usize,
}

/// A decoded adapter file.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedAdapter {
    /// Format version.
    pub format_version: i32,
    /// Adapter version.
    pub adapter_version: i32,
    /// Model version.
    pub model_version: i32,
    /// Parameters.
    pub params: Vec<DecodedParam>,
}

/// Why an adapter file cannot be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdapterDecodeError {
    /// The file identifier is not `TORT` or the file is too short.
    NotAnAdapter,
    /// An offset, vtable or vector points outside the file or is misaligned.
    Malformed,
}

impl std::fmt::Display for AdapterDecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AdapterDecodeError::NotAnAdapter => {
                "not an ONNX Runtime adapter file (identifier TORT)"
            }
            AdapterDecodeError::Malformed => "malformed adapter flatbuffer",
        })
    }
}

impl std::error::Error for AdapterDecodeError {}

/// Reads an adapter file independently of the writer's layout (any valid
/// FlatBuffer with this schema), checking every offset. Used by tests and to
/// list the parameters an adapter overrides.
pub fn decode_adapter(b: &[u8]) -> Result<DecodedAdapter, AdapterDecodeError> {
    use AdapterDecodeError::*;
    if b.len() < 8 || &b[4..8] != ADAPTER_FILE_ID {
        return Err(NotAnAdapter);
    }
    let u32_at = |at: usize| -> Result<u32, AdapterDecodeError> {
        b.get(at..at + 4)
            .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
            .ok_or(Malformed)
    };
    let u16_at = |at: usize| -> Result<u16, AdapterDecodeError> {
        b.get(at..at + 2)
            .map(|s| u16::from_le_bytes([s[0], s[1]]))
            .ok_or(Malformed)
    };
    let deref = |slot: usize| -> Result<usize, AdapterDecodeError> {
        slot.checked_add(u32_at(slot)? as usize)
            .filter(|&t| t < b.len())
            .ok_or(Malformed)
    };
    // Returns the absolute position of field `i` of the table at `t`, if set.
    let field = |t: usize, i: usize| -> Result<Option<usize>, AdapterDecodeError> {
        let soff = u32_at(t)? as i32 as isize;
        let vt = (t as isize)
            .checked_sub(soff)
            .filter(|&v| v >= 0)
            .ok_or(Malformed)? as usize;
        let vt_len = u16_at(vt)? as usize;
        if 4 + 2 * i + 2 > vt_len {
            return Ok(None);
        }
        match u16_at(vt + 4 + 2 * i)? {
            0 => Ok(None),
            off => Ok(Some(t + off as usize)),
        }
    };
    let vector = |slot: usize, elem: usize| -> Result<(usize, usize), AdapterDecodeError> {
        let v = deref(slot)?;
        let n = u32_at(v)? as usize;
        let end = n
            .checked_mul(elem)
            .and_then(|l| l.checked_add(v + 4))
            .ok_or(Malformed)?;
        if end > b.len() {
            return Err(Malformed);
        }
        Ok((v + 4, n))
    };
    let i32_field = |t: usize, i: usize| -> Result<i32, AdapterDecodeError> {
        Ok(match field(t, i)? {
            Some(at) => u32_at(at)? as i32,
            None => 0,
        })
    };

    let root = deref(0)?;
    let mut out = DecodedAdapter {
        format_version: i32_field(root, 0)?,
        adapter_version: i32_field(root, 1)?,
        model_version: i32_field(root, 2)?,
        params: Vec::new(),
    };
    if let Some(slot) = field(root, 3)? {
        let (start, n) = vector(slot, 4)?;
        for k in 0..n {
            let p = deref(start + 4 * k)?;
            let name = match field(p, 0)? {
                Some(s) => {
                    let (at, len) = vector(s, 1)?;
                    String::from_utf8(b[at..at + len].to_vec()).map_err(|_| Malformed)?
                }
                None => String::new(),
            };
            let dims = match field(p, 1)? {
                Some(s) => {
                    let (at, len) = vector(s, 8)?;
                    if at % 8 != 0 {
                        return Err(Malformed);
                    }
                    b[at..at + 8 * len]
                        .chunks_exact(8)
                        .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                        .collect()
                }
                None => Vec::new(),
            };
            let (raw, raw_offset) = match field(p, 3)? {
                Some(s) => {
                    let (at, len) = vector(s, 1)?;
                    if at % 8 != 0 {
                        return Err(Malformed);
                    }
                    (b[at..at + len].to_vec(), at)
                }
                None => (Vec::new(), 0),
            };
            out.params.push(DecodedParam {
                name,
                dims,
                elem_type: i32_field(p, 2)?,
                raw,
                raw_offset,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_aligns_data() {
        let params = [
            AdapterParam::f32("a", &[2, 1], &[1.0, 2.0]),
            AdapterParam::f32("bee", &[1, 3], &[3.0, 4.0, 5.0]),
        ];
        let bytes = encode_adapter(7, 9, &params);
        assert_eq!(&bytes[4..8], b"TORT");
        let d = decode_adapter(&bytes).unwrap();
        assert_eq!(
            (d.format_version, d.adapter_version, d.model_version),
            (1, 7, 9)
        );
        assert_eq!(d.params.len(), 2);
        for (p, q) in params.iter().zip(&d.params) {
            assert_eq!(p.name, q.name);
            assert_eq!(p.dims, q.dims);
            assert_eq!(p.elem_type, q.elem_type);
            assert_eq!(p.raw, q.raw);
            assert_eq!(q.raw_offset % 8, 0);
        }
    }

    #[test]
    fn decoder_rejects_garbage_without_panicking() {
        assert_eq!(
            decode_adapter(b"short"),
            Err(AdapterDecodeError::NotAnAdapter)
        );
        let good = encode_adapter(1, 1, &[AdapterParam::f32("x", &[1], &[1.0])]);
        // Every truncation and every single-byte corruption decodes or errors,
        // never panics.
        for n in 0..good.len() {
            let _ = decode_adapter(&good[..n]);
        }
        for i in 0..good.len() {
            for v in [0u8, 0x7f, 0xff] {
                let mut b = good.clone();
                b[i] = v;
                let _ = decode_adapter(&b);
            }
        }
    }
}
