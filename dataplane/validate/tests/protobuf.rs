//! Protobuf validator: schemas compiled from .proto text with protox, inputs
//! encoded by hand (the independent encoder cross-check is in
//! protobuf_differential.rs).
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use sluice_validate::limits::DEPTH_MAX;
use sluice_validate::protobuf::{ProtobufSchema, SCHEMA_FILE_NAME};
use sluice_validate::{Invalid, Reference};

const SHOP: &str = r#"
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";

message Order {
  int64 id = 1;
  string customer = 2;
  repeated int32 qty = 3;
  repeated double prices = 4;
  Item item = 5;
  repeated Item items = 6;
  map<string, int64> tags = 7;
  google.protobuf.Timestamp at = 8;
  bytes blob = 9;
  fixed32 f32 = 10;
  sfixed64 f64 = 11;
  Status status = 12;
  bool ok = 13;
  Order child = 14;
  float ratio = 2000;

  message Item {
    string sku = 1;
    uint32 count = 2;
  }
  enum Status {
    UNKNOWN = 0;
    PAID = 1;
  }
}

message Other {
  string x = 1;
}
"#;

const LEGACY: &str = r#"
syntax = "proto2";
package legacy;

message Rec {
  required int32 id = 1;
  required string name = 2;
  optional bytes data = 3;
  optional group Extra = 4 {
    optional int32 a = 5;
    required int32 b = 6;
  }
  repeated int32 nums = 7 [packed = true];
  repeated fixed64 fx = 8;
  extensions 100 to 199;
}

extend Rec {
  optional int64 ext = 100;
}
"#;

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const SGROUP: u8 = 3;
const EGROUP: u8 = 4;
const FIXED32: u8 = 5;

fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        if v < 0x80 {
            out.push(v as u8);
            return out;
        }
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
}

fn key(number: u32, wire: u8) -> Vec<u8> {
    varint(u64::from(number) << 3 | u64::from(wire))
}

fn field_varint(number: u32, v: u64) -> Vec<u8> {
    [key(number, VARINT), varint(v)].concat()
}

fn field_len(number: u32, body: &[u8]) -> Vec<u8> {
    [key(number, LEN), varint(body.len() as u64), body.to_vec()].concat()
}

fn shop() -> ProtobufSchema {
    ProtobufSchema::compile(SHOP, &[], None).unwrap()
}

fn legacy() -> ProtobufSchema {
    ProtobufSchema::compile(LEGACY, &[], None).unwrap()
}

fn refused(s: &ProtobufSchema, input: &[u8]) -> Invalid {
    s.validate(input).expect_err("input should be refused")
}

fn full_order() -> Vec<u8> {
    let item = [field_len(1, b"sku-1"), field_varint(2, 3)].concat();
    let tag = [field_len(1, b"k"), field_varint(2, 9)].concat();
    let ts = [field_varint(1, 1_700_000_000), field_varint(2, 5)].concat();
    [
        field_varint(1, 42),
        field_len(2, "Ada Lovelace ✓".as_bytes()),
        field_len(3, &[varint(1), varint(300), varint(u64::MAX)].concat()),
        field_len(4, &[1.5f64.to_le_bytes(), 2.5f64.to_le_bytes()].concat()),
        field_len(5, &item),
        field_len(6, &item),
        field_len(6, &[]),
        field_len(7, &tag),
        field_len(8, &ts),
        field_len(9, &[0xff, 0x00]),
        [key(10, FIXED32), 7u32.to_le_bytes().to_vec()].concat(),
        [key(11, FIXED64), (-7i64).to_le_bytes().to_vec()].concat(),
        field_varint(12, 1),
        field_varint(13, 1),
        field_len(14, &field_varint(1, 43)),
        [key(2000, FIXED32), 0.5f32.to_le_bytes().to_vec()].concat(),
    ]
    .concat()
}

#[test]
fn a_full_message_validates() {
    let s = shop();
    assert_eq!(s.message_name(), "shop.Order");
    assert_eq!(s.validate(&full_order()), Ok(()));
    // The empty message is valid (proto3 has no required fields).
    assert_eq!(s.validate(&[]), Ok(()));
}

#[test]
fn packed_and_unpacked_repeated_numerics_are_both_accepted() {
    let s = shop();
    // qty unpacked, prices unpacked, as a parser must accept.
    let unpacked = [
        field_varint(3, 1),
        field_varint(3, 2),
        [key(4, FIXED64), 1.0f64.to_le_bytes().to_vec()].concat(),
    ]
    .concat();
    assert_eq!(s.validate(&unpacked), Ok(()));
    // legacy.nums is declared packed; unpacked still parses.
    let l = legacy();
    let base = [field_varint(1, 1), field_len(2, b"n")].concat();
    assert_eq!(
        l.validate(&[base.clone(), field_varint(7, 5)].concat()),
        Ok(())
    );
    assert_eq!(
        l.validate(&[base.clone(), field_len(7, &varint(5))].concat()),
        Ok(())
    );
    // fx is not declared packed; packed still parses.
    assert_eq!(l.validate(&[base, field_len(8, &[0; 16])].concat()), Ok(()));
    // A singular numeric field does not accept a packed run.
    assert_eq!(
        refused(&s, &field_len(1, &varint(5))),
        Invalid {
            message: "wrong wire type for the declared field",
            offset: 0
        }
    );
}

#[test]
fn packed_runs_must_hold_whole_values() {
    let s = shop();
    let e = refused(&s, &field_len(3, &[0x80, 0x80]));
    assert_eq!(
        e,
        Invalid {
            message: "packed varint runs past its length",
            offset: 2
        }
    );
    assert_eq!(
        refused(&s, &field_len(4, &[0; 12])).message,
        "packed fixed-width run is not a whole number of values"
    );
    assert_eq!(
        refused(&s, &[key(10, LEN), varint(3), vec![0; 3]].concat()).message,
        "wrong wire type for the declared field"
    );
}

#[test]
fn every_wire_level_error_is_named() {
    let s = shop();
    let cases: Vec<(Vec<u8>, &str, usize)> = vec![
        (vec![0x08], "section ends inside a value", 1),
        (vec![0x08, 0x80], "section ends inside a value", 1),
        (
            [key(10, FIXED32), vec![1, 2]].concat(),
            "section ends inside a value",
            1,
        ),
        (
            [key(11, FIXED64), vec![1; 7]].concat(),
            "section ends inside a value",
            1,
        ),
        (vec![0x80], "section ends inside a value", 0),
        (
            [vec![0x08], vec![0xff; 10], vec![0]].concat(),
            "varint longer than 10 bytes",
            1,
        ),
        (
            [vec![0x08], vec![0xff; 9], vec![0x02]].concat(),
            "varint overflows 64 bits",
            1,
        ),
        (varint(1 << 32 | 8), "tag varint exceeds 32 bits", 0),
        (key(1, 6), "wire type 6 or 7 is invalid", 0),
        (key(1, 7), "wire type 6 or 7 is invalid", 0),
        (field_varint(0, 1), "field number 0 is invalid", 0),
        (key(2, LEN), "section ends inside a value", 1),
        (
            [key(2, LEN), varint(10), b"abc".to_vec()].concat(),
            "length runs past the end of the enclosing message",
            1,
        ),
        (key(3, EGROUP), "end-group tag without a start-group", 0),
        (
            [key(20, SGROUP), key(21, EGROUP)].concat(),
            "end-group tag does not match the open group",
            key(20, SGROUP).len(),
        ),
        (key(20, SGROUP), "group has no end-group tag", 2),
        (
            field_varint(2, 1),
            "wrong wire type for the declared field",
            0,
        ),
        (
            field_len(13, b"x"),
            "wrong wire type for the declared field",
            0,
        ),
        (key(5, SGROUP), "wrong wire type for the declared field", 0),
        (
            field_len(2, &[b'a', 0xe2, 0x82]),
            "string is not valid UTF-8",
            2,
        ),
    ];
    for (input, message, offset) in cases {
        assert_eq!(
            s.validate(&input),
            Err(Invalid { message, offset }),
            "input {input:?}"
        );
    }
    // A nested message's bytes must stay within the nested length.
    let item = field_len(5, &[key(1, LEN), varint(4), b"ab".to_vec()].concat());
    let mut outer = item.clone();
    outer.extend_from_slice(b"ab");
    assert_eq!(
        refused(&s, &outer),
        Invalid {
            message: "length runs past the end of the enclosing message",
            offset: 3
        }
    );
    // Map keys of a proto3 map are UTF-8 checked too.
    let entry = [field_len(1, &[0xff]), field_varint(2, 1)].concat();
    assert_eq!(
        refused(&s, &field_len(7, &entry)).message,
        "string is not valid UTF-8"
    );
}

#[test]
fn unknown_fields_are_skipped_by_wire_type() {
    let s = shop();
    let unknown = [
        field_varint(15, u64::MAX),
        [key(16, FIXED64), vec![0; 8]].concat(),
        field_len(17, &[0xff; 5]),
        [key(18, FIXED32), vec![0; 4]].concat(),
        // A group holding fields and a nested group.
        key(19, SGROUP),
        field_varint(1, 1),
        key(20, SGROUP),
        field_len(2, &[0xff]),
        key(20, EGROUP),
        key(19, EGROUP),
        field_varint(1, 7),
    ]
    .concat();
    assert_eq!(s.validate(&unknown), Ok(()));
    // Unknown LEN fields are not parsed, so bad UTF-8 inside is fine.
    assert_eq!(s.validate(&field_len(99, &[0xff])), Ok(()));
}

#[test]
fn proto2_required_fields_groups_and_extensions() {
    let l = legacy();
    assert_eq!(l.message_name(), "legacy.Rec");
    let base = [field_varint(1, 1), field_len(2, b"name")].concat();
    assert_eq!(l.validate(&base), Ok(()));
    // Order does not matter; repeats are fine.
    let reordered = [field_len(2, b"n"), field_varint(1, 1), field_varint(1, 2)].concat();
    assert_eq!(l.validate(&reordered), Ok(()));
    assert_eq!(
        refused(&l, &field_varint(1, 1)),
        Invalid {
            message: "required field missing",
            offset: 2
        }
    );
    assert_eq!(refused(&l, &[]).message, "required field missing");
    // proto2 strings are not required to be UTF-8.
    assert_eq!(
        l.validate(&[field_varint(1, 1), field_len(2, &[0xff])].concat()),
        Ok(())
    );

    // The group holds its own required field b.
    let group = |body: &[u8]| [key(4, SGROUP), body.to_vec(), key(4, EGROUP)].concat();
    let with = |g: Vec<u8>| [base.clone(), g].concat();
    assert_eq!(l.validate(&with(group(&field_varint(6, 1)))), Ok(()));
    assert_eq!(
        l.validate(&with(group(
            &[field_varint(5, 1), field_varint(6, 1)].concat()
        ))),
        Ok(())
    );
    assert_eq!(
        refused(&l, &with(group(&field_varint(5, 1)))).message,
        "required field missing"
    );
    assert_eq!(
        refused(&l, &with([key(4, SGROUP), field_varint(6, 1)].concat())).message,
        "group has no end-group tag"
    );
    assert_eq!(
        refused(
            &l,
            &with([key(4, SGROUP), field_varint(6, 1), key(5, EGROUP)].concat())
        )
        .message,
        "end-group tag does not match the open group"
    );
    assert_eq!(
        refused(&l, &with(field_len(4, &field_varint(6, 1)))).message,
        "wrong wire type for the declared field"
    );
    // The extension is a known field: its wire type is checked.
    assert_eq!(l.validate(&with(field_varint(100, 5))), Ok(()));
    assert_eq!(
        refused(&l, &with(field_len(100, b"x"))).message,
        "wrong wire type for the declared field"
    );
}

#[test]
fn nesting_is_bounded() {
    let s = shop();
    // child -> child -> ... (field 14), each level one more LEN.
    let nest = |levels: usize| {
        let mut m = field_varint(1, 1);
        for _ in 0..levels {
            m = field_len(14, &m);
        }
        m
    };
    assert_eq!(s.validate(&nest(DEPTH_MAX)), Ok(()));
    let e = refused(&s, &nest(DEPTH_MAX + 1));
    assert_eq!(e.message, "nesting deeper than limits::DEPTH_MAX");
    // Unknown groups nest too, and are bounded the same way.
    let groups = |levels: u32| {
        let mut m = Vec::new();
        for n in 0..levels {
            m.extend(key(100 + n, SGROUP));
        }
        for n in (0..levels).rev() {
            m.extend(key(100 + n, EGROUP));
        }
        m
    };
    assert_eq!(s.validate(&groups(DEPTH_MAX as u32)), Ok(()));
    assert_eq!(
        refused(&s, &groups(DEPTH_MAX as u32 + 1)).message,
        "nesting deeper than limits::DEPTH_MAX"
    );
}

#[test]
fn the_message_is_chosen_by_name_or_is_the_first() {
    let other = ProtobufSchema::compile(SHOP, &[], Some("shop.Other")).unwrap();
    assert_eq!(other.message_name(), "shop.Other");
    assert_eq!(other.validate(&field_len(1, b"x")), Ok(()));
    assert_eq!(
        refused(&other, &field_varint(1, 1)).message,
        "wrong wire type for the declared field"
    );
    let item = ProtobufSchema::compile(SHOP, &[], Some(".shop.Order.Item")).unwrap();
    assert_eq!(item.message_name(), "shop.Order.Item");
    assert_eq!(item.validate(&field_varint(2, 1)), Ok(()));
    // Only the messages reachable from the chosen one are in the table.
    assert_eq!(other.message_count(), 1);
    let e = ProtobufSchema::compile(SHOP, &[], Some("shop.Nope")).unwrap_err();
    assert!(e.0.contains("declares no message \"shop.Nope\""), "{e}");
}

#[test]
fn references_resolve_as_imports() {
    let common = r#"
        syntax = "proto3";
        package common;
        message Money { string currency = 1; int64 units = 2; }
    "#;
    let invoice = r#"
        syntax = "proto3";
        package billing;
        import "common/money.proto";
        message Invoice { common.Money total = 1; repeated common.Money lines = 2; }
    "#;
    let refs = [Reference {
        name: "common/money.proto",
        schema: common,
    }];
    let s = ProtobufSchema::compile(invoice, &refs, None).unwrap();
    assert_eq!(s.message_name(), "billing.Invoice");
    let money = [field_len(1, b"EUR"), field_varint(2, 12)].concat();
    assert_eq!(
        s.validate(&[field_len(1, &money), field_len(2, &money)].concat()),
        Ok(())
    );
    assert_eq!(
        refused(&s, &field_len(1, &field_len(1, &[0xff]))).message,
        "string is not valid UTF-8"
    );
    // Without the reference the import fails, naming it.
    let e = ProtobufSchema::compile(invoice, &[], None).unwrap_err();
    assert!(e.0.contains("common/money.proto"), "{e}");
}

#[test]
fn bad_schemas_are_refused() {
    let cases: &[(&str, &[Reference], &str)] = &[
        ("syntax = \"proto3\"; message {", &[], "protobuf schema"),
        (
            "syntax = \"proto3\"; enum E { A = 0; }",
            &[],
            "declares no message",
        ),
        (
            "syntax = \"proto3\"; message M { Missing m = 1; }",
            &[],
            "Missing",
        ),
        (
            "syntax = \"proto3\"; message M {}",
            &[Reference {
                name: SCHEMA_FILE_NAME,
                schema: "",
            }],
            "reserved",
        ),
    ];
    for (text, refs, want) in cases {
        let e = ProtobufSchema::compile(text, refs, None).unwrap_err();
        assert!(e.0.contains(want), "{text}: {e}");
    }
    let fields: String = (1..=65)
        .map(|i| format!("required int32 f{i} = {i};"))
        .collect();
    let e = ProtobufSchema::compile(
        &format!("syntax = \"proto2\"; message M {{ {fields} }}"),
        &[],
        None,
    )
    .unwrap_err();
    assert!(e.0.contains("REQUIRED_FIELDS_MAX"), "{e}");
}

#[test]
fn compiled_schemas_can_be_shared_across_workers() {
    let s = std::sync::Arc::new(shop());
    let worker = {
        let s = s.clone();
        std::thread::spawn(move || s.validate(&full_order()))
    };
    assert_eq!(worker.join().unwrap(), Ok(()));
}

#[test]
fn schemas_are_bounded_in_nodes() {
    // A chain of messages M0 -> M1 -> ... : each one message and one field.
    let chain: String = (0..8200)
        .map(|i| format!("message M{i} {{ M{} next = 1; }}", i + 1))
        .collect();
    let text = format!("syntax = \"proto3\"; {chain} message M8200 {{}}");
    let e = ProtobufSchema::compile(&text, &[], None).unwrap_err();
    assert!(e.0.contains("limits::NODES_MAX"), "{e}");
}
