//! KServe v2 datatypes and tensor elements written as JSON: parsing
//! `"data"` straight into a request slot, and printing an output's
//! elements from the reply slot. No intermediate vector in either way.

use std::fmt;

use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use sluice_wire::DType;

/// Triton's `TYPE_*` enum value (model_config.proto) of a dtype.
pub fn triton_type(d: DType) -> i32 {
    match d {
        DType::Bool => 1,
        DType::U8 => 2,
        DType::U16 => 3,
        DType::U32 => 4,
        DType::U64 => 5,
        DType::I8 => 6,
        DType::I16 => 7,
        DType::I32 => 8,
        DType::I64 => 9,
        DType::F16 => 10,
        DType::F32 => 11,
        DType::F64 => 12,
        DType::BF16 => 14,
    }
}

/// A dtype's `TYPE_*` name as Triton's JSON config prints it.
pub fn triton_type_name(d: DType) -> &'static str {
    match d {
        DType::Bool => "TYPE_BOOL",
        DType::U8 => "TYPE_UINT8",
        DType::U16 => "TYPE_UINT16",
        DType::U32 => "TYPE_UINT32",
        DType::U64 => "TYPE_UINT64",
        DType::I8 => "TYPE_INT8",
        DType::I16 => "TYPE_INT16",
        DType::I32 => "TYPE_INT32",
        DType::I64 => "TYPE_INT64",
        DType::F16 => "TYPE_FP16",
        DType::F32 => "TYPE_FP32",
        DType::F64 => "TYPE_FP64",
        DType::BF16 => "TYPE_BF16",
    }
}

/// f32 to IEEE half, rounding to nearest even.
pub fn f32_to_f16(v: f32) -> u16 {
    let x = v.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32;
    let mant = x & 0x007f_ffff;
    if exp == 0xff {
        // Inf or NaN (keep NaN quiet).
        return sign | 0x7c00 | if mant != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = mant | 0x0080_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rest = m & ((1 << shift) - 1);
        let mut r = (m >> shift) as u16;
        if rest > half || (rest == half && r & 1 == 1) {
            r += 1;
        }
        return sign | r;
    }
    let mut r = ((e as u32) << 10 | (mant >> 13)) as u16;
    let rest = mant & 0x1fff;
    if rest > 0x1000 || (rest == 0x1000 && r & 1 == 1) {
        r += 1;
    }
    sign | r
}

/// IEEE half to f32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let mant = (h & 0x3ff) as u32;
    let bits = match exp {
        0 if mant == 0 => sign,
        0 => {
            // Subnormal: normalize.
            let mut e = 127 - 15 + 1;
            let mut m = mant;
            while m & 0x400 == 0 {
                m <<= 1;
                e -= 1;
            }
            sign | (e as u32) << 23 | (m & 0x3ff) << 13
        }
        0x1f => sign | 0x7f80_0000 | mant << 13,
        _ => sign | (exp + 127 - 15) << 23 | mant << 13,
    };
    f32::from_bits(bits)
}

/// f32 to bfloat16, rounding to nearest even.
pub fn f32_to_bf16(v: f32) -> u16 {
    let x = v.to_bits();
    if v.is_nan() {
        return ((x >> 16) | 0x40) as u16;
    }
    let round = 0x7fff + ((x >> 16) & 1);
    (x.wrapping_add(round) >> 16) as u16
}

/// bfloat16 to f32 (exact).
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// Writes the elements of a JSON `"data"` value (flat or nested arrays of
/// numbers or booleans) into `out` as `dtype`; `out.len()` must be the
/// tensor's byte length, and the element count must fill it exactly.
pub fn parse_json_data(raw: &str, dtype: DType, out: &mut [u8]) -> Result<(), String> {
    let mut sink = Sink {
        out,
        dtype,
        n: 0,
        depth: 0,
    };
    let mut de = serde_json::Deserializer::from_str(raw);
    (&mut sink)
        .deserialize(&mut de)
        .map_err(|e| e.to_string())?;
    // Nothing may follow the value ("[1]x" is not JSON).
    de.end().map_err(|e| e.to_string())?;
    let want = sink.out.len() / dtype.size_bytes();
    if sink.n != want {
        return Err(format!(
            "data holds {} elements, the shape needs {want}",
            sink.n
        ));
    }
    Ok(())
}

/// Most nesting of `"data"` arrays (the wire's rank limit, plus one).
const DEPTH_MAX: usize = 9;

struct Sink<'a> {
    out: &'a mut [u8],
    dtype: DType,
    n: usize,
    depth: usize,
}

impl Sink<'_> {
    fn slot(&mut self) -> Result<&mut [u8], String> {
        let sz = self.dtype.size_bytes();
        let off = self.n * sz;
        if off + sz > self.out.len() {
            return Err("data holds more elements than the shape".into());
        }
        self.n += 1;
        Ok(&mut self.out[off..off + sz])
    }

    fn put_f64(&mut self, v: f64, integral: bool) -> Result<(), String> {
        let d = self.dtype;
        let int = |lo: f64, hi: f64| -> Result<f64, String> {
            if !integral && v.fract() != 0.0 {
                return Err(format!("{v} is not an integer ({})", d.kserve_name()));
            }
            if v < lo || v > hi {
                return Err(format!("{v} is out of range for {}", d.kserve_name()));
            }
            Ok(v)
        };
        let s = self.slot()?;
        match d {
            DType::F32 => s.copy_from_slice(&(v as f32).to_le_bytes()),
            DType::F64 => s.copy_from_slice(&v.to_le_bytes()),
            DType::F16 => s.copy_from_slice(&f32_to_f16(v as f32).to_le_bytes()),
            DType::BF16 => s.copy_from_slice(&f32_to_bf16(v as f32).to_le_bytes()),
            DType::U8 => s[0] = int(0.0, 255.0)? as u8,
            DType::I8 => s[0] = int(-128.0, 127.0)? as i8 as u8,
            DType::U16 => s.copy_from_slice(&(int(0.0, 65535.0)? as u16).to_le_bytes()),
            DType::I16 => s.copy_from_slice(&(int(-32768.0, 32767.0)? as i16).to_le_bytes()),
            DType::U32 => s.copy_from_slice(&(int(0.0, u32::MAX as f64)? as u32).to_le_bytes()),
            DType::I32 => {
                s.copy_from_slice(&(int(i32::MIN as f64, i32::MAX as f64)? as i32).to_le_bytes())
            }
            DType::I64 => s.copy_from_slice(
                &(int(-9.223_372_036_854_776e18, 9.223_372_036_854_775e18)? as i64).to_le_bytes(),
            ),
            DType::U64 => {
                s.copy_from_slice(&(int(0.0, 1.844_674_407_370_955e19)? as u64).to_le_bytes())
            }
            DType::Bool => s[0] = u8::from(int(0.0, 1.0)? != 0.0),
        }
        Ok(())
    }

    fn put_i64(&mut self, v: i64) -> Result<(), String> {
        match self.dtype {
            DType::I64 => {
                let s = self.slot()?;
                s.copy_from_slice(&v.to_le_bytes());
                Ok(())
            }
            DType::U64 if v >= 0 => {
                let s = self.slot()?;
                s.copy_from_slice(&(v as u64).to_le_bytes());
                Ok(())
            }
            _ => self.put_f64(v as f64, true),
        }
    }

    fn put_u64(&mut self, v: u64) -> Result<(), String> {
        match self.dtype {
            DType::U64 => {
                let s = self.slot()?;
                s.copy_from_slice(&v.to_le_bytes());
                Ok(())
            }
            DType::I64 if v <= i64::MAX as u64 => {
                let s = self.slot()?;
                s.copy_from_slice(&(v as i64).to_le_bytes());
                Ok(())
            }
            _ => self.put_f64(v as f64, true),
        }
    }
}

impl<'de> DeserializeSeed<'de> for &mut Sink<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for &mut Sink<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of numbers or booleans")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if self.depth >= DEPTH_MAX {
            return Err(de::Error::custom("data is nested too deeply"));
        }
        self.depth += 1;
        while seq.next_element_seed(&mut *self)?.is_some() {}
        self.depth -= 1;
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        if self.dtype != DType::Bool {
            return Err(E::custom(format!(
                "a boolean in {} data",
                self.dtype.kserve_name()
            )));
        }
        let s = self.slot().map_err(E::custom)?;
        s[0] = u8::from(v);
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.put_i64(v).map_err(E::custom)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.put_u64(v).map_err(E::custom)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.put_f64(v, false).map_err(E::custom)
    }
}

/// Appends the elements of `data` (a tensor of `dtype`) to `out` as a
/// flat JSON array.
pub fn write_json_data(out: &mut Vec<u8>, dtype: DType, data: &[u8]) {
    let sz = dtype.size_bytes();
    out.push(b'[');
    let mut ibuf = itoa::Buffer::new();
    let mut fbuf = ryu::Buffer::new();
    for (i, e) in data.chunks_exact(sz).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let mut float = |v: f64, narrow: Option<f32>| {
            if !v.is_finite() {
                // JSON has no NaN or infinity.
                out.extend_from_slice(b"null");
            } else if let Some(f) = narrow {
                out.extend_from_slice(fbuf.format_finite(f).as_bytes());
            } else {
                out.extend_from_slice(fbuf.format_finite(v).as_bytes());
            }
        };
        match dtype {
            DType::F32 => {
                let f = f32::from_le_bytes([e[0], e[1], e[2], e[3]]);
                float(f as f64, Some(f));
            }
            DType::F64 => float(f64::from_le_bytes(e.try_into().unwrap_or([0; 8])), None),
            DType::F16 => {
                let f = f16_to_f32(u16::from_le_bytes([e[0], e[1]]));
                float(f as f64, Some(f));
            }
            DType::BF16 => {
                let f = bf16_to_f32(u16::from_le_bytes([e[0], e[1]]));
                float(f as f64, Some(f));
            }
            DType::Bool => out.extend_from_slice(if e[0] != 0 { b"true" } else { b"false" }),
            DType::U8 => out.extend_from_slice(ibuf.format(e[0]).as_bytes()),
            DType::I8 => out.extend_from_slice(ibuf.format(e[0] as i8).as_bytes()),
            DType::U16 => {
                out.extend_from_slice(ibuf.format(u16::from_le_bytes([e[0], e[1]])).as_bytes())
            }
            DType::I16 => {
                out.extend_from_slice(ibuf.format(i16::from_le_bytes([e[0], e[1]])).as_bytes())
            }
            DType::U32 => out.extend_from_slice(
                ibuf.format(u32::from_le_bytes([e[0], e[1], e[2], e[3]]))
                    .as_bytes(),
            ),
            DType::I32 => out.extend_from_slice(
                ibuf.format(i32::from_le_bytes([e[0], e[1], e[2], e[3]]))
                    .as_bytes(),
            ),
            DType::U64 => out.extend_from_slice(
                ibuf.format(u64::from_le_bytes(e.try_into().unwrap_or([0; 8])))
                    .as_bytes(),
            ),
            DType::I64 => out.extend_from_slice(
                ibuf.format(i64::from_le_bytes(e.try_into().unwrap_or([0; 8])))
                    .as_bytes(),
            ),
        }
    }
    out.push(b']');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for &d in DType::ALL {
            assert_eq!(DType::from_kserve(d.kserve_name()), Some(d));
        }
        assert_eq!(DType::from_kserve("BYTES"), None);
    }

    #[test]
    fn nested_json_fills_the_tensor() {
        let mut out = [0u8; 16];
        parse_json_data("[[1, 2.5], [-3, 4e0]]", DType::F32, &mut out).unwrap();
        let v: Vec<f32> = out
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(v, [1.0, 2.5, -3.0, 4.0]);
        let mut j = Vec::new();
        write_json_data(&mut j, DType::F32, &out);
        assert_eq!(std::str::from_utf8(&j).unwrap(), "[1.0,2.5,-3.0,4.0]");
    }

    #[test]
    fn counts_and_ranges_are_checked() {
        let mut out = [0u8; 8];
        assert!(
            parse_json_data("[1,2,3]", DType::F32, &mut out)
                .unwrap_err()
                .contains("more elements")
        );
        assert!(
            parse_json_data("[1]", DType::F32, &mut out)
                .unwrap_err()
                .contains("needs 2")
        );
        let mut b = [0u8; 2];
        assert!(
            parse_json_data("[1, 300]", DType::U8, &mut b)
                .unwrap_err()
                .contains("range")
        );
        assert!(
            parse_json_data("[1.5, 3]", DType::I8, &mut b)
                .unwrap_err()
                .contains("integer")
        );
        assert!(parse_json_data("[true, \"x\"]", DType::Bool, &mut b).is_err());
        assert!(parse_json_data("[1, 0] [", DType::U8, &mut b).is_err());
        parse_json_data("[true, false]", DType::Bool, &mut b).unwrap();
        assert_eq!(b, [1, 0]);
        let mut i = [0u8; 8];
        parse_json_data("[-9223372036854775808]", DType::I64, &mut i).unwrap();
        assert_eq!(i64::from_le_bytes(i), i64::MIN);
    }

    #[test]
    fn halves_convert_exactly_where_they_can() {
        for v in [0.0f32, 1.0, -2.5, 65504.0, 6.1035156e-5, 5.9604645e-8] {
            assert_eq!(f16_to_f32(f32_to_f16(v)), v, "{v}");
        }
        for v in [0.0f32, 1.0, -2.5, 65536.0, 6.1035156e-5, 0.15625] {
            let b = f32_to_bf16(v);
            assert_eq!(b, (v.to_bits() >> 16) as u16, "{v} is exact in bf16");
            assert_eq!(bf16_to_f32(b), v);
        }
        // Round to nearest: 65504 lies nearer 65536 than 65280 in bf16.
        assert_eq!(bf16_to_f32(f32_to_bf16(65504.0)), 65536.0);
        assert_eq!(f32_to_f16(1e6), 0x7c00);
        assert!(f16_to_f32(f32_to_f16(f32::NAN)).is_nan());
    }
}
