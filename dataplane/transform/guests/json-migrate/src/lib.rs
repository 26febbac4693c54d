//! Migrates the `chat` request section between its two registered JSON
//! Schema versions (schemas in dataplane/transform/testdata/):
//!
//! * version 1: `{"user", "prompt", "max_tokens"?}`
//! * version 2: `{"user_id", "prompt", "max_output_tokens", "temperature", "lang"}`
//!
//! 1 → 2 renames `user` to `user_id` and `max_tokens` to
//! `max_output_tokens` (default 256), and adds `temperature` (1.0) and
//! `lang` ("en"). 2 → 1 renames back and drops the added fields.

wit_bindgen::generate!({ world: "transform", path: "../../wit" });

use exports::sluice::transform::transformer::Guest;
use serde_json::{Map, Value};
use sluice::transform::host;
use sluice::transform::types::{ErrorCode, Payload};

/// Default of `max_output_tokens` when version 1 leaves `max_tokens` out.
const MAX_OUTPUT_TOKENS_DEFAULT: u64 = 256;
const TEMPERATURE_DEFAULT: f64 = 1.0;
const LANG_DEFAULT: &str = "en";

struct Migrate;

fn rename(m: &mut Map<String, Value>, from: &str, to: &str) {
    if let Some(v) = m.remove(from) {
        m.insert(to.to_string(), v);
    }
}

fn up(mut m: Map<String, Value>) -> Result<Map<String, Value>, ErrorCode> {
    if !m.contains_key("user") {
        return Err(ErrorCode::InvalidInput);
    }
    rename(&mut m, "user", "user_id");
    rename(&mut m, "max_tokens", "max_output_tokens");
    m.entry("max_output_tokens")
        .or_insert(Value::from(MAX_OUTPUT_TOKENS_DEFAULT));
    m.entry("temperature")
        .or_insert(Value::from(TEMPERATURE_DEFAULT));
    m.entry("lang").or_insert(Value::from(LANG_DEFAULT));
    Ok(m)
}

fn down(mut m: Map<String, Value>) -> Result<Map<String, Value>, ErrorCode> {
    if !m.contains_key("user_id") {
        return Err(ErrorCode::InvalidInput);
    }
    rename(&mut m, "user_id", "user");
    rename(&mut m, "max_output_tokens", "max_tokens");
    m.remove("temperature");
    m.remove("lang");
    Ok(m)
}

impl Guest for Migrate {
    fn transform(input: Payload, from: u32, to: u32) -> Result<(), ErrorCode> {
        let Payload::Section(bytes) = input else {
            host::log(
                host::Level::Warn,
                "json-migrate reads sections, not tensors",
            );
            return Err(ErrorCode::UnsupportedVersions);
        };
        let step: fn(Map<String, Value>) -> Result<Map<String, Value>, ErrorCode> = match (from, to)
        {
            (1, 2) => up,
            (2, 1) => down,
            _ => return Err(ErrorCode::UnsupportedVersions),
        };
        let Ok(Value::Object(m)) = serde_json::from_slice::<Value>(&bytes) else {
            return Err(ErrorCode::InvalidInput);
        };
        let out = serde_json::to_vec(&Value::Object(step(m)?)).map_err(|_| ErrorCode::Internal)?;
        if out.len() > host::output_bytes_max() as usize {
            return Err(ErrorCode::OutputTooLarge);
        }
        host::emit_section(&out)
    }
}

export!(Migrate);
