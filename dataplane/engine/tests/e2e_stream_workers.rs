//! Streams on an appliance with two io_uring workers (docs/wire.md "Which
//! worker holds a stream"): the reuseport program steers every frame of a
//! stream to the worker its stream id picks, so a stream's frames may come
//! from any client socket (the kernel's flow hash alone would spread them
//! over the workers, and those that miss the stream's worker would get
//! `unknown_stream`), and, with `[auth] mode = "tenants"`, signed stream
//! frames are steered by stream id rather than by tag. Stateful streams
//! (`accum`) and token streams (the bundled decoder) both work; streams
//! open on both workers; no stream frame is refused.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::net::{SocketAddr, UdpSocket};

use common::tokens::{collect, decoder_models, recv, stream_frame, token_frame};
use common::*;
use sluice_wire::{
    DType, EndReason, ExtRepr, Frame, FrameRepr, Kind, StreamHeader, TenantKey, TensorRepr,
    stream_flags,
};

fn config(auth: &str) -> sluice_engine::Config {
    let root = repo_root();
    let text = format!(
        r#"
[auth]
mode = "{auth}"
[engine]
workers = [0, 1]
[io_uring]
listen = "127.0.0.1:0"
rx_buffers = 128
tx_buffers = 128
[onnxruntime]
library = "{lib}"
[streams]
per_worker = 16
per_tenant = 16
[[shards]]
name = "s"
[[routes]]
name = "all"
shard = "s"
[[models]]
name = "accum"
version = "1"
path = "{root}/models/accum.onnx"
[models.stream]
state = [{{ input = "s", output = "sN", shape = [1, 8] }}]
{decoders}
{tenants}
"#,
        lib = ort_lib().display(),
        root = root.display(),
        decoders = decoder_models(&root, 64),
        tenants = if auth == "tenants" {
            format!("[[tenants]]\nname = \"t\"\nid = 7\nkey = \"hex:{KEY_HEX}\"")
        } else {
            String::new()
        },
    );
    sluice_engine::Config::parse(&text, root).unwrap()
}

/// Signs `f` in place when the appliance checks tags.
fn signed(mut f: Vec<u8>, sign: bool) -> Vec<u8> {
    if sign {
        TenantKey::new(&key_bytes()).sign(&mut Frame::new_unchecked(&mut f[..]));
    }
    f
}

fn accum_step(id: u64, seq: u32, x: &[f32; 8], sign: bool) -> Vec<u8> {
    let xb: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let t = [TensorRepr {
        name: "x",
        dtype: DType::F32,
        dims: &[1, 8],
        data: Some(&xb),
    }];
    let sh = StreamHeader {
        stream_id: id,
        seq,
        flags: if seq == 0 {
            stream_flags::OPEN
        } else {
            stream_flags::CONTINUE
        },
        ..StreamHeader::default()
    }
    .to_bytes();
    let ext = [ExtRepr::stream(&sh)];
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id: next_id(),
        tenant_id: 7,
        deadline_us: fresh_deadline(),
        model: "accum",
        model_version: "1",
        extensions: &ext,
        tensors: &t,
        ..FrameRepr::default()
    };
    let mut buf = vec![0u8; 4096];
    let n = repr.emit(&mut buf).unwrap().frame_len;
    buf.truncate(n);
    signed(buf, sign)
}

fn y_of(a: &[u8]) -> Vec<f32> {
    let f = Frame::new_checked(a).unwrap();
    assert_eq!(f.kind(), Kind::Response, "{:?}", f.error_body());
    f.tensor_data(&f.tensor("y").unwrap())
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn run(auth: &str) {
    let sign = auth == "tenants";
    let e = started(config(auth));
    let addr: SocketAddr = e.local_addr().unwrap();
    let socks: Vec<UdpSocket> = (0..4).map(|_| client()).collect();
    // Stateful: six streams, each step from another socket.
    let mut sums = [[0f32; 8]; 6];
    for step in 0..12u32 {
        for (k, sum) in sums.iter_mut().enumerate() {
            let x: [f32; 8] = std::array::from_fn(|i| {
                ((i as i64 * 5 + i64::from(step) * 3 + k as i64 * 7) % 11 - 5) as f32 / 16.0
            });
            for (s, v) in sum.iter_mut().zip(&x) {
                *s += v;
            }
            let id = 1 + k as u64;
            let s = &socks[(k + step as usize) % socks.len()];
            let a = roundtrip(s, addr, &accum_step(id, step, &x, sign));
            let want: Vec<f32> = sum.iter().map(|v| v * 0.5).collect();
            assert_eq!(y_of(&a), want, "{auth}: stream {id} step {step}");
        }
    }
    // Token streams: the decoder's tokens, whichever worker generates.
    let prompts = ["hello", "Sluice", "a", "token streams", "zz", "0123456789"];
    for (k, p) in prompts.iter().enumerate() {
        let s = &socks[k % socks.len()];
        let (rid, f) = stream_frame(
            "decoder",
            20 + k as u64,
            0,
            stream_flags::OPEN,
            Some(p.as_bytes()),
            1,
            0,
            fresh_deadline(),
        );
        s.send_to(&signed(f, sign), addr).unwrap();
        let (toks, _) = collect(s, rid, 1);
        let prompt: Vec<i64> = p.bytes().map(i64::from).collect();
        let want = sluice_models::decoder::decoder_generate(&prompt, 32);
        assert_eq!(toks, want, "{auth}: prompt {p:?}");
    }
    // A token stream opened from one socket, kept alive from a second and
    // cancelled from a third: the cancel finds the stream's worker.
    for (id, first) in [(40u64, 0usize), (41, 3)] {
        let (rid, f) = stream_frame(
            "endless",
            id,
            0,
            stream_flags::OPEN,
            Some(b"go"),
            1,
            0,
            fresh_deadline(),
        );
        socks[first].send_to(&signed(f, sign), addr).unwrap();
        for _ in 0..3 {
            assert_eq!(token_frame(&recv(&socks[first])).0, id);
        }
        let at = fresh_deadline();
        let (_, f) = stream_frame("endless", id, 1, stream_flags::CONTINUE, None, 0, 0, at);
        socks[1].send_to(&signed(f, sign), addr).unwrap();
        let (cid, f) = stream_frame("endless", id, 2, stream_flags::CANCEL, None, 0, 0, at);
        let a = roundtrip(&socks[2], addr, &signed(f, sign));
        let fr = Frame::new_checked(a.as_slice()).unwrap();
        assert_eq!(
            (fr.kind(), fr.request_id()),
            (Kind::Response, cid),
            "{auth}: {:?}",
            fr.error_body()
        );
        let h = fr.stream().unwrap();
        assert_eq!(h.end_reason, EndReason::Cancelled as u8);
        // The stream's frames went to the OPEN's socket, none elsewhere.
        assert_eq!(
            Frame::new_checked(recv(&socks[first]).as_slice())
                .unwrap()
                .request_id(),
            rid
        );
    }
    // Stream counts are published every stats tick (50 ms).
    let t0 = std::time::Instant::now();
    let st = loop {
        let st = e.stats();
        let all = st.workers.iter().all(|w| w.streams.opened > 0);
        if all || t0.elapsed() > std::time::Duration::from_secs(2) {
            break st;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(st.workers.len(), 2);
    for (i, w) in st.workers.iter().enumerate() {
        assert!(w.streams.opened > 0, "{auth}: worker {i} opened no stream");
        assert_eq!(
            w.streams.refused, 0,
            "{auth}: worker {i} refused a stream frame"
        );
    }
}

#[test]
fn streams_work_with_two_workers_from_any_socket() {
    run("none");
}

#[test]
fn signed_streams_work_with_two_workers() {
    run("tenants");
}
