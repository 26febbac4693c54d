//! Sends a few real requests to the bundled MLP and prints what comes back:
//! the outputs with and without the LoRA adapter, and the error frames that
//! bad requests earn. Used by `scripts/demo.sh`.
//!
//! sluice-demo [ADDR] (default 127.0.0.1:7070)

use std::time::{Duration, Instant};

use sluice_client::{Client, ClientConfig, Request};
use sluice_wire::TenantKey;

/// The demo tenant of cfg/sluice.toml.
const DEMO_TENANT: u32 = 1;
const DEMO_KEY_HEX: &str = "73756963652d64656d6f2d6b65792d30303030303030303030303030303030";

fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7070".into());
    let key: Vec<u8> = (0..DEMO_KEY_HEX.len())
        .step_by(2)
        .filter_map(|i| u8::from_str_radix(DEMO_KEY_HEX.get(i..i + 2)?, 16).ok())
        .collect();
    let tkey = TenantKey::new(&key);
    let cfg = ClientConfig {
        tenant_id: DEMO_TENANT,
        key: Some(key.clone()),
        timeout: Duration::from_secs(2),
        ..ClientConfig::default()
    };
    let mut c = match Client::connect(addr.as_str(), cfg) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sluice-demo: cannot reach {addr}: {e}");
            std::process::exit(1);
        }
    };
    let x = [0.5f32, -1.0, 2.0, 0.25];
    println!("input x = {x:?}");
    for (version, adapter) in [("1", ""), ("1.0.0", "formal")] {
        let mut req = Request::new("mlp", version)
            .tenant(DEMO_TENANT, Some(&tkey))
            .tensor_f32("x", &[1, 4], &x);
        if !adapter.is_empty() {
            req = req.adapter(adapter);
        }
        let t0 = Instant::now();
        match c.call(&req) {
            Ok(r) => {
                let y = r
                    .tensor("y")
                    .and_then(|t| t.to_f32_vec().ok())
                    .unwrap_or_default();
                println!(
                    "mlp {:<6} adapter {:<8} -> y = {:?}  ({} us round trip, served by version {})",
                    version,
                    if adapter.is_empty() { "-" } else { adapter },
                    y,
                    t0.elapsed().as_micros(),
                    r.model_version()
                );
            }
            Err(e) => {
                eprintln!("sluice-demo: request failed: {e}");
                std::process::exit(1);
            }
        }
    }
    let batch: Vec<f32> = (0..32 * 4).map(|i| i as f32 / 64.0 - 1.0).collect();
    let req = Request::new("mlp", "1")
        .tenant(DEMO_TENANT, Some(&tkey))
        .tensor_f32("x", &[32, 4], &batch);
    match c.call(&req) {
        Ok(r) => {
            let Some(t) = r.tensor("y") else {
                eprintln!("mlp answered without an output y");
                std::process::exit(1);
            };
            println!(
                "mlp batch 32 -> y shape {:?}, first row {:?}",
                t.dims(),
                &t.to_f32_vec().unwrap_or_default()[..3]
            );
        }
        Err(e) => eprintln!("sluice-demo: batch request failed: {e}"),
    }
    println!("bad requests get error frames:");
    let cases: [(&str, Request<'_>); 3] = [
        (
            "no model version",
            Request::new("mlp", "")
                .tenant(DEMO_TENANT, Some(&tkey))
                .tensor_f32("x", &[1, 4], &x),
        ),
        (
            "unknown model",
            Request::new("gpt-9", "1")
                .tenant(DEMO_TENANT, Some(&tkey))
                .tensor_f32("x", &[1, 4], &x),
        ),
        (
            "wrong shape",
            Request::new("mlp", "1")
                .tenant(DEMO_TENANT, Some(&tkey))
                .tensor_f32("x", &[2, 2], &x),
        ),
    ];
    for (what, req) in cases {
        match c.call(&req) {
            Ok(_) => println!("  {what:<17} -> unexpectedly answered"),
            Err(e) => println!("  {what:<17} -> {e}"),
        }
    }
}
