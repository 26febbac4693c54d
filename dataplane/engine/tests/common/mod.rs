//! Helpers shared by the engine's integration tests.
#![allow(dead_code)]

#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod tokens;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluice_engine::config::Config;
use sluice_engine::schema::SchemaCfg;
use sluice_engine::{Engine, EngineOptions};
use sluice_wire::{DType, Frame, FrameRepr, Kind, SECTION_TENSOR_NAME, TenantKey, TensorRepr};

pub const KEY_HEX: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

pub fn key_bytes() -> Vec<u8> {
    (0..32u8).collect()
}

/// A config with null and echo models, two shards (one remote), one tenant.
pub fn test_config(extra: &str) -> Config {
    let text = format!(
        r#"
[engine]
workers = [0]
poll = "adaptive"
spin_us = 50
rx_burst_max = 32

[io_uring]
listen = "127.0.0.1:0"
rx_buffers = 64
tx_buffers = 64
buffer_size = 65536

[host]
labels = {{ "hardware.gpu.memory" = "hbm2" }}

[[shards]]
name = "hbm2"
labels = {{ "hardware.gpu.memory" = "hbm2" }}
max_concurrency = 4
queue_depth = 8

[[shards]]
name = "gddr6"
labels = {{ "hardware.gpu.memory" = "gddr6" }}

[[routes]]
name = "training"
intent = "training"
shard = "gddr6"

[[routes]]
name = "null"
model = "null"
version = "^1"
shard = "hbm2"

[[routes]]
name = "echo"
model = "echo"
shard = "hbm2"

[[models]]
name = "null"
version = "1.0.0"
kind = "null"
aliases = ["1"]
adapters = [{{ id = "formal", path = "unused" }}]

[[models]]
name = "echo"
version = "1"
kind = "echo"

[[tenants]]
name = "acme"
id = 7
key = "hex:{KEY_HEX}"
models = ["null", "echo"]
adapters = ["formal"]

[[tenants]]
name = "limited"
id = 8
key = "hex:{KEY_HEX}"
models = ["echo"]
adapters = []
subjects = ["echo-*"]
{extra}
"#
    );
    Config::parse(&text, std::env::temp_dir()).expect("test config parses")
}

pub struct Req<'a> {
    pub id: u64,
    pub tenant: u32,
    pub model: &'a str,
    pub version: &'a str,
    pub adapter: &'a str,
    pub intent: &'a str,
    pub deadline_us: u64,
    pub data: &'a [f32],
    pub sign: bool,
    /// W3C trace context (none by default).
    pub trace: sluice_wire::TraceContext,
}

/// An engine from `cfg`, started, workers not pinned (tests share cores).
pub fn started(cfg: Config) -> Engine {
    let mut e = Engine::new(
        cfg,
        EngineOptions {
            no_pin: true,
            ..Default::default()
        },
    )
    .unwrap();
    e.start().unwrap();
    e
}

/// The config of one of two appliances on loopback that forward to each
/// other (e2e_peers, e2e_tcp_peers): host labels `host_label`, shards
/// `hbm2` and `gddr6`, intent "training" routed to `gddr6`, everything else
/// to `hbm2`, the null model, tenant 7. `engine` and `io_uring` are added
/// to those tables, `more` at the end (models, peers).
pub fn peer_config(host_label: &str, engine: &str, io_uring: &str, more: &str) -> Config {
    let text = format!(
        r#"
[engine]
workers = [0]
{engine}
[io_uring]
listen = "127.0.0.1:0"
rx_buffers = 64
tx_buffers = 64
{io_uring}
[host]
labels = {{ "hardware.gpu.memory" = "{host_label}" }}
[[shards]]
name = "hbm2"
labels = {{ "hardware.gpu.memory" = "hbm2" }}
[[shards]]
name = "gddr6"
labels = {{ "hardware.gpu.memory" = "gddr6" }}
[[routes]]
name = "training"
intent = "training"
shard = "gddr6"
[[routes]]
name = "rest"
shard = "hbm2"
[[models]]
name = "null"
version = "1"
kind = "null"
[[tenants]]
name = "acme"
id = 7
key = "hex:{KEY_HEX}"
{more}
"#
    );
    Config::parse(&text, std::env::temp_dir()).unwrap()
}

/// The wall clock in µs since the Unix epoch.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// A deadline the freshness rule accepts: 5 s from now (the default
/// window is 10 s).
pub fn fresh_deadline() -> u64 {
    now_us() + 5_000_000
}

/// Request ids unique within the test process, so that signed frames
/// built alike still differ (the replay table keys on the tag).
pub fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1_000_000);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl Default for Req<'_> {
    /// Signed, with a fresh deadline: what the clients send.
    fn default() -> Self {
        Req {
            id: 1,
            tenant: 7,
            model: "null",
            version: "1",
            adapter: "",
            intent: "",
            deadline_us: fresh_deadline(),
            data: &[1.0, 2.0, 3.0, 4.0],
            sign: true,
            trace: sluice_wire::TraceContext::default(),
        }
    }
}

pub fn build(r: &Req<'_>, buf: &mut [u8]) -> usize {
    let bytes: Vec<u8> = r.data.iter().flat_map(|f| f.to_le_bytes()).collect();
    let dims = [1u64, r.data.len() as u64];
    let t = [TensorRepr {
        name: "x",
        dtype: DType::F32,
        dims: &dims,
        data: Some(&bytes),
    }];
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id: r.id,
        tenant_id: r.tenant,
        model: r.model,
        model_version: r.version,
        adapter: r.adapter,
        intent: r.intent,
        deadline_us: r.deadline_us,
        tensors: &t,
        trace: r.trace,
        ..FrameRepr::default()
    };
    let len = repr.emit(buf).expect("request builds").frame_len;
    if r.sign {
        let mut f = Frame::new_unchecked(&mut buf[..len]);
        TenantKey::new(&key_bytes()).sign(&mut f);
    }
    len
}

pub fn client() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

pub fn roundtrip(s: &UdpSocket, to: SocketAddr, frame: &[u8]) -> Vec<u8> {
    s.send_to(frame, to).unwrap();
    let mut buf = vec![0u8; 70_000];
    let (n, _) = s.recv_from(&mut buf).expect("an answer arrives");
    buf.truncate(n);
    buf
}

/// (kind, error code if any)
pub fn answer_kind(bytes: &[u8]) -> (Kind, Option<sluice_wire::ErrorCode>) {
    let f = Frame::new_checked(bytes).expect("answer parses");
    (f.kind(), f.error_body().and_then(|b| b.code()))
}

/// The repository root (for bundled models and the ONNX Runtime library).
pub fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The ONNX Runtime library fetched by scripts/setup-onnxruntime.sh; tests
/// that need it fail with this hint rather than pass silently.
pub fn ort_lib() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("SLUICE_ORT_LIB") {
        return p.into();
    }
    let p = repo_root().join(".cache/onnxruntime/libonnxruntime.so.1.31.1");
    assert!(
        p.is_file(),
        "ONNX Runtime missing at {}: run scripts/setup-onnxruntime.sh",
        p.display()
    );
    p
}

/// Schemas of structured sections used by several tests.
pub const JSON_SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "intent": {"enum": ["reasoning", "chat"]},
    "text": {"type": "string", "maxLength": 2000},
    "priority": {"type": "integer", "minimum": 0}
  },
  "required": ["intent", "text"],
  "additionalProperties": false
}"#;
pub const AVRO_SCHEMA: &str = r#"{"type":"record","name":"Req","fields":[
  {"name":"intent","type":"string"},{"name":"n","type":"int"}]}"#;
pub const PROTO_SCHEMA: &str =
    "syntax = \"proto3\";\nmessage Req {\n  string intent = 1;\n  int32 n = 2;\n}\n";

/// Version 1 of `subject`.
pub fn schema(id: u32, subject: &str, ty: &str, text: &str) -> SchemaCfg {
    SchemaCfg {
        id,
        subject: subject.into(),
        version: 1,
        schema_type: ty.into(),
        schema: text.into(),
        retired: false,
        references: Vec::new(),
    }
}

/// A signed request to the null model naming `schema_id` with one f32 input and, if given, a
/// section.
pub fn build_section(schema_id: u32, section: Option<&[u8]>, buf: &mut [u8]) -> usize {
    let x: Vec<u8> = [1.0f32; 4].iter().flat_map(|f| f.to_le_bytes()).collect();
    let dims_x = [1u64, 4];
    let dims_s = [section.map_or(0, |s| s.len() as u64)];
    let mut t = vec![TensorRepr {
        name: "x",
        dtype: DType::F32,
        dims: &dims_x,
        data: Some(&x),
    }];
    if let Some(s) = section {
        t.push(TensorRepr {
            name: SECTION_TENSOR_NAME,
            dtype: DType::U8,
            dims: &dims_s,
            data: Some(s),
        });
    }
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id: next_id(),
        tenant_id: 7,
        deadline_us: fresh_deadline(),
        model: "null",
        model_version: "1",
        schema_id,
        tensors: &t,
        ..FrameRepr::default()
    };
    let n = repr.emit(buf).unwrap().frame_len;
    TenantKey::new(&key_bytes()).sign(&mut Frame::new_unchecked(&mut buf[..n]));
    n
}

/// Reads one frame from a TCP stream: the fixed header, then the rest.
pub fn read_frame(s: &mut std::net::TcpStream) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = vec![0u8; sluice_wire::FIXED_HEADER_LEN];
    s.read_exact(&mut buf)?;
    let f = Frame::new_unchecked(&buf[..]);
    let len = f.header_len() + f.payload_len();
    buf.resize(len.max(sluice_wire::FIXED_HEADER_LEN), 0);
    s.read_exact(&mut buf[sluice_wire::FIXED_HEADER_LEN..])?;
    Ok(buf)
}

/// A TCP connection to `addr` with a read timeout.
pub fn tcp_client(addr: SocketAddr) -> std::net::TcpStream {
    let s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Sends one frame over TCP and reads one frame back.
pub fn tcp_roundtrip(s: &mut std::net::TcpStream, frame: &[u8]) -> Vec<u8> {
    use std::io::Write;
    s.write_all(frame).unwrap();
    read_frame(s).expect("an answer arrives")
}

/// A negotiation for `subject` (latest version) from `tenant`, signed with
/// the test key when `sign`, with a fresh deadline.
pub fn build_negotiate(id: u64, tenant: u32, subject: &str, sign: bool, buf: &mut [u8]) -> usize {
    let repr = FrameRepr {
        kind: Kind::NegotiateRequest,
        request_id: id,
        tenant_id: tenant,
        deadline_us: fresh_deadline(),
        body: sluice_wire::BodyRepr::NegotiateRequest {
            subject,
            version_hint: 0,
        },
        ..FrameRepr::default()
    };
    let n = repr.emit(buf).unwrap().frame_len;
    if sign {
        TenantKey::new(&key_bytes()).sign(&mut Frame::new_unchecked(&mut buf[..n]));
    }
    n
}
