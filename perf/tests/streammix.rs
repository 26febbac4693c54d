//! The streaming mix (`loadgen --stream-rate`) against the real engine:
//! token streams of the bundled decoder (models/decoder.onnx) in ONNX
//! Runtime, mixed with plain requests to the null model. Every stream ends
//! with all its tokens, every plain request is answered, and TTFT is
//! measured from the intended open time: with one stream at a time and
//! opens scheduled faster than streams finish, the later streams' TTFT
//! carries their wait (no coordinated omission).
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::process::Command;
use std::time::Duration;

use sluice_engine::{Config, Engine, EngineOptions};
use sluice_perf::mix::Mix;
use sluice_perf::streammix::{StreamMix, StreamMixConfig, TokenOpen};

const KEY_HEX: &str = "hex:000102030405060708090a0b0c0d0e0f";

fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

fn ort_lib() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("SLUICE_ORT_LIB") {
        return p.into();
    }
    repo_root().join(".cache/onnxruntime/libonnxruntime.so.1.31.1")
}

fn engine() -> Engine {
    let root = repo_root();
    let text = format!(
        r#"
[engine]
workers = [0]
[io_uring]
listen = "127.0.0.1:0"
rx_buffers = 256
tx_buffers = 256
[onnxruntime]
library = "{lib}"
[streams]
per_worker = 64
per_tenant = 64
[[shards]]
name = "s"
[[routes]]
name = "all"
shard = "s"
[[tenants]]
name = "t"
id = 7
key = "{KEY_HEX}"
models = ["*"]
routes = ["*"]
[[models]]
name = "null"
version = "1"
kind = "null"
[[models]]
name = "endless"
version = "1"
path = "{root}/models/decoder.onnx"
[models.stream]
state = [{{ input = "h", output = "hN", shape = [1, 16] }}]
[models.stream.generate]
token_input = "token"
token_output = "next"
max_tokens = 1000000
"#,
        lib = ort_lib().display(),
        root = root.display()
    );
    let mut e = Engine::new(
        Config::parse(&text, root).unwrap(),
        EngineOptions {
            no_pin: true,
            ..Default::default()
        },
    )
    .unwrap();
    e.start().unwrap();
    e
}

fn open(max_tokens: u32) -> TokenOpen {
    TokenOpen {
        model: "endless".into(),
        version: "1".into(),
        tenant_id: 7,
        key: Some(sluice_client::TenantKey::new(
            &sluice_perf::mix::parse_key(KEY_HEX).unwrap(),
        )),
        token_input: "token".into(),
        prompt: b"hello".iter().map(|&b| i64::from(b)).collect(),
        tokens_per_frame: 1,
        max_tokens,
    }
}

fn plain_mix() -> Mix {
    Mix::parse(&format!(
        "[[request]]\nmodel = \"null\"\nversion = \"1\"\ntenant_id = 7\nkey = \"{KEY_HEX}\"\n\
         [[request.tensors]]\nname = \"x\"\ndtype = \"f32\"\nshape = [1, 4]\nfill = 0.5\n"
    ))
    .unwrap()
}

fn cfg(plain: f64, streams: f64, streams_max: usize, duration_ms: u64) -> StreamMixConfig {
    StreamMixConfig {
        plain_rate_per_sec: plain,
        stream_rate_per_sec: streams,
        streams_max,
        plain_outstanding_max: 4096,
        warmup: Duration::ZERO,
        duration: Duration::from_millis(duration_ms),
        timeout: Duration::from_secs(10),
        // Blocking waits: the test machine has two cores.
        spin: false,
        seed: 1,
    }
}

#[test]
fn streams_and_plain_requests_complete_and_are_measured() {
    let e = engine();
    let addr = e.local_addr().unwrap();
    let mix = plain_mix();
    let mut g = StreamMix::connect(addr, Some(&mix), open(16)).unwrap();
    g.set_socket_buffers(4 << 20).unwrap();
    let r = g.run(&cfg(400.0, 40.0, 64, 1000));
    assert!(r.stream_errors.is_empty(), "{}", r.human());
    assert!((38..=41).contains(&r.streams_opened), "{}", r.human());
    assert_eq!(
        r.streams_ended.get("max_tokens").copied(),
        Some(r.streams_opened),
        "{}",
        r.human()
    );
    assert_eq!(r.tokens, 16 * r.streams_opened);
    assert_eq!(r.ttft_ns.len(), r.streams_opened, "one TTFT per stream");
    assert_eq!(
        r.itl_ns.len(),
        15 * r.streams_opened,
        "one ITL per later token"
    );
    assert!((395..=401).contains(&r.plain_sent), "{}", r.human());
    assert_eq!(r.plain_ok, r.plain_sent, "{}", r.human());
    assert_eq!(r.plain_latency_ns.len(), r.plain_ok);
    assert_eq!((r.plain_timeouts, r.io_errors), (0, 0));
    assert!(r.tokens_per_sec() > 0.0 && r.streams_per_sec() > 0.0);
    let j = r.json();
    assert_eq!(j["streams"]["tokens"], r.tokens);
    assert!(
        j["latency_from"]
            .as_str()
            .unwrap()
            .contains("coordinated omission")
    );
}

#[test]
fn ttft_counts_the_wait_for_a_free_stream() {
    // 200 opens scheduled in 20 ms, one stream at a time, 50 tokens each:
    // the streams cannot keep up with the schedule, so the later ones open
    // long after their slot, and their TTFT, measured from the slot, must
    // carry that wait. Without the correction every TTFT would be about
    // one decode step plus a round trip (well under 1 ms here).
    let e = engine();
    let mut g = StreamMix::connect(e.local_addr().unwrap(), None, open(50)).unwrap();
    let r = g.run(&cfg(0.0, 10_000.0, 1, 20));
    assert_eq!(r.streams_opened, 200, "{}", r.human());
    assert_eq!(r.streams_running_max, 1, "streams_max holds");
    assert_eq!(r.streams_ended.get("max_tokens").copied(), Some(200));
    assert!(r.stream_errors.is_empty(), "{}", r.human());
    // The last open waits for the 199 streams before it.
    let spent = r.elapsed.as_nanos() as u64;
    assert!(
        r.ttft_ns.max() >= spent / 2,
        "TTFT max {} ns in a {spent} ns run\n{}",
        r.ttft_ns.max(),
        r.human()
    );
    assert!(r.ttft_ns.value_at_quantile(0.5) > 5 * r.itl_ns.value_at_quantile(0.5));
}

#[test]
fn loadgen_binary_runs_the_streaming_mix() {
    let e = engine();
    let out = Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args([
            "--addr",
            &e.local_addr().unwrap().to_string(),
            "--stream-rate",
            "20",
            "--stream-model",
            "endless",
            "--stream-tenant",
            "7",
            "--stream-key",
            KEY_HEX,
            "--max-tokens",
            "8",
            "--duration",
            "500ms",
            "--block",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("coordinated omission corrected"), "{text}");
    assert!(text.contains("TTFT µs") && text.contains("ITL"), "{text}");
    assert!(text.contains("ended {\"max_tokens\": 10}"), "{text}");
    let bad = Command::new(env!("CARGO_BIN_EXE_loadgen"))
        .args(["--stream-rate", "5", "--transport", "tcp"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--transport udp"));
}
