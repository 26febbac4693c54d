//! 1 MiB and 16 MiB f32 tensors over TCP through the bundled large-input
//! model (`models/large.onnx`): ONNX Runtime reads the tensor in the slot
//! it landed in and writes the 16 MiB answer into the reply slot; the
//! answer equals the same model run in-process by sluice-infer, and no
//! payload byte is copied.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::time::Duration;

use common::*;
use sluice_wire::{DType, Frame, FrameRepr, Kind, TenantKey, TensorRepr};

fn config() -> sluice_engine::Config {
    let root = repo_root();
    let text = format!(
        r#"
[engine]
workers = [0]
[io_uring]
listen = "127.0.0.1:0"
rx_buffers = 64
tx_buffers = 64
tcp_listen = "127.0.0.1:0"
tcp_connections_max = 32
tcp_slots = [{{ size = 65536, count = 16 }}, {{ size = 2097152, count = 4 }}, {{ size = 18874368, count = 2 }}]
[onnxruntime]
library = "{lib}"
[[shards]]
name = "s"
[[routes]]
name = "all"
shard = "s"
[[models]]
name = "large"
version = "1.0.0"
path = "{root}/models/large.onnx"
[[tenants]]
name = "t"
id = 7
key = "hex:{KEY_HEX}"
"#,
        lib = ort_lib().display(),
        root = root.display()
    );
    sluice_engine::Config::parse(&text, root).unwrap()
}

/// Inputs k/16 for small k: every `y` is exact in f32.
fn input(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 7 + seed) % 9) as f32 / 16.0 - 0.25)
        .collect()
}

fn request(id: u64, x: &[f32]) -> Vec<u8> {
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let dims = [1u64, x.len() as u64];
    let t = [TensorRepr {
        name: "x",
        dtype: DType::F32,
        dims: &dims,
        data: Some(&bytes),
    }];
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id: id,
        tenant_id: 7,
        deadline_us: fresh_deadline(),
        model: "large",
        model_version: "1.0.0",
        tensors: &t,
        ..FrameRepr::default()
    };
    let mut buf = vec![0u8; bytes.len() + 4096];
    let n = repr.emit(&mut buf).unwrap().frame_len;
    buf.truncate(n);
    TenantKey::new(&key_bytes()).sign(&mut Frame::new_unchecked(&mut buf[..]));
    buf
}

/// (y bytes, total bytes) of an answer.
fn outputs(a: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let f = Frame::new_checked(a).unwrap();
    assert_eq!(f.kind(), Kind::Response, "{:?}", f.error_body());
    let y = f.tensor("y").expect("output y");
    let total = f.tensor("total").expect("output total");
    (f.tensor_data(&y).to_vec(), f.tensor_data(&total).to_vec())
}

/// The same request run by sluice-infer in this process.
fn in_process(req: &[u8]) -> (Vec<u8>, Vec<u8>) {
    sluice_infer::init(&ort_lib()).unwrap();
    let mut model = sluice_infer::OrtModel::load(&sluice_infer::ModelSpec {
        name: "large".into(),
        version: "1.0.0".into(),
        path: repo_root().join("models/large.onnx"),
        adapters: Vec::new(),
    })
    .unwrap();
    let mut rq = sluice_infer::AlignedBuf::new(req.len());
    rq.as_mut_slice().copy_from_slice(req);
    let mut tx = sluice_infer::AlignedBuf::new(req.len() + 4096);
    let mut stats = sluice_infer::RunStats::default();
    let frame = Frame::new_checked(rq.as_slice()).unwrap();
    let n = model
        .run_into(&frame, None, tx.as_mut_slice(), &mut stats)
        .unwrap();
    assert_eq!(stats.payload_bytes_copied, 0);
    outputs(&tx.as_slice()[..n])
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn one_and_sixteen_mib_tensors_run_in_place_over_tcp() {
    let mut e = started(config());
    let mut s = tcp_client(e.tcp_local_addr().unwrap());
    let mut staged = 0;
    for (id, n) in [(1u64, 1usize << 18), (2, 1 << 22), (3, 1 << 18)] {
        let x = input(n, id as usize);
        let req = request(id, &x);
        // Large frames: the whole header is staged and its tag checked
        // before a slot is taken.
        staged += Frame::new_unchecked(&req[..]).header_len() as u64;
        let got = outputs(&tcp_roundtrip(&mut s, &req));
        let want = in_process(&req);
        assert!(
            got == want,
            "request {id}: the engine's answer differs from sluice-infer's"
        );
        let y = f32s(&got.0);
        let wy: Vec<f32> = x.iter().map(|v| v * 0.5 + 0.25).collect();
        assert_eq!(y, wy, "y is exact");
        let total = f32s(&got.1)[0] as f64;
        let wt: f64 = x.iter().map(|&v| f64::from(v)).sum();
        assert!(
            (total - wt).abs() <= 1e-3 * wt.abs().max(1.0),
            "{total} vs {wt}"
        );
    }
    let st = e.stats();
    assert_eq!(st.total(|w| w.ok), 3);
    assert_eq!(
        st.total(|w| w.payload_bytes_copied),
        0,
        "no payload byte copied"
    );
    let t = &e.tcp_connection_totals()[0];
    assert_eq!(t.header_bytes_copied, staged);
    assert_eq!((t.rx_large, t.tx_large), (3, 3));
    // The answers (of 64 KiB or more) went by SEND_ZC, and on loopback the
    // kernel reported that it copied them all: counted, and with
    // tcp_send_zc = "auto" the connection falls back to plain sends.
    assert!(t.zc_copied >= 1, "{t:?}");
    assert_eq!(t.zc_sends, 0, "loopback never sends without a copy: {t:?}");
    e.stop(Duration::ZERO);
}
