//! `JsonSchema::validate` and `Predicate::matches` allocate nothing, on
//! success and on every error path. A counting global allocator, alone in
//! this test binary, proves it. It counts only on the measuring thread, so
//! the test harness's own threads cannot disturb the count.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use sluice_validate::json::{JsonSchema, Predicate};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // Const-initialised and drop-free: reading it never allocates.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if COUNTING.with(Cell::get) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
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
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    for _ in 0..200 {
        outcomes.clear();
        for d in &docs {
            outcomes.push(schema.validate(d).is_ok());
            for p in &preds {
                outcomes.push(p.matches(d));
            }
        }
    }
    let during = ALLOCATIONS.load(Ordering::SeqCst) - before;
    // The counter is live: an allocation outside the measured region counts.
    let probe = std::hint::black_box(vec![0u8; 64]);
    let after_probe = ALLOCATIONS.load(Ordering::SeqCst) - before;
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
