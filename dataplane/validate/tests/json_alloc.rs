//! `JsonSchema::validate` and `Predicate::matches` allocate nothing, on
//! success and on every error path. A counting global allocator, alone in
//! this test binary, proves it. It counts per thread, only while the
//! measuring thread asks, so other tests and the harness's own threads
//! cannot disturb a count.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use sluice_validate::json::{JsonSchema, Predicate};

struct Counting;

thread_local! {
    // Const-initialised and drop-free: reading them never allocates.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    if COUNTING.with(Cell::get) {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
    }
}

/// Allocations counted on this thread so far.
fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: forwards to the system allocator unchanged; only counts.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const SCHEMA: &str = r##"{
  "$defs": {"tag": {"type": "string", "minLength": 1, "maxLength": 16}},
  "type": "object",
  "properties": {
    "intent": {"enum": ["chat", "reasoning", "embedding"]},
    "model": {"type": "string"},
    "meta": {"type": "object", "properties": {"priority": {"type": "integer", "minimum": 0, "maximum": 9}},
             "required": ["priority"], "additionalProperties": false},
    "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}, "uniqueItems": true, "maxItems": 8},
    "temperature": {"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.01},
    "mode": {"oneOf": [{"const": "fast"}, {"const": "slow"}]},
    "extra": {"anyOf": [{"type": "null"}, {"not": {"type": "string"}}]}
  },
  "required": ["intent", "model"],
  "if": {"properties": {"intent": {"const": "reasoning"}}},
  "then": {"required": ["meta"]}
}"##;

#[test]
fn validate_and_matches_allocate_nothing() {
    let schema = JsonSchema::compile(SCHEMA, &[]).unwrap();
    let preds: Vec<Predicate> = [
        r#"$.intent == "reasoning""#,
        r#"$.meta.priority != 3"#,
        r#"$.tags[1] == "b\u00e9""#,
        r#"$["model"] == "m""#,
        r#"$.missing == null"#,
    ]
    .iter()
    .map(|e| Predicate::parse(e).unwrap())
    .collect();
    let docs: Vec<&[u8]> = vec![
        br#"{"intent":"reasoning","model":"m","meta":{"priority":2},"tags":["a","b\u00e9"],"temperature":0.7,"mode":"fast","extra":null}"#,
        br#"{"intent":"chat","model":"m","extra":5}"#,
        // Error paths: schema mismatches and syntax errors.
        br#"{"intent":"reasoning","model":"m"}"#,
        br#"{"intent":"chat","model":"m","tags":["a","a"]}"#,
        br#"{"intent":"chat","model":"m","meta":{"priority":2,"x":1}}"#,
        br#"{"intent":"chat","model":"m","mode":"medium"}"#,
        br#"{"intent":"chat","model":"m","extra":"s"}"#,
        br#"{"intent":"chat","model":"m","temperature":0}"#,
        br#"{"intent":"other","model":"m"}"#,
        br#"{"intent":"chat","model":"m",}"#,
        b"{\"intent\":\"\xff\"}",
        br#"{"intent":"\ud800"}"#,
        b"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
        b"",
    ];
    let mut outcomes = Vec::with_capacity(docs.len() * (preds.len() + 1));
    // Warm up (lazy statics, if any, would allocate here).
    for d in &docs {
        let _ = schema.validate(d);
        for p in &preds {
            let _ = p.matches(d);
        }
    }
    COUNTING.with(|c| c.set(true));
    let before = allocations();
    for _ in 0..200 {
        outcomes.clear();
        for d in &docs {
            outcomes.push(schema.validate(d).is_ok());
            for p in &preds {
                outcomes.push(p.matches(d));
            }
        }
    }
    let during = allocations() - before;
    // The counter is live: an allocation outside the measured region counts.
    let probe = std::hint::black_box(vec![0u8; 64]);
    let after_probe = allocations() - before;
    COUNTING.with(|c| c.set(false));
    drop(probe);
    assert_eq!(during, 0, "validate/matches allocated {during} times");
    assert!(after_probe >= 1, "the counting allocator is not live");
    // The calls did real work: the first two documents are valid, the
    // others are not, and the first document matches the first predicate.
    assert!(outcomes[0]);
    assert!(outcomes[1]);
    assert!(outcomes[preds.len() + 1]);
    for k in 2..docs.len() {
        assert!(
            !outcomes[k * (preds.len() + 1)],
            "document {k} should be invalid"
        );
    }
}

/// Schemas with the keywords that need more than one pass or a lookup on
/// the hot path: patterns (DFAs), dependent*, unevaluated* (bit sets),
/// dynamic references (the dynamic scope), anchors, `$id`-relative refs,
/// asserted formats, and a meta-schema (dynamic references all the way).
const KEYWORD_SCHEMAS: &[&str] = &[
    r##"{"$schema":"https://json-schema.org/draft/2020-12/schema",
        "type":"object",
        "properties":{"name":{"type":"string","pattern":"^[a-z]+(-[a-z0-9]+)*$"},
                      "when":{"format":"date-time"},"host":{"format":"hostname"},
                      "ip":{"anyOf":[{"format":"ipv4"},{"format":"ipv6"}]},
                      "link":{"format":"uri"},"re":{"format":"regex"}},
        "patternProperties":{"^x-":{"type":"string"},"[0-9]$":{"type":"integer"}},
        "dependentRequired":{"name":["when"]},
        "dependentSchemas":{"host":{"required":["ip"]}},
        "anyOf":[{"properties":{"extra":true}},{"properties":{"other":true}}],
        "if":{"properties":{"kind":{"const":"a"}}},"then":{"properties":{"a":{"type":"integer"}}},
        "unevaluatedProperties":false}"##,
    r##"{"$schema":"https://json-schema.org/draft/2020-12/schema",
        "prefixItems":[{"type":"string"}],
        "allOf":[{"contains":{"type":"integer"}}],
        "oneOf":[{"prefixItems":[true,{"type":"integer"}]},{"prefixItems":[true,{"type":"null"}]}],
        "unevaluatedItems":{"type":"boolean"}}"##,
    r##"{"$schema":"https://json-schema.org/draft/2020-12/schema",
        "$id":"https://example.test/tree","$dynamicAnchor":"node",
        "type":"object","properties":{"v":{"type":"number"},
        "kids":{"type":"array","items":{"$dynamicRef":"#node"}}},
        "$ref":"strict","$defs":{"strict":{"$id":"strict","$dynamicAnchor":"node",
        "$ref":"#/$defs/base","unevaluatedProperties":false,
        "$defs":{"base":{"properties":{"v":true,"kids":true}}}}}}"##,
    r##"{"$schema":"https://json-schema.org/draft/2019-09/schema",
        "$id":"https://example.test/r","$recursiveAnchor":true,
        "type":["object","integer"],"additionalProperties":{"$recursiveRef":"#"},
        "$defs":{"a":{"$anchor":"leaf","type":"integer"}},
        "properties":{"leaf":{"$ref":"#leaf"}}}"##,
    r##"{"$id":"http://x.test/root","$defs":{"int":{"type":"string"},
        "A":{"$id":"http://x.test/a","$defs":{"int":{"type":"integer"}},
        "properties":{"v":{"$ref":"#/$defs/int"}},
        "dependencies":{"v":["w"],"z":{"properties":{"w":{"minimum":3}}}}}},
        "$ref":"#/$defs/A"}"##,
    r##"{"$ref":"https://json-schema.org/draft/2020-12/schema"}"##,
];

#[test]
fn new_keywords_allocate_nothing() {
    use sluice_validate::json::{CompileOptions, FormatMode};
    let options = CompileOptions {
        format: FormatMode::Assertion,
        ..CompileOptions::default()
    };
    let schemas: Vec<JsonSchema> = KEYWORD_SCHEMAS
        .iter()
        .map(|s| JsonSchema::compile_with(s, &[], &options).unwrap())
        .collect();
    let many: String = (0..300)
        .map(|k| format!("\"k{k}a\":1"))
        .collect::<Vec<_>>()
        .join(",");
    let many = format!("{{{many}}}");
    // (schema, document, valid)
    let docs: Vec<(usize, Vec<u8>, bool)> = vec![
        (0, br#"{"name":"ab-1","when":"2024-02-29T23:59:60Z","host":"a.example","ip":"::1","x-a":"s","n1":1,"extra":1,"kind":"a","a":1,"link":"http://a/b?c#d","re":"^a+$"}"#.to_vec(), true),
        (0, br#"{"n\u0061me":"ab","when":"2024-01-01T00:00:00z","x-\u0062":"s"}"#.to_vec(), true),
        (0, br#"{"name":"AB","when":"2024-01-01T00:00:00Z"}"#.to_vec(), false),
        (0, br#"{"name":"ab"}"#.to_vec(), false),
        (0, br#"{"host":"a.example"}"#.to_vec(), false),
        (0, br#"{"when":"2024-02-30T00:00:00Z"}"#.to_vec(), false),
        (0, br#"{"ip":"1.2.3.256"}"#.to_vec(), false),
        (0, br#"{"re":"(a"}"#.to_vec(), false),
        (0, br#"{"x-a":1}"#.to_vec(), false),
        (0, br#"{"unknown":1}"#.to_vec(), false),
        (0, br#"{"kind":"a","a":"s"}"#.to_vec(), false),
        (0, many.clone().into_bytes(), false),
        (1, br#"["s",1,true]"#.to_vec(), true),
        (1, br#"["s",null,3,false]"#.to_vec(), true),
        (1, br#"["s",1,3]"#.to_vec(), true),
        (1, br#"["s",1,"t"]"#.to_vec(), false),
        (1, br#"["s","t"]"#.to_vec(), false),
        (2, br#"{"v":1,"kids":[{"v":2,"kids":[{"v":3}]}]}"#.to_vec(), true),
        (2, br#"{"v":1,"kids":[{"v":2,"extra":1}]}"#.to_vec(), false),
        (3, br#"{"a":{"b":{"c":1}},"leaf":2}"#.to_vec(), true),
        (3, br#"{"a":{"b":"x"}}"#.to_vec(), false),
        (4, br#"{"v":1,"w":0}"#.to_vec(), true),
        (4, br#"{"v":"x","w":0}"#.to_vec(), false),
        (4, br#"{"v":1}"#.to_vec(), false),
        (4, br#"{"v":1,"w":0,"z":0}"#.to_vec(), false),
        (5, KEYWORD_SCHEMAS[0].as_bytes().to_vec(), true),
        (5, br#"{"type":1,"properties":{"a":{"minimum":"x"}}}"#.to_vec(), false),
        (5, br#"{"$defs":{"a":{"items":[{"type":"string"}]}}}"#.to_vec(), false),
    ];
    for (s, d, want) in &docs {
        let got = schemas[*s].validate(d);
        assert_eq!(
            got.is_ok(),
            *want,
            "schema {s} on {}: {got:?}",
            String::from_utf8_lossy(d)
        );
    }
    COUNTING.with(|c| c.set(true));
    let before = allocations();
    let mut valid = 0usize;
    for _ in 0..50 {
        for (s, d, _) in &docs {
            valid += usize::from(schemas[*s].validate(d).is_ok());
        }
    }
    let during = allocations() - before;
    COUNTING.with(|c| c.set(false));
    assert_eq!(during, 0, "validate allocated {during} times");
    assert_eq!(valid, 50 * docs.iter().filter(|d| d.2).count());
}
