//! The bundled decoder (`models/decoder.onnx`) generates, under
//! onnxruntime-python's greedy loop (tests/streams/decoder_reference.py),
//! exactly the tokens of the plain-Rust reference: the sequence a token
//! stream must produce.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::collections::BTreeMap;

use sluice_models::decoder::{DECODER_EOS, decoder_generate};

const PROMPTS: &[&str] = &["hello", "Sluice", "a", "token streams", "zz", "0123456789"];
const MAX_TOKENS: usize = 32;

/// Parses the script's `{"prompt": [t, ...], ...}` (no serde here).
fn parse(json: &str) -> BTreeMap<String, Vec<i64>> {
    let mut out = BTreeMap::new();
    let body = json.trim().trim_start_matches('{').trim_end_matches('}');
    for part in body.split(']').filter(|p| p.contains('[')) {
        let (key, list) = part.split_once('[').unwrap();
        let key = key.trim_matches([',', ' ', ':', '"']);
        let toks = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().unwrap())
            .collect();
        out.insert(key.to_string(), toks);
    }
    out
}

#[test]
fn decoder_generation_equals_onnxruntime_python() {
    let root = sluice_models::models_dir().parent().unwrap().to_path_buf();
    let python = std::env::var("SLUICE_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(&python)
        .arg(root.join("tests/streams/decoder_reference.py"))
        .arg(root.join("models/decoder.onnx"))
        .arg(MAX_TOKENS.to_string())
        .args(PROMPTS)
        .output()
        .unwrap_or_else(|e| panic!("{python}: {e}"));
    assert!(
        out.status.success(),
        "decoder_reference.py failed (needs onnxruntime and numpy: scripts/setup.sh): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reference = parse(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(reference.len(), PROMPTS.len());
    let (mut eos, mut full) = (0, 0);
    for p in PROMPTS {
        let want = &reference[*p];
        let got = decoder_generate(
            p.as_bytes()
                .iter()
                .map(|&b| i64::from(b))
                .collect::<Vec<_>>()
                .as_slice(),
            MAX_TOKENS,
        );
        assert_eq!(&got, want, "prompt {p:?}");
        assert!(!got.contains(&DECODER_EOS));
        if got.len() == MAX_TOKENS {
            full += 1;
        } else {
            eos += 1;
        }
    }
    // The prompts exercise both ends: EOS and max_tokens.
    assert!(eos > 0 && full > 0, "eos {eos}, max_tokens {full}");
}
