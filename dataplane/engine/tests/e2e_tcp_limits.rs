//! TCP slots cannot be pinned: a large slot only for a header whose tag
//! verified, frame / idle / send deadlines, per-source caps, each close
//! counted by cause. Real engine, real io_uring sockets, short timeouts.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::*;
use sluice_engine::Engine;
use sluice_wire::{ErrorCode, Frame, Kind};

fn slot(size: u32, count: u32) -> sluice_engine::config::TcpSlotCfg {
    sluice_engine::config::TcpSlotCfg { size, count }
}

/// TCP beside UDP with short limits; `edit` adjusts the rest.
fn engine(edit: impl FnOnce(&mut sluice_engine::config::UringCfg)) -> Engine {
    let mut cfg = test_config("");
    let u = &mut cfg.io_uring;
    u.tcp_listen = "127.0.0.1:0".into();
    u.tcp_connections_max = 128;
    u.tcp_idle_timeout_ms = 1_000;
    u.tcp_frame_timeout_ms = 1_500;
    u.tcp_send_timeout_ms = 500;
    u.tcp_slots = vec![slot(64 << 10, 8), slot(18 << 20, 4)];
    edit(u);
    cfg.validate().unwrap();
    started(cfg)
}

/// A signed request to `model` with `n` f32 elements.
fn request(model: &str, n: usize) -> Vec<u8> {
    let data: Vec<f32> = (0..n).map(|i| (i % 5) as f32).collect();
    let mut buf = vec![0u8; n * 4 + 4096];
    let len = build(
        &Req {
            id: next_id(),
            model,
            data: &data,
            ..Req::default()
        },
        &mut buf,
    );
    buf.truncate(len);
    buf
}

/// A connection from a given loopback source address.
fn client_from(src: [u8; 4], addr: SocketAddr) -> TcpStream {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::from((src, 0)).into()).unwrap();
    s.connect(&addr.into()).unwrap();
    let s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Whether the server ended the connection (end of stream or a reset);
/// error frames before the end are skipped and returned.
fn ended(s: &mut TcpStream) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    loop {
        match read_frame(s) {
            Ok(f) => frames.push(f),
            Err(e) => {
                assert!(
                    matches!(
                        e.kind(),
                        std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
                    ),
                    "expected the connection closed, got {e:?}"
                );
                return frames;
            }
        }
    }
}

fn eventually(e: &Engine, what: &str, ok: impl Fn(&Engine) -> bool) {
    let until = Instant::now() + Duration::from_secs(10);
    while !ok(e) {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn slots_free(e: &Engine) -> bool {
    e.tcp_connection_totals()
        .iter()
        .all(|t| t.slots.iter().all(|s| s.in_use == 0))
        && e.stats().total(|w| w.rx_in_use) == 0
}

#[test]
fn tricklers_cannot_pin_the_large_slots() {
    let mut e = engine(|u| u.tcp_connections_per_source_max = 100);
    let addr = e.tcp_local_addr().unwrap();
    // 64 connections (16 times the large slots) each declare a validly
    // signed 16 MiB frame and trickle its bytes: one frame built, each
    // connection's header given its own request id and signed again.
    let big = request("null", 4 << 20);
    let key = sluice_wire::TenantKey::new(&key_bytes());
    let mut tricklers: Vec<TcpStream> = (0..64)
        .map(|_| {
            let mut h = big[..4096].to_vec();
            h[16..24].copy_from_slice(&next_id().to_le_bytes());
            key.sign(&mut Frame::new_unchecked(&mut h[..]));
            let mut s = tcp_client(addr);
            s.write_all(&h).unwrap();
            s
        })
        .collect();
    drop(big);
    let trickle = std::thread::spawn(move || {
        for _ in 0..40 {
            for s in tricklers.iter_mut() {
                let _ = s.write(&[0u8]);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        tricklers
    });
    // Meanwhile a legitimate 1 MiB request from another source is served.
    std::thread::sleep(Duration::from_millis(200));
    let req = request("echo", 1 << 18);
    let mut good = client_from([127, 0, 0, 2], addr);
    let a = tcp_roundtrip(&mut good, &req);
    let f = Frame::new_checked(&a[..]).unwrap();
    assert_eq!(f.kind(), Kind::Response, "{:?}", f.error_body());
    let d = f.tensors().next().unwrap();
    let got: Vec<f32> = f
        .tensor_data(&d)
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let want: Vec<f32> = (0..1 << 18).map(|i| (i % 5) as f32).collect();
    assert_eq!(got, want);
    // Every trickler is closed at its frame deadline, counted.
    let mut tricklers = trickle.join().unwrap();
    for s in tricklers.iter_mut() {
        ended(s);
    }
    let t = &e.tcp_connection_totals()[0];
    assert_eq!(t.frame_timeouts, 64, "{t:?}");
    assert!(t.share_waits > 0, "one source held its share: {t:?}");
    eventually(&e, "slots back", slots_free);
    e.stop(Duration::ZERO);
}

#[test]
fn a_bad_tag_on_a_large_header_gets_no_slot() {
    let mut e = engine(|_| {});
    let addr = e.tcp_local_addr().unwrap();
    for (i, tamper) in [80usize, 12].into_iter().enumerate() {
        let mut f = request("null", 4 << 20);
        // A wrong tag byte; then an unknown tenant.
        f[tamper] ^= 0x5a;
        let mut s = tcp_client(addr);
        let hl = Frame::new_unchecked(&f[..]).header_len();
        s.write_all(&f[..hl]).unwrap();
        let frames = ended(&mut s);
        assert_eq!(frames.len(), 1, "one error frame");
        assert_eq!(
            answer_kind(&frames[0]),
            (Kind::Error, Some(ErrorCode::Unauthenticated))
        );
        let t = &e.tcp_connection_totals()[0];
        assert_eq!(t.unauthenticated, i as u64 + 1, "{t:?}");
    }
    let t = &e.tcp_connection_totals()[0];
    assert_eq!(t.slots[1].in_use, 0, "no large slot taken: {t:?}");
    // A signed large frame still goes through.
    let req = request("null", 1 << 20);
    let mut s = tcp_client(addr);
    let a = tcp_roundtrip(&mut s, &req);
    assert_eq!(answer_kind(&a), (Kind::Response, None));
    e.stop(Duration::ZERO);
}

#[test]
fn an_idle_connection_is_closed_at_the_idle_timeout() {
    let mut e = engine(|u| u.tcp_idle_timeout_ms = 300);
    let addr = e.tcp_local_addr().unwrap();
    let started = Instant::now();
    let mut quiet = tcp_client(addr);
    // One answered, then silence: idle too.
    let mut once = tcp_client(addr);
    let a = tcp_roundtrip(&mut once, &request("null", 4));
    assert_eq!(answer_kind(&a), (Kind::Response, None));
    assert!(ended(&mut quiet).is_empty());
    assert!(ended(&mut once).is_empty());
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(250),
        "too early: {waited:?}"
    );
    let t = &e.tcp_connection_totals()[0];
    assert_eq!(t.conn_idle_timeouts, 2, "{t:?}");
    e.stop(Duration::ZERO);
}

#[test]
fn a_client_that_never_reads_is_closed_at_the_send_timeout() {
    let mut e = engine(|_| {});
    let addr = e.tcp_local_addr().unwrap();
    // A 16 MiB answer, more than the socket buffers hold; never read.
    let req = request("echo", 4 << 20);
    let mut s = tcp_client(addr);
    s.write_all(&req).unwrap();
    eventually(&e, "the send timeout", |e| {
        e.tcp_connection_totals()[0].send_timeouts == 1
    });
    eventually(&e, "slots back", slots_free);
    drop(s);
    // The slots are free again: the next large request is served.
    let req = request("echo", 4 << 20);
    let mut s = tcp_client(addr);
    let a = tcp_roundtrip(&mut s, &req);
    assert_eq!(answer_kind(&a), (Kind::Response, None));
    e.stop(Duration::ZERO);
}

#[test]
fn a_source_gets_at_most_its_connections() {
    let mut e = engine(|u| u.tcp_connections_per_source_max = 4);
    let addr = e.tcp_local_addr().unwrap();
    let mut open: Vec<TcpStream> = (0..4).map(|_| tcp_client(addr)).collect();
    for s in open.iter_mut() {
        let a = tcp_roundtrip(s, &request("null", 4));
        assert_eq!(answer_kind(&a), (Kind::Response, None));
    }
    // The fifth from the same address is closed at accept.
    let mut fifth = tcp_client(addr);
    let _ = fifth.write_all(&request("null", 4));
    let mut one = [0u8; 1];
    match fifth.read(&mut one) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("expected the fifth connection closed, got {other:?}"),
    }
    // The worker counts the refusal as it closes the socket: the count may
    // land just after the client sees the close.
    let until = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let t = &e.tcp_connection_totals()[0];
        if t.source_refused == 1 {
            break;
        }
        assert!(std::time::Instant::now() < until, "{t:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Another source is not affected.
    let mut other = client_from([127, 0, 0, 3], addr);
    let a = tcp_roundtrip(&mut other, &request("null", 4));
    assert_eq!(answer_kind(&a), (Kind::Response, None));
    e.stop(Duration::ZERO);
}
