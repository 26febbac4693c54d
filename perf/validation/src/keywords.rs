//! Part 4: what the keywords that need more than one pass cost on the hot
//! path (`pattern`/`patternProperties` as DFAs, `unevaluated*` with their
//! evaluation bit sets, `$dynamicRef` with the dynamic scope), each on a
//! 1 KiB section, against the `jsonschema` crate in the same run (its
//! `is_valid` on a parsed `serde_json::Value`, and parse + `is_valid`, which
//! is what it costs on bytes), and against this validator's own syntax-only
//! pass (the `true` schema) and a schema of plain keywords.

use std::hint::black_box;
use std::time::Instant;

use serde_json::{Value, json};
use sluice_validate::json::JsonSchema;

use crate::Result;

const PLAIN: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "id": {"type": "string", "minLength": 7, "maxLength": 7},
    "intent": {"enum": ["reasoning", "chat", "summarize"]},
    "text": {"type": "string", "maxLength": 4096},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 16},
    "meta": {"type": "object", "properties": {"tier": {"type": "integer"}, "region": {"type": "string"}}}
  },
  "required": ["id", "intent", "text"],
  "additionalProperties": false
}"#;

const PATTERN: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "id": {"type": "string", "pattern": "^u-[0-9]{5}$"},
    "intent": {"type": "string", "pattern": "^(reasoning|chat|summarize)$"},
    "text": {"type": "string", "pattern": "^[\\x20-\\x7e]*$"},
    "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z][a-z0-9-]{0,15}$"}},
    "meta": {"type": "object", "patternProperties": {"^[a-z]+$": {"type": ["integer", "string"]}},
             "additionalProperties": false}
  },
  "patternProperties": {"^x-[a-z]+$": {"type": "string"}},
  "required": ["id", "intent", "text"],
  "additionalProperties": false
}"#;

const UNEVALUATED: &str = r#"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {"id": {"type": "string"}, "text": {"type": "string"}},
  "allOf": [{"properties": {"intent": {"enum": ["reasoning", "chat", "summarize"]}}}],
  "anyOf": [{"properties": {"tags": {"type": "array", "prefixItems": [{"type": "string"}],
                                      "contains": {"type": "string"}, "unevaluatedItems": {"type": "string"}}}},
            {"required": ["nothing"]}],
  "if": {"properties": {"intent": {"const": "reasoning"}}, "required": ["intent"]},
  "then": {"properties": {"meta": {"type": "object", "properties": {"tier": true}, "unevaluatedProperties": {"type": "string"}}}},
  "unevaluatedProperties": false
}"#;

const DYNAMIC: &str = r##"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$id": "https://bench.test/strict-tree",
  "$dynamicAnchor": "node",
  "$ref": "tree",
  "unevaluatedProperties": false,
  "$defs": {
    "tree": {
      "$id": "tree",
      "$dynamicAnchor": "node",
      "type": "object",
      "properties": {
        "name": {"type": "string"},
        "kids": {"type": "array", "items": {"$dynamicRef": "#node"}}
      }
    }
  }
}"##;

fn text_of(len: usize) -> String {
    "the quick brown fox jumps over the lazy dog "
        .chars()
        .cycle()
        .take(len)
        .collect()
}

/// A request-like document padded to exactly 1 KiB through its text.
fn request(extra: Option<(&str, Value)>) -> Vec<u8> {
    let doc = |len: usize| {
        let mut v = json!({
            "id": "u-12345",
            "intent": "reasoning",
            "text": text_of(len),
            "tags": ["alpha", "beta", "gamma", "delta"],
            "meta": {"tier": 2, "region": "eu"}
        });
        if let Some((k, x)) = &extra {
            v[*k] = x.clone();
        }
        serde_json::to_vec(&v).unwrap_or_default()
    };
    let short = doc(0).len();
    doc(1024 - short)
}

/// A tree of named nodes, about 1 KiB.
fn tree() -> Vec<u8> {
    fn node(depth: usize, fan: usize, k: &mut usize) -> Value {
        *k += 1;
        let name = format!("node-{k:03}");
        if depth == 0 {
            return json!({"name": name});
        }
        let kids: Vec<Value> = (0..fan).map(|_| node(depth - 1, fan, k)).collect();
        json!({"name": name, "kids": kids})
    }
    let mut k = 0;
    let mut v = serde_json::to_vec(&node(3, 3, &mut k)).unwrap_or_default();
    // Pad to 1 KiB with whitespace, which both validators skip.
    v.resize(1024, b' ');
    v
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn time(iters: usize, mut f: impl FnMut() -> bool) -> f64 {
    let mut rounds = Vec::new();
    for _ in 0..11 {
        let t0 = Instant::now();
        for _ in 0..iters {
            black_box(f());
        }
        rounds.push(t0.elapsed().as_nanos() as f64 / iters as f64);
    }
    median(rounds)
}

struct Case {
    name: &'static str,
    schema: &'static str,
    section: Vec<u8>,
    /// A section the schema refuses (both validators must agree).
    bad: Vec<u8>,
}

pub fn run(quick: bool) -> Result<()> {
    let iters = if quick { 2_000 } else { 20_000 };
    let cases = [
        Case {
            name: "plain keywords",
            schema: PLAIN,
            section: request(None),
            bad: request(Some(("intent", json!("other")))),
        },
        Case {
            name: "pattern, patternProperties",
            schema: PATTERN,
            section: request(Some(("x-trace", json!("abc")))),
            bad: request(Some(("id", json!("u-1234x")))),
        },
        Case {
            name: "unevaluated*",
            schema: UNEVALUATED,
            section: request(None),
            bad: request(Some(("stray", json!(1)))),
        },
        Case {
            name: "$dynamicRef (strict tree)",
            schema: DYNAMIC,
            section: tree(),
            bad: br#"{"name":"a","kids":[{"name":"b","kids":[{"name":"c","extra":1}]}]}"#.to_vec(),
        },
    ];
    let syntax = JsonSchema::compile("true", &[])?;
    println!(
        "\n## Keywords vs the jsonschema crate (1 KiB sections, median of 11 rounds of {iters})"
    );
    println!(
        "| schema | sluice ns | jsonschema validate ns | jsonschema parse+validate ns | sluice / jsonschema validate | sluice / jsonschema parse+validate | sluice / its syntax pass |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for c in &cases {
        let ours = JsonSchema::compile(c.schema, &[])?;
        if !ours.unenforced().is_empty() {
            return Err(format!("{}: not enforced: {:?}", c.name, ours.unenforced()).into());
        }
        let theirs = jsonschema::validator_for(&serde_json::from_str(c.schema)?)?;
        let doc: Value = serde_json::from_slice(&c.section)?;
        let bad: Value = serde_json::from_slice(&c.bad)?;
        if c.section.len() != 1024 {
            return Err(format!("{}: section of {} bytes", c.name, c.section.len()).into());
        }
        if let Err(e) = ours.validate(&c.section) {
            return Err(format!("{}: the section is invalid: {e:?}", c.name).into());
        }
        if !theirs.is_valid(&doc) {
            return Err(format!("{}: the jsonschema crate refuses the section", c.name).into());
        }
        if ours.validate(&c.bad).is_ok() || theirs.is_valid(&bad) {
            return Err(format!("{}: the bad section is accepted", c.name).into());
        }
        let s = &c.section;
        let base = time(iters, || syntax.validate(black_box(s)).is_ok());
        let us = time(iters, || ours.validate(black_box(s)).is_ok());
        let them = time(iters, || theirs.is_valid(black_box(&doc)));
        let them_bytes = time(iters, || {
            serde_json::from_slice::<Value>(black_box(s)).is_ok_and(|v| theirs.is_valid(&v))
        });
        println!(
            "| {} | {us:.0} | {them:.0} | {them_bytes:.0} | {:.2}× | {:.2}× | {:.2}× |",
            c.name,
            us / them,
            us / them_bytes,
            us / base
        );
    }
    Ok(())
}
