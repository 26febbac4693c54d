//! The keywords issue 19 brought to the hot path, each accepting and
//! rejecting with its message, and their limits: `$id` base URIs and
//! anchors, `$dynamicRef`/`$recursiveRef`, patterns, `dependent*`,
//! `unevaluated*`, vocabularies and `format`. (The official suite runs in
//! tests/suite.rs; these pin down behaviour and messages.)
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use sluice_validate::json::{
    self, CompileOptions, Draft, EVALUATED_EXCEEDED, FormatMode, JsonSchema,
};
use sluice_validate::{Invalid, Reference};

const S2020: &str = "https://json-schema.org/draft/2020-12/schema";

fn schema(text: &str) -> JsonSchema {
    JsonSchema::compile(text, &[]).unwrap_or_else(|e| panic!("{text}: {e}"))
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

#[test]
fn local_ref_resolves_against_the_enclosing_id() {
    // The false accept of issue 19: `#/$defs/int` inside the resource
    // http://x.test/a is that resource's int (an integer), not the root's.
    let s = schema(
        r##"{"$id":"http://x.test/root","$defs":{"int":{"type":"string"},
             "A":{"$id":"http://x.test/a","$defs":{"int":{"type":"integer"}},
                  "properties":{"v":{"$ref":"#/$defs/int"}}}},"$ref":"#/$defs/A"}"##,
    );
    bad(&s, r#"{"v":"x"}"#, "type mismatch: expected integer");
    ok(&s, r#"{"v":1}"#);
    // Relative $ids resolve against the enclosing one; a $ref by URI
    // reaches an embedded resource.
    let s = schema(&format!(
        r##"{{"$schema":"{S2020}","$id":"http://x.test/dir/root.json",
             "$defs":{{"b":{{"$id":"sub/b.json","type":"boolean"}}}},
             "properties":{{"p":{{"$ref":"sub/b.json"}},"q":{{"$ref":"http://x.test/dir/sub/b.json"}}}}}}"##
    ));
    ok(&s, r#"{"p":true,"q":false}"#);
    bad(&s, r#"{"p":1}"#, "type mismatch: expected boolean");
    bad(&s, r#"{"q":1}"#, "type mismatch: expected boolean");
}

#[test]
fn anchors_per_draft() {
    let s = schema(&format!(
        r##"{{"$schema":"{S2020}","$defs":{{"a":{{"$anchor":"pos","minimum":0}}}},"$ref":"#pos"}}"##
    ));
    ok(&s, "1");
    bad(&s, "-1", "number below minimum");
    // Draft 7: a plain-name $id is the anchor; $anchor is not a keyword.
    let d7 = schema(
        r##"{"definitions":{"a":{"$id":"#pos","minimum":0}},"properties":{"x":{"$ref":"#pos"}}}"##,
    );
    bad(&d7, r#"{"x":-1}"#, "number below minimum");
    compile_err(
        r##"{"definitions":{"a":{"$anchor":"pos"}},"$ref":"#pos"}"##,
        "no anchor \"pos\"",
    );
}

#[test]
fn dynamic_ref_follows_the_dynamic_scope() {
    // A generic list whose items a caller overrides through $dynamicAnchor.
    let list = Reference {
        name: "http://x.test/list",
        schema: r##"{"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"http://x.test/list",
                     "type":"array","items":{"$dynamicRef":"#item"},
                     "$defs":{"item":{"$dynamicAnchor":"item"}}}"##,
    };
    let strings = JsonSchema::compile(
        &format!(
            r##"{{"$schema":"{S2020}","$id":"http://x.test/strings","$ref":"list",
                 "$defs":{{"s":{{"$dynamicAnchor":"item","type":"string"}}}}}}"##
        ),
        &[list],
    )
    .unwrap();
    ok(&strings, r#"["a","b"]"#);
    bad(&strings, r#"["a",1]"#, "type mismatch: expected string");
    // The list alone accepts anything as an item.
    let alone = JsonSchema::compile(r#"{"$ref":"http://x.test/list"}"#, &[list]).unwrap();
    ok(&alone, r#"["a",1]"#);
}

#[test]
fn recursive_ref_follows_the_outermost_recursive_anchor() {
    let tree = Reference {
        name: "http://x.test/tree",
        schema: r##"{"$schema":"https://json-schema.org/draft/2019-09/schema","$id":"http://x.test/tree",
                     "$recursiveAnchor":true,"type":"object",
                     "properties":{"kids":{"type":"array","items":{"$recursiveRef":"#"}}}}"##,
    };
    let strict = JsonSchema::compile(
        r#"{"$schema":"https://json-schema.org/draft/2019-09/schema","$id":"http://x.test/strict",
            "$recursiveAnchor":true,"$ref":"tree","unevaluatedProperties":false,
            "properties":{"kids":true,"v":{"type":"integer"}}}"#,
        &[tree],
    )
    .unwrap();
    ok(&strict, r#"{"v":1,"kids":[{"v":2,"kids":[{"v":3}]}]}"#);
    // Deep in the tree the strict schema still applies.
    bad(
        &strict,
        r#"{"kids":[{"kids":[{"x":1}]}]}"#,
        "unevaluated property not allowed",
    );
}

#[test]
fn dynamic_scope_depth_is_bounded() {
    // Every nesting level enters six resources (the root, then r0 -> r1
    // -> ... -> r4 on the same value, whose items go back to the root
    // through $dynamicRef): 60 levels need 360 scope entries, past
    // SCOPE_MAX, and the section is refused, not overflowed.
    let mut defs = Vec::new();
    for k in 0..5 {
        let next = if k == 4 {
            r##""items":{"$dynamicRef":"root#n"}"##.to_string()
        } else {
            format!(r#""$ref":"r{}""#, k + 1)
        };
        defs.push(format!(r#""r{k}":{{"$id":"r{k}",{next}}}"#));
    }
    let s = schema(&format!(
        r#"{{"$schema":"{S2020}","$id":"http://x.test/root","$dynamicAnchor":"n","$ref":"r0","$defs":{{{}}}}}"#,
        defs.join(",")
    ));
    let nest = |d: usize| format!("{}{}", "[".repeat(d), "]".repeat(d));
    ok(&s, &nest(10));
    assert_eq!(json::SCOPE_MAX, 256);
    bad(&s, &nest(60), "dynamic scope deeper than SCOPE_MAX");
}

#[test]
fn patterns() {
    let s = schema(r#"{"type":"string","pattern":"^[a-z]+(-[0-9]{2})?$"}"#);
    ok(&s, r#""abc""#);
    ok(&s, r#""abc-12""#);
    ok(&s, r#""\u0061bc""#);
    let at = bad(&s, r#"  "abc-1""#, "string does not match pattern");
    assert_eq!(at, 2);
    // Not anchored unless the pattern says so; code points, not bytes.
    let s = schema(r#"{"pattern":"é{2}"}"#);
    ok(&s, r#""xééx""#);
    ok(&s, "12");
    bad(&s, r#""é""#, "string does not match pattern");
    // patternProperties and additionalProperties.
    let s = schema(
        r#"{"properties":{"id":{"type":"string"}},
            "patternProperties":{"^x-":{"type":"string"},"_n$":{"type":"integer"}},
            "additionalProperties":false}"#,
    );
    ok(&s, r#"{"id":"a","x-tag":"t","count_n":3}"#);
    bad(&s, r#"{"x-y_n":"s"}"#, "type mismatch: expected integer");
    bad(&s, r#"{"\u0078-a":1}"#, "type mismatch: expected string");
    let at = bad(
        &s,
        r#"{"id":"a","other":1}"#,
        "additional property not allowed",
    );
    assert_eq!(at, 10);
}

#[test]
fn patterns_the_dfa_cannot_express_are_refused_with_a_reason() {
    for (p, why) in [
        ("(a)\\\\1", "back-references are not supported"),
        ("a(?=b)", "lookahead is not supported"),
        ("(?<!a)b", "lookbehind is not supported"),
        ("\\\\a", "not an ECMA-262 escape"),
        ("a{2,1}", "numbers out of order"),
    ] {
        compile_err(
            &format!(r#"{{"properties":{{"s":{{"pattern":"{p}"}}}}}}"#),
            why,
        );
        compile_err(
            &format!(r#"{{"patternProperties":{{"{p}":true}}}}"#),
            "at #/patternProperties/",
        );
    }
    compile_err(
        r#"{"properties":{"s":{"pattern":"(a)\\1"}}}"#,
        "pattern \"(a)\\\\1\": back-references are not supported (the DFA engine cannot express them) at #/properties/s/pattern",
    );
    // A DFA with 2^21 states.
    let big = r#"{"pattern":"(a|b)*a(a|b){20}"}"#;
    compile_err(big, "REGEX_DFA_BYTES_MAX");
}

#[test]
fn dependencies_per_draft() {
    let s = schema(&format!(
        r#"{{"$schema":"{S2020}","dependentRequired":{{"card":["billing"]}},
             "dependentSchemas":{{"billing":{{"properties":{{"zip":{{"type":"string"}}}},"required":["zip"]}}}}}}"#
    ));
    ok(&s, "{}");
    ok(&s, r#"{"card":1,"billing":{},"zip":"1"}"#);
    bad(
        &s,
        r#"{"card":1}"#,
        "property required by a present property (dependentRequired) missing",
    );
    bad(&s, r#"{"billing":1}"#, "required property missing");
    bad(
        &s,
        r#"{"billing":1,"zip":2}"#,
        "type mismatch: expected string",
    );
    // Draft 7 (the default): dependencies, both forms.
    let d7 = schema(r#"{"dependencies":{"card":["billing"],"billing":{"required":["zip"]}}}"#);
    bad(
        &d7,
        r#"{"card":1}"#,
        "property required by a present property (dependentRequired) missing",
    );
    bad(&d7, r#"{"billing":1}"#, "required property missing");
    // ... and no 2019-09 keywords.
    ok(
        &schema(r#"{"dependentRequired":{"a":["b"]}}"#),
        r#"{"a":1}"#,
    );
    let many: Vec<String> = (0..65).map(|k| format!("\"p{k}\"")).collect();
    compile_err(
        &format!(r#"{{"dependencies":{{"a":[{}]}}}}"#, many.join(",")),
        "REQUIRED_MAX",
    );
}

#[test]
fn unevaluated_properties_and_items() {
    let s = schema(&format!(
        r#"{{"$schema":"{S2020}","properties":{{"a":true}},
             "anyOf":[{{"properties":{{"b":true}}}},{{"properties":{{"c":true}},"required":["c"]}}],
             "if":{{"properties":{{"k":{{"const":1}}}},"required":["k"]}},"then":{{"properties":{{"t":true}}}},
             "unevaluatedProperties":false}}"#
    ));
    ok(&s, r#"{"a":1,"b":2,"c":3}"#);
    ok(&s, r#"{"k":1,"t":2}"#);
    let at = bad(&s, r#"{"a":1,"t":2}"#, "unevaluated property not allowed");
    assert_eq!(at, 7);
    let s = schema(&format!(
        r#"{{"$schema":"{S2020}","prefixItems":[{{"type":"string"}}],"contains":{{"type":"integer"}},
             "unevaluatedItems":{{"type":"boolean"}}}}"#
    ));
    ok(&s, r#"["a",1,true,2]"#);
    bad(&s, r#"["a",1,null]"#, "type mismatch: expected boolean");
    let closed = schema(&format!(
        r#"{{"$schema":"{S2020}","prefixItems":[true],"unevaluatedItems":false}}"#
    ));
    bad(&closed, "[1,2]", "unevaluated item not allowed");
    // Cousins do not see each other's annotations.
    let cousins = schema(&format!(
        r#"{{"$schema":"{S2020}","allOf":[{{"properties":{{"a":true}}}},{{"unevaluatedProperties":false}}]}}"#
    ));
    bad(&cousins, r#"{"a":1}"#, "unevaluated property not allowed");
}

#[test]
fn evaluation_bit_sets_are_bounded() {
    let s = schema(&format!(
        r#"{{"$schema":"{S2020}","patternProperties":{{"^k":true}},"unevaluatedProperties":false}}"#
    ));
    let fits: Vec<String> = (0..json::EVALUATED_MAX)
        .map(|k| format!("\"k{k}\":{k}"))
        .collect();
    ok(&s, &format!("{{{}}}", fits.join(",")));
    let over: Vec<String> = (0..=json::EVALUATED_MAX)
        .map(|k| format!("\"k{k}\":{k}"))
        .collect();
    bad(&s, &format!("{{{}}}", over.join(",")), EVALUATED_EXCEEDED);
    // The limit is not read as "a subschema did not match".
    let not = schema(&format!(
        r#"{{"$schema":"{S2020}","not":{{"patternProperties":{{"^k":true}},"unevaluatedProperties":false}}}}"#
    ));
    bad(&not, &format!("{{{}}}", over.join(",")), EVALUATED_EXCEEDED);
    // additionalProperties evaluates every member: nothing to track.
    let all = schema(&format!(
        r#"{{"$schema":"{S2020}","additionalProperties":true,"unevaluatedProperties":false}}"#
    ));
    ok(&all, &format!("{{{}}}", over.join(",")));
}

#[test]
fn vocabularies_and_format() {
    // The 2020-12 format-assertion vocabulary opts in; default is annotation.
    let meta = Reference {
        name: "http://x.test/meta",
        schema: r#"{"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"http://x.test/meta",
                    "$vocabulary":{"https://json-schema.org/draft/2020-12/vocab/core":true,
                                   "https://json-schema.org/draft/2020-12/vocab/format-assertion":true}}"#,
    };
    let asserted = JsonSchema::compile(
        r#"{"$schema":"http://x.test/meta","format":"ipv4","minimum":5}"#,
        &[meta],
    )
    .unwrap();
    bad(&asserted, r#""1.2.3""#, "format: not an IPv4 address");
    ok(&asserted, r#""1.2.3.4""#);
    ok(&asserted, "1"); // no validation vocabulary: minimum is ignored
    let plain = schema(r#"{"format":"ipv4"}"#);
    ok(&plain, r#""1.2.3""#);
    let on = CompileOptions {
        format: FormatMode::Assertion,
        ..CompileOptions::default()
    };
    let configured = JsonSchema::compile_with(r#"{"format":"ipv4"}"#, &[], &on).unwrap();
    bad(&configured, r#""1.2.3""#, "format: not an IPv4 address");
    // An escaped string is decoded first.
    ok(&configured, r#""1.2.3.\u0034""#);
    // An unknown required vocabulary refuses the schema.
    let strange = Reference {
        name: "http://x.test/strange",
        schema: r#"{"$schema":"https://json-schema.org/draft/2020-12/schema",
                    "$vocabulary":{"http://x.test/vocab/magic":true}}"#,
    };
    let e = JsonSchema::compile(r#"{"$schema":"http://x.test/strange"}"#, &[strange]).unwrap_err();
    assert!(e.0.contains("requires vocabulary"), "{e}");
}

#[test]
fn default_draft_is_explicit() {
    // No $schema: draft 7 by default, as Confluent reads JSON schemas.
    let text = r#"{"items":[{"type":"string"}],"additionalItems":false,"minContains":5,"contains":{"type":"string"}}"#;
    let d7 = schema(text);
    ok(&d7, r#"["a"]"#);
    bad(&d7, r#"["a",1]"#, "additional item not allowed");
    let as_2020 = CompileOptions {
        default_draft: Draft::Draft2020_12,
        ..CompileOptions::default()
    };
    let e = JsonSchema::compile_with(text, &[], &as_2020).unwrap_err();
    assert!(e.0.contains("items must be a schema in 2020-12"), "{e}");
}

#[test]
fn meta_schemas_are_built_in() {
    let s = schema(r#"{"$ref":"http://json-schema.org/draft-07/schema#"}"#);
    ok(&s, r#"{"type":"string","items":[{"type":"integer"}]}"#);
    bad(&s, r#"{"type":"strin"}"#, "anyOf: no subschema matched");
    let s = schema(&format!(r#"{{"$ref":"{S2020}"}}"#));
    ok(&s, r#"{"$defs":{"a":{"prefixItems":[true]}}}"#);
    assert!(s.validate(br#"{"$defs":{"a":{"minLength":-1}}}"#).is_err());
    // The meta-schemas' own annotations are not reported.
    assert!(s.unenforced().is_empty(), "{:?}", s.unenforced());
}

#[test]
fn confluent_references_by_name_under_an_id() {
    // A Confluent reference named "addr.json", used from a schema whose
    // $id makes the ref resolve to http://x.test/schemas/addr.json.
    let addr = Reference {
        name: "addr.json",
        schema: r#"{"type":"object","required":["city"]}"#,
    };
    let s = JsonSchema::compile(
        r#"{"$id":"http://x.test/schemas/person.json","properties":{"home":{"$ref":"addr.json"}}}"#,
        &[addr],
    )
    .unwrap();
    ok(&s, r#"{"home":{"city":"Oslo"}}"#);
    bad(&s, r#"{"home":{}}"#, "required property missing");
    let e = JsonSchema::compile(r#"{"$ref":"nowhere.json"}"#, &[addr]).unwrap_err();
    assert!(e.0.contains("unresolvable $ref \"nowhere.json\""), "{e}");
}
