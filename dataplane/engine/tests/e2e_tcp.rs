//! TCP on io_uring beside UDP: the same engine, the same frames, framed by
//! the frame itself; large frames placed whole in slots.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::time::Duration;

use common::*;
use sluice_engine::{Engine, EngineOptions};
use sluice_wire::{Frame, FrameRepr, Kind};

/// The test config with TCP beside UDP: small pools, a short idle timeout.
fn tcp_config(extra: &str) -> sluice_engine::Config {
    let mut cfg = test_config(extra);
    let u = &mut cfg.io_uring;
    u.tcp_listen = "127.0.0.1:0".into();
    u.tcp_connections_max = 64;
    u.tcp_idle_timeout_ms = 300;
    u.tcp_slots = vec![
        slot(64 << 10, 32),
        slot(2 << 20, 4),
        slot(18 << 20, 1),
    ];
    cfg.validate().unwrap();
    cfg
}

fn slot(size: u32, count: u32) -> sluice_engine::config::TcpSlotCfg {
    sluice_engine::config::TcpSlotCfg { size, count }
}

fn engine(extra: &str) -> Engine {
    let cfg = tcp_config(extra);
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


#[test]
fn ping_and_requests_over_tcp() {
    let mut e = engine("");
    let addr = e.tcp_local_addr().expect("tcp listens");
    let mut s = tcp_client(addr);
    let mut buf = vec![0u8; 4096];
    let ping = FrameRepr {
        kind: Kind::Ping,
        request_id: 9,
        ..FrameRepr::default()
    };
    let n = ping.emit(&mut buf).unwrap().frame_len;
    let a = tcp_roundtrip(&mut s, &buf[..n]);
    let f = Frame::new_checked(&a[..]).unwrap();
    assert_eq!((f.kind(), f.request_id()), (Kind::Pong, 9));
    for id in 0..50 {
        let n = build(
            &Req {
                id,
                model: "echo",
                ..Req::default()
            },
            &mut buf,
        );
        let a = tcp_roundtrip(&mut s, &buf[..n]);
        let f = Frame::new_checked(&a[..]).unwrap();
        assert_eq!((f.kind(), f.request_id()), (Kind::Response, id), "{:?}", f.error_body());
    }
    e.stop(Duration::ZERO);
}
