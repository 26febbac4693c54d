//! Structured sections on the hot path, over real io_uring: JSON, Avro and
//! Protobuf sections checked against pushed schemas (with references),
//! content routing on a validated JSON section, and schemas the data plane
//! cannot compile refused rather than passed unchecked.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use common::*;
use sluice_engine::Engine;
use sluice_engine::schema::{SchemaCfg, SchemaRefCfg};
use sluice_wire::{ErrorCode, Frame, Kind, SECTION_TENSOR_NAME};

const ADDR_SCHEMA: &str =
    r#"{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}"#;
const PERSON_SCHEMA: &str =
    r#"{"type":"object","properties":{"home":{"$ref":"addr.json"}},"required":["home"]}"#;

fn schemas() -> Vec<SchemaCfg> {
    let mut person = schema(25, "person", "JSON", PERSON_SCHEMA);
    person.references = vec![SchemaRefCfg {
        name: "addr.json".into(),
        subject: "addr".into(),
        version: 1,
    }];
    vec![
        schema(21, "llm-out", "JSON", JSON_SCHEMA),
        schema(22, "req-avro", "AVRO", AVRO_SCHEMA),
        schema(23, "req-proto", "PROTOBUF", PROTO_SCHEMA),
        schema(24, "addr", "JSON", ADDR_SCHEMA),
        person,
        schema(
            27,
            "x-tensor",
            "TENSOR",
            r#"{"inputs":[{"name":"x","dtype":"f32","shape":[1,4]}]}"#,
        ),
        // Imports a file nobody pushed: the data plane cannot compile it.
        schema(
            26,
            "broken",
            "PROTOBUF",
            "syntax = \"proto3\";\nimport \"missing.proto\";\nmessage M { Missing m = 1; }\n",
        ),
    ]
}

fn start() -> Engine {
    let e = started(test_config(""));
    let sections = serde_json::json!({
        "shards": [
            {"name": "hbm2", "labels": {"hardware.gpu.memory": "hbm2"}, "max_concurrency": 4, "queue_depth": 8},
            {"name": "gddr6", "labels": {"hardware.gpu.memory": "gddr6"}},
            {"name": "reasoning", "labels": {"hardware.gpu.memory": "hbm2"}, "max_concurrency": 4, "queue_depth": 8}
        ],
        "routes": [
            {"name": "think", "content": ["$.intent == \"reasoning\"", "$.priority != 0"], "shard": "reasoning"},
            {"name": "null", "model": "null", "version": "^1", "shard": "hbm2"}
        ],
        "schemas": schemas(),
    });
    e.apply_json(sections.to_string().as_bytes()).unwrap();
    e
}

fn shard_requests(e: &Engine, name: &str) -> u64 {
    e.stats()
        .shards
        .iter()
        .find(|s| s.name == name)
        .map_or(0, |s| s.requests)
}

#[test]
fn sections_are_validated_and_routed_by_content() {
    let e = start();
    let addr = e.local_addr().unwrap();
    let s = client();
    let mut buf = vec![0u8; 8192];
    let mut ask = |id: u32, section: Option<&[u8]>| {
        let n = build_section(id, section, &mut buf);
        let a = roundtrip(&s, addr, &buf[..n]);
        let kind = answer_kind(&a);
        if kind.0 == Kind::Response {
            // The null model answers its input only, never the section.
            let f = Frame::new_checked(&a[..]).unwrap();
            assert_eq!(f.tensor_count(), 1);
            assert!(f.tensor(SECTION_TENSOR_NAME).is_none());
        }
        kind
    };
    let ok = (Kind::Response, None);
    let mismatch = (Kind::Error, Some(ErrorCode::SchemaMismatch));

    // JSON: valid sections route by content; invalid ones are refused.
    let think = br#"{"intent": "reasoning", "text": "why?", "priority": 2}"#;
    let chat = br#"{"intent":"chat","text":"hi"}"#;
    let low = br#"{"intent":"reasoning","text":"why?","priority":0}"#;
    assert_eq!(ask(21, Some(think)), ok);
    assert_eq!(ask(21, Some(chat)), ok);
    assert_eq!(ask(21, Some(low)), ok);
    assert_eq!(
        shard_requests(&e, "reasoning"),
        1,
        "only the first matches both conditions"
    );
    assert_eq!(shard_requests(&e, "hbm2"), 2);
    for bad in [
        &br#"{"intent":"chat"}"#[..],
        br#"{"intent":"poetry","text":"x"}"#,
        br#"{"intent":"chat","text":"x","extra":1}"#,
        br#"{"intent":"chat","text":"x","priority":-1}"#,
        br#"{"intent":"chat","text":"x""#,
        b"\xff",
    ] {
        assert_eq!(
            ask(21, Some(bad)),
            mismatch,
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
    assert_eq!(
        ask(21, None),
        mismatch,
        "a structured schema needs a section"
    );
    // A section under a schema that is not JSON is never routed by content.
    assert_eq!(shard_requests(&e, "reasoning"), 1);

    // A tensor signature reads the tensor table only: a section riding
    // along is not counted as an input.
    assert_eq!(ask(27, Some(chat)), ok);
    assert_eq!(ask(27, None), ok);

    // Avro: string "chat" then int 5, zigzag varints.
    assert_eq!(ask(22, Some(b"\x08chat\x0a")), ok);
    assert_eq!(ask(22, Some(b"\x08ch")), mismatch, "truncated");
    assert_eq!(
        ask(22, Some(b"\x08chat\x0a\x00")),
        mismatch,
        "trailing byte"
    );

    // Protobuf: field 1 (string) "chat", field 2 (varint) 5.
    assert_eq!(ask(23, Some(b"\x0a\x04chat\x10\x05")), ok);
    assert_eq!(
        ask(23, Some(b"\x0a\x09chat")),
        mismatch,
        "length past the end"
    );
    assert_eq!(
        ask(23, Some(b"\x08\x01")),
        mismatch,
        "string field sent as varint"
    );

    // References resolve against the pushed set.
    assert_eq!(ask(25, Some(br#"{"home":{"city":"Oslo"}}"#)), ok);
    assert_eq!(ask(25, Some(br#"{"home":{}}"#)), mismatch);

    // A schema the data plane cannot compile refuses its requests and says
    // why in the status.
    assert_eq!(ask(26, Some(b"")), mismatch);
    let st = e.status();
    assert!(
        st.schemas_unenforced
            .iter()
            .any(|u| u.starts_with("id 26 v1:")),
        "{:?}",
        st.schemas_unenforced
    );
    assert_eq!(
        ask(99, Some(chat)),
        (Kind::Error, Some(ErrorCode::UnknownSchema))
    );

    let errors: u64 = e
        .stats()
        .workers
        .iter()
        .flat_map(|w| w.errors.iter())
        .filter(|(code, _)| code == "schema_mismatch")
        .map(|(_, n)| n)
        .sum();
    assert_eq!(errors, 13, "every refusal is counted");
}

#[test]
fn content_routes_need_a_validated_json_section() {
    let e = start();
    let addr = e.local_addr().unwrap();
    let s = client();
    let mut buf = vec![0u8; 8192];
    // No schema at all: the section is not read, so content cannot match.
    let n = build_section(
        0,
        Some(br#"{"intent":"reasoning","text":"x","priority":1}"#),
        &mut buf,
    );
    assert_eq!(
        answer_kind(&roundtrip(&s, addr, &buf[..n])),
        (Kind::Response, None)
    );
    assert_eq!(shard_requests(&e, "reasoning"), 0);
    assert_eq!(shard_requests(&e, "hbm2"), 1);
}

#[test]
fn bad_content_conditions_are_config_errors() {
    let e = start();
    for bad in [r#"$.intent = "x""#, r#"intent == "x""#, r#"$.a == {"b":1}"#] {
        let doc = serde_json::json!({
            "routes": [{"name": "r", "content": [bad], "shard": "hbm2"}]
        });
        let err = e
            .apply_json(doc.to_string().as_bytes())
            .unwrap_err()
            .to_string();
        assert!(err.contains("content"), "{bad}: {err}");
    }
}

/// Issue 19: the JSON Schema keywords that need more than one pass, a
/// draft-07 schema without `$schema`, and what a schema leaves unenforced,
/// through the real engine.
#[test]
fn json_schema_keywords_are_enforced_and_reported() {
    const STRICT_TREE: &str = r##"{"$schema":"https://json-schema.org/draft/2020-12/schema",
        "$id":"https://t.test/strict","$dynamicAnchor":"node","$ref":"tree","unevaluatedProperties":false,
        "$defs":{"tree":{"$id":"tree","$dynamicAnchor":"node","type":"object",
            "properties":{"name":{"type":"string","pattern":"^[a-z]+-[0-9]{2}$"},
                          "kids":{"type":"array","items":{"$dynamicRef":"#node"}}}}}}"##;
    let list = vec![
        schema(31, "tree", "JSON", STRICT_TREE),
        // Confluent's default dialect: the tuple form of items.
        schema(
            32,
            "pair",
            "JSON",
            r#"{"items":[{"type":"string"},{"type":"integer"}],"additionalItems":false}"#,
        ),
        // A back-reference no DFA can match: refused, with the reason.
        schema(33, "echo", "JSON", r#"{"pattern":"^(a+)\\1$"}"#),
        schema(34, "dated", "JSON", r#"{"type":"string","format":"date"}"#),
    ];
    let e = started(test_config(""));
    let doc = serde_json::json!({
        "shards": [{"name": "hbm2", "labels": {"hardware.gpu.memory": "hbm2"}}],
        "routes": [{"name": "null", "model": "null", "version": "^1", "shard": "hbm2"}],
        "schemas": list,
    });
    e.apply_json(doc.to_string().as_bytes()).unwrap();
    let addr = e.local_addr().unwrap();
    let s = client();
    let mut buf = vec![0u8; 8192];
    let mut ask = |id: u32, section: &[u8]| {
        let n = build_section(id, Some(section), &mut buf);
        answer_kind(&roundtrip(&s, addr, &buf[..n]))
    };
    let ok = (Kind::Response, None);
    let mismatch = (Kind::Error, Some(ErrorCode::SchemaMismatch));
    assert_eq!(
        ask(
            31,
            br#"{"name":"root-01","kids":[{"name":"leaf-02","kids":[]}]}"#
        ),
        ok
    );
    for bad in [
        &br#"{"name":"Root-01"}"#[..],
        br#"{"name":"root-01","kids":[{"name":"leaf-02","colour":"red"}]}"#,
        br#"{"kids":[{"kids":[{"name":"x"}]}]}"#,
    ] {
        assert_eq!(ask(31, bad), mismatch, "{}", String::from_utf8_lossy(bad));
    }
    assert_eq!(ask(32, br#"["a",1]"#), ok);
    assert_eq!(ask(32, br#"["a",1,2]"#), mismatch);
    assert_eq!(
        ask(33, br#""aa""#),
        mismatch,
        "an unenforceable schema refuses"
    );
    assert_eq!(ask(34, br#""not a date""#), ok, "format is an annotation");
    let st = e.status();
    let line = |id: u32| {
        st.schemas_unenforced
            .iter()
            .find(|u| u.starts_with(&format!("id {id} v1:")))
            .cloned()
            .unwrap_or_default()
    };
    assert!(
        line(33).contains("back-references are not supported"),
        "{:?}",
        st.schemas_unenforced
    );
    assert!(
        line(34).contains("format \"date\" (annotation only: not asserted)"),
        "{:?}",
        st.schemas_unenforced
    );
    assert!(
        line(31).is_empty() && line(32).is_empty(),
        "{:?}",
        st.schemas_unenforced
    );
}
