//! Keywords on scalars: `type`, numbers and their draft differences,
//! `multipleOf`, string lengths (and a proptest of code point counting),
//! `enum`/`const`.

use super::*;

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
fn draft4_integers_are_literals() {
    let d4 = schema(r#"{"$schema":"http://json-schema.org/draft-04/schema#","type":"integer"}"#);
    ok(&d4, "12");
    bad(&d4, "1.0", "type mismatch: expected integer");
    bad(&d4, "1e2", "type mismatch: expected integer");
    let d6 = schema(r#"{"$schema":"http://json-schema.org/draft-06/schema#","type":"integer"}"#);
    ok(&d6, "1.0");
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
