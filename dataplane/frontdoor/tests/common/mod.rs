//! A front door on a real engine for the connection and gRPC gate tests:
//! the null model only, `[frontdoor]` keys as each test needs them, and
//! the front door's counters.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use sluice_engine::{Engine, EngineOptions};

/// The tenant's bearer token (tenant "acme", id 7).
pub const TOKEN: &str = "front-door-test-token-0123456789";
const KEY_HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// An engine with the front door on; `frontdoor` is more `[frontdoor]`
/// keys; `tenants` turns authentication on.
pub struct Fd {
    pub e: Engine,
    pub http: SocketAddr,
    pub grpc: SocketAddr,
}

/// A started engine with its front door, from a config's text; relative
/// paths resolve against `root`.
pub fn engine(text: &str, root: std::path::PathBuf) -> Engine {
    let cfg = sluice_engine::Config::parse(text, root).unwrap();
    let mut e = Engine::new(
        cfg,
        EngineOptions {
            no_pin: true,
            frontdoor: Some(sluice_frontdoor::start),
            ..Default::default()
        },
    )
    .unwrap();
    e.start().unwrap();
    e
}

pub fn start(frontdoor: &str, tenants: bool) -> Fd {
    let auth = if tenants {
        use sha2::Digest;
        let d: String = sha2::Sha256::digest(TOKEN.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!(
            "[[tenants]]\nname = \"acme\"\nid = 7\nkey = \"hex:{KEY_HEX}\"\ntokens = [\"sha256:{d}\"]\n"
        )
    } else {
        "[auth]\nmode = \"none\"\n".to_string()
    };
    let text = format!(
        r#"
[engine]
workers = [0]
poll = "adaptive"
spin_us = 50
[io_uring]
listen = "127.0.0.1:0"
rx_buffers = 64
tx_buffers = 64
[frontdoor]
http_listen = "127.0.0.1:0"
grpc_listen = "127.0.0.1:0"
slots = 16
body_bytes_max = 65536
{frontdoor}
[[shards]]
name = "s"
[[routes]]
name = "all"
shard = "s"
[[models]]
name = "null"
version = "1"
kind = "null"
{auth}
"#
    );
    let e = engine(&text, root());
    let (http, grpc) = e.frontdoor_addrs();
    Fd {
        e,
        http: http.unwrap(),
        grpc: grpc.unwrap(),
    }
}

impl Fd {
    /// One front-door counter.
    pub fn stat(&self, name: &str) -> u64 {
        self.e.frontdoor_stats()[name]
            .as_u64()
            .unwrap_or_else(|| panic!("no counter {name}"))
    }

    /// Waits (bounded) until `name` reaches `n`; returns its value.
    pub fn wait_stat(&self, name: &str, n: u64, within: Duration) -> u64 {
        let t = Instant::now();
        loop {
            let v = self.stat(name);
            if v >= n || t.elapsed() > within {
                return v;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
