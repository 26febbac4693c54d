//! Object and array keywords: properties (escaped, many, sharing a
//! prefix), arrays, tuple forms, `contains`, `uniqueItems`.

use super::*;

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
