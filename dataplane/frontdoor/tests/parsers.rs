//! The front door's own parsers on arbitrary input: never a panic, and
//! what they accept obeys their rules. (serde_json, hyper and prost are
//! fuzzed upstream; the whole HTTP path gets mutated bodies over a real
//! socket in tests/http.rs.)
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use proptest::prelude::*;
use sluice_frontdoor::dtype::parse_json_data;
use sluice_frontdoor::semantic::{TIMEOUT_MAX, parse_duration, parse_traceparent};
use sluice_wire::DType;

fn json_like() -> impl Strategy<Value = String> {
    // Mostly array-shaped text, so the element writer is reached often.
    prop_oneof![
        ".*",
        proptest::collection::vec(
            prop_oneof![
                Just("[".to_string()),
                Just("]".to_string()),
                Just(",".to_string()),
                Just("true".to_string()),
                Just("null".to_string()),
                any::<i64>().prop_map(|v| v.to_string()),
                any::<f64>().prop_map(|v| v.to_string()),
                any::<u64>().prop_map(|v| v.to_string()),
            ],
            0..40
        )
        .prop_map(|v| v.concat()),
    ]
}

proptest! {
    #[test]
    fn json_data_never_panics(raw in json_like(), d in 0usize..13, n in 0usize..9) {
        let dtype = DType::ALL[d];
        let mut out = vec![0u8; n * dtype.size_bytes()];
        if parse_json_data(&raw, dtype, &mut out).is_ok() {
            // Accepted: valid JSON holding exactly n elements.
            prop_assert!(serde_json::from_str::<serde_json::Value>(&raw).is_ok());
        }
    }

    #[test]
    fn durations_are_positive_and_bounded(s in ".{0,24}") {
        if let Some(d) = parse_duration(&s) {
            prop_assert!(!d.is_zero() && d <= TIMEOUT_MAX);
        }
    }

    #[test]
    fn traceparents_never_panic(s in "[0-9a-f-]{0,60}|.{0,60}") {
        let t = parse_traceparent(&s);
        if t.is_set() {
            prop_assert_eq!(s.trim().len(), 55);
        }
    }
}
