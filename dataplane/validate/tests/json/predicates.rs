//! Content predicates: matching, garbage input, parse errors.

use super::*;

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
