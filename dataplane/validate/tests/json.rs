//! JSON Schema validator and content predicates: every keyword accepting
//! and rejecting, every Invalid message, the strict parser, the limits.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

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

#[test]
fn type_keyword() {
    let cases = [
        ("null", "null", "1", "type mismatch: expected null"),
        ("boolean", "true", "0", "type mismatch: expected boolean"),
        ("object", "{}", "[]", "type mismatch: expected object"),
        ("array", "[]", "{}", "type mismatch: expected array"),
        ("number", "1.5", "\"1\"", "type mismatch: expected number"),
        ("integer", "-7", "1.5", "type mismatch: expected integer"),
        ("string", "\"x\"", "null", "type mismatch: expected string"),
    ];
    for (t, yes, no, msg) in cases {
        let s = schema(&format!(r#"{{"type":"{t}"}}"#));
        ok(&s, yes);
        assert_eq!(bad(&s, &format!("  {no}"), msg), 2);
    }
    let s = schema(r#"{"type":["string","null"]}"#);
    ok(&s, "\"a\"");
    ok(&s, "null");
    bad(&s, "false", "type mismatch: value type not allowed");
}

#[test]
fn integers_per_spec() {
    let s = schema(r#"{"type":"integer"}"#);
    ok(&s, "1.0");
    ok(&s, "-0");
    ok(&s, "1e3");
    ok(&s, "123456789012345678901234567890");
    ok(&s, "1e400");
    bad(&s, "1.000001", "type mismatch: expected integer");
    bad(&s, "12e-1", "type mismatch: expected integer");
    let n = schema(r#"{"type":"number"}"#);
    ok(&n, "3");
}

#[test]
fn numeric_bounds_draft6_and_draft4() {
    let s = schema(r#"{"minimum":1,"maximum":10,"exclusiveMinimum":0,"exclusiveMaximum":10}"#);
    ok(&s, "1");
    ok(&s, "9.99");
    ok(&s, "\"not a number\"");
    bad(&s, "0.5", "number below minimum");
    bad(&s, "10", "number not below exclusiveMaximum");
    let s = schema(r#"{"maximum":5,"exclusiveMinimum":2}"#);
    bad(&s, "2", "number not above exclusiveMinimum");
    bad(&s, "5.5", "number above maximum");
    ok(&s, "5");
    let d4 = schema(
        r#"{"$schema":"http://json-schema.org/draft-04/schema#","minimum":1,"exclusiveMinimum":true,"maximum":3,"exclusiveMaximum":true}"#,
    );
    bad(&d4, "1", "number not above exclusiveMinimum");
    bad(&d4, "3", "number not below exclusiveMaximum");
    ok(&d4, "2");
    let d4f = schema(
        r#"{"$schema":"http://json-schema.org/draft-04/schema#","minimum":1,"exclusiveMinimum":false}"#,
    );
    ok(&d4f, "1");
    // The boolean form is draft 4 only: elsewhere the schema is refused.
    compile_err(
        r#"{"minimum":1,"exclusiveMinimum":true}"#,
        "exclusiveMinimum must be a number in draft-07 (a boolean is draft-04) at #/exclusiveMinimum",
    );
    compile_err(
        r#"{"$schema":"http://json-schema.org/draft-04/schema#","exclusiveMaximum":3}"#,
        "exclusiveMaximum must be a boolean in draft-04",
    );
}

#[test]
fn multiple_of() {
    let s = schema(r#"{"multipleOf":3}"#);
    ok(&s, "9");
    ok(&s, "-12");
    ok(&s, "0");
    bad(&s, "10", "number not a multiple of multipleOf");
    let f = schema(r#"{"multipleOf":0.01}"#);
    ok(&f, "0.07");
    ok(&f, "19.99");
    bad(&f, "0.075", "number not a multiple of multipleOf");
    compile_err(
        r#"{"multipleOf":0}"#,
        "multipleOf must be a number above 0 at #/multipleOf",
    );
}

#[test]
fn string_lengths_count_code_points() {
    let s = schema(r#"{"minLength":2,"maxLength":3}"#);
    ok(&s, r#""ab""#);
    ok(&s, r#""日本語""#);
    ok(&s, r#""\ud83d\ude00x""#); // a surrogate pair is one code point
    ok(&s, "\"😀😀\"");
    bad(&s, r#""a""#, "string shorter than minLength");
    bad(&s, r#""\u0041""#, "string shorter than minLength");
    bad(&s, r#""日本語x""#, "string longer than maxLength");
    ok(&s, "12345");
}

#[test]
fn object_keywords() {
    let s = schema(
        r#"{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},
            "required":["a","c"],"additionalProperties":false,"minProperties":2,"maxProperties":3}"#,
    );
    // "c" is required but not declared: additionalProperties still applies.
    let off = bad(&s, r#"{"a":1,"c":2}"#, "additional property not allowed");
    assert_eq!(off, 7);
    let s = schema(
        r#"{"properties":{"a":{"type":"integer"},"b":{"type":"string"}},
            "required":["a","b"],"minProperties":2,"maxProperties":3}"#,
    );
    ok(&s, r#"{"a":1,"b":"x"}"#);
    ok(&s, r#"{"b":"x","a":1,"z":null}"#);
    assert_eq!(bad(&s, r#" {"a":1,"z":2}"#, "required property missing"), 1);
    bad(&s, r#"{"a":1,"b":2}"#, "type mismatch: expected string");
    bad(
        &s,
        r#"{"a":1,"b":"x","c":1,"d":2}"#,
        "more properties than maxProperties",
    );
    let m = schema(r#"{"minProperties":2}"#);
    bad(&m, r#"{"a":1}"#, "fewer properties than minProperties");
    let a = schema(r#"{"properties":{"a":true},"additionalProperties":{"type":"boolean"}}"#);
    ok(&a, r#"{"a":[1],"b":true}"#);
    bad(&a, r#"{"a":[1],"b":1}"#, "type mismatch: expected boolean");
    let f = schema(r#"{"properties":{"gone":false}}"#);
    bad(&f, r#"{"gone":1}"#, "schema is false: no value allowed");
    ok(&f, r#"{"other":1}"#);
    let pn = schema(r#"{"propertyNames":{"maxLength":3}}"#);
    ok(&pn, r#"{"abc":1}"#);
    bad(&pn, r#"{"abcd":1}"#, "string longer than maxLength");
}

#[test]
fn escaped_keys_match_properties() {
    let s = schema(
        r#"{"properties":{"a/b":{"type":"integer"},"é":{"type":"string"}},"required":["a/b","é"],"additionalProperties":false}"#,
    );
    ok(&s, r#"{"a\/b":1,"\u00e9":"x"}"#);
    ok(&s, r#"{"a/b":1,"é":"x"}"#);
    bad(
        &s,
        r#"{"a\/b":"1","\u00e9":"x"}"#,
        "type mismatch: expected integer",
    );
    bad(&s, r#"{"a\u002fc":1}"#, "additional property not allowed");
    // An escaped key longer than any property name is simply additional.
    let long = format!(r#"{{"{}":1}}"#, "\\u0041".repeat(300));
    bad(&s, &long, "additional property not allowed");
}

#[test]
fn array_keywords() {
    let s = schema(r#"{"items":{"type":"integer"},"minItems":1,"maxItems":3,"uniqueItems":true}"#);
    ok(&s, "[1,2,3]");
    bad(&s, "[]", "fewer items than minItems");
    bad(&s, "[1,2,3,4]", "more items than maxItems");
    assert_eq!(bad(&s, "[1,2,1.0]", "uniqueItems: duplicate item"), 5);
    bad(&s, "[1,\"2\"]", "type mismatch: expected integer");
    let u = schema(r#"{"uniqueItems":true}"#);
    ok(
        &u,
        r#"[{"a":1,"b":2},{"a":1,"b":3},[1],"1",1,true,null,false]"#,
    );
    bad(
        &u,
        r#"[{"a":1,"b":[2,{"c":"\u0078"}]},{"b":[2,{"c":"x"}],"a":1.0}]"#,
        "uniqueItems: duplicate item",
    );
    bad(&u, r#"["é","\u00e9"]"#, "uniqueItems: duplicate item");
    ok(&u, r#"[[1,2],[2,1],{"a":1},{"a":1,"b":1}]"#);
}

#[test]
fn tuple_forms() {
    let d7 = schema(
        r#"{"$schema":"http://json-schema.org/draft-07/schema#","items":[{"type":"string"},{"type":"integer"}],"additionalItems":false}"#,
    );
    ok(&d7, r#"["a",1]"#);
    ok(&d7, r#"["a"]"#);
    assert_eq!(bad(&d7, r#"["a",1,2]"#, "additional item not allowed"), 7);
    bad(&d7, r#"[1]"#, "type mismatch: expected string");
    let d2020 = schema_2020(r#"{"prefixItems":[{"type":"string"}],"items":{"type":"boolean"}}"#);
    ok(&d2020, r#"["a",true,false]"#);
    bad(&d2020, r#"["a",true,0]"#, "type mismatch: expected boolean");
    let closed = schema_2020(r#"{"prefixItems":[true],"items":false}"#);
    bad(&closed, "[1,2]", "additional item not allowed");
    // Keywords of other drafts are ignored: prefixItems in draft 7 (the
    // default), the array form of items in 2020-12 is refused.
    let d7_prefix = schema(r#"{"prefixItems":[{"type":"string"}]}"#);
    ok(&d7_prefix, "[1]");
    assert_eq!(
        d7_prefix.unenforced(),
        ["prefixItems (not a draft-07 keyword: ignored) at #"]
    );
    let text =
        r#"{"$schema":"https://json-schema.org/draft/2020-12/schema","items":[{"type":"string"}]}"#;
    compile_err(text, "items must be a schema in 2020-12");
    let d2019 = schema(
        r#"{"$schema":"https://json-schema.org/draft/2019-09/schema","prefixItems":[{"type":"string"}],"items":[{"type":"integer"}],"additionalItems":false}"#,
    );
    ok(&d2019, "[1]");
    bad(&d2019, "[1,2]", "additional item not allowed");
    // additionalItems without the tuple form is ignored (the spec says so).
    let ignored = schema(r#"{"items":{"type":"integer"},"additionalItems":false}"#);
    ok(&ignored, "[1,2,3]");
}

#[test]
fn contains() {
    let s = schema_2020(r#"{"contains":{"type":"string"},"minContains":2,"maxContains":3}"#);
    ok(&s, r#"[1,"a","b"]"#);
    bad(&s, r#"[1,"a"]"#, "contains: too few matching items");
    bad(
        &s,
        r#"["a","b","c","d"]"#,
        "contains: too many matching items",
    );
    let plain = schema(r#"{"contains":{"const":5}}"#);
    ok(&plain, "[1,5]");
    bad(&plain, "[1,2]", "contains: too few matching items");
    bad(&plain, "[]", "contains: too few matching items");
    // minContains is not a draft 7 keyword, contains not a draft 4 one.
    let d7 = schema(r#"{"contains":{"type":"string"},"minContains":2}"#);
    ok(&d7, r#"[1,"a"]"#);
    let d4 = schema(
        r#"{"$schema":"http://json-schema.org/draft-04/schema#","contains":{"type":"string"}}"#,
    );
    ok(&d4, "[1]");
}

#[test]
fn enum_and_const() {
    let s = schema(r#"{"enum":["red",1,null,{"a":[1,2]}]}"#);
    ok(&s, r#""red""#);
    ok(&s, r#""r\u0065d""#);
    ok(&s, "1.0");
    ok(&s, "null");
    ok(&s, r#" { "a" : [ 1 , 2.0 ] } "#);
    bad(&s, r#"{"a":[2,1]}"#, "value not in enum");
    bad(&s, r#""blue""#, "value not in enum");
    let c = schema(r#"{"const":{"x":"y"}}"#);
    ok(&c, r#"{"x":"y"}"#);
    bad(&c, r#"{"x":"y","z":1}"#, "value not equal to const");
    bad(&c, "false", "value not equal to const");
    let empty = schema(r#"{"enum":[]}"#);
    bad(&empty, "1", "value not in enum (the enum is empty)");
    bad(&empty, "null", "value not in enum (the enum is empty)");
}

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
fn unenforced_keywords_are_listed() {
    // Draft 7 (no $schema): 2019-09 keywords are ignored and said so,
    // format is an annotation, the draft 7 keywords are enforced.
    let s = schema(
        r##"{"properties":{"name":{"type":"string","pattern":"^a","format":"email","contentMediaType":"text/plain"},
             "m":{"patternProperties":{"x":{}},"dependentRequired":{"a":["b"]},"unevaluatedProperties":false}},
             "dependencies":{"a":["b"]}}"##,
    );
    assert_eq!(
        s.unenforced(),
        [
            "contentMediaType (annotation only) at #/properties/name",
            "dependentRequired (not a draft-07 keyword: ignored) at #/properties/m",
            "format \"email\" (annotation only: not asserted) at #/properties/name",
            "unevaluatedProperties (not a draft-07 keyword: ignored) at #/properties/m",
        ]
    );
    bad(&s, r#"{"name":1}"#, "type mismatch: expected string");
    bad(&s, r#"{"name":"b"}"#, "string does not match pattern");
    bad(
        &s,
        r#"{"a":1}"#,
        "property required by a present property (dependentRequired) missing",
    );
    ok(&s, r#"{"name":"a@b","a":1,"b":2,"m":{"a":1}}"#);
    // Drafts 4-7 ignore the siblings of $ref, so they are not reported.
    let r = schema(
        r##"{"definitions":{"a":{}},"properties":{"x":{"$ref":"#/definitions/a","prefixItems":[]}}}"##,
    );
    assert!(r.unenforced().is_empty(), "{:?}", r.unenforced());
    assert!(
        schema(r#"{"type":"string","x-unknown":1}"#)
            .unenforced()
            .is_empty()
    );
}

#[test]
fn strict_parser() {
    let t = schema("true");
    let cases: &[(&[u8], &str, usize)] = &[
        (b"", "empty section: expected a JSON value", 0),
        (b"  \n", "empty section: expected a JSON value", 3),
        (b"\"a\xff\"", "invalid UTF-8", 2),
        (b"\"\xed\xa0\x80\"", "invalid UTF-8", 1),
        (br#""\ud800""#, "lone surrogate in \\u escape", 1),
        (br#""\udc00\ud800""#, "lone surrogate in \\u escape", 1),
        (br#""\ud800\u0041""#, "lone surrogate in \\u escape", 1),
        (br#""\x""#, "invalid escape in string", 1),
        (br#""\u12g4""#, "invalid escape in string", 1),
        (b"\"a\x01\"", "unescaped control character in string", 2),
        (b"[1,2,]", "trailing comma", 5),
        (b"{\"a\":1,}", "trailing comma", 7),
        (b"012", "leading zero in number", 0),
        (b"-01", "leading zero in number", 0),
        (b"1.", "invalid number", 0),
        (b"1e", "invalid number", 0),
        (b".5", "unexpected character", 0),
        (b"+1", "unexpected character", 0),
        (b"-", "unexpected end of input", 1),
        (b"tru", "unexpected end of input", 3),
        (b"trux", "invalid literal", 0),
        (b"nul", "unexpected end of input", 3),
        (b"{\"a\" 1}", "expected ':' after a key", 5),
        (b"{1:2}", "expected a string key", 1),
        (b"{\"a\":1 \"b\":2}", "expected ',' or '}'", 7),
        (b"[1 2]", "expected ',' or ']'", 3),
        (b"[1,2", "unexpected end of input", 4),
        (b"{\"a\":", "unexpected end of input", 5),
        (b"\"abc", "unexpected end of input", 4),
        (b"1 2", "trailing characters after the value", 2),
        (b"{} x", "trailing characters after the value", 3),
        (b"[1]]", "trailing characters after the value", 3),
    ];
    let obj = schema(
        r#"{"type":["object","array","string","number","boolean","null"],"properties":{"a":{"type":"integer"}},"items":{"type":"integer"}}"#,
    );
    for &(doc, msg, off) in cases {
        for s in [&t, &obj] {
            let e = s.validate(doc).expect_err(&String::from_utf8_lossy(doc));
            assert_eq!(
                (e.message, e.offset),
                (msg, off),
                "{:?}",
                String::from_utf8_lossy(doc)
            );
        }
    }
    for doc in [
        r#" {"a" : [1, -0.5e+10, "\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00", true, false, null, {}, []]} "#,
        "\t\r\n 0 \n",
    ] {
        ok(&t, doc);
    }
}

#[test]
fn depth_limit() {
    let t = schema("true");
    let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    ok(&t, &nested(DEPTH_MAX));
    assert_eq!(
        bad(&t, &nested(DEPTH_MAX + 1), "nesting deeper than DEPTH_MAX"),
        DEPTH_MAX
    );
    let objs = |n: usize| format!("{}1{}", r#"{"a":"#.repeat(n), "}".repeat(n));
    let rec = schema(r##"{"type":["object","integer"],"properties":{"a":{"$ref":"#"}}}"##);
    ok(&rec, &objs(DEPTH_MAX));
    bad(&rec, &objs(DEPTH_MAX + 1), "nesting deeper than DEPTH_MAX");
    // Far deeper than the limit: refused, no stack overflow.
    bad(&rec, &objs(100_000), "nesting deeper than DEPTH_MAX");
    bad(&t, &"[".repeat(1_000_000), "nesting deeper than DEPTH_MAX");
}

#[test]
fn work_budget_bounds_quadratic_uniqueness() {
    // Many equal-looking long items: pairwise comparison is quadratic, so
    // the budget stops it with a clear error instead of running long.
    let u = schema(r#"{"uniqueItems":true}"#);
    let item = format!("\"{}\"", "a".repeat(100));
    let mut doc = String::from("[");
    for k in 0..2000 {
        doc.push_str(&item[..item.len() - 1]);
        doc.push_str(&format!("{k}\","));
    }
    doc.push_str("0]");
    bad(&u, &doc, json::BUDGET_EXCEEDED);
    // A small unique array passes.
    ok(&u, "[1,2,3,4,5,6,7,8]");
}

#[test]
fn budget_is_not_mistaken_for_a_mismatch() {
    // Budget exhaustion inside `not` must fail validation, not satisfy `not`.
    let s = schema(r#"{"not":{"uniqueItems":true}}"#);
    let item = format!("\"{}\"", "b".repeat(100));
    let mut doc = String::from("[");
    for k in 0..2000 {
        doc.push_str(&item[..item.len() - 1]);
        doc.push_str(&format!("{k}\","));
    }
    doc.push_str("0]");
    bad(&s, &doc, json::BUDGET_EXCEEDED);
}

#[test]
fn limits_are_enforced_at_compile() {
    let names: Vec<String> = (0..=json::REQUIRED_MAX)
        .map(|k| format!("\"p{k}\""))
        .collect();
    compile_err(
        &format!(r#"{{"required":[{}]}}"#, names.join(",")),
        "REQUIRED_MAX",
    );
    let long = "n".repeat(json::PROPERTY_NAME_BYTES_MAX + 1);
    compile_err(
        &format!(r#"{{"properties":{{"{long}":true}}}}"#),
        "PROPERTY_NAME_BYTES_MAX",
    );
    let values: Vec<String> = (0..=json::ENUM_VALUES_MAX).map(|k| k.to_string()).collect();
    compile_err(
        &format!(r#"{{"enum":[{}]}}"#, values.join(",")),
        "ENUM_VALUES_MAX",
    );
    let subs = vec!["true"; json::SUBSCHEMAS_MAX + 1].join(",");
    compile_err(&format!(r#"{{"anyOf":[{subs}]}}"#), "SUBSCHEMAS_MAX");
    // 64 required names fit the bitmask; each one is tracked.
    let names: Vec<String> = (0..json::REQUIRED_MAX)
        .map(|k| format!("\"p{k}\""))
        .collect();
    let s = schema(&format!(r#"{{"required":[{}]}}"#, names.join(",")));
    let full: Vec<String> = (0..json::REQUIRED_MAX)
        .map(|k| format!("\"p{k}\":{k}"))
        .collect();
    ok(&s, &format!("{{{}}}", full.join(",")));
    let missing_last: Vec<String> = full[..json::REQUIRED_MAX - 1].to_vec();
    bad(
        &s,
        &format!("{{{}}}", missing_last.join(",")),
        "required property missing",
    );
}

#[test]
fn many_properties_use_binary_search() {
    let props: Vec<String> = (0..500)
        .map(|k| format!(r#""k{k}":{{"const":{k}}}"#))
        .collect();
    let s = schema(&format!(
        r#"{{"properties":{{{}}},"additionalProperties":false}}"#,
        props.join(",")
    ));
    ok(&s, r#"{"k0":0,"k499":499,"k250":250}"#);
    bad(&s, r#"{"k17":18}"#, "value not equal to const");
    bad(&s, r#"{"k500":500}"#, "additional property not allowed");
}

fn pred(e: &str) -> Predicate {
    Predicate::parse(e).unwrap_or_else(|err| panic!("{e}: {err}"))
}

#[test]
fn predicates() {
    let doc = br#" {"intent":"reasoning","meta":{"priority":3,"tags":["a","b\u00e9"],"w e":1.5},
                    "flags":[true,false],"x":null,"esc\"key":"tab\there"} "#;
    let yes = [
        r#"$.intent == "reasoning""#,
        r#"$.intent != "chat""#,
        r#"$.meta.priority == 3"#,
        r#"$.meta.priority == 3.0"#,
        r#"$.meta.priority == 3e0"#,
        r#"$.meta.priority != 4"#,
        r#"$.meta.tags[1] == "bé""#,
        r#"$.meta.tags[1] == "b\u00e9""#,
        r#"$.meta["w e"] == 1.5"#,
        r#"$["esc\"key"] == "tab\there""#,
        r#"$.flags[0] == true"#,
        r#"$.flags[1] == false"#,
        r#"$.x == null"#,
        r#"$.missing != 1"#,
        r#"$.meta.tags[5] != "a""#,
        r#"$.intent.deeper != 1"#,
        r#"  $.intent=="reasoning"  "#,
    ];
    for e in yes {
        assert!(pred(e).matches(doc), "{e} should match");
    }
    let no = [
        r#"$.intent == "Reasoning""#,
        r#"$.meta.priority == "3""#,
        r#"$.meta.priority != 3"#,
        r#"$.missing == 1"#,
        r#"$.meta.tags[2] == "a""#,
        r#"$.flags[0] == 1"#,
        r#"$.x == false"#,
        r#"$.meta == 3"#,
        r#"$.intent.deeper == 1"#,
    ];
    for e in no {
        assert!(!pred(e).matches(doc), "{e} should not match");
    }
    let p = pred(r#"$.meta.priority == 3"#);
    assert_eq!(p.path(), "$.meta.priority");
    assert_eq!(p.to_string(), "$.meta.priority == 3");
}

#[test]
fn predicates_on_garbage_are_false() {
    // Only the bytes up to the end of the target value are read (the
    // section was validated before); malformed bytes there make both
    // operators false.
    let eq = pred(r#"$.a.b == 1"#);
    let ne = pred(r#"$.a.b != 1"#);
    for doc in [
        &b""[..],
        b"{",
        b"{\"a\":",
        b"{\"a\":{\"b\":",
        b"{\"a\":{\"b\":01}}",
        b"{\"a\":{\"b\":\"\\ud800\"}}",
        b"{\"z\":[1,,2],\"a\":{\"b\":1}}",
        b"\xff\xfe{",
        b"{\"a\xff\":1,\"a\":{\"b\":\"\\ud800\"}}",
    ] {
        assert!(!eq.matches(doc), "{:?}", String::from_utf8_lossy(doc));
        assert!(!ne.matches(doc), "{:?}", String::from_utf8_lossy(doc));
    }
    let deep = "[".repeat(1_000_000);
    assert!(!pred("$[0][0] == 1").matches(deep.as_bytes()));
    assert!(!pred("$[0][0] != 1").matches(deep.as_bytes()));
}

#[test]
fn predicate_parse_errors() {
    for e in [
        "",
        "intent == 1",
        "$.intent",
        "$.intent = 1",
        "$. == 1",
        "$.a == [1]",
        "$.a == {}",
        "$.a == reasoning",
        "$[x] == 1",
        "$[\"a\" == 1",
        "$.a.b.c.d.e.f.g.h.i == 1",
        "$.a == 1 2",
    ] {
        assert!(Predicate::parse(e).is_err(), "{e:?} should not parse");
    }
    assert!(Predicate::parse("$.a.b.c.d.e.f.g.h == 1").is_ok());
    assert!(Predicate::parse("$ == 1").unwrap().matches(b"1.0"));
}

#[test]
fn draft4_integers_are_literals() {
    let d4 = schema(r#"{"$schema":"http://json-schema.org/draft-04/schema#","type":"integer"}"#);
    ok(&d4, "12");
    bad(&d4, "1.0", "type mismatch: expected integer");
    bad(&d4, "1e2", "type mismatch: expected integer");
    let d6 = schema(r#"{"$schema":"http://json-schema.org/draft-06/schema#","type":"integer"}"#);
    ok(&d6, "1.0");
}

#[test]
fn ref_chains_resolve() {
    let s = schema(
        r##"{"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/c"},"c":{"type":"integer"}}}"##,
    );
    ok(&s, "3");
    bad(&s, "\"3\"", "type mismatch: expected integer");
}

/// Worst case for recursion: nesting at DEPTH_MAX with, at every level, an
/// applicator chain of APPLICATOR_DEPTH_MAX. Measured need: under 256 KiB
/// optimised, up to 4 MiB unoptimised; the test gives each twice that.
#[test]
fn worst_case_recursion_fits_a_small_stack() {
    let stack_bytes: usize = if cfg!(debug_assertions) {
        8 << 20
    } else {
        512 << 10
    };
    let mut chain =
        r##"{"type":["object","integer"],"properties":{"a":{"$ref":"#/$defs/n"}}}"##.to_string();
    for _ in 0..(json::APPLICATOR_DEPTH_MAX - 1) {
        chain = format!(r#"{{"allOf":[{chain}]}}"#);
    }
    let text = format!(r##"{{"$defs":{{"n":{chain}}},"$ref":"#/$defs/n"}}"##);
    let s = JsonSchema::compile(&text, &[]).unwrap();
    let doc = format!("{}1{}", r#"{"a":"#.repeat(DEPTH_MAX), "}".repeat(DEPTH_MAX));
    let too_deep = format!(
        "{}1{}",
        r#"{"a":"#.repeat(DEPTH_MAX + 1),
        "}".repeat(DEPTH_MAX + 1)
    );
    let verdicts = std::thread::Builder::new()
        .stack_size(stack_bytes)
        .spawn(move || (s.validate(doc.as_bytes()), s.validate(too_deep.as_bytes())))
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(verdicts.0, Ok(()));
    assert_eq!(
        verdicts.1.unwrap_err().message,
        "nesting deeper than DEPTH_MAX"
    );
}

#[test]
fn worst_case_recursion_with_evaluation_marks_fits_a_small_stack() {
    // The heavier frames: every applicator level collects marks for
    // unevaluatedProperties, through $dynamicRef, with an anyOf (which
    // keeps a bit set per branch) at the bottom of each chain.
    let stack_bytes: usize = if cfg!(debug_assertions) {
        8 << 20
    } else {
        512 << 10
    };
    let mut chain = r##"{"anyOf":[{"type":["object","integer"],"properties":{"a":{"$dynamicRef":"#n"}}},{"type":"string"}],"unevaluatedProperties":false}"##
        .to_string();
    for _ in 0..(json::APPLICATOR_DEPTH_MAX - 3) {
        chain = format!(r#"{{"allOf":[{chain}],"unevaluatedProperties":false}}"#);
    }
    let text = format!(
        r##"{{"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"http://x.test/s","$dynamicAnchor":"n","$ref":"#/$defs/n","$defs":{{"n":{chain}}}}}"##
    );
    let s = JsonSchema::compile(&text, &[]).unwrap();
    let doc = format!("{}1{}", r#"{"a":"#.repeat(DEPTH_MAX), "}".repeat(DEPTH_MAX));
    let verdict = std::thread::Builder::new()
        .stack_size(stack_bytes)
        .spawn(move || s.validate(doc.as_bytes()))
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(verdict, Ok(()));
}

proptest::proptest! {
    /// Code point counting (word-at-a-time scan, escapes, multi-byte UTF-8)
    /// agrees with std on arbitrary strings, at every alignment.
    #[test]
    fn string_length_matches_std(s in "\\PC{0,40}|[a-z\"\\\\\u{1}é😀]{0,40}", pad in 0usize..9) {
        let n = s.chars().count();
        let doc = format!("{}{}", " ".repeat(pad), serde_json::to_string(&s).unwrap());
        let exact = schema(&format!(r#"{{"minLength":{n},"maxLength":{n}}}"#));
        proptest::prop_assert_eq!(exact.validate(doc.as_bytes()), Ok(()));
        if n > 0 {
            let shorter = schema(&format!(r#"{{"maxLength":{}}}"#, n - 1));
            proptest::prop_assert_eq!(shorter.validate(doc.as_bytes()).unwrap_err().message, "string longer than maxLength");
        }
        // Unterminated: always an error, never a panic.
        let cut = &doc.as_bytes()[..doc.len() - 1];
        proptest::prop_assert!(exact.validate(cut).is_err());
    }
}

#[test]
fn long_property_names_sharing_a_prefix() {
    let s = schema(
        r#"{"properties":{"abcdefgh_1":{"type":"integer"},"abcdefgh_2":{"type":"string"},
            "abcdefgh":{"type":"null"},"abcdefghi":{"type":"boolean"},"b":{"const":1}},
            "additionalProperties":false}"#,
    );
    ok(
        &s,
        r#"{"abcdefgh_1":1,"abcdefgh_2":"x","abcdefgh":null,"abcdefghi":true,"b":1}"#,
    );
    ok(&s, r#"{"abcdefgh\u005f2":"x","\u0061bcdefgh":null}"#);
    bad(&s, r#"{"abcdefgh_2":1}"#, "type mismatch: expected string");
    bad(
        &s,
        r#"{"abcdefgh_1":"x"}"#,
        "type mismatch: expected integer",
    );
    bad(
        &s,
        r#"{"abcdefghi":null}"#,
        "type mismatch: expected boolean",
    );
    bad(&s, r#"{"abcdefgh_3":1}"#, "additional property not allowed");
    bad(&s, r#"{"abcdefgh_":1}"#, "additional property not allowed");
}

#[test]
fn unique_items_short_and_long_arrays() {
    let u = schema(r#"{"uniqueItems":true}"#);
    for n in [2usize, 31, 32, 33, 100] {
        let items: Vec<String> = (0..n).map(|k| format!("\"s{k}\"")).collect();
        ok(&u, &format!("[{}]", items.join(",")));
        let with_dup = format!("[{},\"s{}\"]", items.join(","), n - 1);
        bad(&u, &with_dup, "uniqueItems: duplicate item");
        let escaped_dup = format!("[{},\"\\u0073{}\"]", items.join(","), n / 2);
        bad(&u, &escaped_dup, "uniqueItems: duplicate item");
        let numbers: Vec<String> = (0..n).map(|k| k.to_string()).collect();
        ok(&u, &format!("[{}]", numbers.join(",")));
        bad(
            &u,
            &format!("[{},{}.0]", numbers.join(","), n - 1),
            "uniqueItems: duplicate item",
        );
    }
    ok(&u, "[true,false,null,0,\"\",[],{}]");
    bad(&u, "[false,null,false]", "uniqueItems: duplicate item");
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
