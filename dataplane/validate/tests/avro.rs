//! Avro validator: schemas compiled from JSON text, inputs encoded by hand
//! (the independent encoder cross-check is in avro_differential.rs).
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use sluice_validate::avro::{AvroSchema, ITEMS_MAX};
use sluice_validate::limits::DEPTH_MAX;
use sluice_validate::{Invalid, Reference};

fn schema(text: &str) -> AvroSchema {
    AvroSchema::compile(text, &[]).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn compile_err(text: &str) -> String {
    AvroSchema::compile(text, &[]).unwrap_err().0
}

/// Zigzag varint of a long, as the Avro spec encodes it.
fn long(v: i64) -> Vec<u8> {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut out = Vec::new();
    loop {
        if z < 0x80 {
            out.push(z as u8);
            return out;
        }
        out.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
}

fn string(s: &[u8]) -> Vec<u8> {
    let mut out = long(s.len() as i64);
    out.extend_from_slice(s);
    out
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn refused(s: &AvroSchema, input: &[u8]) -> Invalid {
    s.validate(input).expect_err("input should be refused")
}

#[test]
fn primitives_accept_their_encodings() {
    assert_eq!(schema(r#""null""#).validate(&[]), Ok(()));
    let b = schema(r#""boolean""#);
    assert_eq!(b.validate(&[0]), Ok(()));
    assert_eq!(b.validate(&[1]), Ok(()));
    let i = schema(r#""int""#);
    for v in [0, 1, -1, 63, -64, 64, i32::MAX as i64, i32::MIN as i64] {
        assert_eq!(i.validate(&long(v)), Ok(()), "int {v}");
    }
    let l = schema(r#"{"type": "long"}"#);
    for v in [0, -1, i64::MAX, i64::MIN, 1 << 40] {
        assert_eq!(l.validate(&long(v)), Ok(()), "long {v}");
    }
    assert_eq!(schema(r#""float""#).validate(&1.5f32.to_le_bytes()), Ok(()));
    assert_eq!(
        schema(r#""double""#).validate(&1.5f64.to_le_bytes()),
        Ok(())
    );
    assert_eq!(schema(r#""bytes""#).validate(&string(&[0xff, 0])), Ok(()));
    assert_eq!(
        schema(r#""string""#).validate(&string("héllo".as_bytes())),
        Ok(())
    );
    assert_eq!(schema(r#""string""#).validate(&[0]), Ok(()));
}

#[test]
fn truncated_values_are_refused() {
    let cases: &[(&str, &[u8])] = &[
        (r#""int""#, &[]),
        (r#""int""#, &[0x80]),
        (r#""long""#, &[0xff, 0xff]),
        (r#""float""#, &[0, 0, 0]),
        (r#""double""#, &[0; 7]),
        (r#""boolean""#, &[]),
        (r#"{"type": "fixed", "name": "F", "size": 4}"#, &[1, 2, 3]),
    ];
    for (text, input) in cases {
        let e = refused(&schema(text), input);
        assert_eq!(e.message, "section ends inside a value", "{text} {input:?}");
    }
    // The offset is where the value starts: after the record's first field.
    let r = schema(
        r#"{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"b","type":"double"}]}"#,
    );
    assert_eq!(
        r.validate(&[2, 0, 0, 0]),
        Err(Invalid {
            message: "section ends inside a value",
            offset: 1
        })
    );
}

#[test]
fn varints_are_bounded() {
    let l = schema(r#""long""#);
    assert_eq!(
        refused(&l, &[0xff; 11]).message,
        "varint longer than 10 bytes"
    );
    let mut over = vec![0xff; 9];
    over.push(0x02);
    assert_eq!(refused(&l, &over).message, "varint overflows 64 bits");
    // Non-minimal but within 10 bytes is still a long.
    assert_eq!(l.validate(&[0x80, 0x80, 0x00]), Ok(()));

    let i = schema(r#""int""#);
    assert_eq!(
        refused(&i, &[0x80, 0x80, 0x80, 0x80, 0x80, 0x00]).message,
        "int varint longer than 5 bytes"
    );
    assert_eq!(
        refused(&i, &long(i32::MAX as i64 + 1)).message,
        "int out of 32-bit range"
    );
    assert_eq!(
        refused(&i, &long(i32::MIN as i64 - 1)).message,
        "int out of 32-bit range"
    );
}

#[test]
fn lengths_and_strings() {
    let b = schema(r#""bytes""#);
    assert_eq!(refused(&b, &long(-1)).message, "negative length");
    assert_eq!(
        refused(&b, &cat(&[&long(5), b"ab"])),
        Invalid {
            message: "length runs past the end of the section",
            offset: 0
        }
    );
    // A length near i64::MAX must not overflow anything.
    assert_eq!(
        refused(&b, &long(i64::MAX)).message,
        "length runs past the end of the section"
    );
    let s = schema(r#""string""#);
    assert_eq!(
        refused(&s, &string(&[b'a', 0xc3])),
        Invalid {
            message: "string is not valid UTF-8",
            offset: 1
        }
    );
    // Bytes carry anything.
    assert_eq!(b.validate(&string(&[b'a', 0xc3])), Ok(()));
}

#[test]
fn booleans_are_zero_or_one() {
    let b = schema(r#""boolean""#);
    assert_eq!(refused(&b, &[2]).message, "boolean byte is neither 0 nor 1");
    let arr = schema(r#"{"type":"array","items":"boolean"}"#);
    assert_eq!(arr.validate(&[6, 1, 0, 1, 0]), Ok(()));
    assert_eq!(
        refused(&arr, &[6, 1, 7, 1, 0]),
        Invalid {
            message: "boolean byte is neither 0 nor 1",
            offset: 2
        }
    );
}

#[test]
fn enums_check_the_symbol_index() {
    let e = schema(r#"{"type":"enum","name":"Color","symbols":["RED","GREEN","BLUE"]}"#);
    for i in 0..3 {
        assert_eq!(e.validate(&long(i)), Ok(()));
    }
    assert_eq!(
        refused(&e, &long(3)).message,
        "enum symbol index out of range"
    );
    assert_eq!(
        refused(&e, &long(-1)).message,
        "enum symbol index out of range"
    );
}

#[test]
fn unions_check_the_branch_and_validate_it() {
    let u = schema(r#"["null", "string", {"type":"array","items":"int"}]"#);
    assert_eq!(u.validate(&long(0)), Ok(()));
    assert_eq!(u.validate(&cat(&[&long(1), &string(b"x")])), Ok(()));
    assert_eq!(
        u.validate(&cat(&[&long(2), &long(1), &long(7), &long(0)])),
        Ok(())
    );
    assert_eq!(
        refused(&u, &long(3)).message,
        "union branch index out of range"
    );
    assert_eq!(
        refused(&u, &long(-1)).message,
        "union branch index out of range"
    );
    assert_eq!(
        refused(&u, &cat(&[&long(1), &string(&[0xff])])).message,
        "string is not valid UTF-8"
    );
    // A union's branch index is an int.
    assert_eq!(
        refused(&u, &long(1 << 33)).message,
        "int out of 32-bit range"
    );
    assert_eq!(
        refused(&u, &long(1 << 40)).message,
        "int varint longer than 5 bytes"
    );
}

#[test]
fn arrays_and_maps_in_blocks() {
    let a = schema(r#"{"type":"array","items":"long"}"#);
    // Two blocks, then the terminating zero.
    let two_blocks = cat(&[&long(2), &long(1), &long(-5), &long(1), &long(9), &long(0)]);
    assert_eq!(a.validate(&two_blocks), Ok(()));
    assert_eq!(a.validate(&long(0)), Ok(()));
    // No terminating zero.
    assert_eq!(
        refused(&a, &cat(&[&long(1), &long(1)])).message,
        "section ends inside a value"
    );
    // Negative count: the byte size follows and must match the items.
    let items = cat(&[&long(300), &long(-2)]);
    let sized = cat(&[&long(-2), &long(items.len() as i64), &items, &long(0)]);
    assert_eq!(a.validate(&sized), Ok(()));
    let wrong = cat(&[
        &long(-2),
        &long(items.len() as i64 + 1),
        &items,
        &long(0),
        &[0],
    ]);
    assert_eq!(
        refused(&a, &wrong),
        Invalid {
            message: "block byte size does not match its items",
            offset: 0
        }
    );
    assert_eq!(
        refused(&a, &cat(&[&long(-1), &long(-1), &long(1), &long(0)])).message,
        "block byte size is negative"
    );
    assert_eq!(
        refused(&a, &cat(&[&long(-1), &long(50), &long(1), &long(0)])).message,
        "block byte size runs past the end of the section"
    );
    // i64::MIN as a count cannot be negated into a count of items.
    assert_eq!(
        refused(&a, &cat(&[&long(i64::MIN), &long(0)])).message,
        "more than ITEMS_MAX array or map items"
    );

    let m = schema(r#"{"type":"map","values":"int"}"#);
    let ok = cat(&[
        &long(2),
        &string(b"a"),
        &long(1),
        &string(b"b"),
        &long(2),
        &long(0),
    ]);
    assert_eq!(m.validate(&ok), Ok(()));
    let bad_key = cat(&[&long(1), &string(&[0xfe]), &long(1), &long(0)]);
    assert_eq!(
        refused(&m, &bad_key),
        Invalid {
            message: "map key is not valid UTF-8",
            offset: 2
        }
    );
    let sized = cat(&[&long(-1), &long(3), &string(b"k"), &long(4), &long(0)]);
    assert_eq!(m.validate(&sized), Ok(()));

    // Fixed-width items are checked by one bounds check per block.
    let d = schema(r#"{"type":"array","items":"double"}"#);
    let mut three = long(3);
    three.extend_from_slice(&[0; 24]);
    three.extend_from_slice(&long(0));
    assert_eq!(d.validate(&three), Ok(()));
    assert_eq!(
        refused(&d, &three[..20]).message,
        "section ends inside a value"
    );
}

#[test]
fn items_of_zero_byte_types_are_bounded() {
    // An array of nulls declares items that cost no input.
    let a = schema(r#"{"type":"array","items":"null"}"#);
    assert_eq!(
        a.validate(&cat(&[&long(ITEMS_MAX as i64), &long(0)])),
        Ok(())
    );
    assert_eq!(
        refused(&a, &cat(&[&long(ITEMS_MAX as i64 + 1), &long(0)])).message,
        "more than ITEMS_MAX array or map items"
    );
    // The limit is over the whole section, not per block.
    let halves = cat(&[
        &long(ITEMS_MAX as i64 / 2),
        &long(ITEMS_MAX as i64 / 2 + 1),
        &long(0),
    ]);
    assert_eq!(
        refused(&a, &halves),
        Invalid {
            message: "more than ITEMS_MAX array or map items",
            offset: long(ITEMS_MAX as i64 / 2).len()
        }
    );
    // 2^62 items of an empty record, in a few bytes.
    let r = schema(
        r#"{"type":"array","items":{"type":"record","name":"E","fields":[{"name":"n","type":"null"}]}}"#,
    );
    assert_eq!(
        refused(&r, &cat(&[&long(1 << 62), &long(0)])).message,
        "more than ITEMS_MAX array or map items"
    );
    // Zero-byte items under a negative count: the byte size must be 0.
    assert_eq!(r.validate(&cat(&[&long(-5), &long(0), &long(0)])), Ok(()));
    assert_eq!(
        refused(&r, &cat(&[&long(-5), &long(1), &[0], &long(0)])).message,
        "block byte size does not match its items"
    );
}

#[test]
fn records_fixed_and_trailing_bytes() {
    let r = schema(
        r#"{"type":"record","name":"User","namespace":"com.acme","fields":[
            {"name":"id","type":"long"},
            {"name":"name","type":"string"},
            {"name":"nothing","type":"null"},
            {"name":"hash","type":{"type":"fixed","name":"Md5","size":16}},
            {"name":"score","type":["null","float"]}
        ]}"#,
    );
    let mut ok = cat(&[&long(42), &string(b"ada")]);
    ok.extend_from_slice(&[7; 16]);
    ok.extend_from_slice(&long(1));
    ok.extend_from_slice(&2.5f32.to_le_bytes());
    assert_eq!(r.validate(&ok), Ok(()));
    let mut trailing = ok.clone();
    trailing.push(0);
    assert_eq!(
        refused(&r, &trailing),
        Invalid {
            message: "trailing bytes after the value",
            offset: ok.len()
        }
    );
    assert_eq!(
        refused(&r, &ok[..ok.len() - 1]).message,
        "section ends inside a value"
    );
    assert_eq!(refused(&r, &[]).message, "section ends inside a value");
    // A schema of null takes nothing, so any byte is trailing.
    assert_eq!(
        refused(&schema(r#""null""#), &[0]).message,
        "trailing bytes after the value"
    );
}

#[test]
fn recursive_linked_list() {
    let list = schema(
        r#"{"type":"record","name":"LongList","fields":[
            {"name":"value","type":"long"},
            {"name":"next","type":["null","LongList"]}
        ]}"#,
    );
    // 1 -> 2 -> 3 -> null
    let three = cat(&[&long(1), &long(1), &long(2), &long(1), &long(3), &long(0)]);
    assert_eq!(list.validate(&three), Ok(()));
    assert_eq!(
        refused(&list, &cat(&[&long(1), &long(2)])).message,
        "union branch index out of range"
    );

    let chain = |n: usize| {
        let mut out = Vec::new();
        for i in 0..n {
            out.extend(long(i as i64));
            out.extend(long(if i + 1 == n { 0 } else { 1 }));
        }
        out
    };
    assert_eq!(list.validate(&chain(DEPTH_MAX)), Ok(()));
    let deep = chain(DEPTH_MAX + 1);
    let e = refused(&list, &deep);
    assert_eq!(e.message, "nesting deeper than limits::DEPTH_MAX");
    // The record that does not fit is the last (value, branch) pair.
    assert_eq!(e.offset, deep.len() - long(DEPTH_MAX as i64).len() - 1);
    // A record that contains itself unconditionally has no finite value.
    let endless = schema(r#"{"type":"record","name":"R","fields":[{"name":"r","type":"R"}]}"#);
    assert_eq!(
        refused(&endless, &[]).message,
        "nesting deeper than limits::DEPTH_MAX"
    );
}

#[test]
fn mutually_recursive_tree_through_arrays_and_maps() {
    let tree = schema(
        r#"{"type":"record","name":"Tree","namespace":"t","fields":[
            {"name":"label","type":"string"},
            {"name":"kids","type":{"type":"array","items":"Tree"}},
            {"name":"attrs","type":{"type":"map","values":"t.Tree"}}
        ]}"#,
    );
    let leaf = |l: &[u8]| cat(&[&string(l), &long(0), &long(0)]);
    let root = cat(&[
        &string(b"root"),
        &long(2),
        &leaf(b"a"),
        &leaf(b"b"),
        &long(0),
        &long(1),
        &string(b"k"),
        &leaf(b"c"),
        &long(0),
    ]);
    assert_eq!(tree.validate(&root), Ok(()));
    assert_eq!(
        refused(&tree, &root[..root.len() - 1]).message,
        "section ends inside a value"
    );
}

#[test]
fn namespaces_resolve_per_the_spec() {
    // Inner types inherit the enclosing namespace; short names resolve in it,
    // full names anywhere; a dotted name ignores "namespace".
    let s = schema(
        r#"{"type":"record","name":"Outer","namespace":"a.b","fields":[
            {"name":"e","type":{"type":"enum","name":"E","symbols":["X"]}},
            {"name":"e2","type":"E"},
            {"name":"e3","type":"a.b.E"},
            {"name":"f","type":{"type":"fixed","name":"c.F","namespace":"ignored","size":1}},
            {"name":"f2","type":"c.F"},
            {"name":"g","type":{"type":"record","name":"G","namespace":"","fields":[{"name":"x","type":"int"}]}},
            {"name":"g2","type":"G"}
        ]}"#,
    );
    assert_eq!(s.validate(&[0, 0, 0, 9, 9, 2, 4]), Ok(()));
    // "F" alone is not visible from namespace a.b.
    let e = compile_err(
        r#"{"type":"record","name":"Outer","namespace":"a.b","fields":[
            {"name":"f","type":{"type":"fixed","name":"c.F","size":1}},
            {"name":"f2","type":"F"}]}"#,
    );
    assert!(e.contains("unknown type name \"F\""), "{e}");
    assert!(e.contains("/fields/1/type"), "{e}");
}

#[test]
fn logical_types_validate_as_their_underlying_type() {
    let s = schema(
        r#"{"type":"record","name":"L","fields":[
            {"name":"d","type":{"type":"int","logicalType":"date"}},
            {"name":"ts","type":{"type":"long","logicalType":"timestamp-micros"}},
            {"name":"u","type":{"type":"string","logicalType":"uuid"}},
            {"name":"dec","type":{"type":"bytes","logicalType":"decimal","precision":4,"scale":2}},
            {"name":"dur","type":{"type":"fixed","name":"Dur","size":12,"logicalType":"duration"}}
        ]}"#,
    );
    let mut ok = cat(&[
        &long(19000),
        &long(1 << 50),
        &string(b"not-a-uuid"),
        &string(&[1, 2]),
    ]);
    ok.extend_from_slice(&[0; 12]);
    assert_eq!(s.validate(&ok), Ok(()));
    let mut big_date = cat(&[&long(1 << 33), &long(0), &long(0), &long(0)]);
    big_date.extend_from_slice(&[0; 12]);
    assert_eq!(refused(&s, &big_date).message, "int out of 32-bit range");
}

#[test]
fn references_define_named_types() {
    let address = r#"{"type":"record","name":"Address","namespace":"com.acme","fields":[
        {"name":"city","type":"string"}]}"#;
    let country = r#"{"type":"enum","name":"com.acme.Country","symbols":["FR","JP"]}"#;
    let refs = [
        Reference {
            name: "com.acme.Address",
            schema: address,
        },
        Reference {
            name: "com.acme.Country",
            schema: country,
        },
    ];
    let user = r#"{"type":"record","name":"User","namespace":"com.acme","fields":[
        {"name":"home","type":"Address"},
        {"name":"work","type":["null","com.acme.Address"]},
        {"name":"country","type":"Country"}]}"#;
    let s = AvroSchema::compile(user, &refs).unwrap();
    let ok = cat(&[&string(b"Lyon"), &long(1), &string(b"Kyoto"), &long(1)]);
    assert_eq!(s.validate(&ok), Ok(()));
    assert_eq!(
        refused(&s, &cat(&[&string(b"Lyon"), &long(0), &long(2)])).message,
        "enum symbol index out of range"
    );
    // Without the references the names are unknown.
    assert!(compile_err(user).contains("unknown type name \"Address\""));
    // A broken reference is named in the error.
    let e = AvroSchema::compile(
        user,
        &[Reference {
            name: "com.acme.Address",
            schema: "{",
        }],
    )
    .unwrap_err()
    .0;
    assert!(
        e.contains("com.acme.Address") && e.contains("not valid JSON"),
        "{e}"
    );
}

#[test]
fn bad_schemas_are_refused_with_where() {
    let cases: &[(&str, &str)] = &[
        ("{", "not valid JSON"),
        ("42", "a type must be"),
        (r#""Nope""#, "unknown type name \"Nope\""),
        (
            r#"{"type":"record","name":"R"}"#,
            "record has no \"fields\" array",
        ),
        (
            r#"{"type":"record","fields":[]}"#,
            "named type has no \"name\"",
        ),
        (
            r#"{"type":"record","name":"1R","fields":[]}"#,
            "not a valid full name",
        ),
        (
            r#"{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"a","type":"int"}]}"#,
            "field \"a\" appears twice",
        ),
        (
            r#"{"type":"record","name":"R","fields":[{"name":"a"}]}"#,
            "at /fields/0: field \"a\" has no \"type\"",
        ),
        (
            r#"{"type":"enum","name":"E","symbols":["A","A"]}"#,
            "enum symbol \"A\" appears twice",
        ),
        (
            r#"{"type":"enum","name":"E","symbols":["A", 3]}"#,
            "enum symbol 1 is not a valid name",
        ),
        (
            r#"{"type":"enum","name":"E"}"#,
            "enum has no \"symbols\" array",
        ),
        (
            r#"{"type":"fixed","name":"F","size":-1}"#,
            "fixed has no non-negative integer \"size\"",
        ),
        (
            r#"{"type":"fixed","name":"F","size":9999999999999}"#,
            "exceeds FIXED_SIZE_MAX_BYTES",
        ),
        (r#"{"type":"array"}"#, "array has no \"items\""),
        (r#"{"type":"map"}"#, "map has no \"values\""),
        (r#"{"items":"int"}"#, "object has no \"type\""),
        (
            r#"["int", ["null"]]"#,
            "at /1: a union may not directly contain a union",
        ),
        (
            r#"["int", "string", "int"]"#,
            "at /2: union has two branches of type \"int\"",
        ),
        (
            r#"[{"type":"fixed","name":"F","size":1},{"type":"fixed","name":"F","size":2}]"#,
            "named type \"F\" is defined twice",
        ),
        (
            r#"{"type":"record","name":"int","fields":[]}"#,
            "redefines a primitive type",
        ),
        (
            r#"{"type":{"type":"array","items":"Missing"}}"#,
            "at /type/items: unknown type name",
        ),
    ];
    for (text, want) in cases {
        let e = compile_err(text);
        assert!(e.contains(want), "{text}: got {e:?}, want {want:?}");
    }
    // Two different named types in one union are fine.
    schema(r#"[{"type":"fixed","name":"F","size":1},{"type":"fixed","name":"G","size":1}]"#);
}

#[test]
fn schemas_are_bounded_in_nodes() {
    let fields: Vec<String> = (0..20_000)
        .map(|i| format!(r#"{{"name":"f{i}","type":{{"type":"array","items":"int"}}}}"#))
        .collect();
    let text = format!(
        r#"{{"type":"record","name":"Big","fields":[{}]}}"#,
        fields.join(",")
    );
    assert!(compile_err(&text).contains("limits::NODES_MAX"));
}

#[test]
fn compiled_schemas_can_be_shared_across_workers() {
    fn shared<T: Send + Sync + 'static>(_: &T) {}
    let s = schema(r#""string""#);
    shared(&s);
    let s = std::sync::Arc::new(s);
    let worker = {
        let s = s.clone();
        std::thread::spawn(move || s.validate(&string(b"from a worker")))
    };
    assert_eq!(worker.join().unwrap(), Ok(()));
}
