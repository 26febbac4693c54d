//! The bundled MLP through the whole engine over io_uring: ONNX Runtime reads
//! the tensor in the receive buffer and writes the answer into the reply.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use common::*;
use sluice_wire::{DType, ErrorCode, Frame, FrameRepr, Kind, TenantKey, TensorRepr};

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
aliases = ["1"]
adapters = [{{ id = "formal", path = "{root}/models/mlp_formal.onnx_adapter" }}]
[[models]]
name = "mlp"
version = "2.0.0"
path = "{root}/models/mlp.onnx"
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

fn request(id: u64, version: &str, adapter: &str, batch: usize, buf: &mut [u8]) -> usize {
    let x: Vec<u8> = (0..batch * 4)
        .flat_map(|i| (i as f32 * 0.25 - 1.0).to_le_bytes())
        .collect();
    let dims = [batch as u64, 4];
    let t = [TensorRepr {
        name: "x",
        dtype: DType::F32,
        dims: &dims,
        data: Some(&x),
    }];
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id: id,
        tenant_id: 7,
        deadline_us: fresh_deadline(),
        model: "mlp",
        model_version: version,
        adapter,
        tensors: &t,
        ..FrameRepr::default()
    };
    let n = repr.emit(buf).unwrap().frame_len;
    TenantKey::new(&key_bytes()).sign(&mut Frame::new_unchecked(&mut buf[..n]));
    n
}

fn outputs(a: &[u8]) -> Vec<f32> {
    let f = Frame::new_checked(a).unwrap();
    assert_eq!(f.kind(), Kind::Response, "{:?}", f.error_body());
    let y = f.tensor("y").expect("output y");
    f.tensor_data(&y)
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn mlp_runs_in_place_with_adapters_and_batches() {
    let mut e = started(config());
    let addr = e.local_addr().unwrap();
    let s = client();
    let mut buf = vec![0u8; 8192];

    let n = request(1, "1", "", 1, &mut buf);
    let base = outputs(&roundtrip(&s, addr, &buf[..n]));
    assert_eq!(base.len(), 3);
    let n = request(2, "1.0.0", "formal", 1, &mut buf);
    let lora = outputs(&roundtrip(&s, addr, &buf[..n]));
    assert_ne!(base, lora, "the adapter changes the answer");
    let n = request(3, "1", "", 32, &mut buf);
    let batch = outputs(&roundtrip(&s, addr, &buf[..n]));
    assert_eq!(batch.len(), 32 * 3);
    assert_eq!(
        &batch[..3],
        &base[..],
        "row 0 of the batch equals the batch-1 answer"
    );

    let n = request(4, "1", "unknown-adapter", 1, &mut buf);
    assert_eq!(
        answer_kind(&roundtrip(&s, addr, &buf[..n])),
        (Kind::Error, Some(ErrorCode::UnknownAdapter))
    );
    let n = request(5, "3.0.0", "", 1, &mut buf);
    assert_eq!(
        answer_kind(&roundtrip(&s, addr, &buf[..n])),
        (Kind::Error, Some(ErrorCode::UnknownModel))
    );

    let st = e.stats();
    assert_eq!(st.total(|w| w.ok), 3);
    assert_eq!(
        st.total(|w| w.payload_bytes_copied),
        0,
        "no payload byte copied"
    );
    e.stop(std::time::Duration::ZERO);
}

#[test]
fn alias_switch_under_traffic_loses_nothing() {
    let e = started(config());
    let addr = e.local_addr().unwrap();
    let e = std::sync::Arc::new(e);
    let e2 = std::sync::Arc::clone(&e);
    let switcher = std::thread::spawn(move || {
        for i in 0..20 {
            let v = if i % 2 == 0 { "2.0.0" } else { "1.0.0" };
            e2.set_alias("mlp", "1", v).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    });
    let s = client();
    let mut buf = vec![0u8; 8192];
    let mut rbuf = vec![0u8; 70_000];
    let mut answered = 0;
    for id in 0..400u64 {
        let n = request(id, "1", "", 1, &mut buf);
        s.send_to(&buf[..n], addr).unwrap();
        let (m, _) = s.recv_from(&mut rbuf).expect("answered");
        let f = Frame::new_checked(&rbuf[..m]).unwrap();
        assert_eq!(f.request_id(), id);
        assert_eq!(f.kind(), Kind::Response, "{:?}", f.error_body());
        assert!(f.model_version() == "1.0.0" || f.model_version() == "2.0.0");
        answered += 1;
    }
    switcher.join().unwrap();
    assert_eq!(answered, 400);
}
