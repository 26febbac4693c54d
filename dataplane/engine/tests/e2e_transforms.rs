//! Schema transforms in the engine (issue 21, docs/transforms.md): a route
//! that accepts one version of a subject, requests of another version sent
//! through the registered transform on the worker, schema_mismatch naming
//! both versions when none is registered, a spinning module that cannot
//! stall the worker, and a transform swapped 100 times while traffic flows:
//! every request answered, each answer made by exactly one module version,
//! none half-transformed.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use sluice_engine::config::Config;
use sluice_engine::schema::SchemaCfg;
use sluice_engine::{Engine, EngineError, EngineOptions};
use sluice_wire::{DType, ErrorCode, Frame, FrameRepr, Kind, TensorRepr};

const SUBJECT: &str = "stamp";
/// Schema ids of versions 1, 2 and 3 of the subject.
const IDS: [u32; 3] = [31, 32, 33];

/// `deadline_us` is wall time: on a busy 2-core host a preempted worker
/// spends it too, so the swap test gives room.
fn engine(workers: &str, deadline_us: u64) -> Engine {
    let text = format!(
        r#"
[auth]
mode = "none"
[engine]
workers = {workers}
poll = "adaptive"
spin_us = 50
rx_burst_max = 32
[io_uring]
listen = "127.0.0.1:0"
rx_buffers = 256
tx_buffers = 256
[transforms]
deadline_us = {deadline_us}
memory_bytes_max = 4194304
[[shards]]
name = "main"
max_concurrency = 8
queue_depth = 64
[[routes]]
name = "stamp"
model = "stamp"
shard = "main"
accepts = {{ subject = "{SUBJECT}", version = 2 }}
[[models]]
name = "stamp"
version = "1"
kind = "echo"
"#
    );
    let cfg = Config::parse(&text, std::env::temp_dir()).unwrap();
    let mut e = Engine::new(
        cfg,
        EngineOptions {
            no_pin: true,
            ..Default::default()
        },
    )
    .unwrap();
    e.start().unwrap();
    let schemas = IDS
        .iter()
        .zip(1..)
        .map(|(&id, version)| SchemaCfg {
            id,
            subject: SUBJECT.into(),
            version,
            schema_type: "TENSOR".into(),
            schema: r#"{"inputs":[{"name":"x","dtype":"u8","shape":[-1]}]}"#.into(),
            retired: false,
            references: Vec::new(),
        })
        .collect();
    e.set_schemas(schemas, 30_000).unwrap();
    e
}

/// A hand-written transform (core WAT made a component of the world) that
/// hands the request's tensors back with every data byte set to `stamp`;
/// from-version 3 spins forever instead.
fn stamper(stamp: u8) -> Vec<u8> {
    let wat = format!(
        r#"(module
  (import "sluice:transform/host@1.0.0" "emit-tensors" (func $emit (param i32 i32 i32)))
  (memory (export "memory") 1)
  (global $bump (mut i32) (i32.const 1024))
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $p i32)
    (local.set $p
      (i32.and
        (i32.add (global.get $bump) (i32.sub (local.get 2) (i32.const 1)))
        (i32.sub (i32.const 0) (local.get 2))))
    (global.set $bump (i32.add (local.get $p) (local.get 3)))
    (local.get $p))
  (func (export "sluice:transform/transformer@1.0.0#transform")
      (param $disc i32) (param $ptr i32) (param $len i32) (param $from i32) (param $to i32)
      (result i32)
    (local $i i32) (local $rec i32)
    (if (i32.eq (local.get $from) (i32.const 3)) (then (loop $spin (br $spin))))
    ;; tensor record: name (ptr, len) at 0, dtype at 8, shape at 12, data (ptr, len) at 20
    (block $done
      (loop $each
        (br_if $done (i32.ge_u (local.get $i) (local.get $len)))
        (local.set $rec (i32.add (local.get $ptr) (i32.mul (local.get $i) (i32.const 28))))
        (memory.fill
          (i32.load offset=20 (local.get $rec))
          (i32.const {stamp})
          (i32.load offset=24 (local.get $rec)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $each)))
    (call $emit (local.get $ptr) (local.get $len) (i32.const 512))
    ;; the arguments are dead: the next call's are allocated afresh
    (global.set $bump (i32.const 1024))
    ;; result<_, error-code>: ok, taken from the (zero) area at 256
    (i32.const 256)))"#
    );
    let mut core = wat::parse_str(wat).unwrap();
    let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../transform/wit");
    sluice_componentize::embed_world(&mut core, &wit, "transform").unwrap();
    sluice_componentize::componentize(&core).unwrap()
}

/// An unsigned request to the `stamp` model at `version` of the subject,
/// with `x` = 64 bytes of `fill`.
fn request(id: u64, version: u32, fill: u8, buf: &mut [u8]) -> usize {
    let data = [fill; 64];
    let dims = [data.len() as u64];
    let t = [TensorRepr {
        name: "x",
        dtype: DType::U8,
        dims: &dims,
        data: Some(&data),
    }];
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id: id,
        model: "stamp",
        model_version: "1",
        schema_id: IDS[version as usize - 1],
        schema_version: version,
        tensors: &t,
        ..FrameRepr::default()
    };
    repr.emit(buf).unwrap().frame_len
}

/// The answer's `x` (echoed), or its error code and message.
fn answer(bytes: &[u8]) -> Result<Vec<u8>, (ErrorCode, String)> {
    let f = Frame::new_checked(bytes).unwrap();
    if let Some(e) = f.error_body() {
        return Err((e.code().unwrap(), e.message.to_string()));
    }
    assert_eq!(f.kind(), Kind::Response);
    let x = f.tensor("x").expect("echoed x");
    Ok(f.tensor_data(&x).to_vec())
}

fn ask(s: &UdpSocket, addr: SocketAddr, version: u32) -> Result<Vec<u8>, (ErrorCode, String)> {
    let mut buf = vec![0u8; 4096];
    let n = request(next_id(), version, 7, &mut buf);
    answer(&roundtrip(s, addr, &buf[..n]))
}

#[test]
fn accepts_runs_the_transform_or_names_both_versions() {
    let e = engine("[0]", 20_000);
    let addr = e.local_addr().unwrap();
    let s = client();

    // The accepted version goes straight to the model.
    assert_eq!(ask(&s, addr, 2).unwrap(), vec![7u8; 64]);
    // Another registered version and no transform: schema_mismatch naming
    // the subject and both versions.
    let (code, msg) = ask(&s, addr, 1).unwrap_err();
    assert_eq!(code, ErrorCode::SchemaMismatch);
    assert!(
        msg.contains(SUBJECT) && msg.contains("version 1") && msg.contains("version 2"),
        "{msg}"
    );

    // Registered: version 1 goes through it, on the worker.
    let put = e.put_transform(SUBJECT, 1, 2, &stamper(0xA1)).unwrap();
    assert!(!put.replaced);
    assert_eq!(ask(&s, addr, 1).unwrap(), vec![0xA1u8; 64]);
    assert_eq!(ask(&s, addr, 2).unwrap(), vec![7u8; 64]);
    let st = e.transforms();
    assert_eq!(st.len(), 1);
    assert_eq!((st[0].calls, st[0].ok), (1, 1));
    assert_eq!(
        st[0].bytes_out, 64,
        "the one copy a transform costs is counted"
    );

    // A module that spins ends its request at the deadline; the worker
    // serves the next one.
    e.put_transform(SUBJECT, 3, 2, &stamper(0xC3)).unwrap();
    let (code, msg) = ask(&s, addr, 3).unwrap_err();
    assert_eq!(code, ErrorCode::InferenceFailed, "{msg}");
    assert!(msg.contains("deadline"), "{msg}");
    assert_eq!(ask(&s, addr, 1).unwrap(), vec![0xA1u8; 64]);
    let spin = e.transforms().into_iter().find(|t| t.from == 3).unwrap();
    assert_eq!((spin.timeouts, spin.recycles), (1, 1));
    assert_eq!(spin.last_fault, "timeout");

    // Refused before load: a core module, and a pair whose versions are not
    // registered; neither changes what serves.
    let core = wat::parse_str("(module)").unwrap();
    let err = e.put_transform(SUBJECT, 1, 2, &core).unwrap_err();
    assert!(matches!(err, EngineError::InvalidArgument(_)), "{err}");
    assert!(err.to_string().contains("component"), "{err}");
    let err = e.put_transform(SUBJECT, 9, 2, &stamper(1)).unwrap_err();
    assert!(matches!(err, EngineError::NotFound(_)), "{err}");
    assert_eq!(ask(&s, addr, 1).unwrap(), vec![0xA1u8; 64]);

    // Removed: mismatch again from the next burst on.
    e.remove_transform(SUBJECT, 1, 2).unwrap();
    assert_eq!(ask(&s, addr, 1).unwrap_err().0, ErrorCode::SchemaMismatch);
    assert!(matches!(
        e.remove_transform(SUBJECT, 1, 2),
        Err(EngineError::NotFound(_))
    ));
}

/// One client: one request at a time, each awaited (a loss is a timeout).
/// Returns (answers stamped A, answers stamped B, anything else).
fn traffic(addr: SocketAddr, stop: Arc<AtomicBool>) -> (u64, u64, Vec<String>) {
    let s = client();
    let (mut a, mut b, mut bad) = (0, 0, Vec::new());
    let mut buf = vec![0u8; 4096];
    while !stop.load(Ordering::Acquire) {
        let n = request(next_id(), 1, 7, &mut buf);
        match answer(&roundtrip(&s, addr, &buf[..n])) {
            Ok(x) if x == [0xA1u8; 64] => a += 1,
            Ok(x) if x == [0xB2u8; 64] => b += 1,
            other => bad.push(format!("{other:?}")),
        }
    }
    (a, b, bad)
}

#[test]
fn swapped_100_times_under_load_every_answer_from_one_version() {
    let e = engine("[0, 1]", 500_000);
    let addr = e.local_addr().unwrap();
    let (ma, mb) = (stamper(0xA1), stamper(0xB2));
    e.put_transform(SUBJECT, 1, 2, &ma).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..3)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || traffic(addr, stop))
        })
        .collect();
    for i in 0..100 {
        let m = if i % 2 == 0 { &mb } else { &ma };
        let put = e.put_transform(SUBJECT, 1, 2, m).unwrap();
        assert!(put.replaced);
        std::thread::sleep(Duration::from_millis(2));
    }
    stop.store(true, Ordering::Release);
    let (mut a, mut b) = (0, 0);
    for c in clients {
        let (ca, cb, bad) = c.join().unwrap();
        assert!(bad.is_empty(), "answers not made by one version: {bad:?}");
        a += ca;
        b += cb;
    }
    assert!(a > 0 && b > 0, "both versions served: A {a}, B {b}");
    // The last PUT installed B; the old modules' instances came back and
    // were dropped: one entry, its slot's counters fresh.
    let st = e.transforms();
    assert_eq!(st.len(), 1);
    let s = client();
    assert_eq!(ask(&s, addr, 1).unwrap(), vec![0xA1u8; 64]);
}

/// The project's own JSON migration (scripts/build-transforms.sh) through
/// the engine: a `chat` v1 section reaches a route that accepts v2, is
/// migrated on the worker and validated at v2 before the model runs.
#[test]
fn the_projects_json_migration_serves_a_route_that_accepts_v2() {
    let wasm_path = repo_root().join("target/transforms/json-migrate.wasm");
    let wasm = std::fs::read(&wasm_path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: run scripts/build-transforms.sh first (scripts/test.sh does)",
            wasm_path.display()
        )
    });
    let text = r#"
[auth]
mode = "none"
[engine]
workers = [0]
poll = "adaptive"
spin_us = 50
[io_uring]
listen = "127.0.0.1:0"
[transforms]
deadline_us = 200000
[[shards]]
name = "main"
[[routes]]
name = "chat"
model = "chat"
shard = "main"
[[models]]
name = "chat"
version = "1"
kind = "echo"
accepts = { subject = "chat", version = 2 }
"#;
    let cfg = Config::parse(text, std::env::temp_dir()).unwrap();
    let mut e = Engine::new(
        cfg,
        EngineOptions {
            no_pin: true,
            ..Default::default()
        },
    )
    .unwrap();
    e.start().unwrap();
    let testdata = repo_root().join("dataplane/transform/testdata");
    let read = |n: &str| std::fs::read_to_string(testdata.join(n)).unwrap();
    let chat = |id, version, file: &str| SchemaCfg {
        id,
        subject: "chat".into(),
        version,
        schema_type: "JSON".into(),
        schema: read(file),
        retired: false,
        references: Vec::new(),
    };
    e.set_schemas(
        vec![chat(41, 1, "chat-v1.json"), chat(42, 2, "chat-v2.json")],
        30_000,
    )
    .unwrap();
    let addr = e.local_addr().unwrap();
    let s = client();
    let send = |section: &[u8]| {
        let len = [section.len() as u64];
        let t = [TensorRepr {
            name: sluice_wire::SECTION_TENSOR_NAME,
            dtype: DType::U8,
            dims: &len,
            data: Some(section),
        }];
        let repr = FrameRepr {
            kind: Kind::Request,
            request_id: next_id(),
            model: "chat",
            model_version: "1",
            schema_id: 41,
            schema_version: 1,
            tensors: &t,
            ..FrameRepr::default()
        };
        let mut buf = vec![0u8; 4096];
        let n = repr.emit(&mut buf).unwrap().frame_len;
        answer_kind(&roundtrip(&s, addr, &buf[..n]))
    };
    let v1 = br#"{"user":"ada","prompt":"hello","max_tokens":64}"#;
    assert_eq!(
        send(v1).1,
        Some(ErrorCode::SchemaMismatch),
        "no transform yet"
    );
    e.put_transform("chat", 1, 2, &wasm).unwrap();
    assert_eq!(send(v1), (Kind::Response, None));
    assert_eq!(
        send(br#"{"user":"bob","prompt":"hi"}"#),
        (Kind::Response, None)
    );
    let st = &e.transforms()[0];
    assert_eq!((st.calls, st.ok, st.bad_outputs), (2, 2, 0), "{st:?}");
    // What v2 takes is longer (renamed fields, defaults added): copied once.
    assert!(st.bytes_out > st.bytes_in, "{st:?}");
}
