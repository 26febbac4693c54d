//! Without the `dpdk` cargo feature, an engine asked for the DPDK transport
//! refuses to start and says the feature is off; nothing else is touched.
#![cfg(not(feature = "dpdk"))]
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use sluice_engine::{Config, Engine, EngineError, EngineOptions};

#[test]
fn dpdk_transport_without_the_feature_is_refused_clearly() {
    let text = r#"
[engine]
workers = [0]
transport = "dpdk"

[dpdk]
vdevs = ["net_af_xdp0,iface=veth0"]
"#;
    let cfg =
        Config::parse(text, std::env::temp_dir()).expect("config parses: [dpdk] is opaque here");
    let mut e = Engine::new(cfg, EngineOptions::default()).unwrap();
    match e.start() {
        Err(EngineError::Unsupported(m)) => {
            assert!(m.contains("dpdk") && m.contains("cargo feature"), "{m}");
        }
        other => panic!("expected Unsupported, got {:?}", other.map(|_| ())),
    }
    assert!(!e.is_running());
}
