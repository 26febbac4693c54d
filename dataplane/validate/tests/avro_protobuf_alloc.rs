//! `validate` allocates nothing, for Avro and Protobuf, on valid and invalid
//! inputs. A counting global allocator counts this thread's allocations;
//! an allocation outside the measured region shows that it counts.
#![allow(unsafe_code)]
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;

use sluice_validate::Invalid;
use sluice_validate::avro::AvroSchema;
use sluice_validate::limits::DEPTH_MAX;
use sluice_validate::protobuf::ProtobufSchema;

struct Counting;

thread_local! {
    // Const-initialised and without a destructor: reading it never allocates.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    // During thread teardown the slot may be gone; such allocations are not ours.
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: every method forwards to the system allocator with the caller's
// arguments unchanged; counting touches only a thread-local Cell.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// Allocations made by `f` on this thread.
fn allocations_during(f: impl FnOnce()) -> u64 {
    let before = allocations();
    f();
    allocations() - before
}

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

fn pb_len(number: u32, body: &[u8]) -> Vec<u8> {
    [
        varint(u64::from(number) << 3 | 2),
        varint(body.len() as u64),
        body.to_vec(),
    ]
    .concat()
}

fn pb_varint(number: u32, v: u64) -> Vec<u8> {
    [varint(u64::from(number) << 3), varint(v)].concat()
}

const AVRO: &str = r#"{"type":"record","name":"Node","fields":[
    {"name":"id","type":"long"},
    {"name":"label","type":"string"},
    {"name":"weights","type":{"type":"array","items":"double"}},
    {"name":"tags","type":{"type":"map","values":"int"}},
    {"name":"flag","type":"boolean"},
    {"name":"next","type":["null","Node"]}
]}"#;

const PROTO: &str = r#"
syntax = "proto3";
message Node {
  int64 id = 1;
  string label = 2;
  repeated double weights = 3;
  map<string, int32> tags = 4;
  Node next = 5;
}
"#;

fn avro_inputs() -> Vec<(Vec<u8>, Option<&'static str>)> {
    let node = |next: &[u8]| {
        let mut weights = long(2);
        weights.extend_from_slice(&[0; 16]);
        weights.extend(long(0));
        [
            long(7),
            long(3),
            b"abc".to_vec(),
            weights,
            long(1),
            long(1),
            b"k".to_vec(),
            long(5),
            long(0),
            vec![1],
            next.to_vec(),
        ]
        .concat()
    };
    let leaf = node(&long(0));
    let two = node(&[long(1), leaf.clone()].concat());
    let mut deep = long(0);
    for _ in 0..=DEPTH_MAX {
        deep = node(&[long(1), deep].concat());
    }
    let mut bad_utf8 = leaf.clone();
    bad_utf8[2] = 0xff;
    let mut trailing = leaf.clone();
    trailing.push(0);
    let mut bad_bool = leaf.clone();
    let at = bad_bool.len() - 2;
    bad_bool[at] = 9;
    vec![
        (leaf.clone(), None),
        (two.clone(), None),
        (
            leaf[..leaf.len() - 1].to_vec(),
            Some("section ends inside a value"),
        ),
        (bad_utf8, Some("string is not valid UTF-8")),
        (trailing, Some("trailing bytes after the value")),
        (bad_bool, Some("boolean byte is neither 0 nor 1")),
        (deep, Some("nesting deeper than limits::DEPTH_MAX")),
        (vec![0xff; 11], Some("varint longer than 10 bytes")),
    ]
}

fn protobuf_inputs() -> Vec<(Vec<u8>, Option<&'static str>)> {
    let node = |next: &[u8]| {
        [
            pb_varint(1, 7),
            pb_len(2, b"abc"),
            pb_len(3, &[0; 16]),
            pb_len(4, &[pb_len(1, b"k"), pb_varint(2, 5)].concat()),
            next.to_vec(),
        ]
        .concat()
    };
    let leaf = node(&[]);
    let two = node(&pb_len(5, &leaf));
    let mut deep = leaf.clone();
    for _ in 0..=DEPTH_MAX {
        deep = node(&pb_len(5, &deep));
    }
    vec![
        (leaf.clone(), None),
        (two, None),
        (
            leaf[..leaf.len() - 1].to_vec(),
            Some("length runs past the end of the enclosing message"),
        ),
        (pb_len(2, &[0xff]), Some("string is not valid UTF-8")),
        (
            pb_varint(2, 1),
            Some("wrong wire type for the declared field"),
        ),
        (vec![0x0f], Some("wire type 6 or 7 is invalid")),
        (
            pb_len(3, &[0; 5]),
            Some("packed fixed-width run is not a whole number of values"),
        ),
        (vec![0x0c], Some("end-group tag without a start-group")),
        (deep, Some("nesting deeper than limits::DEPTH_MAX")),
    ]
}

fn expect(result: Result<(), Invalid>, want: Option<&str>) {
    assert_eq!(result.map_err(|e| e.message).err(), want);
}

#[test]
fn validate_allocates_nothing() {
    // The counter is live: an allocation outside the measured region shows.
    assert!(allocations_during(|| drop(black_box(Box::new(black_box(1u64))))) >= 1);

    let avro = AvroSchema::compile(AVRO, &[]).unwrap();
    let proto = ProtobufSchema::compile(PROTO, &[], None).unwrap();
    let avro_inputs = avro_inputs();
    let protobuf_inputs = protobuf_inputs();

    // Warm-up, and the verdicts themselves.
    for (input, want) in &avro_inputs {
        expect(avro.validate(input), *want);
    }
    for (input, want) in &protobuf_inputs {
        expect(proto.validate(input), *want);
    }

    for (input, want) in &avro_inputs {
        let mut result = Ok(());
        let n = allocations_during(|| result = black_box(avro.validate(black_box(input))));
        assert_eq!(n, 0, "avro validate allocated for {want:?}");
        expect(result, *want);
    }
    for (input, want) in &protobuf_inputs {
        let mut result = Ok(());
        let n = allocations_during(|| result = black_box(proto.validate(black_box(input))));
        assert_eq!(n, 0, "protobuf validate allocated for {want:?}");
        expect(result, *want);
    }
}
