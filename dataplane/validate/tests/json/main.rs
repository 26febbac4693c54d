//! JSON Schema validator and content predicates: every keyword accepting
//! and rejecting, every Invalid message, the strict parser, the limits.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod applicators;
mod containers;
mod limits;
mod predicates;
mod scalars;

use sluice_validate::json::{self, JsonSchema, Predicate};
use sluice_validate::limits::DEPTH_MAX;
use sluice_validate::{Invalid, Reference};

fn schema(text: &str) -> JsonSchema {
    JsonSchema::compile(text, &[]).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// `text` (an object schema) read as 2020-12 rather than the default draft 7.
fn schema_2020(text: &str) -> JsonSchema {
    let text = text.replacen(
        '{',
        r#"{"$schema":"https://json-schema.org/draft/2020-12/schema","#,
        1,
    );
    schema(&text)
}

#[track_caller]
fn ok(s: &JsonSchema, doc: &str) {
    assert_eq!(s.validate(doc.as_bytes()), Ok(()), "should accept {doc}");
}

#[track_caller]
fn bad(s: &JsonSchema, doc: &str, message: &str) -> usize {
    match s.validate(doc.as_bytes()) {
        Err(Invalid { message: m, offset }) => {
            assert_eq!(m, message, "wrong message for {doc}");
            offset
        }
        Ok(()) => panic!("should reject {doc} with {message:?}"),
    }
}

#[track_caller]
fn compile_err(text: &str, needle: &str) {
    match JsonSchema::compile(text, &[]) {
        Err(e) => assert!(e.0.contains(needle), "{text}: {e} lacks {needle:?}"),
        Ok(_) => panic!("{text} should not compile"),
    }
}

fn pred(e: &str) -> Predicate {
    Predicate::parse(e).unwrap_or_else(|err| panic!("{e}: {err}"))
}

#[test]
fn compiled_schemas_and_predicates_are_shared_across_workers() {
    fn shared<T: Send + Sync + 'static>() {}
    shared::<JsonSchema>();
    shared::<Predicate>();
    let s = std::sync::Arc::new(schema(r#"{"required":["a"]}"#));
    let p = std::sync::Arc::new(pred(r#"$.a == 1"#));
    let handles: Vec<_> = (0..2)
        .map(|k| {
            let (s, p) = (s.clone(), p.clone());
            std::thread::spawn(move || {
                let doc = format!(r#"{{"a":{k}}}"#);
                (
                    s.validate(doc.as_bytes()).is_ok(),
                    p.matches(doc.as_bytes()),
                )
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(results, [(true, false), (true, true)]);
}
