//! Applicators and references: combinators, boolean schemas, local and
//! named `$ref`s, recursion, refs that must not compile.

use super::*;

#[test]
fn combinators() {
    let all = schema(r#"{"allOf":[{"type":"integer"},{"minimum":3}]}"#);
    ok(&all, "4");
    bad(&all, "2", "number below minimum");
    let any = schema(r#"{"anyOf":[{"type":"string"},{"minimum":3}]}"#);
    ok(&any, "\"x\"");
    ok(&any, "5");
    bad(&any, "2", "anyOf: no subschema matched");
    let one = schema(r#"{"oneOf":[{"type":"integer"},{"minimum":3}]}"#);
    ok(&one, "2");
    ok(&one, "3.5");
    bad(&one, "4", "oneOf: more than one subschema matched");
    bad(&one, "1.5", "oneOf: no subschema matched");
    let not = schema(r#"{"not":{"type":"string"}}"#);
    ok(&not, "1");
    bad(&not, "\"s\"", "not: value matched the subschema");
    let cond = schema(
        r#"{"if":{"properties":{"kind":{"const":"a"}},"required":["kind"]},
            "then":{"required":["x"]},"else":{"required":["y"]}}"#,
    );
    ok(&cond, r#"{"kind":"a","x":1}"#);
    ok(&cond, r#"{"kind":"b","y":1}"#);
    bad(&cond, r#"{"kind":"a","y":1}"#, "required property missing");
    bad(&cond, r#"{"kind":"b","x":1}"#, "required property missing");
    // A syntax error inside an applicator's span is still a syntax error.
    bad(&not, "[1,]", "trailing comma");
}

#[test]
fn boolean_schemas() {
    let t = schema("true");
    ok(&t, r#"{"anything":[1,2,{"x":null}]}"#);
    bad(&t, "[1,", "unexpected end of input");
    let f = schema("false");
    bad(&f, "{}", "schema is false: no value allowed");
}

#[test]
fn local_refs_and_recursion() {
    let tree = schema(
        r##"{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
             "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},
             "$ref":"#/$defs/node"}"##,
    );
    ok(
        &tree,
        r#"{"v":1,"kids":[{"v":2,"kids":[{"v":3}]},{"v":4}]}"#,
    );
    bad(
        &tree,
        r#"{"v":1,"kids":[{"v":2,"kids":[{"w":3}]}]}"#,
        "required property missing",
    );
    let root_rec = schema(r##"{"properties":{"next":{"$ref":"#"}},"type":"object"}"##);
    ok(&root_rec, r#"{"next":{"next":{}}}"#);
    bad(
        &root_rec,
        r#"{"next":{"next":1}}"#,
        "type mismatch: expected object",
    );
    let defs = schema(
        r##"{"definitions":{"a~b":{"type":"string"},"c/d":{"type":"integer"},"p%":{"type":"null"}},
             "properties":{"x":{"$ref":"#/definitions/a~0b"},"y":{"$ref":"#/definitions/c~1d"},
             "z":{"$ref":"#/definitions/p%25"},"w":{"$ref":"#/properties/x"}}}"##,
    );
    ok(&defs, r#"{"x":"s","y":1,"z":null,"w":"t"}"#);
    bad(&defs, r#"{"y":"s"}"#, "type mismatch: expected integer");
    bad(&defs, r#"{"w":1}"#, "type mismatch: expected string");
    bad(&defs, r#"{"z":1}"#, "type mismatch: expected null");
    // Draft 7 ignores $ref siblings; 2020-12 applies both.
    let d7 = schema(
        r##"{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"i":{"type":"integer"}},"properties":{"a":{"$ref":"#/definitions/i","maximum":1}}}"##,
    );
    ok(&d7, r#"{"a":5}"#);
    let d2020 = schema_2020(
        r##"{"$defs":{"i":{"type":"integer"}},"properties":{"a":{"$ref":"#/$defs/i","maximum":1}}}"##,
    );
    bad(&d2020, r#"{"a":5}"#, "number above maximum");
    bad(&d2020, r#"{"a":0.5}"#, "type mismatch: expected integer");
    // $id of the root names the same document.
    let id = schema(
        r#"{"$id":"http://example.com/s.json","definitions":{"a":{"type":"null"}},"properties":{"n":{"$ref":"http://example.com/s.json#/definitions/a"}}}"#,
    );
    bad(&id, r#"{"n":0}"#, "type mismatch: expected null");
}

#[test]
fn bad_refs_do_not_compile() {
    compile_err(r##"{"$ref":"#"}"##, "cycle that consumes no input");
    compile_err(
        r##"{"allOf":[{"$ref":"#/allOf/1"},{"anyOf":[{"$ref":"#"}]}]}"##,
        "cycle",
    );
    compile_err(
        r##"{"$ref":"#/definitions/missing"}"##,
        "points to nothing at #/$ref",
    );
    compile_err(
        r##"{"properties":{"a":{"$ref":"other.json"}}}"##,
        "unresolvable $ref \"other.json\"",
    );
    compile_err(r##"{"$ref":"#anchor"}"##, "anchor");
    compile_err(r#"{"type":"strin"}"#, "at #/type");
    compile_err(
        r#"{"properties":{"a":{"minLength":-1}}}"#,
        "minLength must be a non-negative integer at #/properties/a/minLength",
    );
    compile_err(
        r#"{"properties":{"a":5}}"#,
        "a schema must be an object or a boolean at #/properties/a",
    );
    compile_err("{", "not valid JSON");
    let mut deep = String::from("true");
    for _ in 0..(json::APPLICATOR_DEPTH_MAX + 1) {
        deep = format!(r#"{{"allOf":[{deep}]}}"#);
    }
    compile_err(&deep, "APPLICATOR_DEPTH_MAX");
}

#[test]
fn references_by_name() {
    let address = r##"{"$defs":{"zip":{"type":"string","maxLength":5}},"type":"object","properties":{"zip":{"$ref":"#/$defs/zip"}},"required":["zip"]}"##;
    let refs = [Reference {
        name: "address.json",
        schema: address,
    }];
    let s = JsonSchema::compile(
        r##"{"properties":{"home":{"$ref":"address.json"},"zip":{"$ref":"address.json#/$defs/zip"}}}"##,
        &refs,
    )
    .unwrap();
    ok(&s, r#"{"home":{"zip":"12345"},"zip":"1"}"#);
    bad(&s, r#"{"home":{}}"#, "required property missing");
    bad(
        &s,
        r#"{"home":{"zip":"123456"}}"#,
        "string longer than maxLength",
    );
    bad(&s, r#"{"zip":"123456"}"#, "string longer than maxLength");
    let e = JsonSchema::compile(
        r#"{"$ref":"address.json"}"#,
        &[Reference {
            name: "address.json",
            schema: "{",
        }],
    )
    .unwrap_err();
    assert!(e.0.contains("address.json"), "{e}");
}

#[test]
fn ref_chains_resolve() {
    let s = schema(
        r##"{"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/c"},"c":{"type":"integer"}}}"##,
    );
    ok(&s, "3");
    bad(&s, "\"3\"", "type mismatch: expected integer");
}
