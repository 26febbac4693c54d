//! sluiced end to end: the Go daemon with the Rust engine, started from
//! cfg/sluice.toml; traffic flows while a route changes through the admin
//! API and the config reloads; nothing is lost; metrics show it; SIGTERM
//! shuts down cleanly.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use sluice_client::{Client, ClientConfig, Request};
use sluice_tests::*;
use sluice_wire::TenantKey;

const DEMO_KEY_HEX: &str = "73756963652d64656d6f2d6b65792d30303030303030303030303030303030";

fn demo_key() -> Vec<u8> {
    (0..DEMO_KEY_HEX.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&DEMO_KEY_HEX[i..i + 2], 16).unwrap())
        .collect()
}

fn shard_requests(admin: std::net::SocketAddr, shard: &str) -> u64 {
    let (_, stats) = http(admin, "GET", "/v1/stats", None);
    stats["shards"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == shard))
        .and_then(|s| s["requests"].as_u64())
        .unwrap_or(0)
}

#[test]
fn route_change_under_load_reload_metrics_and_shutdown() {
    let dir = std::env::temp_dir().join(format!("sluice-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A second local shard for traffic to move to.
    let cfg = test_config(
        &dir,
        "\n[[shards]]\nname = \"hbm2-batch\"\nlabels = { \"hardware.gpu.memory\" = \"hbm2\" }\nmax_concurrency = 4\nqueue_depth = 64\n",
    );
    let mut d = Sluiced::start(&cfg);

    // Traffic: one client, closed loop, every answer checked.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let data = d.data;
    let traffic = {
        let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
        std::thread::spawn(move || {
            let key = demo_key();
            let tkey = TenantKey::new(&key);
            let cfg = ClientConfig {
                tenant_id: 1,
                key: Some(key.clone()),
                timeout: Duration::from_secs(2),
                ..ClientConfig::default()
            };
            let mut c = Client::connect(data, cfg).expect("client");
            let x = [1.0f32; 4];
            while !stop.load(Ordering::Relaxed) {
                let req =
                    Request::new("null", "1")
                        .tenant(1, Some(&tkey))
                        .tensor_f32("x", &[1, 4], &x);
                match c.call(&req) {
                    Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        eprintln!("request failed: {e}");
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    assert!(ok.load(Ordering::Relaxed) > 0, "traffic flows");
    assert!(shard_requests(d.admin, "hbm2-inference") > 0);

    // A bad route set is refused whole, with the reason.
    let (code, body) = http(
        d.admin,
        "PUT",
        "/v1/routes",
        Some(r#"[{"name":"x","shard":"nope"}]"#),
    );
    assert!(code == 400 || code == 422, "{code} {body}");
    assert!(body.to_string().contains("nope"), "{body}");

    // Move the null model's traffic to hbm2-batch.
    let before = shard_requests(d.admin, "hbm2-batch");
    assert_eq!(before, 0);
    let routes = r#"[{"name":"null","model":"null","shard":"hbm2-batch"},{"name":"mlp","model":"mlp","version":"^1","shard":"hbm2-inference"}]"#;
    let (code, body) = http(d.admin, "PUT", "/v1/routes", Some(routes));
    assert_eq!(code, 200, "{body}");
    std::thread::sleep(Duration::from_millis(500));
    let moved = shard_requests(d.admin, "hbm2-batch");
    assert!(moved > 0, "traffic moved to the new shard");
    let old = shard_requests(d.admin, "hbm2-inference");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        shard_requests(d.admin, "hbm2-inference"),
        old,
        "nothing goes to the old shard any more"
    );

    // Reload through the API: the file is re-read; the API's routes stay.
    let (code, body) = http(d.admin, "POST", "/v1/reload", None);
    assert_eq!(code, 200, "{body}");
    std::thread::sleep(Duration::from_millis(200));

    // Metrics carry the shard counters.
    let (code, metrics) = http_text(d.admin, "GET", "/metrics", None);
    assert_eq!(code, 200);
    assert!(
        metrics.contains("shard=\"hbm2-batch\""),
        "metrics name the new shard"
    );
    // The pool and copy counters of the real engine (docs/observability.md).
    for family in [
        "sluice_pool_allocs_total{",
        "sluice_pool_reuses_total{",
        "sluice_pool_page_reuse_ratio{",
        "sluice_pool_bytes{",
        "sluice_worker_spans_dropped_total{",
    ] {
        assert!(metrics.contains(family), "metrics have {family}");
    }
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("sluice_pool_allocs_total{")
                && l.contains("pool=\"rx\"")
                && !l.ends_with(" 0")),
        "the receive pool counted its receives"
    );

    stop.store(true, Ordering::Relaxed);
    traffic.join().unwrap();
    let (n_ok, n_failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert!(n_ok > 100, "{n_ok} requests answered");
    assert_eq!(
        n_failed, 0,
        "no request lost or failed across the route change and reload"
    );

    // Graceful shutdown.
    assert_eq!(
        d.signal_and_wait(15, Duration::from_secs(10)),
        Some(0),
        "sluiced exits 0 on SIGTERM"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_config_is_refused_with_file_and_line() {
    let dir = std::env::temp_dir().join(format!("sluice-e2e-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = test_config(&dir, "\n[[shards]]\nname = \"x\"\nqueue_depth = 0\n");
    let out = std::process::Command::new(sluiced_bin())
        .arg("-config")
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!("{}:", cfg.display())) && err.contains("queue_depth"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
