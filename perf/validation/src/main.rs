//! What hot-path schema validation costs per request, in one run:
//!
//! 1. In process: the data path's classification step (parse, authenticate,
//!    validate, route, admit: `worker::classify_frame`) for the same signed
//!    request without a schema, with a tensor signature, and with a 1 KiB
//!    JSON, Avro or Protobuf section (plus JSON with a content route).
//!    Medians of 11 rounds; the ratio is against the unvalidated request.
//! 2. End to end: the same requests through the engine on io_uring
//!    loopback (null model, busy-polled worker), closed loop; p50 and p99
//!    against the unvalidated request.
//! 3. Registration to use: a new schema version pushed while traffic flows,
//!    timed until the first request validated against it is answered.
//! 4. Keywords: `pattern`, `unevaluated*` and `$dynamicRef` schemas on 1 KiB
//!    sections against the `jsonschema` crate in the same run (keywords.rs).
//! 5. What the freshness rule and the replay table add to classification
//!    (`replay.rs`), against the tag check alone, in the same run.
//!
//! cargo run --release -p sluice-validation-bench [-- --quick] [--keywords (part 4 only)] [--replay (part 5 only)]
#![deny(unsafe_code)]

mod keywords;
mod replay;

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use sluice_client::{Client, ClientConfig, PollMode, Request};
use sluice_engine::config::Config;
use sluice_engine::schema::{SchemaCfg, SchemaTable};
use sluice_engine::tables::{HostView, LiveConfig, Tables};
use sluice_engine::worker::{Verdict, classify_frame};
use sluice_engine::{Engine, EngineOptions};
use sluice_wire::{DType, Frame, FrameRepr, Kind, SECTION_TENSOR_NAME, TenantKey, TensorRepr};

const KEY: [u8; 32] = [7; 32];
const TENANT: u32 = 7;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn config(worker_core: usize) -> Result<Config> {
    let key: String = KEY.iter().map(|b| format!("{b:02x}")).collect();
    let text = format!(
        r#"
[engine]
workers = [{worker_core}]
poll = "busy"

[io_uring]
listen = "127.0.0.1:0"

[[shards]]
name = "main"
max_concurrency = 64
queue_depth = 256

[[shards]]
name = "reasoning"
max_concurrency = 64
queue_depth = 256

[[routes]]
name = "think"
content = ['$.intent == "reasoning"']
shard = "reasoning"

[[routes]]
name = "null"
model = "null"
shard = "main"

[[models]]
name = "null"
version = "1"
kind = "null"

[[tenants]]
name = "bench"
id = {TENANT}
key = "hex:{key}"
"#
    );
    Ok(Config::parse(&text, std::env::temp_dir())?)
}

const JSON_SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "intent": {"enum": ["reasoning", "chat", "summarize"]},
    "text": {"type": "string", "maxLength": 4096},
    "priority": {"type": "integer", "minimum": 0, "maximum": 9},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 16},
    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    "user": {"type": "object", "properties": {"id": {"type": "string"}, "tier": {"type": "integer"}},
             "required": ["id"]}
  },
  "required": ["intent", "text", "priority"],
  "additionalProperties": false
}"#;

const AVRO_SCHEMA: &str = r#"{"type": "record", "name": "Req", "fields": [
  {"name": "intent", "type": {"type": "enum", "name": "Intent", "symbols": ["reasoning", "chat", "summarize"]}},
  {"name": "text", "type": "string"},
  {"name": "priority", "type": "int"},
  {"name": "tags", "type": {"type": "array", "items": "string"}},
  {"name": "temperature", "type": "double"},
  {"name": "user", "type": {"type": "record", "name": "User", "fields": [
      {"name": "id", "type": "string"}, {"name": "tier", "type": ["null", "int"]}]}}
]}"#;

const PROTO_SCHEMA: &str = r#"syntax = "proto3";
message Req {
  string intent = 1;
  string text = 2;
  int32 priority = 3;
  repeated string tags = 4;
  double temperature = 5;
  User user = 6;
}
message User {
  string id = 1;
  int32 tier = 2;
}
"#;

const TENSOR_SCHEMA: &str = r#"{"inputs": [{"name": "x", "dtype": "f32", "shape": [-1, 4]}]}"#;

fn text_of(len: usize) -> String {
    "the quick brown fox jumps over the lazy dog "
        .chars()
        .cycle()
        .take(len)
        .collect()
}

/// Exactly 1 KiB of JSON.
fn json_section(intent: &str) -> Vec<u8> {
    let doc = |text_len: usize| {
        serde_json::json!({
            "intent": intent,
            "text": text_of(text_len),
            "priority": 3,
            "tags": ["alpha", "beta", "gamma", "delta"],
            "temperature": 0.7,
            "user": {"id": "u-12345", "tier": 2}
        })
        .to_string()
        .into_bytes()
    };
    let short = doc(0).len();
    let v = doc(1024 - short);
    assert_eq!(v.len(), 1024);
    v
}

fn zigzag(v: i64, out: &mut Vec<u8>) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        let b = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// The same content in Avro binary, 1 KiB.
fn avro_section() -> Vec<u8> {
    let v = avro_with(960);
    let v = avro_with(960 + 1024 - v.len());
    assert_eq!(v.len(), 1024);
    v
}

fn avro_with(text_len: usize) -> Vec<u8> {
    let mut o = Vec::new();
    let s = |t: &str, o: &mut Vec<u8>| {
        zigzag(t.len() as i64, o);
        o.extend_from_slice(t.as_bytes());
    };
    zigzag(0, &mut o); // intent = reasoning
    s(&text_of(text_len), &mut o);
    zigzag(3, &mut o);
    zigzag(4, &mut o); // one block of four tags
    for t in ["alpha", "beta", "gamma", "delta"] {
        s(t, &mut o);
    }
    zigzag(0, &mut o); // end of blocks
    o.extend_from_slice(&0.7f64.to_le_bytes());
    s("u-12345", &mut o);
    zigzag(1, &mut o); // union branch int
    zigzag(2, &mut o);
    o
}

/// The same content in Protobuf, 1 KiB.
fn proto_section() -> Vec<u8> {
    let v = proto_with(950);
    let v = proto_with(950 + 1024 - v.len());
    assert_eq!(v.len(), 1024);
    v
}

fn proto_with(text_len: usize) -> Vec<u8> {
    let mut o = Vec::new();
    let s = |field: u64, t: &[u8], o: &mut Vec<u8>| {
        varint(field << 3 | 2, o);
        varint(t.len() as u64, o);
        o.extend_from_slice(t);
    };
    s(1, b"reasoning", &mut o);
    s(2, text_of(text_len).as_bytes(), &mut o);
    varint(3 << 3, &mut o);
    varint(3, &mut o);
    for t in ["alpha", "beta", "gamma", "delta"] {
        s(4, t.as_bytes(), &mut o);
    }
    varint(5 << 3 | 1, &mut o);
    o.extend_from_slice(&0.7f64.to_le_bytes());
    let mut user = Vec::new();
    s(1, b"u-12345", &mut user);
    varint(2 << 3, &mut user);
    varint(2, &mut user);
    s(6, &user, &mut o);
    o
}

fn schemas() -> Vec<SchemaCfg> {
    let s = |id: u32, subject: &str, ty: &str, text: &str| SchemaCfg {
        id,
        subject: subject.into(),
        version: 1,
        schema_type: ty.into(),
        schema: text.into(),
        retired: false,
        references: Vec::new(),
    };
    vec![
        s(1, "x-tensor", "TENSOR", TENSOR_SCHEMA),
        s(2, "req-json", "JSON", JSON_SCHEMA),
        s(3, "req-avro", "AVRO", AVRO_SCHEMA),
        s(4, "req-proto", "PROTOBUF", PROTO_SCHEMA),
    ]
}

struct Case {
    name: &'static str,
    schema_id: u32,
    section: Option<Vec<u8>>,
}

fn cases() -> Vec<Case> {
    vec![
        // The baseline carries the same 1 KiB section, unvalidated.
        Case {
            name: "no validation (1 KiB section carried)",
            schema_id: 0,
            section: Some(json_section("chat")),
        },
        Case {
            name: "tensor signature",
            schema_id: 1,
            section: None,
        },
        Case {
            name: "JSON 1 KiB",
            schema_id: 2,
            section: Some(json_section("chat")),
        },
        Case {
            name: "JSON 1 KiB + content route",
            schema_id: 2,
            section: Some(json_section("reasoning")),
        },
        Case {
            name: "Avro 1 KiB",
            schema_id: 3,
            section: Some(avro_section()),
        },
        Case {
            name: "Protobuf 1 KiB",
            schema_id: 4,
            section: Some(proto_section()),
        },
    ]
}

const X: [f32; 4] = [1.0, 2.0, 3.0, 4.0];

/// A signed request frame for `c`, 64-byte aligned in `buf`.
fn frame(c: &Case, buf: &mut Vec<u8>) -> Result<usize> {
    let x: Vec<u8> = X.iter().flat_map(|f| f.to_le_bytes()).collect();
    let dx = [1u64, 4];
    let ds = [c.section.as_ref().map_or(0, |s| s.len() as u64)];
    let mut t = vec![TensorRepr {
        name: "x",
        dtype: DType::F32,
        dims: &dx,
        data: Some(&x),
    }];
    if let Some(s) = &c.section {
        t.push(TensorRepr {
            name: SECTION_TENSOR_NAME,
            dtype: DType::U8,
            dims: &ds,
            data: Some(s),
        });
    }
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id: 1,
        tenant_id: TENANT,
        model: "null",
        model_version: "1",
        schema_id: c.schema_id,
        tensors: &t,
        ..FrameRepr::default()
    };
    buf.resize(8192, 0);
    let n = repr.emit(buf)?.frame_len;
    TenantKey::new(&KEY).sign(&mut Frame::new_unchecked(&mut buf[..n]));
    Ok(n)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn in_process(quick: bool) -> Result<Vec<f64>> {
    let cfg = config(0)?;
    let live = LiveConfig::of(&cfg);
    let slots: Vec<usize> = (0..live.models.len()).collect();
    let table = SchemaTable::build(&schemas(), 30_000)?;
    assert!(table.unenforced().is_empty(), "{:?}", table.unenforced());
    let t = Tables::build(&live, &HostView::of(&cfg), &slots, table)?;
    let iters = if quick { 20_000 } else { 200_000 };
    println!(
        "## In process: classify_frame (parse, HMAC, validate, route, admit), median of 11 rounds of {iters}"
    );
    println!("| request | ns/request | ratio | validation alone, ns |");
    println!("| --- | ---: | ---: | ---: |");
    let mut base = 0.0;
    let mut out = Vec::new();
    for c in cases() {
        let mut buf = Vec::new();
        let n = frame(&c, &mut buf)?;
        let bytes = &buf[..n];
        // The tag check only (no replay table): every round classifies the
        // same bytes; section 4 measures what freshness and replays add.
        match classify_frame(bytes, false, &t, false, 0, None) {
            Verdict::Admit { .. } => {}
            v => panic!("{}: not admitted: {v:?}", c.name),
        }
        let mut rounds = Vec::new();
        for _ in 0..11 {
            let t0 = Instant::now();
            for _ in 0..iters {
                black_box(classify_frame(black_box(bytes), false, &t, false, 0, None));
            }
            rounds.push(t0.elapsed().as_nanos() as f64 / iters as f64);
        }
        let ns = median(rounds);
        if c.schema_id == 0 {
            base = ns;
        }
        // Validation alone: the schema table's check on the parsed frame.
        let f = Frame::new_checked(bytes)?;
        let mut vr = Vec::new();
        for _ in 0..11 {
            let t0 = Instant::now();
            for _ in 0..iters {
                if c.schema_id != 0 {
                    black_box(t.schemas.validate(black_box(&f)).is_ok());
                }
            }
            vr.push(t0.elapsed().as_nanos() as f64 / iters as f64);
        }
        let alone = median(vr);
        println!(
            "| {} | {ns:.0} | {:.2}× | {} |",
            c.name,
            ns / base,
            if c.schema_id == 0 {
                "–".to_string()
            } else {
                format!("{alone:.0}")
            }
        );
        out.push(ns);
    }
    Ok(out)
}

fn pct(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

fn client(addr: std::net::SocketAddr) -> std::result::Result<Client, sluice_client::ClientError> {
    let cc = ClientConfig {
        tenant_id: TENANT,
        key: Some(KEY.to_vec()),
        timeout: Duration::from_secs(2),
        poll: PollMode::Spin,
        ..ClientConfig::default()
    };
    Client::connect(addr, cc)
}

fn request<'a>(c: &'a Case) -> Request<'a> {
    let mut r = Request::new("null", "1")
        .tensor_f32("x", &[1, 4], &X)
        .schema(c.schema_id, 0);
    if let Some(s) = &c.section {
        r = r.section(s);
    }
    r
}

fn end_to_end(quick: bool) -> Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut e = Engine::new(
        config(if cores > 1 { 1 } else { 0 })?,
        EngineOptions {
            no_pin: cores < 2,
            ..Default::default()
        },
    )?;
    e.start()?;
    e.set_schemas(schemas(), 30_000)?;
    let addr = e.local_addr().ok_or("the engine has no address")?;
    let mut cl = client(addr)?;
    let n = if quick { 3_000 } else { 30_000 };
    println!(
        "\n## End to end: io_uring loopback, null model, closed loop, {n} requests per case (interleaved rounds)"
    );
    println!("| request | p50 µs | p99 µs | p50 ratio | p99 ratio |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    let cs = cases();
    let mut hists = Vec::new();
    for _ in &cs {
        hists.push(Histogram::<u64>::new(3)?);
    }
    // Rounds interleave the cases so drift in the VM's load hits all alike.
    for _ in 0..10 {
        for (c, h) in cs.iter().zip(hists.iter_mut()) {
            let req = request(c);
            for _ in 0..n / 10 {
                let t0 = Instant::now();
                cl.call(&req).map_err(|err| format!("{}: {err}", c.name))?;
                h.record(t0.elapsed().as_nanos() as u64)?;
            }
        }
    }
    let (b50, b99) = (pct(&hists[0], 0.5), pct(&hists[0], 0.99));
    for (c, h) in cs.iter().zip(&hists) {
        let (p50, p99) = (pct(h, 0.5), pct(h, 0.99));
        println!(
            "| {} | {p50:.1} | {p99:.1} | {:.2}× | {:.2}× |",
            c.name,
            p50 / b50,
            p99 / b99
        );
    }
    let think = e
        .stats()
        .shards
        .iter()
        .find(|s| s.name == "reasoning")
        .map_or(0, |s| s.requests);
    assert_eq!(
        think,
        (n / 10 * 10) as u64,
        "content-routed requests reached their shard"
    );

    // Registration to use, under traffic.
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let bg = {
        let (stop, served) = (stop.clone(), served.clone());
        std::thread::spawn(move || -> std::result::Result<(), String> {
            let mut cl = client(addr).map_err(|e| e.to_string())?;
            let c = &cases()[2];
            let req = request(c);
            while !stop.load(Ordering::Relaxed) {
                cl.call(&req)
                    .map_err(|e| format!("traffic during registrations is answered: {e}"))?;
                served.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        })
    };
    // Traffic first, then registrations spaced so requests interleave.
    while served.load(Ordering::Relaxed) < 200 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut list = schemas();
    let mut times = Vec::new();
    let section = json_section("chat");
    for v in 2..=21u32 {
        let mut s = list[1].clone();
        s.version = v;
        s.id = 100 + v;
        // A new text each time: nothing compiled before can be reused.
        s.schema = s.schema.replace("4096", &(4096 + v).to_string());
        list.push(s);
        std::thread::sleep(Duration::from_millis(5));
        let t0 = Instant::now();
        e.set_schemas(list.clone(), 30_000)?;
        let c = Case {
            name: "new",
            schema_id: 100 + v,
            section: Some(section.clone()),
        };
        cl.call(&request(&c))
            .map_err(|e| format!("first request against the new version: {e}"))?;
        times.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    stop.store(true, Ordering::Relaxed);
    bg.join().map_err(|_| "the traffic thread panicked")??;
    let ok = served.load(Ordering::Relaxed);
    let max = times.iter().cloned().fold(0.0, f64::max);
    println!(
        "\n## Registration to first validated use (engine level, 20 JSON versions while {ok} requests flowed, none lost)\nmedian {:.0} µs, max {max:.0} µs",
        median(times.clone())
    );
    Ok(())
}

fn main() -> Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    println!(
        "# Hot-path validation cost ({})",
        if quick { "quick" } else { "full" }
    );
    if std::env::args().any(|a| a == "--keywords") {
        return keywords::run(quick);
    }
    if std::env::args().any(|a| a == "--replay") {
        return replay::measure(&config(0)?, quick);
    }
    in_process(quick)?;
    keywords::run(quick)?;
    end_to_end(quick)?;
    replay::measure(&config(0)?, quick)
}
