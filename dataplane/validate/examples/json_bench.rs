//! Cost of `JsonSchema::validate` and `Predicate::matches` on a ~1 KiB
//! request section, as ratios against baselines measured in the same run:
//! the same parser with the `true` schema (syntax only), serde_json parsing
//! into a `Value`, and the jsonschema crate (parse into a `Value`, then
//! validate). Run: `cargo run --release -p sluice-validate --example json_bench`.

use std::hint::black_box;
use std::time::Instant;

use sluice_validate::json::{JsonSchema, Predicate};

const SCHEMA: &str = r##"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$defs": {"message": {"type": "object", "additionalProperties": false, "required": ["role", "content"],
             "properties": {"role": {"enum": ["system", "user", "assistant"]},
                            "content": {"type": "string", "maxLength": 4096}}}},
  "type": "object",
  "additionalProperties": false,
  "required": ["model", "version", "intent", "messages"],
  "properties": {
    "model": {"type": "string", "minLength": 1, "maxLength": 64},
    "version": {"type": "string", "maxLength": 32},
    "intent": {"enum": ["chat", "reasoning", "embedding", "rerank"]},
    "tenant": {"type": "string"},
    "meta": {"type": "object", "required": ["priority"],
             "properties": {"priority": {"type": "integer", "minimum": 0, "maximum": 9},
                            "deadline_us": {"type": "integer", "exclusiveMinimum": 0},
                            "trace": {"type": "string", "minLength": 55, "maxLength": 55}}},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 16}, "uniqueItems": true, "maxItems": 8},
    "messages": {"type": "array", "minItems": 1, "maxItems": 32, "items": {"$ref": "#/$defs/message"}},
    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    "max_tokens": {"type": "integer", "minimum": 1, "maximum": 32768},
    "stream": {"type": "boolean"}
  }
}"##;

fn section() -> Vec<u8> {
    let text = "Summarise the attached incident report in three bullet points, \
                naming the root cause, the blast radius and the follow-up owners. ";
    let doc = format!(
        r#"{{"model":"llama-3-8b-instruct","version":"2024-06-01","intent":"reasoning","tenant":"acme",
"meta":{{"priority":3,"deadline_us":15000,"trace":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
"tags":["ops","incident","summary","p1"],
"messages":[{{"role":"system","content":"You are a concise assistant for site reliability engineers."}},
{{"role":"user","content":"{}"}}],
"temperature":0.2,"max_tokens":512,"stream":false}}"#,
        text.repeat(4)
    );
    doc.into_bytes()
}

/// Median ns per call over a few rounds.
fn time(mut f: impl FnMut() -> bool) -> f64 {
    let iters = 20_000;
    let mut rounds = Vec::new();
    for _ in 0..7 {
        let t = Instant::now();
        for _ in 0..iters {
            black_box(f());
        }
        rounds.push(t.elapsed().as_nanos() as f64 / f64::from(iters));
    }
    rounds.sort_by(f64::total_cmp);
    rounds[rounds.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let doc = section();
    let schema = JsonSchema::compile(SCHEMA, &[])?;
    let syntax = JsonSchema::compile("true", &[])?;
    schema
        .validate(&doc)
        .map_err(|e| format!("the section is invalid: {} at {}", e.message, e.offset))?;
    let value: serde_json::Value = serde_json::from_slice(&doc)?;
    let theirs = jsonschema::validator_for(&serde_json::from_str(SCHEMA)?)?;
    if !theirs.is_valid(&value) {
        return Err("jsonschema finds the section invalid".into());
    }
    let pred = Predicate::parse(r#"$.intent == "reasoning""#)?;
    let deep_pred = Predicate::parse(r#"$.messages[1].role == "user""#)?;
    assert!(pred.matches(&doc) && deep_pred.matches(&doc));

    let ours = time(|| schema.validate(black_box(&doc)).is_ok());
    let floor = time(|| syntax.validate(black_box(&doc)).is_ok());
    let serde = time(|| serde_json::from_slice::<serde_json::Value>(black_box(&doc)).is_ok());
    let js = time(|| {
        serde_json::from_slice::<serde_json::Value>(black_box(&doc))
            .is_ok_and(|v| theirs.is_valid(&v))
    });
    let p1 = time(|| pred.matches(black_box(&doc)));
    let p2 = time(|| deep_pred.matches(black_box(&doc)));

    println!("section: {} bytes", doc.len());
    println!("validate (typical object schema): {ours:8.0} ns");
    println!(
        "validate (true schema, syntax only): {floor:8.0} ns  -> schema checks cost {:.2}x syntax",
        ours / floor
    );
    println!(
        "serde_json parse into Value:        {serde:8.0} ns  -> validate is {:.2}x faster",
        serde / ours
    );
    println!(
        "jsonschema crate (parse + validate): {js:8.0} ns  -> validate is {:.2}x faster",
        js / ours
    );
    println!("predicate $.intent:                 {p1:8.0} ns");
    println!("predicate $.messages[1].role:       {p2:8.0} ns");

    // A pattern over one 1 KiB string: the DFA's cost per byte.
    let text = format!("\"{}\"", "the quick brown fox ".repeat(51));
    let pattern = JsonSchema::compile(r#"{"pattern":"^[\\x20-\\x7e]*$"}"#, &[])?;
    if pattern.validate(text.as_bytes()).is_err() {
        return Err("the pattern refuses the string".into());
    }
    let plain = time(|| syntax.validate(black_box(text.as_bytes())).is_ok());
    let matched = time(|| pattern.validate(black_box(text.as_bytes())).is_ok());
    println!(
        "pattern over a {}-byte string:     {matched:8.0} ns  ({:.2} ns/byte over the syntax pass)",
        text.len(),
        (matched - plain) / text.len() as f64
    );
    Ok(())
}
