//! The few protobuf wire-format primitives an ONNX model needs.
//!
//! Fields are written in the order the caller emits them; the ONNX writer
//! emits them in field-number order, as protobuf serializers do, so the output
//! is deterministic.

/// Wire types of the protobuf encoding.
const WIRE_VARINT: u8 = 0;
const WIRE_LEN: u8 = 2;
const WIRE_FIXED32: u8 = 5;

/// One message being encoded.
#[derive(Debug, Default, Clone)]
pub struct Msg {
    buf: Vec<u8>,
}

impl Msg {
    pub fn new() -> Msg {
        Msg::default()
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    fn raw_varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    fn key(&mut self, field: u32, wire: u8) {
        self.raw_varint(((field as u64) << 3) | wire as u64);
    }

    /// An `int64`/`int32`/enum field. Negative values take ten bytes, as in
    /// protobuf (sign-extended two's complement).
    pub fn int(&mut self, field: u32, v: i64) -> &mut Msg {
        self.key(field, WIRE_VARINT);
        self.raw_varint(v as u64);
        self
    }

    pub fn bytes(&mut self, field: u32, v: &[u8]) -> &mut Msg {
        self.key(field, WIRE_LEN);
        self.raw_varint(v.len() as u64);
        self.buf.extend_from_slice(v);
        self
    }

    pub fn string(&mut self, field: u32, v: &str) -> &mut Msg {
        self.bytes(field, v.as_bytes())
    }

    pub fn msg(&mut self, field: u32, v: &Msg) -> &mut Msg {
        self.bytes(field, &v.buf)
    }

    pub fn float(&mut self, field: u32, v: f32) -> &mut Msg {
        self.key(field, WIRE_FIXED32);
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_match_the_protobuf_spec() {
        // The spec's own example: field 1 = 150 encodes as 08 96 01.
        assert_eq!(
            Msg::new().int(1, 150).clone().into_bytes(),
            [0x08, 0x96, 0x01]
        );
        // -1 is ten bytes of sign extension.
        let neg = Msg::new().int(1, -1).clone().into_bytes();
        assert_eq!(neg.len(), 11);
        assert_eq!(neg[10], 0x01);
        // Field 2 "testing" from the spec: 12 07 74 65 73 74 69 6e 67.
        assert_eq!(
            Msg::new().string(2, "testing").clone().into_bytes(),
            b"\x12\x07testing"
        );
        assert_eq!(
            Msg::new().float(2, 1.0).clone().into_bytes(),
            [0x15, 0, 0, 0x80, 0x3f]
        );
    }
}
