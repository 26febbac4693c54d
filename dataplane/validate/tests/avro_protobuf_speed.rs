//! Cost of `validate` on a ~1 KiB section, against decoding the same bytes
//! with apache-avro / prost-reflect in the same run. Prints numbers, asserts
//! none (timings belong to perf runs, not to CI):
//!
//! ```sh
//! cargo test --release -p sluice-validate --test avro_protobuf_speed -- --ignored --nocapture
//! ```
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::hint::black_box;
use std::time::Instant;

use apache_avro::types::Value as AvroValue;
use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, Value};
use sluice_validate::avro::AvroSchema;
use sluice_validate::protobuf::ProtobufSchema;

const AVRO: &str = r#"{"type":"record","name":"Request","fields":[
    {"name":"id","type":"long"},
    {"name":"prompt","type":"string"},
    {"name":"tags","type":{"type":"map","values":"string"}},
    {"name":"scores","type":{"type":"array","items":"float"}},
    {"name":"tokens","type":{"type":"array","items":"int"}},
    {"name":"user","type":["null",{"type":"record","name":"User","fields":[
        {"name":"name","type":"string"},{"name":"age","type":"int"}]}]}
]}"#;

const PROTO: &str = r#"
syntax = "proto3";
message Request {
  int64 id = 1;
  string prompt = 2;
  map<string, string> tags = 3;
  repeated float scores = 4;
  repeated int32 tokens = 5;
  User user = 6;
}
message User { string name = 1; int32 age = 2; }
"#;

/// ns per call, best of a few rounds.
fn time(mut f: impl FnMut()) -> f64 {
    let rounds = 5;
    // Fewer under a profiler (callgrind counts instructions exactly).
    let iterations: u32 = std::env::var("SLUICE_SPEED_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    (0..rounds)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..iterations {
                f();
            }
            t.elapsed().as_nanos() as f64 / iterations as f64
        })
        .fold(f64::INFINITY, f64::min)
}

#[test]
#[ignore = "measurement: run in release with --ignored --nocapture"]
fn validate_cost_on_a_1kib_section() {
    let prompt = "Summarise the following passage in one sentence, please. ".repeat(8);
    let tags: Vec<(String, String)> = (0..8)
        .map(|i| (format!("key{i}"), format!("value-{i}")))
        .collect();

    // Avro
    let theirs = apache_avro::Schema::parse_str(AVRO).unwrap();
    let value = AvroValue::Record(vec![
        ("id".into(), AvroValue::Long(1 << 40)),
        ("prompt".into(), AvroValue::String(prompt.clone())),
        (
            "tags".into(),
            AvroValue::Map(
                tags.iter()
                    .map(|(k, v)| (k.clone(), AvroValue::String(v.clone())))
                    .collect(),
            ),
        ),
        (
            "scores".into(),
            AvroValue::Array((0..64).map(|i| AvroValue::Float(i as f32)).collect()),
        ),
        (
            "tokens".into(),
            AvroValue::Array((0..64).map(|i| AvroValue::Int(i * 1000)).collect()),
        ),
        (
            "user".into(),
            AvroValue::Union(
                1,
                Box::new(AvroValue::Record(vec![
                    ("name".into(), AvroValue::String("Ada".into())),
                    ("age".into(), AvroValue::Int(36)),
                ])),
            ),
        ),
    ]);
    let avro_bytes = apache_avro::to_avro_datum(&theirs, value).unwrap();
    let ours = AvroSchema::compile(AVRO, &[]).unwrap();
    assert_eq!(ours.validate(&avro_bytes), Ok(()));
    let ours_ns = time(|| {
        black_box(ours.validate(black_box(&avro_bytes))).unwrap();
    });
    let theirs_ns = time(|| {
        let mut r = black_box(&avro_bytes[..]);
        black_box(apache_avro::from_avro_datum(&theirs, &mut r, None)).unwrap();
    });
    println!(
        "avro {} B: validate {ours_ns:.0} ns, apache-avro decode {theirs_ns:.0} ns, ratio {:.3}",
        avro_bytes.len(),
        ours_ns / theirs_ns
    );

    // Protobuf
    let dir = std::env::temp_dir().join(format!("sluice-validate-speed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("req.proto"), PROTO).unwrap();
    let set = protox::compile(["req.proto"], [&dir]).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let pool = DescriptorPool::from_file_descriptor_set(set).unwrap();
    let desc = pool.get_message_by_name("Request").unwrap();
    let user_desc = pool.get_message_by_name("User").unwrap();
    let mut m = DynamicMessage::new(desc.clone());
    m.set_field_by_name("id", Value::I64(1 << 40));
    m.set_field_by_name("prompt", Value::String(prompt));
    m.set_field_by_name(
        "tags",
        Value::Map(
            tags.iter()
                .map(|(k, v)| {
                    (
                        prost_reflect::MapKey::String(k.clone()),
                        Value::String(v.clone()),
                    )
                })
                .collect(),
        ),
    );
    m.set_field_by_name(
        "scores",
        Value::List((0..64).map(|i| Value::F32(i as f32)).collect()),
    );
    m.set_field_by_name(
        "tokens",
        Value::List((0..64).map(|i| Value::I32(i * 1000)).collect()),
    );
    let mut user = DynamicMessage::new(user_desc);
    user.set_field_by_name("name", Value::String("Ada".into()));
    user.set_field_by_name("age", Value::I32(36));
    m.set_field_by_name("user", Value::Message(user));
    let pb_bytes = m.encode_to_vec();
    let ours = ProtobufSchema::compile(PROTO, &[], None).unwrap();
    assert_eq!(ours.validate(&pb_bytes), Ok(()));
    let ours_ns = time(|| {
        black_box(ours.validate(black_box(&pb_bytes))).unwrap();
    });
    let theirs_ns = time(|| {
        black_box(DynamicMessage::decode(
            desc.clone(),
            black_box(&pb_bytes[..]),
        ))
        .unwrap();
    });
    println!(
        "protobuf {} B: validate {ours_ns:.0} ns, prost-reflect decode {theirs_ns:.0} ns, ratio {:.3}",
        pb_bytes.len(),
        ours_ns / theirs_ns
    );
}
