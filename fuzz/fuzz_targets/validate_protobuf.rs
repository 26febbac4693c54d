//! `ProtobufSchema::validate` on arbitrary bytes against a few fixed schemas
//! (the first input byte picks one). Never panics; an error's offset is
//! inside the input; an accepted message concatenated with itself is
//! accepted too (the wire format merges concatenated messages).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sluice_validate::Reference;
use sluice_validate::protobuf::ProtobufSchema;

const PROTO3: &str = r#"
syntax = "proto3";
package fz;
import "google/protobuf/timestamp.proto";
import "common.proto";
message Top {
  int32 i32 = 1;
  sint64 s64 = 2;
  bool b = 3;
  fixed32 fx32 = 4;
  double d = 5;
  string s = 6;
  bytes by = 7;
  Color color = 8;
  repeated int64 r_i64 = 9;
  repeated float r_f = 10;
  repeated string r_s = 11;
  Inner inner = 12;
  repeated Inner r_inner = 13;
  map<string, Inner> m = 14;
  google.protobuf.Timestamp ts = 15;
  Top next = 16;
  common.Money money = 17;
  uint64 far = 536870911;
}
message Inner { string name = 1; repeated uint64 vals = 2; Inner child = 3; }
enum Color { RED = 0; GREEN = 1; }
"#;

const COMMON: &str = r#"
syntax = "proto3";
package common;
message Money { string currency = 1; int64 units = 2; }
"#;

const PROTO2: &str = r#"
syntax = "proto2";
package fz2;
message Rec {
  required int32 id = 1;
  optional string name = 2;
  repeated int64 nums = 3 [packed = true];
  optional group G = 4 { required uint32 a = 5; optional Rec rec = 6; }
  repeated group R = 7 { optional fixed64 x = 8; }
  optional Rec next = 9;
  extensions 100 to 200;
}
extend Rec { optional string e_name = 100; repeated sint32 e_nums = 101; }
"#;

fn schemas() -> &'static [ProtobufSchema] {
    static COMPILED: OnceLock<Vec<ProtobufSchema>> = OnceLock::new();
    COMPILED.get_or_init(|| {
        let refs = [Reference {
            name: "common.proto",
            schema: COMMON,
        }];
        vec![
            ProtobufSchema::compile(PROTO3, &refs, None).expect("fixed schema compiles"),
            ProtobufSchema::compile(PROTO3, &refs, Some("fz.Inner"))
                .expect("fixed schema compiles"),
            ProtobufSchema::compile(PROTO2, &[], None).expect("fixed schema compiles"),
        ]
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, section)) = data.split_first() else {
        return;
    };
    let schemas = schemas();
    let schema = &schemas[pick as usize % schemas.len()];
    match schema.validate(section) {
        Ok(()) => {
            let twice = [section, section].concat();
            assert_eq!(schema.validate(&twice), Ok(()));
        }
        Err(e) => assert!(e.offset <= section.len()),
    }
});
