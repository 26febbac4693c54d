//! Schemas in the data plane: in-band negotiation answered by the engine
//! itself, tensor-signature validation on the hot path, and new versions
//! registered while traffic flows, with nothing lost.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::time::{Duration, Instant};

use common::*;
use sluice_engine::schema::SchemaCfg;
use sluice_engine::{Engine, EngineOptions};
use sluice_wire::{
    BodyRepr, DType, ErrorCode, Frame, FrameRepr, Kind, SchemaType, TenantKey, TensorRepr,
};

fn sig(id: u32, version: u32, width: i64) -> SchemaCfg {
    SchemaCfg {
        id,
        subject: "null-input".into(),
        version,
        schema_type: "TENSOR".into(),
        schema: format!(r#"{{"inputs":[{{"name":"x","dtype":"f32","shape":[-1,{width}]}}]}}"#),
        retired: false,
        references: Vec::new(),
    }
}

fn negotiate(
    s: &std::net::UdpSocket,
    addr: std::net::SocketAddr,
    subject: &str,
    hint: u32,
) -> Vec<u8> {
    let mut buf = vec![0u8; 1024];
    let repr = FrameRepr {
        kind: Kind::NegotiateRequest,
        request_id: next_id(),
        tenant_id: 7,
        deadline_us: fresh_deadline(),
        body: BodyRepr::NegotiateRequest {
            subject,
            version_hint: hint,
        },
        ..FrameRepr::default()
    };
    let n = repr.emit(&mut buf).unwrap().frame_len;
    TenantKey::new(&key_bytes()).sign(&mut Frame::new_unchecked(&mut buf[..n]));
    roundtrip(s, addr, &buf[..n])
}

fn with_schema(id: u32, version: u32, data: &[f32], buf: &mut [u8]) -> usize {
    let bytes: Vec<u8> = data.iter().flat_map(|f| f.to_le_bytes()).collect();
    let dims = [1u64, data.len() as u64];
    let t = [TensorRepr {
        name: "x",
        dtype: DType::F32,
        dims: &dims,
        data: Some(&bytes),
    }];
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id: next_id(),
        tenant_id: 7,
        deadline_us: fresh_deadline(),
        model: "null",
        model_version: "1",
        schema_id: id,
        schema_version: version,
        tensors: &t,
        ..FrameRepr::default()
    };
    let n = repr.emit(buf).unwrap().frame_len;
    TenantKey::new(&key_bytes()).sign(&mut Frame::new_unchecked(&mut buf[..n]));
    n
}

#[test]
fn negotiation_and_validation() {
    let e = started(test_config(""));
    e.set_schemas(vec![sig(11, 1, 4), sig(12, 2, 8)], 30_000)
        .unwrap();
    let addr = e.local_addr().unwrap();
    let s = client();

    // Latest version, then a hinted one, then an unknown subject.
    let a = negotiate(&s, addr, "null-input", 0);
    let f = Frame::new_checked(&a[..]).unwrap();
    let n = f.negotiate_response().expect("negotiate response");
    assert_eq!(
        (n.schema_id, n.version, n.ttl_ms, n.schema_type),
        (12, 2, 30_000, SchemaType::Tensor)
    );
    assert!(std::str::from_utf8(n.schema).unwrap().contains("[-1,8]"));
    let a = negotiate(&s, addr, "null-input", 1);
    assert_eq!(
        Frame::new_checked(&a[..])
            .unwrap()
            .negotiate_response()
            .unwrap()
            .schema_id,
        11
    );
    let a = negotiate(&s, addr, "nope", 0);
    assert_eq!(
        answer_kind(&a),
        (Kind::Error, Some(ErrorCode::UnknownSubject))
    );

    // Validation: matching, mismatching shape, unknown id.
    let mut buf = vec![0u8; 4096];
    let n = with_schema(11, 1, &[1.0; 4], &mut buf);
    assert_eq!(
        answer_kind(&roundtrip(&s, addr, &buf[..n])),
        (Kind::Response, None)
    );
    let n = with_schema(12, 2, &[1.0; 4], &mut buf);
    assert_eq!(
        answer_kind(&roundtrip(&s, addr, &buf[..n])),
        (Kind::Error, Some(ErrorCode::SchemaMismatch))
    );
    let n = with_schema(99, 1, &[1.0; 4], &mut buf);
    assert_eq!(
        answer_kind(&roundtrip(&s, addr, &buf[..n])),
        (Kind::Error, Some(ErrorCode::UnknownSchema))
    );

    // Retiring a version makes it unknown.
    let mut retired = sig(11, 1, 4);
    retired.retired = true;
    e.set_schemas(vec![retired, sig(12, 2, 8)], 30_000).unwrap();
    let n = with_schema(11, 1, &[1.0; 4], &mut buf);
    assert_eq!(
        answer_kind(&roundtrip(&s, addr, &buf[..n])),
        (Kind::Error, Some(ErrorCode::UnknownSchema))
    );
}

#[test]
fn registering_versions_under_load_loses_nothing() {
    let e = started(test_config(""));
    e.set_schemas(vec![sig(11, 1, 4)], 30_000).unwrap();
    let addr = e.local_addr().unwrap();
    let e = std::sync::Arc::new(e);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let traffic = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let s = client();
            let mut buf = vec![0u8; 4096];
            let mut rbuf = vec![0u8; 70_000];
            let mut n_ok = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let n = with_schema(11, 1, &[1.0; 4], &mut buf);
                s.send_to(&buf[..n], addr).unwrap();
                let (m, _) = s.recv_from(&mut rbuf).expect("every request is answered");
                assert_eq!(answer_kind(&rbuf[..m]), (Kind::Response, None));
                n_ok += 1;
            }
            n_ok
        })
    };
    // Register versions 2..=20 while traffic flows; time each from the call
    // to the first request validated against the new version.
    let s = client();
    let mut buf = vec![0u8; 4096];
    let mut worst = Duration::ZERO;
    let mut list = vec![sig(11, 1, 4)];
    for v in 2..=20u32 {
        list.push(sig(100 + v, v, 4 + v as i64));
        let t0 = Instant::now();
        e.set_schemas(list.clone(), 30_000).unwrap();
        let data = vec![0.5f32; 4 + v as usize];
        let n = with_schema(100 + v, v, &data, &mut buf);
        assert_eq!(
            answer_kind(&roundtrip(&s, addr, &buf[..n])),
            (Kind::Response, None)
        );
        worst = worst.max(t0.elapsed());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let n_ok = traffic.join().unwrap();
    assert!(n_ok > 0);
    eprintln!(
        "registration to first validated use: worst {worst:?} over 19 versions; {n_ok} requests, none lost"
    );
}

/// Schemas pushed as a config section (as sluiced does) are negotiated with
/// the ttl of `engine.negotiation_ttl_ms`.
#[test]
fn negotiation_ttl_comes_from_the_config() {
    let mut cfg = test_config("");
    cfg.engine.negotiation_ttl_ms = 5_000;
    let mut e = started(cfg);
    let doc = serde_json::json!({ "schemas": [sig(11, 1, 4)] });
    e.apply_json(doc.to_string().as_bytes()).unwrap();
    let s = client();
    let a = negotiate(&s, e.local_addr().unwrap(), "null-input", 0);
    let n = Frame::new_checked(&a[..])
        .unwrap()
        .negotiate_response()
        .map(|n| n.ttl_ms);
    assert_eq!(n, Some(5_000));
    e.stop(Duration::from_millis(10));

    let mut cfg = test_config("");
    cfg.engine.negotiation_ttl_ms = 10;
    let err = Engine::new(cfg, EngineOptions::default())
        .err()
        .map(|e| e.to_string());
    assert!(
        err.as_deref()
            .is_some_and(|m| m.contains("engine.negotiation_ttl_ms")),
        "{err:?}"
    );
}
