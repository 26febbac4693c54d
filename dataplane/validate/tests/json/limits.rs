//! What is enforced and within what bounds: unenforced keywords listed,
//! the strict parser, depth, work budget, compile-time limits, stack use.

use super::*;

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
