//! Front-door frames take the worker's hot path without a heap allocation:
//! a counting global allocator counts allocations on worker threads while
//! real HTTP traffic (JSON and binary inference on the MLP in ONNX Runtime,
//! refusals from the worker) goes through the ingress rings. The front
//! door's own threads allocate (hyper, serde); they are not worker cores.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use sluice_engine::{Engine, EngineOptions};

#[global_allocator]
static GLOBAL: sluice_testkit::CountingAlloc = sluice_testkit::CountingAlloc;

fn mark_worker(_: usize) {
    sluice_testkit::watch_this_thread();
}

fn engine() -> (Engine, SocketAddr) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap();
    let lib = std::env::var("SLUICE_ORT_LIB").unwrap_or_else(|_| {
        format!(
            "{}/.cache/onnxruntime/libonnxruntime.so.1.31.1",
            root.display()
        )
    });
    let text = format!(
        r#"
[engine]
workers = [0]
[io_uring]
listen = "127.0.0.1:0"
rx_buffers = 64
tx_buffers = 64
[frontdoor]
http_listen = "127.0.0.1:0"
slots = 8
body_bytes_max = 65536
[auth]
mode = "none"
[onnxruntime]
library = "{lib}"
[[shards]]
name = "s"
[[routes]]
name = "all"
shard = "s"
[[models]]
name = "mlp"
version = "1.0.0"
path = "{root}/models/mlp.onnx"
adapters = [{{ id = "formal", path = "{root}/models/mlp_formal.onnx_adapter" }}]
"#,
        root = root.display()
    );
    let cfg = sluice_engine::Config::parse(&text, root).unwrap();
    let mut e = Engine::new(
        cfg,
        EngineOptions {
            worker_init: Some(mark_worker),
            no_pin: true,
            frontdoor: Some(sluice_frontdoor::start),
            ..EngineOptions::default()
        },
    )
    .unwrap();
    e.start().unwrap();
    let a = e.frontdoor_addrs().0.unwrap();
    (e, a)
}

/// Path, headers, body.
type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a [u8]);

/// One keep-alive connection; returns each response's status.
fn traffic(addr: SocketAddr, rounds: usize) -> Vec<u16> {
    let mut s = TcpStream::connect(addr).unwrap();
    // Headers and body go out as two writes: without this, Nagle holds
    // the body for the server's delayed ACK (40 ms a request).
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let json =
        br#"{"inputs":[{"name":"x","shape":[2,4],"datatype":"FP32","data":[1,2,3,4,5,6,7,8]}]}"#
            .to_vec();
    let hdr = br#"{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","parameters":{"binary_data_size":16}}],"parameters":{"binary_data_output":true}}"#;
    let mut bin = hdr.to_vec();
    bin.extend((0..4).flat_map(|i| (i as f32).to_le_bytes()));
    let bad_shape =
        br#"{"inputs":[{"name":"x","shape":[1,5],"datatype":"FP32","data":[1,2,3,4,5]}]}"#.to_vec();
    let hl = hdr.len().to_string();
    let cases: Vec<Case<'_>> = vec![
        ("/v2/models/mlp/versions/1.0.0/infer", vec![], &json),
        (
            "/v2/models/mlp/versions/1.0.0/infer",
            vec![("inference-header-content-length", &hl)],
            &bin,
        ),
        (
            "/v2/models/mlp/versions/1.0.0/infer",
            vec![("x-lora-adapter-id", "formal")],
            &json,
        ),
        ("/v2/models/mlp/versions/1.0.0/infer", vec![], &bad_shape),
        (
            "/v2/models/mlp/versions/1.0.0/infer",
            vec![("x-lora-adapter-id", "nope")],
            &json,
        ),
    ];
    let mut statuses = Vec::new();
    let mut buf = vec![0u8; 65536];
    for _ in 0..rounds {
        for (path, headers, body) in &cases {
            let mut req = format!(
                "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n",
                body.len()
            );
            for (k, v) in headers {
                req.push_str(&format!("{k}: {v}\r\n"));
            }
            req.push_str("\r\n");
            s.write_all(req.as_bytes()).unwrap();
            s.write_all(body).unwrap();
            // Read one response (headers, then Content-Length bytes).
            let mut got = Vec::new();
            let (head, len) = loop {
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0);
                got.extend_from_slice(&buf[..n]);
                if let Some(p) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&got[..p]).to_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    break (p + 4, len);
                }
            };
            while got.len() < head + len {
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0);
                got.extend_from_slice(&buf[..n]);
            }
            let status: u16 = String::from_utf8_lossy(&got[9..12]).parse().unwrap();
            statuses.push(status);
        }
    }
    statuses
}

#[test]
fn front_door_frames_take_the_hot_path_without_allocating() {
    let (e, addr) = engine();
    // Warm up: sessions' first runs, adapters, thread-locals, publication.
    traffic(addr, 20);
    std::thread::sleep(Duration::from_millis(120));
    let before = sluice_testkit::watched_allocs();
    assert!(
        before > 0,
        "the counting allocator saw the worker's start-up"
    );
    let statuses = traffic(addr, 200);
    std::thread::sleep(Duration::from_millis(120));
    let after = sluice_testkit::watched_allocs();
    let ok = statuses.iter().filter(|&&s| s == 200).count();
    assert_eq!(ok, 600, "three of five cases answer 200: {statuses:?}");
    assert!(statuses.iter().all(|&s| s == 200 || s == 400 || s == 404));
    assert!(e.stats().total(|w| w.ok) >= 600);
    assert_eq!(
        after - before,
        0,
        "worker threads allocated {} times during 1000 front-door requests",
        after - before
    );
}
