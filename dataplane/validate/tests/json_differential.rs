//! Differential test: our validator against an independent implementation
//! (the `jsonschema` crate) on generated documents, for schemas covering
//! the keywords we enforce (patterns, dependent*, unevaluated* and dynamic
//! references included). Each document is also re-encoded with every
//! string character as a `\u` escape, which must not change the verdict.
//! Schemas without `$schema` are read as draft 7 by us and as 2020-12 by
//! the crate, so those use only keywords that mean the same in both.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use sluice_validate::json::JsonSchema;

const SCHEMAS: &[&str] = &[
    // Object keywords, 2020-12 (no $schema).
    r#"{"type":"object",
        "properties":{"a":{"type":"integer","minimum":0,"maximum":10},
                      "b":{"type":["string","integer"],"minLength":1,"maxLength":3},
                      "c":{"enum":[1,"x",null,[1,2],{"a":1}]},
                      "tags":{"type":"array","items":{"type":"string"},"uniqueItems":true,"maxItems":3},
                      "é":{"type":"number","exclusiveMaximum":2.5}},
        "required":["a"],"additionalProperties":{"type":["boolean","null","array","integer"]},
        "minProperties":1,"maxProperties":4}"#,
    // Applicators, on each item of an array.
    r#"{"type":"array","items":{
        "anyOf":[{"type":"integer","multipleOf":3},{"type":"string","minLength":2},{"type":"null"}],
        "not":{"const":"abc"},
        "oneOf":[{"type":"integer","minimum":3},{"type":"integer","maximum":6},{"type":["string","null"]}],
        "if":{"type":"string"},"then":{"maxLength":2},"else":{"not":{"const":0}}}}"#,
    // Recursion through $ref with siblings (2020-12).
    r##"{"$schema":"https://json-schema.org/draft/2020-12/schema",
         "$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
             "kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":3}},"required":["v"]}},
         "anyOf":[{"$ref":"#/$defs/node","minProperties":1},{"type":"array","prefixItems":[{"type":"string"}],"items":{"$ref":"#"}}]}"##,
    // Draft 7: tuple items, additionalItems, contains, $ref overriding siblings.
    r##"{"$schema":"http://json-schema.org/draft-07/schema#",
         "definitions":{"s":{"type":"string"}},
         "type":["array","object"],
         "items":[{"type":"integer"},{"$ref":"#/definitions/s","maxLength":0}],
         "additionalItems":{"type":"boolean"},
         "contains":{"type":"integer"},
         "properties":{"x":{"$ref":"#/definitions/s"},"a":{"type":"array","contains":{"const":"x"}}},
         "propertyNames":{"maxLength":1}}"##,
    // Draft 4: boolean exclusiveMinimum / exclusiveMaximum.
    r#"{"$schema":"http://json-schema.org/draft-04/schema#",
        "type":["number","array"],"minimum":0,"exclusiveMinimum":true,"maximum":5,"exclusiveMaximum":true,
        "items":{"type":"integer","minimum":-3,"exclusiveMinimum":false,"maximum":3,"exclusiveMaximum":true},
        "minItems":1}"#,
    // 2019-09: minContains/maxContains, const objects, uniqueItems on mixed values.
    r#"{"$schema":"https://json-schema.org/draft/2019-09/schema",
        "type":"array","contains":{"type":"object","required":["a"]},"minContains":1,"maxContains":2,
        "uniqueItems":false,
        "items":{"anyOf":[{"type":"object"},{"type":"array","uniqueItems":true},{"type":"integer"}]}}"#,
    // 2020-12: patterns, dependent*, additionalProperties after patterns.
    r#"{"$schema":"https://json-schema.org/draft/2020-12/schema","type":["object","string"],
        "pattern":"^(a|b)*c?$|日",
        "properties":{"x":{"pattern":"^[a-c]+$"},"tags":{"items":{"pattern":"\\w{2}|^$"}}},
        "patternProperties":{"^a":{"type":"integer"},"b$":{"type":["string","array"]},"é|本":{"maxLength":1}},
        "additionalProperties":{"type":["array","null","boolean"]},
        "dependentRequired":{"a":["b"]},"dependentSchemas":{"v":{"required":["x"]}}}"#,
    // 2020-12: unevaluated* through anyOf, oneOf, if/then/else, $ref.
    r##"{"$schema":"https://json-schema.org/draft/2020-12/schema",
         "$defs":{"k":{"properties":{"kids":{"type":"array"}}}},
         "anyOf":[{"properties":{"a":{"type":"integer"}}},{"properties":{"b":true},"required":["b"]},{"type":"array"}],
         "oneOf":[{"prefixItems":[{"type":"string"}]},{"contains":{"type":"integer"}},{"type":"object"}],
         "if":{"properties":{"c":{"const":null}},"required":["c"]},"then":{"properties":{"v":true}},
         "else":{"properties":{"x":true}},"$ref":"#/$defs/k",
         "unevaluatedProperties":{"type":"string"},"unevaluatedItems":{"type":["integer","null"]}}"##,
    // 2020-12: a recursive tree through $dynamicRef, closed by a strict
    // extension that overrides the anchor.
    r##"{"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"https://t.test/strict",
         "$dynamicAnchor":"node","$ref":"tree","unevaluatedProperties":false,
         "$defs":{"tree":{"$id":"tree","$dynamicAnchor":"node","type":"object",
                          "properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$dynamicRef":"#node"}}}}}}"##,
    // 2019-09: the same through $recursiveRef, and dependentSchemas.
    r##"{"$schema":"https://json-schema.org/draft/2019-09/schema","$id":"https://t.test/r",
         "$recursiveAnchor":true,"type":["object","integer","string"],
         "additionalProperties":{"$recursiveRef":"#"},"dependentSchemas":{"x":{"maxProperties":2}},
         "unevaluatedItems":false}"##,
    // Draft 7: dependencies (both forms), patterns on code points.
    r#"{"$schema":"http://json-schema.org/draft-07/schema#",
        "dependencies":{"a":["b","c"],"x":{"properties":{"v":{"type":"null"}}}},
        "patternProperties":{"^.$":{"pattern":"^.{0,2}$"}},
        "items":{"pattern":"[^a-z]"}}"#,
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        3 => (-5i64..12).prop_map(|x| json!(x)),
        1 => (-40i32..40).prop_map(|x| json!(f64::from(x) / 4.0)),
        1 => prop::sample::select(vec!["", "x", "ab", "abc", "é", "日本", "😀", "a\"b", "abcd", "\u{1}"])
            .prop_map(|s| Value::String(s.to_string())),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "c", "v", "x", "tags", "kids", "é", "ab"])
        .prop_map(str::to_string)
}

/// Documents valid for some schema, to be mutated: random documents alone
/// are almost never valid for the stricter object schemas.
const SEEDS: &[&str] = &[
    r#"{"a":3,"b":"xy","c":[1,2],"tags":["a","b"]}"#,
    r#"{"a":0,"é":1.5,"v":null}"#,
    r#"[9,"ab",null,-3]"#,
    r#"{"v":1,"kids":[{"v":2},{"v":3,"kids":[]}]}"#,
    r#"["x",{"v":1},["y"]]"#,
    r#"[1,"",true,false]"#,
    r#"{"x":"s","a":["x",1]}"#,
    r#"[1,-3,2]"#,
    r#"[{"a":1},[1,2],3]"#,
];

/// Replaces the `k`-th node (pre-order, modulo the count) of `v` with
/// `with`, or leaves `v` alone when `k` lands past the nodes.
fn mutate(v: &mut Value, k: &mut usize, with: &Value) {
    if *k == 0 {
        *v = with.clone();
        *k = usize::MAX;
        return;
    }
    *k -= 1;
    match v {
        Value::Array(a) => a.iter_mut().for_each(|x| mutate(x, k, with)),
        Value::Object(m) => m.values_mut().for_each(|x| mutate(x, k, with)),
        _ => {}
    }
}

fn document() -> impl Strategy<Value = Value> {
    let any = value();
    let seeds: Vec<Value> = SEEDS
        .iter()
        .map(|s| serde_json::from_str(s).unwrap())
        .collect();
    prop_oneof![
        1 => any.clone(),
        1 => prop::collection::vec((key(), any.clone()), 0..5)
            .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        2 => (prop::sample::select(seeds), 0usize..24, any).prop_map(|(mut seed, mut k, with)| {
            mutate(&mut seed, &mut k, &with);
            seed
        }),
    ]
}

fn value() -> impl Strategy<Value = Value> + Clone {
    leaf().prop_recursive(5, 48, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..5)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// JSON text with every string character written as a `\u` escape
/// (surrogate pairs beyond the BMP) and some whitespace.
fn escaped(v: &Value, out: &mut String) {
    match v {
        Value::String(s) => {
            out.push('"');
            for unit in s.encode_utf16() {
                out.push_str(&format!("\\u{unit:04x}"));
            }
            out.push('"');
        }
        Value::Array(a) => {
            out.push_str("[ ");
            for (k, x) in a.iter().enumerate() {
                if k > 0 {
                    out.push_str(" ,\n");
                }
                escaped(x, out);
            }
            out.push_str(" ]");
        }
        Value::Object(m) => {
            out.push_str("{\t");
            for (k, (name, x)) in m.iter().enumerate() {
                if k > 0 {
                    out.push(',');
                }
                escaped(&Value::String(name.clone()), out);
                out.push_str(" : ");
                escaped(x, out);
            }
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

struct Pair {
    ours: JsonSchema,
    theirs: jsonschema::Validator,
}

fn pairs() -> Vec<Pair> {
    SCHEMAS
        .iter()
        .map(|text| {
            let v: Value = serde_json::from_str(text).unwrap();
            Pair {
                ours: JsonSchema::compile(text, &[]).unwrap(),
                theirs: jsonschema::validator_for(&v).unwrap(),
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn agrees_with_the_jsonschema_crate(doc in document()) {
        thread_local!(static PAIRS: Vec<Pair> = pairs());
        let plain = serde_json::to_vec(&doc).unwrap();
        let mut esc = String::new();
        escaped(&doc, &mut esc);
        PAIRS.with(|pairs| -> Result<(), TestCaseError> {
            for (k, p) in pairs.iter().enumerate() {
                let want = p.theirs.is_valid(&doc);
                let got = p.ours.validate(&plain);
                prop_assert_eq!(got.is_ok(), want, "schema {} on {} -> {:?}", k, String::from_utf8_lossy(&plain), got);
                let got_esc = p.ours.validate(esc.as_bytes());
                prop_assert_eq!(got_esc.is_ok(), want, "schema {} on escaped {} -> {:?}", k, esc, got_esc);
            }
            Ok(())
        })?;
    }
}

#[test]
fn generated_documents_exercise_both_verdicts() {
    // Guard against a vacuous differential test: over a fixed sample, every
    // schema must accept some documents and reject others.
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let pairs = pairs();
    let mut runner = TestRunner::deterministic();
    let mut seen = vec![(0usize, 0usize); pairs.len()];
    for _ in 0..6000 {
        let doc = document().new_tree(&mut runner).unwrap().current();
        let bytes = serde_json::to_vec(&doc).unwrap();
        for (k, p) in pairs.iter().enumerate() {
            if p.ours.validate(&bytes).is_ok() {
                seen[k].0 += 1;
            } else {
                seen[k].1 += 1;
            }
        }
    }
    eprintln!("(valid, invalid) per schema: {seen:?}");
    for (k, (valid, invalid)) in seen.iter().enumerate() {
        assert!(
            *valid >= 20 && *invalid >= 20,
            "schema {k}: {valid} valid, {invalid} invalid"
        );
    }
}

/// Nesting depth of a parsed value (containers count one each).
fn depth(v: &Value) -> usize {
    match v {
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// A document's text with a few bytes replaced, inserted or removed, from
/// an alphabet rich in JSON syntax, escapes and broken UTF-8.
fn mutated() -> impl Strategy<Value = Vec<u8>> {
    let edit = (
        0usize..3,
        any::<prop::sample::Index>(),
        prop::sample::select(b"{}[]\":,\\u0aeE+-.1 \t\nntf\xc3\xa9\xff\xed\x01/".to_vec()),
    );
    (document(), prop::collection::vec(edit, 0..4)).prop_map(|(doc, edits)| {
        let mut b = serde_json::to_vec(&doc).unwrap();
        for (kind, at, byte) in edits {
            let k = at.index(b.len() + 1);
            match kind {
                0 if k < b.len() => b[k] = byte,
                1 => b.insert(k, byte),
                _ if k < b.len() => {
                    b.remove(k);
                }
                _ => {}
            }
        }
        b
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5000))]
    /// The strict parser agrees with serde_json on well-formedness, except
    /// for serde_json's own limits (nesting 128, numbers beyond f64) and
    /// ours (DEPTH_MAX).
    #[test]
    fn well_formedness_agrees_with_serde_json(bytes in mutated()) {
        let any = JsonSchema::compile("true", &[]).unwrap();
        let ours = any.validate(&bytes);
        if let Err(e) = ours {
            prop_assert!(e.offset <= bytes.len());
        }
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(v) => prop_assert_eq!(
                ours.is_ok(),
                depth(&v) <= sluice_validate::limits::DEPTH_MAX,
                "{:?}", String::from_utf8_lossy(&bytes)
            ),
            Err(e) => {
                let limit = ["recursion limit", "number out of range"].iter().any(|m| e.to_string().contains(m));
                prop_assert!(ours.is_err() || limit, "{:?} accepted, serde_json: {}", String::from_utf8_lossy(&bytes), e);
            }
        }
    }
}
