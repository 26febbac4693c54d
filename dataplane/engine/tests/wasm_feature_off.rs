//! Without the `wasm` cargo feature there are no schema transforms: a config
//! that declares `accepts` is refused at the key that asks, and a transform
//! PUT is refused as unsupported; both name the feature. Nothing is ignored
//! silently. (`cargo test -p sluice-engine --no-default-features --features
//! onnx --test wasm_feature_off`.)
#![cfg(not(feature = "wasm"))]
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use sluice_engine::{Config, Engine, EngineError, EngineOptions};

const BASE: &str = r#"
[auth]
mode = "none"
[engine]
workers = [0]
[io_uring]
listen = "127.0.0.1:0"
[[shards]]
name = "main"
[[models]]
name = "stamp"
version = "1"
kind = "echo"
"#;

#[test]
fn accepts_without_the_feature_is_a_config_error_naming_it() {
    for (what, text) in [
        (
            "routes[0].accepts",
            format!(
                "{BASE}[[routes]]\nname = \"r\"\nmodel = \"stamp\"\nshard = \"main\"\naccepts = {{ subject = \"chat\", version = 2 }}\n"
            ),
        ),
        (
            "models[0].accepts",
            format!("{BASE}accepts = {{ subject = \"chat\", version = 2 }}\n"),
        ),
    ] {
        let err = Config::parse(&text, std::env::temp_dir())
            .err()
            .unwrap_or_else(|| panic!("{what}: a config with accepts parsed without the feature"));
        let m = err.to_string();
        assert!(
            m.contains("accepts") && m.contains("`wasm` feature"),
            "{what}: {m}"
        );
        // Located: the line of the key that asks.
        assert!(m.contains(':'), "{what}: not located: {m}");
    }
}

#[test]
fn a_transform_put_without_the_feature_is_unsupported_naming_it() {
    let cfg = Config::parse(BASE, std::env::temp_dir()).unwrap();
    let e = Engine::new(
        cfg,
        EngineOptions {
            no_pin: true,
            ..Default::default()
        },
    )
    .unwrap();
    match e.put_transform("chat", 1, 2, b"\0asm\x0d\0\x01\0") {
        Err(EngineError::Unsupported(m)) => {
            assert!(m.contains("`wasm` feature"), "{m}");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    assert!(e.transforms().is_empty());
}
