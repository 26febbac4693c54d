//! Differential test against prost-reflect's `DynamicMessage`, an
//! independent encoder/decoder: random messages it encodes must validate,
//! and on mutated encodings our verdict must match its decode.
//!
//! Deliberate, known differences:
//! - proto2 `string` fields: prost-reflect requires UTF-8 in every syntax;
//!   we follow protoc, which requires it only in proto3. So on a proto2
//!   schema prost-reflect may refuse (a UTF-8 error) what we accept.
//! - prost-reflect does not check proto2 `required` fields; we do.
//! - prost-reflect's nesting limit is 100; ours is `limits::DEPTH_MAX`.
//! - prost-reflect does not check the wire type of a map field (it reads
//!   any value as an entry's length); we refuse a map field that is not
//!   length-delimited, as for any other declared field.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use common::Rng;
use prost::Message as _;
use prost::bytes::Bytes;
use prost_reflect::{
    Cardinality, DescriptorPool, DynamicMessage, Kind, MapKey, MessageDescriptor, Value,
};
use sluice_validate::protobuf::ProtobufSchema;

const PROTO3: &str = r#"
syntax = "proto3";
package d3;
import "google/protobuf/timestamp.proto";

message Top {
  int32 i32 = 1;
  int64 i64 = 2;
  uint32 u32 = 3;
  uint64 u64 = 4;
  sint32 s32 = 5;
  sint64 s64 = 6;
  bool b = 7;
  fixed32 fx32 = 8;
  fixed64 fx64 = 9;
  sfixed32 sfx32 = 10;
  sfixed64 sfx64 = 11;
  float f = 12;
  double d = 13;
  string s = 14;
  bytes by = 15;
  Color color = 16;
  repeated int32 r_i32 = 17;
  repeated sint64 r_s64 = 18;
  repeated double r_d = 19;
  repeated fixed32 r_fx32 = 20 [packed = false];
  repeated string r_s = 21;
  repeated bytes r_by = 22;
  repeated Color r_color = 23;
  Inner inner = 24;
  repeated Inner r_inner = 25;
  map<string, Inner> m_inner = 26;
  map<int32, string> m_s = 27;
  map<bool, bytes> m_b = 28;
  google.protobuf.Timestamp ts = 29;
  Top next = 30;
  oneof pick {
    string o_s = 31;
    Inner o_inner = 32;
  }
  optional int32 opt = 33;
  uint64 far = 536870911;
}

message Inner {
  string name = 1;
  repeated uint64 vals = 2;
  Inner child = 3;
}

enum Color {
  RED = 0;
  GREEN = 1;
  BLUE = 2;
}
"#;

const PROTO2: &str = r#"
syntax = "proto2";
package d2;

message Rec {
  required int32 id = 1;
  optional string name = 2;
  repeated int64 nums = 3 [packed = true];
  optional group G = 4 {
    required uint32 a = 5;
    optional string t = 6;
  }
  repeated group R = 7 {
    optional fixed64 x = 8;
  }
  optional Rec next = 9;
  optional Kind kind = 10;
  extensions 100 to 200;
}

enum Kind {
  A = 1;
  B = 2;
}

extend Rec {
  optional string e_name = 100;
  repeated sint32 e_nums = 101;
}
"#;

impl Rng {
    fn int(&mut self) -> u64 {
        match self.below(3) {
            0 => self.below(300),
            1 => [0, u64::MAX, 1 << 63, u32::MAX as u64][self.below(4) as usize],
            _ => self.next() >> self.below(64),
        }
    }
    fn string(&mut self) -> String {
        const CHARS: &[char] = &['a', 'Z', '0', ' ', 'é', '€', '日', '🦀'];
        (0..self.below(6))
            .map(|_| CHARS[self.below(CHARS.len() as u64) as usize])
            .collect()
    }
    fn bytes(&mut self) -> Bytes {
        (0..self.below(6)).map(|_| self.next() as u8).collect()
    }
}

fn scalar(kind: &Kind, rng: &mut Rng, depth: usize) -> Option<Value> {
    Some(match kind {
        Kind::Double => Value::F64(f64::from_bits(rng.next())),
        Kind::Float => Value::F32(f32::from_bits(rng.next() as u32)),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Value::I32(rng.int() as i32),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Value::I64(rng.int() as i64),
        Kind::Uint32 | Kind::Fixed32 => Value::U32(rng.int() as u32),
        Kind::Uint64 | Kind::Fixed64 => Value::U64(rng.int()),
        Kind::Bool => Value::Bool(rng.below(2) == 1),
        Kind::String => Value::String(rng.string()),
        Kind::Bytes => Value::Bytes(rng.bytes()),
        Kind::Enum(e) => {
            let values: Vec<i32> = e.values().map(|v| v.number()).collect();
            Value::EnumNumber(values[rng.below(values.len() as u64) as usize])
        }
        Kind::Message(m) => {
            // Deep down, leave optional messages unset so recursion ends.
            if depth > 3 {
                return None;
            }
            Value::Message(message(m, rng, depth + 1))
        }
    })
}

fn map_key(kind: &Kind, rng: &mut Rng) -> MapKey {
    match scalar(kind, rng, 0).unwrap() {
        Value::Bool(b) => MapKey::Bool(b),
        Value::I32(v) => MapKey::I32(v),
        Value::I64(v) => MapKey::I64(v),
        Value::U32(v) => MapKey::U32(v),
        Value::U64(v) => MapKey::U64(v),
        Value::String(s) => MapKey::String(s),
        other => panic!("not a map key: {other:?}"),
    }
}

/// A random message of `desc`, required fields always set.
fn message(desc: &MessageDescriptor, rng: &mut Rng, depth: usize) -> DynamicMessage {
    let mut m = DynamicMessage::new(desc.clone());
    for f in desc.fields() {
        let required = f.cardinality() == Cardinality::Required;
        if !required && rng.below(3) == 0 {
            continue;
        }
        let kind = f.kind();
        let value = if f.is_map() {
            let entry = kind.as_message().unwrap().clone();
            let (k, v) = (entry.map_entry_key_field(), entry.map_entry_value_field());
            let mut map = HashMap::new();
            for _ in 0..rng.below(3) {
                if let Some(value) = scalar(&v.kind(), rng, depth) {
                    map.insert(map_key(&k.kind(), rng), value);
                }
            }
            Value::Map(map)
        } else if f.is_list() {
            Value::List(
                (0..rng.below(4))
                    .filter_map(|_| scalar(&kind, rng, depth))
                    .collect(),
            )
        } else {
            match scalar(&kind, rng, depth) {
                Some(v) => v,
                None => continue,
            }
        };
        m.set_field(&f, value);
    }
    for ext in desc.extensions() {
        if rng.below(2) == 0 {
            continue;
        }
        let kind = ext.kind();
        let value = if ext.is_list() {
            Value::List(
                (0..rng.below(4))
                    .filter_map(|_| scalar(&kind, rng, depth))
                    .collect(),
            )
        } else {
            scalar(&kind, rng, depth).unwrap()
        };
        m.set_extension(&ext, value);
    }
    m
}

/// The same .proto text compiled for prost-reflect, through protox from a
/// temporary directory.
fn pool(name: &str, text: &str) -> DescriptorPool {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "sluice-validate-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = PathBuf::from(format!("{name}.proto"));
    std::fs::write(dir.join(&file), text).unwrap();
    let set = protox::compile([&file], [&dir]).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    DescriptorPool::from_file_descriptor_set(set).unwrap()
}

fn mutate(bytes: &mut Vec<u8>, rng: &mut Rng) {
    for _ in 0..=rng.below(3) {
        let at = if bytes.is_empty() {
            0
        } else {
            rng.below(bytes.len() as u64) as usize
        };
        match rng.below(7) {
            0 if !bytes.is_empty() => bytes[at] ^= 1 << rng.below(8),
            1 if !bytes.is_empty() => bytes[at] = rng.next() as u8,
            2 => bytes.truncate(at),
            3 => bytes.insert(at, rng.next() as u8),
            4 if !bytes.is_empty() => {
                bytes.remove(at);
            }
            // Splice in a random tag (any number, any wire type) and a few bytes.
            5 => {
                let tag = (rng.below(40) << 3 | rng.below(8)).to_le_bytes();
                let len = 1 + rng.below(4) as usize;
                let at = at.min(bytes.len());
                for (k, b) in tag[..1].iter().chain(&tag[1..len]).enumerate() {
                    bytes.insert(at + k, *b);
                }
            }
            _ => bytes.push(rng.next() as u8),
        }
    }
}

/// Whether the tag at the start of `at` is a map field of `desc`.
fn is_map_tag(desc: &MessageDescriptor, at: &[u8]) -> bool {
    let (mut key, mut shift) = (0u64, 0);
    for &b in at.iter().take(5) {
        key |= u64::from(b & 0x7f) << shift;
        shift += 7;
        if b < 0x80 {
            break;
        }
    }
    desc.get_field((key >> 3) as u32)
        .is_some_and(|f| f.is_map())
}

struct Case {
    desc: MessageDescriptor,
    ours: ProtobufSchema,
    proto2: bool,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            desc: pool("d3", PROTO3).get_message_by_name("d3.Top").unwrap(),
            ours: ProtobufSchema::compile(PROTO3, &[], None).unwrap(),
            proto2: false,
        },
        Case {
            desc: pool("d2", PROTO2).get_message_by_name("d2.Rec").unwrap(),
            ours: ProtobufSchema::compile(PROTO2, &[], None).unwrap(),
            proto2: true,
        },
    ]
}

#[test]
fn messages_encoded_by_prost_reflect_validate() {
    for case in cases() {
        for seed in 0..1500u64 {
            let mut rng = Rng(seed);
            let m = message(&case.desc, &mut rng, 0);
            let bytes = m.encode_to_vec();
            assert_eq!(
                case.ours.validate(&bytes),
                Ok(()),
                "{} seed {seed}: {bytes:?}",
                case.desc.full_name()
            );
            // And prost-reflect reads back what it wrote (not compared by
            // value: random floats include NaN).
            if let Err(e) = DynamicMessage::decode(case.desc.clone(), &bytes[..]) {
                panic!("seed {seed}: prost-reflect cannot read its own encoding: {e}");
            }
        }
    }
}

#[test]
fn mutated_encodings_agree_with_prost_reflect() {
    for case in cases() {
        let (mut both_accept, mut both_refuse, mut known) = (0, 0, 0);
        for seed in 0..4000u64 {
            let mut rng = Rng(seed);
            let mut bytes = message(&case.desc, &mut rng, 0).encode_to_vec();
            mutate(&mut bytes, &mut rng);
            let theirs = DynamicMessage::decode(case.desc.clone(), &bytes[..]);
            match (case.ours.validate(&bytes), theirs) {
                (Ok(()), Ok(_)) => both_accept += 1,
                (Err(_), Err(_)) => both_refuse += 1,
                (Ok(()), Err(e)) => {
                    assert!(
                        case.proto2 && e.to_string().contains("UTF-8"),
                        "{} seed {seed}: we accept what prost-reflect refuses ({e}): {bytes:?}",
                        case.desc.full_name()
                    );
                    known += 1;
                }
                (Err(e), Ok(_)) => {
                    assert!(
                        e.message == "required field missing"
                            || e.message == "nesting deeper than limits::DEPTH_MAX"
                            || (e.message == "wrong wire type for the declared field"
                                && is_map_tag(&case.desc, &bytes[e.offset..])),
                        "{} seed {seed}: we refuse ({e:?}) what prost-reflect accepts: {bytes:?}",
                        case.desc.full_name()
                    );
                    known += 1;
                }
            }
        }
        println!(
            "{}: both accept {both_accept}, both refuse {both_refuse}, known differences {known}",
            case.desc.full_name()
        );
        // Mutations must exercise both verdicts, or the comparison says little.
        assert!(
            both_accept > 200 && both_refuse > 200,
            "{both_accept} {both_refuse}"
        );
    }
}

#[test]
fn random_bytes_agree_with_prost_reflect() {
    let case = &cases()[0];
    let (mut both_accept, mut both_refuse) = (0, 0);
    for seed in 0..20_000u64 {
        let mut rng = Rng(seed);
        let bytes: Vec<u8> = (0..rng.below(24)).map(|_| rng.next() as u8).collect();
        let ours = case.ours.validate(&bytes);
        let theirs = DynamicMessage::decode(case.desc.clone(), &bytes[..]);
        assert_eq!(
            ours.is_ok(),
            theirs.is_ok(),
            "seed {seed}: ours {ours:?}, theirs {theirs:?}: {bytes:?}"
        );
        if ours.is_ok() {
            both_accept += 1;
        } else {
            both_refuse += 1;
        }
    }
    println!("random bytes: both accept {both_accept}, both refuse {both_refuse}");
    assert!(
        both_accept > 100 && both_refuse > 100,
        "{both_accept} {both_refuse}"
    );
}
