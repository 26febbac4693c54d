//! What schema transforms cost, in one run (docs/transforms.md):
//!
//! 1. Per request, in process: a request with a 1 KiB JSON section at
//!    `chat` version 1, validated (the baseline: what a request costs the
//!    worker without a transform), against the same request validated,
//!    migrated to version 2 by the project's own `json-migrate` module
//!    (wasm, one pooled instance, reused) and its rebuilt frame validated
//!    at version 2 — exactly what the worker does. Medians of 11 rounds.
//!    Target: at most 2 µs added.
//! 2. Swap time: a transform replaced while traffic flows on two workers,
//!    timed from the PUT (`Engine::put_transform`) to its return (every
//!    worker runs the new tables) and to the first answer made by the new
//!    module on each client flow. Medians of 20 swaps.
//!
//! Needs scripts/build-transforms.sh first.
//!
//! cargo run --release -p sluice-transform-bench [-- --quick]
#![deny(unsafe_code)]

use std::hint::black_box;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sluice_engine::config::Config;
use sluice_engine::schema::{SchemaCfg, SchemaTable};
use sluice_engine::{Engine, EngineOptions};
use sluice_transform::{Input, Limits, Runtime, Target};
use sluice_wire::{DType, Frame, FrameRepr, Kind, SECTION_TENSOR_NAME, TensorRepr};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn schema(id: u32, subject: &str, version: u32, ty: &str, text: String) -> SchemaCfg {
    SchemaCfg {
        id,
        subject: subject.into(),
        version,
        schema_type: ty.into(),
        schema: text,
        retired: false,
        references: Vec::new(),
    }
}

/// A `chat` version 1 section of exactly 1 KiB.
fn section_1k() -> Vec<u8> {
    let doc = |n: usize| {
        format!(
            r#"{{"user":"bench-user","prompt":"{}","max_tokens":128}}"#,
            "p".repeat(n)
        )
        .into_bytes()
    };
    let short = doc(0).len();
    let v = doc(1024 - short);
    assert_eq!(v.len(), 1024);
    v
}

fn request(section: &[u8]) -> Result<Vec<u8>> {
    let len = [section.len() as u64];
    let t = [TensorRepr {
        name: SECTION_TENSOR_NAME,
        dtype: DType::U8,
        dims: &len,
        data: Some(section),
    }];
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id: 1,
        model: "chat",
        model_version: "1",
        schema_id: 11,
        schema_version: 1,
        tensors: &t,
        ..FrameRepr::default()
    };
    let mut buf = vec![0u8; 4096];
    let n = repr.emit(&mut buf).map_err(|e| format!("{e:?}"))?.frame_len;
    buf.truncate(n);
    Ok(buf)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Part 1: ns per request, baseline and with the transform.
fn per_request(iters: u32) -> Result<()> {
    let testdata = root().join("dataplane/transform/testdata");
    let read = |n: &str| std::fs::read_to_string(testdata.join(n));
    let table = SchemaTable::build(
        &[
            schema(11, "chat", 1, "JSON", read("chat-v1.json")?),
            schema(12, "chat", 2, "JSON", read("chat-v2.json")?),
        ],
        30_000,
    )?;
    let wasm = std::fs::read(root().join("target/transforms/json-migrate.wasm")).map_err(|e| {
        format!("target/transforms/json-migrate.wasm: {e}: run scripts/build-transforms.sh")
    })?;
    // The deadline is wall time: on a shared 2-core host a preempted thread
    // spends it too. It does not change what a call costs.
    let rt = Runtime::new(Limits {
        deadline_us: 1_000_000,
        ..Limits::default()
    })?;
    let module = rt.load(&wasm).map_err(|e| e.to_string())?;
    let mut inst = module.instantiate().map_err(|e| e.to_string())?;
    let bytes = request(&section_1k())?;
    let req = Frame::new_checked(&bytes[..]).map_err(|e| format!("{e:?}"))?;
    let target = Target {
        schema_id: 12,
        schema_version: 2,
    };
    let now = Instant::now();
    // Warm up, and check the output is what version 2 takes.
    for _ in 0..1000 {
        let (out, _) = inst
            .run(&req, Input::Section, 1, 2, target, now)
            .map_err(|f| f.message())?;
        let out = Frame::new_checked(out).map_err(|e| format!("{e:?}"))?;
        table.validate(&out).map_err(|r| r.message)?;
    }
    let (mut base, mut with) = (Vec::new(), Vec::new());
    for _ in 0..11 {
        let t0 = Instant::now();
        for _ in 0..iters {
            black_box(table.validate(black_box(&req)).is_ok());
        }
        base.push(t0.elapsed().as_nanos() as f64 / f64::from(iters));
        let t0 = Instant::now();
        for _ in 0..iters {
            let ok = table.validate(black_box(&req)).is_ok();
            let (out, _) = inst
                .run(&req, Input::Section, 1, 2, target, now)
                .map_err(|f| f.message())?;
            let out = Frame::new_checked(out).map_err(|e| format!("{e:?}"))?;
            black_box(ok && table.validate(&out).is_ok());
        }
        with.push(t0.elapsed().as_nanos() as f64 / f64::from(iters));
    }
    let (b, w) = (median(base), median(with));
    let st = inst.stats();
    println!(
        "1. per request, 1 KiB JSON section, chat v1 -> v2 (json-migrate.wasm), medians of 11 x {iters}:"
    );
    println!("   validated only (baseline)          {b:>9.0} ns");
    println!("   validated + transform + validated  {w:>9.0} ns");
    println!(
        "   added {:.2} µs per request (target <= 2 µs): ratio {:.1}x the baseline; bytes copied per call {}",
        (w - b) / 1000.0,
        w / b,
        st.bytes_out.load(std::sync::atomic::Ordering::Relaxed)
            / st.ok.load(std::sync::atomic::Ordering::Relaxed).max(1)
    );
    Ok(())
}

/// A hand-written transform that sets every byte of the request's tensors
/// to `stamp` (as in dataplane/engine/tests/e2e_transforms.rs).
fn stamper(stamp: u8) -> Result<Vec<u8>> {
    let wat = format!(
        r#"(module
  (import "sluice:transform/host@1.0.0" "emit-tensors" (func $emit (param i32 i32 i32)))
  (memory (export "memory") 1)
  (global $bump (mut i32) (i32.const 1024))
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $p i32)
    (local.set $p (i32.and (i32.add (global.get $bump) (i32.sub (local.get 2) (i32.const 1)))
                           (i32.sub (i32.const 0) (local.get 2))))
    (global.set $bump (i32.add (local.get $p) (local.get 3)))
    (local.get $p))
  (func (export "sluice:transform/transformer@1.0.0#transform")
      (param $disc i32) (param $ptr i32) (param $len i32) (param $from i32) (param $to i32)
      (result i32)
    (local $i i32) (local $rec i32)
    (block $done (loop $each
      (br_if $done (i32.ge_u (local.get $i) (local.get $len)))
      (local.set $rec (i32.add (local.get $ptr) (i32.mul (local.get $i) (i32.const 28))))
      (memory.fill (i32.load offset=20 (local.get $rec)) (i32.const {stamp})
                   (i32.load offset=24 (local.get $rec)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $each)))
    (call $emit (local.get $ptr) (local.get $len) (i32.const 512))
    (global.set $bump (i32.const 1024))
    (i32.const 256)))"#
    );
    let mut core = wat::parse_str(wat)?;
    sluice_componentize::embed_world(
        &mut core,
        &root().join("dataplane/transform/wit"),
        "transform",
    )?;
    Ok(sluice_componentize::componentize(&core)?)
}

fn stamp_request(id: u64) -> Result<Vec<u8>> {
    let data = [7u8; 64];
    let dims = [64u64];
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
        schema_id: 31,
        schema_version: 1,
        tensors: &t,
        ..FrameRepr::default()
    };
    let mut buf = vec![0u8; 1024];
    let n = repr.emit(&mut buf).map_err(|e| format!("{e:?}"))?.frame_len;
    buf.truncate(n);
    Ok(buf)
}

/// The stamp of an answer (first byte of the echoed `x`), if it is one.
fn stamp_of(s: &UdpSocket, addr: SocketAddr, id: u64, rb: &mut [u8]) -> Result<Option<u8>> {
    s.send_to(&stamp_request(id)?, addr)?;
    let (n, _) = s.recv_from(rb)?;
    let f = Frame::new_checked(&rb[..n]).map_err(|e| format!("{e:?}"))?;
    Ok(f.tensor("x").map(|x| f.tensor_data(&x)[0]))
}

/// Part 2: swap time.
fn swap_time(swaps: u32) -> Result<()> {
    let text = r#"
[auth]
mode = "none"
[engine]
workers = [0, 1]
poll = "busy"
[io_uring]
listen = "127.0.0.1:0"
[transforms]
deadline_us = 1000000
[[shards]]
name = "main"
[[routes]]
name = "stamp"
model = "stamp"
shard = "main"
accepts = { subject = "stamp", version = 2 }
[[models]]
name = "stamp"
version = "1"
kind = "echo"
"#;
    let cfg = Config::parse(text, std::env::temp_dir())?;
    let mut e = Engine::new(
        cfg,
        EngineOptions {
            no_pin: true,
            ..Default::default()
        },
    )?;
    e.start()?;
    let sig = r#"{"inputs":[{"name":"x","dtype":"u8","shape":[-1]}]}"#;
    e.set_schemas(
        vec![
            schema(31, "stamp", 1, "TENSOR", sig.into()),
            schema(32, "stamp", 2, "TENSOR", sig.into()),
        ],
        30_000,
    )?;
    let addr = e.local_addr().ok_or("no listen address")?;
    let mods = [stamper(0xA1)?, stamper(0xB2)?];
    e.put_transform("stamp", 1, 2, &mods[0])?;
    // Flows from several source ports: the kernel spreads them over both
    // workers' sockets.
    let flows: Vec<UdpSocket> = (0..8)
        .map(|_| {
            let s = UdpSocket::bind("127.0.0.1:0")?;
            s.set_read_timeout(Some(Duration::from_secs(2)))?;
            Ok(s)
        })
        .collect::<Result<_>>()?;
    let mut rb = vec![0u8; 4096];
    let (mut put_us, mut first_us) = (Vec::new(), Vec::new());
    let mut id = 1;
    for i in 0..swaps {
        let (m, stamp) = if i % 2 == 0 {
            (&mods[1], 0xB2)
        } else {
            (&mods[0], 0xA1)
        };
        let t0 = Instant::now();
        e.put_transform("stamp", 1, 2, m)?;
        put_us.push(t0.elapsed().as_secs_f64() * 1e6);
        // Every flow's next answer must already be the new module's.
        for s in &flows {
            id += 1;
            let got = stamp_of(s, addr, id, &mut rb)?;
            if got != Some(stamp) {
                return Err(format!(
                    "swap {i}: an answer after the PUT returned came from the old module ({got:?})"
                )
                .into());
            }
        }
        first_us.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    println!("2. swap, 2 workers, {swaps} swaps, medians:");
    println!(
        "   PUT to return (checked, compiled, instantiated per worker, every worker on the new tables) {:>8.0} µs",
        median(put_us)
    );
    println!(
        "   PUT to the new module's answer on all 8 flows                                             {:>8.0} µs",
        median(first_us)
    );
    e.stop(Duration::from_secs(1));
    Ok(())
}

fn main() -> Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    per_request(if quick { 2_000 } else { 20_000 })?;
    swap_time(if quick { 6 } else { 20 })?;
    println!(
        "3. fleet-wide over NATS: go-control/internal/fleet TestFleet prints FLEET transform_put_to_served_ms (3 appliances, fake engines: the store and watch path)"
    );
    Ok(())
}
