//! `JsonSchema::compile` on arbitrary schema text (the control path: what a
//! registry push carries): it must return a schema or a `CompileError`,
//! never panic, hang or exhaust memory (limits on nodes, patterns, DFA
//! sizes, documents). Whatever compiles then validates a few sections
//! without panicking, its errors inside the section.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_validate::Reference;
use sluice_validate::json::{CompileOptions, Draft, FormatMode, JsonSchema};

const SECTIONS: &[&[u8]] = &[
    br#"{"a":[1,"x",{"b":null}],"c":true,"d":-1.5e3}"#,
    br#"["a\u00e9",[],{},0]"#,
    br#""2024-01-01T00:00:00Z""#,
    b"42",
];

const REFS: &[(&str, &str)] = &[
    (
        "other.json",
        r#"{"$id":"http://f.test/other","$anchor":"x","type":"object"}"#,
    ),
    (
        "http://f.test/meta",
        r#"{"$schema":"https://json-schema.org/draft/2020-12/schema","$vocabulary":{"https://json-schema.org/draft/2020-12/vocab/core":true}}"#,
    ),
];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let refs: Vec<Reference<'_>> = REFS
        .iter()
        .map(|&(name, schema)| Reference { name, schema })
        .collect();
    // The first byte picks the default draft and the format mode.
    let pick = data.first().copied().unwrap_or(0);
    let options = CompileOptions {
        default_draft: match pick % 5 {
            0 => Draft::Draft4,
            1 => Draft::Draft6,
            2 => Draft::Draft7,
            3 => Draft::Draft2019_09,
            _ => Draft::Draft2020_12,
        },
        format: if pick & 8 != 0 {
            FormatMode::Assertion
        } else {
            FormatMode::Annotation
        },
    };
    if let Ok(s) = JsonSchema::compile_with(text, &refs, &options) {
        for sec in SECTIONS {
            if let Err(e) = s.validate(sec) {
                assert!(e.offset <= sec.len(), "{e:?}");
            }
        }
    }
});
