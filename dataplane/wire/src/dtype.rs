/// Tensor element types. The numeric values are ONNX's `TensorProto.DataType`,
/// so a frame's dtype byte passes to ONNX Runtime unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DType {
    /// 32-bit IEEE float.
    F32 = 1,
    /// Unsigned byte.
    U8 = 2,
    /// Signed byte.
    I8 = 3,
    /// Unsigned 16-bit integer.
    U16 = 4,
    /// Signed 16-bit integer.
    I16 = 5,
    /// Signed 32-bit integer.
    I32 = 6,
    /// Signed 64-bit integer.
    I64 = 7,
    /// Boolean, one byte, 0 or 1.
    Bool = 9,
    /// 16-bit IEEE float.
    F16 = 10,
    /// 64-bit IEEE float.
    F64 = 11,
    /// Unsigned 32-bit integer.
    U32 = 12,
    /// Unsigned 64-bit integer.
    U64 = 13,
    /// bfloat16.
    BF16 = 16,
}

impl DType {
    /// Every dtype.
    pub const ALL: &'static [DType] = &[
        DType::F32,
        DType::U8,
        DType::I8,
        DType::U16,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::Bool,
        DType::F16,
        DType::F64,
        DType::U32,
        DType::U64,
        DType::BF16,
    ];

    /// Decodes the wire byte.
    pub const fn from_u8(v: u8) -> Option<DType> {
        Some(match v {
            1 => DType::F32,
            2 => DType::U8,
            3 => DType::I8,
            4 => DType::U16,
            5 => DType::I16,
            6 => DType::I32,
            7 => DType::I64,
            9 => DType::Bool,
            10 => DType::F16,
            11 => DType::F64,
            12 => DType::U32,
            13 => DType::U64,
            16 => DType::BF16,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub const fn size_bytes(self) -> usize {
        match self {
            DType::U8 | DType::I8 | DType::Bool => 1,
            DType::U16 | DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }

    /// Lower-case name as used in configs and schemas ("f32", "bf16", ...).
    pub const fn as_str(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::U8 => "u8",
            DType::I8 => "i8",
            DType::U16 => "u16",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Bool => "bool",
            DType::F16 => "f16",
            DType::F64 => "f64",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::BF16 => "bf16",
        }
    }

    /// Parses a name produced by [`DType::as_str`].
    pub fn parse(s: &str) -> Option<DType> {
        DType::ALL.iter().copied().find(|d| d.as_str() == s)
    }

    /// KServe v2 datatype name ("FP32", "INT64", ...): the one table the
    /// front door and the engine's model metadata both print and parse.
    pub const fn kserve_name(self) -> &'static str {
        match self {
            DType::F32 => "FP32",
            DType::U8 => "UINT8",
            DType::I8 => "INT8",
            DType::U16 => "UINT16",
            DType::I16 => "INT16",
            DType::I32 => "INT32",
            DType::I64 => "INT64",
            DType::Bool => "BOOL",
            DType::F16 => "FP16",
            DType::F64 => "FP64",
            DType::U32 => "UINT32",
            DType::U64 => "UINT64",
            DType::BF16 => "BF16",
        }
    }

    /// The dtype of a KServe v2 datatype name; `None` for names the wire
    /// has no type for (BYTES and anything unknown).
    pub fn from_kserve(name: &str) -> Option<DType> {
        DType::ALL.iter().copied().find(|d| d.kserve_name() == name)
    }

    /// Byte length of a tensor with this dtype and shape; `None` when a
    /// dimension exceeds `i64::MAX`, on overflow, or when the result exceeds
    /// the frame length limit. A shape with a zero dimension has length 0.
    pub fn byte_len(self, dims: &[u64]) -> Option<usize> {
        // ONNX shapes are int64: a larger dimension would turn negative (and
        // -1 means "dynamic") on its way to ONNX Runtime.
        if dims.iter().any(|&d| d > i64::MAX as u64) {
            return None;
        }
        // Zero elements whatever the other dimensions, in any order.
        if dims.contains(&0) {
            return Some(0);
        }
        let mut n: u64 = 1;
        for &d in dims {
            n = n.checked_mul(d)?;
        }
        let bytes = n.checked_mul(self.size_bytes() as u64)?;
        if bytes > crate::limits::FRAME_LEN_MAX as u64 {
            return None;
        }
        usize::try_from(bytes).ok()
    }
}
