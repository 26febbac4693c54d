//! `JsonSchema::validate` and `Predicate::matches` on arbitrary bytes: they
//! must never panic, errors must point inside the input, no schema accepts
//! what the permissive schema finds malformed, and on a well-formed section
//! `==` and `!=` of the same predicate must disagree. (Well-formedness is
//! checked against serde_json in tests/json_differential.rs.)
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sluice_validate::json::{JsonSchema, Predicate};

struct Fixture {
    any: JsonSchema,
    schemas: Vec<JsonSchema>,
    predicates: Vec<(Predicate, Predicate)>,
}

const SCHEMAS: &[&str] = &[
    r##"{"type":"object","properties":{"intent":{"enum":["chat","reasoning"]},
         "meta":{"type":"object","properties":{"priority":{"type":"integer","minimum":0,"maximum":9}},
                 "required":["priority"],"additionalProperties":false},
         "tags":{"type":"array","items":{"type":"string","maxLength":8},"uniqueItems":true}},
         "required":["intent"]}"##,
    r##"{"$defs":{"n":{"type":["object","array","string","number"],"properties":{"k":{"$ref":"#/$defs/n"}},
         "items":{"$ref":"#/$defs/n"},"minLength":1}},
         "anyOf":[{"$ref":"#/$defs/n"},{"type":"null"}],"not":{"const":{"k":[]}},
         "oneOf":[{"type":"array","uniqueItems":true},{"not":{"type":"array"}}]}"##,
    r##"{"$schema":"http://json-schema.org/draft-04/schema#","items":[{"type":"integer"},{"multipleOf":0.5}],
         "additionalItems":{"type":"boolean"},"contains":{"type":"integer"},"propertyNames":{"maxLength":3}}"##,
];

const PREDICATES: &[(&str, &str)] = &[
    (r#"$.intent == "reasoning""#, r#"$.intent != "reasoning""#),
    (r#"$.meta.priority == 3"#, r#"$.meta.priority != 3"#),
    (r#"$.tags[1] == "b\u00e9""#, r#"$.tags[1] != "b\u00e9""#),
    (r#"$["k"][0] == null"#, r#"$["k"][0] != null"#),
];

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| Fixture {
        any: JsonSchema::compile("true", &[]).unwrap(),
        schemas: SCHEMAS
            .iter()
            .map(|s| JsonSchema::compile(s, &[]).unwrap())
            .collect(),
        predicates: PREDICATES
            .iter()
            .map(|(a, b)| (Predicate::parse(a).unwrap(), Predicate::parse(b).unwrap()))
            .collect(),
    })
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let well_formed = match f.any.validate(data) {
        Ok(()) => true,
        Err(e) => {
            assert!(e.offset <= data.len(), "{e:?}");
            false
        }
    };
    for s in &f.schemas {
        match s.validate(data) {
            Ok(()) => assert!(well_formed, "a schema accepted malformed JSON"),
            Err(e) => assert!(e.offset <= data.len(), "{e:?}"),
        }
    }
    for (eq, ne) in &f.predicates {
        let (a, b) = (eq.matches(data), ne.matches(data));
        if well_formed {
            assert!(a != b, "{eq} and {ne} agree on a well-formed section");
        }
    }
});
