//! `JsonSchema::validate` and `Predicate::matches` on arbitrary bytes: they
//! must never panic, errors must point inside the input, no schema accepts
//! what the permissive schema finds malformed, a verdict does not change
//! when the same section is validated again, and on a well-formed section
//! `==` and `!=` of the same predicate must disagree. (Well-formedness is
//! checked against serde_json in tests/json_differential.rs.) The schemas
//! cover every keyword family of the hot path: patterns, dependent*,
//! unevaluated* (bit sets), dynamic references (the dynamic scope),
//! anchors, `$id`-relative references, asserted formats, a meta-schema.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sluice_validate::json::{CompileOptions, FormatMode, JsonSchema, Predicate};

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
    r##"{"$schema":"https://json-schema.org/draft/2020-12/schema","type":["object","string","array"],
         "pattern":"^[a-z]+(-[0-9]{1,3})?$",
         "properties":{"when":{"format":"date-time"},"host":{"format":"hostname"},"ip":{"format":"ipv6"},
                       "re":{"format":"regex"},"u":{"format":"uri-reference"},"t":{"format":"uri-template"},
                       "d":{"format":"duration"},"e":{"format":"email"}},
         "patternProperties":{"^x-":{"type":"string"},"\\d$":{"type":"integer"},"é+":{"maxLength":2}},
         "dependentRequired":{"a":["b"]},"dependentSchemas":{"b":{"properties":{"c":{"const":1}}}},
         "anyOf":[{"properties":{"k":true}},{"prefixItems":[{"type":"string"}]},true],
         "if":{"contains":{"const":"a"}},"then":{"prefixItems":[true,true]},
         "unevaluatedProperties":{"type":"number"},"unevaluatedItems":false}"##,
    r##"{"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"https://f.test/t","$dynamicAnchor":"n",
         "type":["object","array","integer"],"properties":{"kids":{"type":"array","items":{"$dynamicRef":"#n"}}},
         "items":{"$ref":"s"},"$defs":{"s":{"$id":"s","$dynamicAnchor":"n","$ref":"#/$defs/b",
         "unevaluatedProperties":false,"$defs":{"b":{"properties":{"v":{"$anchor":"v","type":"integer"},"kids":true}}}}}}"##,
    r##"{"$schema":"https://json-schema.org/draft/2019-09/schema","$id":"https://f.test/r","$recursiveAnchor":true,
         "type":["object","integer"],"additionalProperties":{"$recursiveRef":"#"},"unevaluatedItems":false,
         "dependentSchemas":{"a":{"required":["b"]}}}"##,
    r##"{"$id":"http://x.test/root","$defs":{"int":{"type":"string"},"A":{"$id":"http://x.test/a",
         "$defs":{"int":{"type":"integer"}},"properties":{"v":{"$ref":"#/$defs/int"}},
         "dependencies":{"v":["w"],"z":{"properties":{"w":{"minimum":3}}}}}},"$ref":"#/$defs/A"}"##,
    r##"{"$ref":"https://json-schema.org/draft/2020-12/schema"}"##,
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
            .map(|s| {
                let options = CompileOptions {
                    format: FormatMode::Assertion,
                    ..CompileOptions::default()
                };
                JsonSchema::compile_with(s, &[], &options).unwrap()
            })
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
        let verdict = s.validate(data);
        match verdict {
            Ok(()) => assert!(well_formed, "a schema accepted malformed JSON"),
            Err(e) => assert!(e.offset <= data.len(), "{e:?}"),
        }
        assert_eq!(s.validate(data), verdict, "the verdict changed");
    }
    for (eq, ne) in &f.predicates {
        let (a, b) = (eq.matches(data), ne.matches(data));
        if well_formed {
            assert!(a != b, "{eq} and {ne} agree on a well-formed section");
        }
    }
});
