//! The engine on the real io_uring transport, over loopback UDP.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use sluice_engine::Engine;
use sluice_wire::{ErrorCode, Frame, FrameRepr, Kind};

fn start(extra: &str) -> Engine {
    started(test_config(extra))
}

#[test]
fn null_model_answers_with_zeros_shaped_like_input() {
    let e = start("");
    let s = client();
    let mut buf = vec![0u8; 4096];
    let n = build(
        &Req {
            id: 42,
            ..Req::default()
        },
        &mut buf,
    );
    let a = roundtrip(&s, e.local_addr().unwrap(), &buf[..n]);
    let f = Frame::new_checked(&a[..]).unwrap();
    assert_eq!(f.kind(), Kind::Response);
    assert_eq!(f.request_id(), 42);
    let t = f.tensor("x").unwrap();
    assert_eq!(t.dims(), &[1, 4]);
    assert!(f.tensor_data(&t).iter().all(|&b| b == 0));
    let st = e.stats();
    assert_eq!(st.total(|w| w.ok), 1);
    assert_eq!(st.total(|w| w.payload_bytes_copied), 0);
}

#[test]
fn echo_model_returns_input_and_counts_the_copy() {
    let e = start("");
    let s = client();
    let mut buf = vec![0u8; 4096];
    let data = [5.0f32, 6.0, 7.0];
    let n = build(
        &Req {
            model: "echo",
            version: "1",
            data: &data,
            ..Req::default()
        },
        &mut buf,
    );
    let a = roundtrip(&s, e.local_addr().unwrap(), &buf[..n]);
    let f = Frame::new_checked(&a[..]).unwrap();
    let t = f.tensor("x").unwrap();
    let got: Vec<f32> = f
        .tensor_data(&t)
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(got, data);
    assert_eq!(e.stats().total(|w| w.payload_bytes_copied), 12);
}

/// Pool counters: every receive and allocation counted, first touches
/// told from reuses, the pages behind each pool reported; copies by path.
#[test]
fn pools_count_first_touches_and_reuses_and_copies_by_path() {
    let e = start("");
    let s = client();
    let mut buf = vec![0u8; 4096];
    let data = [1.0f32, 2.0];
    const N: u64 = 200; // more than the 64 receive buffers
    for id in 0..N {
        let n = build(
            &Req {
                id,
                model: "echo",
                version: "1",
                data: &data,
                ..Req::default()
            },
            &mut buf,
        );
        roundtrip(&s, e.local_addr().unwrap(), &buf[..n]);
    }
    // Workers publish pool counters every 50 ms.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let w = loop {
        let st = e.stats();
        let w = st.workers[0].clone();
        let rx = w
            .pools
            .iter()
            .find(|p| p.pool == "rx")
            .map_or(0, |p| p.allocs);
        if rx >= N || std::time::Instant::now() > deadline {
            break w;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let rx = w.pools.iter().find(|p| p.pool == "rx").unwrap();
    let tx = w.pools.iter().find(|p| p.pool == "tx").unwrap();
    assert_eq!(rx.allocs, N, "one receive buffer per request: {rx:?}");
    assert_eq!(rx.capacity, 64);
    assert!(rx.touched >= 1 && rx.touched <= 64, "{rx:?}");
    assert_eq!(rx.first_touches, rx.touched, "{rx:?}");
    assert_eq!(rx.reuses + rx.first_touches, rx.allocs);
    assert!(rx.reuses >= N - 64, "{rx:?}");
    assert!((rx.reuse_ratio - rx.reuses as f64 / N as f64).abs() < 1e-9);
    assert_eq!(rx.huge_bytes + rx.normal_bytes, 64 * 65536);
    assert_eq!(tx.allocs, N, "one transmit buffer per answer: {tx:?}");
    // LIFO free list, one request at a time: the same warm buffer each time.
    assert_eq!(tx.touched, 1, "{tx:?}");
    assert_eq!(tx.reuses, N - 1);
    assert!(
        w.pools.iter().all(|p| p.pool != "large"),
        "no large pool on io_uring"
    );
    assert_eq!(w.copies.len(), 1, "{:?}", w.copies);
    assert_eq!(w.copies[0].path, "echo_reply");
    assert_eq!(w.copies[0].frames, N);
    assert_eq!(w.copies[0].bytes, N * 8);
    assert_eq!(w.buffer_reuses, rx.reuses + tx.reuses);
}

#[test]
fn every_error_path_answers_with_its_code() {
    let e = start("");
    let addr = e.local_addr().unwrap();
    let s = client();
    let mut buf = vec![0u8; 4096];
    let now_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    let cases: Vec<(Req<'_>, ErrorCode)> = vec![
        (
            Req {
                version: "",
                ..Req::default()
            },
            ErrorCode::ModelVersionRequired,
        ),
        (
            Req {
                model: "nope",
                ..Req::default()
            },
            ErrorCode::UnknownModel,
        ),
        (
            Req {
                version: "1.9.0",
                ..Req::default()
            },
            ErrorCode::UnknownModel,
        ),
        (
            Req {
                sign: false,
                ..Req::default()
            },
            ErrorCode::Unauthenticated,
        ),
        (
            Req {
                tenant: 99,
                ..Req::default()
            },
            ErrorCode::Unauthenticated,
        ),
        // Outside the tenant's lists is answered as not existing.
        (
            Req {
                tenant: 8,
                ..Req::default()
            },
            ErrorCode::UnknownModel,
        ),
        (
            Req {
                tenant: 8,
                model: "echo",
                adapter: "formal",
                ..Req::default()
            },
            ErrorCode::UnknownAdapter,
        ),
        (
            Req {
                adapter: "casual",
                ..Req::default()
            },
            ErrorCode::UnknownAdapter,
        ),
        (
            Req {
                deadline_us: 0,
                ..Req::default()
            },
            ErrorCode::Stale,
        ),
        (
            Req {
                model: "echo",
                adapter: "formal",
                ..Req::default()
            },
            ErrorCode::UnknownAdapter,
        ),
        (
            Req {
                intent: "training",
                ..Req::default()
            },
            ErrorCode::NoRouteToShard,
        ),
        (
            Req {
                deadline_us: now_us - 1_000,
                ..Req::default()
            },
            ErrorCode::DeadlineExceeded,
        ),
    ];
    for (i, (req, code)) in cases.iter().enumerate() {
        let n = build(
            &Req {
                id: i as u64 + 100,
                ..*req
            },
            &mut buf,
        );
        let a = roundtrip(&s, addr, &buf[..n]);
        let f = Frame::new_checked(&a[..]).unwrap();
        assert_eq!(f.request_id(), i as u64 + 100, "case {i}");
        assert_eq!(answer_kind(&a), (Kind::Error, Some(*code)), "case {i}");
        assert_eq!(
            f.error_body().unwrap().code().unwrap().retryable(),
            code.retryable()
        );
    }
    // A malformed frame (corrupt the tensor table) is answered, not dropped.
    let n = build(&Req::default(), &mut buf);
    buf[78] = 3; // tensor count 3: the table no longer fits the header
    let a = roundtrip(&s, addr, &buf[..n]);
    assert_eq!(
        answer_kind(&a),
        (Kind::Error, Some(ErrorCode::MalformedFrame))
    );
    // A ping gets a pong.
    let ping = FrameRepr {
        kind: Kind::Ping,
        request_id: 9,
        ..FrameRepr::default()
    };
    let n = ping.emit(&mut buf).unwrap().frame_len;
    let a = roundtrip(&s, addr, &buf[..n]);
    assert_eq!(answer_kind(&a), (Kind::Pong, None));
    // Garbage that is not Sluice is counted and dropped.
    s.send_to(b"GET / HTTP/1.1\r\n", addr).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let st = e.stats();
    for (_, code) in &cases {
        assert!(st.errors(*code) >= 1, "{code} counted");
    }
    assert_eq!(st.total(|w| w.not_sluice), 1);
    assert_eq!(st.total(|w| w.pings), 1);
}

#[test]
fn full_shard_queue_answers_busy_and_loses_nothing() {
    let e = start("");
    let addr = e.local_addr().unwrap();
    let s = client();
    let mut buf = vec![0u8; 4096];
    // The hbm2 queue holds 8 per burst; send 64 back to back, many land in one burst.
    const N: u64 = 64;
    for id in 0..N {
        let n = build(
            &Req {
                id,
                ..Req::default()
            },
            &mut buf,
        );
        s.send_to(&buf[..n], addr).unwrap();
    }
    let mut seen = std::collections::HashSet::new();
    let (mut ok, mut busy) = (0, 0);
    let mut rbuf = vec![0u8; 70_000];
    while seen.len() < N as usize {
        let (n, _) = s.recv_from(&mut rbuf).expect("every request is answered");
        let f = Frame::new_checked(&rbuf[..n]).unwrap();
        assert!(seen.insert(f.request_id()));
        match answer_kind(&rbuf[..n]) {
            (Kind::Response, None) => ok += 1,
            (Kind::Error, Some(ErrorCode::Busy)) => busy += 1,
            other => panic!("unexpected answer {other:?}"),
        }
    }
    assert_eq!(ok + busy, N);
    assert!(ok >= 8);
}

#[test]
fn stop_answers_new_requests_with_shutting_down() {
    let mut e = start("");
    let addr = e.local_addr().unwrap();
    let s = client();
    let mut buf = vec![0u8; 4096];
    let h = std::thread::spawn(move || {
        e.stop(Duration::from_millis(500));
        e
    });
    std::thread::sleep(Duration::from_millis(150));
    let n = build(&Req::default(), &mut buf);
    let a = roundtrip(&s, addr, &buf[..n]);
    assert_eq!(
        answer_kind(&a),
        (Kind::Error, Some(ErrorCode::ShuttingDown))
    );
    let e = h.join().unwrap();
    assert!(!e.is_running());
}

/// The version rule is one rule: a request's version is an exact version or
/// an alias; whatever does not resolve is unknown_model (routes never turn
/// it into no_route), and ranges are for routes only.
#[test]
fn version_rules_are_one_rule() {
    let e = start(
        r#"
[[tenants]]
name = "all"
id = 9
key = "hex:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

[[models]]
name = "orphan"
version = "1"
kind = "null"
"#,
    );
    let addr = e.local_addr().unwrap();
    let s = client();
    let mut buf = vec![0u8; 4096];
    let cases: &[(&str, &str, Option<ErrorCode>)] = &[
        ("null", "1.0.0", None),                      // exact
        ("null", "1", None),                          // alias
        ("null", "2", Some(ErrorCode::UnknownModel)), // no such version; the ^1 route does not match it either
        ("null", "2.1", Some(ErrorCode::UnknownModel)),
        ("null", "1.9.0", Some(ErrorCode::UnknownModel)), // the ^1 route matches, no such version
        ("null", "^1", Some(ErrorCode::UnknownModel)),    // a range is not a version
        ("null", "1.*", Some(ErrorCode::UnknownModel)),
        ("nope", "1", Some(ErrorCode::UnknownModel)),
        ("orphan", "1", Some(ErrorCode::NoRoute)), // loaded, but no route takes it
    ];
    for (i, (model, version, want)) in cases.iter().enumerate() {
        let n = build(
            &Req {
                id: 500 + i as u64,
                tenant: 9, // every model is in its list
                model,
                version,
                ..Req::default()
            },
            &mut buf,
        );
        let (kind, code) = answer_kind(&roundtrip(&s, addr, &buf[..n]));
        match want {
            None => assert_eq!(kind, Kind::Response, "{model} {version}"),
            Some(c) => assert_eq!(code, Some(*c), "{model} {version}"),
        }
    }
}
