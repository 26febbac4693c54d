//! The responder and requester against a real nats-server and real ONNX
//! Runtime: answers carry the model's output, bad tags are refused, and the
//! driver counts what came back.
//!
//! Needs nats-server (NATS_SERVER, else .cache/bin/nats-server: see
//! perf/nats/compare.sh) and ONNX Runtime (SLUICE_ORT_LIB, else
//! .cache/onnxruntime: scripts/setup-onnxruntime.sh).
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sluice_infer::{AdapterSpec, ModelSpec, OrtModel};
use sluice_nats_responder::proto::Conn;
use sluice_nats_responder::{NatsTransport, Responder};
use sluice_perf::driver::{self, Load, Outcome, RunConfig, Stop, Transport};
use sluice_perf::mix::Mix;
use sluice_wire::{ErrorCode, Frame, Kind, TenantKey};

const KEY: &str = "hex:73756963652d64656d6f2d6b65792d30303030303030303030303030303030";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn nats_server() -> (Server, SocketAddr) {
    let bin = std::env::var_os("NATS_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".cache/bin/nats-server"));
    assert!(
        bin.exists(),
        "no nats-server at {} (run perf/nats/compare.sh --setup or set NATS_SERVER)",
        bin.display()
    );
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(&bin)
        .args(["-a", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nats-server");
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "nats-server did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    (Server(child), addr)
}

fn model() -> OrtModel {
    let lib = sluice_infer::library_path(None)
        .or_else(|| Some(root().join(".cache/onnxruntime/libonnxruntime.so.1.31.1")))
        .unwrap();
    sluice_infer::init(&lib).expect("ONNX Runtime (scripts/setup-onnxruntime.sh)");
    OrtModel::load(&ModelSpec {
        name: "mlp".into(),
        version: "1.0.0".into(),
        path: root().join("models/mlp.onnx"),
        adapters: vec![AdapterSpec {
            id: "formal".into(),
            path: root().join("models/mlp_formal.onnx_adapter"),
        }],
    })
    .expect("load the bundled MLP")
}

/// Runs a responder on its own thread until the returned flag is set.
fn responder(
    addr: SocketAddr,
    subject: &str,
) -> (
    Arc<AtomicBool>,
    std::thread::JoinHandle<sluice_nats_responder::ResponderStats>,
) {
    let mut keys = HashMap::new();
    keys.insert(
        1,
        TenantKey::new(&sluice_perf::mix::parse_key(KEY).unwrap()),
    );
    let mut r = Responder::new(addr, subject, "q", model(), keys).expect("responder");
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let h = std::thread::spawn(move || {
        while !s.load(Ordering::Relaxed) {
            r.serve_one(Some(Duration::from_millis(20))).expect("serve");
        }
        r.stats.clone()
    });
    (stop, h)
}

#[test]
fn answers_with_the_models_output_and_refuses_bad_tags() {
    let (_srv, addr) = nats_server();
    let (stop, h) = responder(addr, "t.infer");
    let mut conn = Conn::connect(addr, "test").unwrap();
    conn.subscribe("t.reply", "", 7).unwrap();
    let key = TenantKey::new(&sluice_perf::mix::parse_key(KEY).unwrap());
    let x = [0.5f32, -1.0, 2.0, 0.25];
    let mut buf = vec![0u8; 4096];

    // The model's own answer for x, run directly.
    let mut direct = model();
    let n = sluice_client::Request::new("mlp", "1.0.0")
        .tensor_f32("x", &[1, 4], &x)
        .encode(&mut buf, 9, 1, Some(&key))
        .unwrap();
    let mut want = vec![0u8; 4096];
    let mut stats = Default::default();
    let wn = direct
        .run_into(
            &Frame::new_checked(&buf[..n]).unwrap(),
            None,
            &mut want,
            &mut stats,
        )
        .unwrap();
    let want_frame = Frame::new_checked(&want[..wn]).unwrap();

    conn.publish("t.infer", "t.reply", &buf[..n]).unwrap();
    let msg = conn
        .next_msg(Some(Duration::from_secs(10)))
        .unwrap()
        .expect("an answer");
    assert_eq!(msg.sid, 7);
    let got = Frame::new_checked(&conn.buf()[msg.payload.clone()]).unwrap();
    assert_eq!(got.kind(), Kind::Response);
    assert_eq!(got.request_id(), 9);
    assert_eq!(
        got.payload(),
        want_frame.payload(),
        "same output tensor bytes as a direct run"
    );

    // Wrong key: refused as the engine refuses it.
    let wrong = TenantKey::new(b"not-the-demo-tenant-key-at-all!!");
    let n = sluice_client::Request::new("mlp", "1.0.0")
        .tensor_f32("x", &[1, 4], &x)
        .encode(&mut buf, 10, 1, Some(&wrong))
        .unwrap();
    conn.publish("t.infer", "t.reply", &buf[..n]).unwrap();
    let msg = conn
        .next_msg(Some(Duration::from_secs(10)))
        .unwrap()
        .expect("an answer");
    let got = Frame::new_checked(&conn.buf()[msg.payload.clone()]).unwrap();
    assert_eq!(got.kind(), Kind::Error);
    assert_eq!(
        got.error_body().unwrap().code(),
        Some(ErrorCode::Unauthenticated)
    );

    // Garbage is dropped without an answer, and the responder goes on.
    conn.publish("t.infer", "t.reply", b"not a frame").unwrap();
    assert!(
        conn.next_msg(Some(Duration::from_millis(300)))
            .unwrap()
            .is_none()
    );

    stop.store(true, Ordering::Relaxed);
    let s = h.join().unwrap();
    assert_eq!((s.ok, s.errors, s.malformed), (1, 1, 1));
    assert!(s.run.payload_bytes_in_place >= 16 && s.run.payload_bytes_copied == 0);
}

#[test]
fn the_driver_counts_answers_from_the_mix() {
    let (_srv, addr) = nats_server();
    let (stop, h) = responder(addr, "t.mix");
    let mix = Mix::load(&root().join("perf/mixes/mlp.toml")).unwrap();
    let mut t = NatsTransport::connect(addr, "t.mix", &mix, Duration::from_secs(5)).unwrap();
    let cfg = RunConfig {
        load: Load::Closed { outstanding: 4 },
        stop: Stop::Requests(200),
        spin: false,
        warmup: Duration::ZERO,
        seed: 3,
    };
    let pick = |r| mix.pick(r);
    let report = driver::run(&mut t, &pick, &cfg);
    assert_eq!(
        report.ok, 200,
        "errors {:?} timeouts {} malformed {}",
        report.errors, report.timeouts, report.malformed
    );
    assert_eq!(report.latency_ns.len(), 200);
    assert_eq!(t.outstanding(), 0);
    stop.store(true, Ordering::Relaxed);
    let s = h.join().unwrap();
    assert_eq!(s.ok, 200);
    // Nobody answers on another subject: the requester times out cleanly.
    let mut lonely =
        NatsTransport::connect(addr, "t.nobody", &mix, Duration::from_millis(100)).unwrap();
    let id = lonely.send(0).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let got = loop {
        if let Some(x) = lonely.poll(Some(Duration::from_millis(50))).unwrap() {
            break x;
        }
        assert!(Instant::now() < deadline);
    };
    assert_eq!(got, (id, Outcome::Timeout));
}
