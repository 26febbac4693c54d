//! `AvroSchema::validate` on arbitrary bytes against a few fixed schemas (the
//! first input byte picks one). Never panics; an error's offset is inside
//! the input; an accepted section followed by one more byte is refused as
//! trailing bytes, exactly at the old end.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sluice_validate::Reference;
use sluice_validate::avro::AvroSchema;

const SCHEMAS: &[&str] = &[
    r#"{"type":"record","name":"Root","namespace":"fz","fields":[
        {"name":"b","type":"boolean"},
        {"name":"i","type":"int"},
        {"name":"l","type":"long"},
        {"name":"f","type":"float"},
        {"name":"d","type":"double"},
        {"name":"by","type":"bytes"},
        {"name":"s","type":"string"},
        {"name":"e","type":{"type":"enum","name":"Color","symbols":["R","G","B"]}},
        {"name":"fx","type":{"type":"fixed","name":"Four","size":4}},
        {"name":"arr","type":{"type":"array","items":"long"}},
        {"name":"m","type":{"type":"map","values":["null","string","Four"]}},
        {"name":"next","type":["null","Root"]}
    ]}"#,
    r#"["null","int","string",{"type":"array","items":"null"},{"type":"map","values":"boolean"}]"#,
    r#"{"type":"array","items":{"type":"record","name":"Empty","fields":[{"name":"n","type":"null"}]}}"#,
    r#"{"type":"record","name":"Tree","fields":[
        {"name":"kids","type":{"type":"array","items":"Tree"}},
        {"name":"attrs","type":{"type":"map","values":"Tree"}},
        {"name":"addr","type":["null","com.acme.Address"]}
    ]}"#,
];

const ADDRESS: &str = r#"{"type":"record","name":"Address","namespace":"com.acme","fields":[
    {"name":"city","type":"string"},{"name":"zip","type":{"type":"fixed","name":"Zip","size":5}}]}"#;

fn schemas() -> &'static [AvroSchema] {
    static COMPILED: OnceLock<Vec<AvroSchema>> = OnceLock::new();
    COMPILED.get_or_init(|| {
        let refs = [Reference {
            name: "com.acme.Address",
            schema: ADDRESS,
        }];
        SCHEMAS
            .iter()
            .map(|s| AvroSchema::compile(s, &refs).expect("fixed schema compiles"))
            .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, section)) = data.split_first() else {
        return;
    };
    let schemas = schemas();
    let schema = &schemas[pick as usize % schemas.len()];
    match schema.validate(section) {
        Ok(()) => {
            let mut longer = section.to_vec();
            longer.push(0);
            let e = schema
                .validate(&longer)
                .expect_err("one more byte is trailing");
            assert_eq!(e.message, "trailing bytes after the value");
            assert_eq!(e.offset, section.len());
        }
        Err(e) => assert!(e.offset <= section.len()),
    }
});
