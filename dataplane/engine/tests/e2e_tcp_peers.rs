//! Forwarding over TCP: a frame too large for a datagram, for a shard only
//! a peer serves, goes on the worker's TCP connection to the peer's
//! `tcp_address`; the answer comes back on it and is relayed from its slot.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::time::Duration;

use common::*;
use sluice_engine::Engine;
use sluice_engine::config::PeerCfg;
use sluice_wire::{ErrorCode, Frame, Kind};

fn appliance(host_label: &str) -> Engine {
    let tcp = "tcp_listen = \"127.0.0.1:0\"\ntcp_connections_max = 16\n\
               tcp_slots = [{ size = 65536, count = 16 }, { size = 4194304, count = 4 }]";
    let echo = "[[models]]\nname = \"echo\"\nversion = \"1\"\nkind = \"echo\"";
    started(peer_config(
        host_label,
        "spin_us = 50\nforward_timeout_ms = 1000",
        tcp,
        echo,
    ))
}

fn peer(b: &Engine, tcp: bool) -> PeerCfg {
    PeerCfg {
        name: "b".into(),
        address: b.local_addr().unwrap().to_string(),
        tcp_address: tcp.then(|| b.tcp_local_addr().unwrap().to_string()),
        labels: [("hardware.gpu.memory".to_string(), "gddr6".to_string())].into(),
        transport: Default::default(),
    }
}

fn request(id: u64, n: usize) -> Vec<u8> {
    let data: Vec<f32> = (0..n).map(|i| (i % 11) as f32).collect();
    let mut buf = vec![0u8; n * 4 + 4096];
    let len = build(
        &Req {
            id,
            model: "echo",
            intent: "training",
            data: &data,
            ..Req::default()
        },
        &mut buf,
    );
    buf.truncate(len);
    buf
}

fn check_echo(a: &[u8], id: u64, n: usize) {
    let f = Frame::new_checked(a).unwrap();
    assert_eq!(
        (f.kind(), f.request_id()),
        (Kind::Response, id),
        "{:?}",
        f.error_body()
    );
    let d = f.tensors().next().unwrap();
    let got: Vec<f32> = f
        .tensor_data(&d)
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let want: Vec<f32> = (0..n).map(|i| (i % 11) as f32).collect();
    assert_eq!(got, want);
}

#[test]
fn large_frames_are_forwarded_over_tcp_and_relayed_back() {
    let mut b = appliance("gddr6");
    let mut a = appliance("hbm2");
    let mut live = a.live();
    live.peers.push(peer(&b, true));
    a.apply(live).unwrap();
    let mut s = tcp_client(a.tcp_local_addr().unwrap());
    // Small over TCP: forwarded as a datagram; 1 and 3 MiB: over TCP.
    for (id, n) in [(1u64, 16usize), (2, 1 << 18), (3, 3 << 18), (4, 64)] {
        check_echo(&tcp_roundtrip(&mut s, &request(id, n)), id, n);
    }
    // Pipelined through the peer, in order.
    use std::io::Write;
    let sizes = [1usize << 18, 8, 1 << 19, 1 << 18];
    for (i, &n) in sizes.iter().enumerate() {
        s.write_all(&request(10 + i as u64, n)).unwrap();
    }
    for (i, &n) in sizes.iter().enumerate() {
        check_echo(&read_frame(&mut s).unwrap(), 10 + i as u64, n);
    }
    std::thread::sleep(Duration::from_millis(120));
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(sa.total(|w| w.forwarded), 8);
    assert_eq!(sa.total(|w| w.relayed), 8);
    assert_eq!(sb.total(|w| w.ok), 8, "B ran them");
    let ta = &a.tcp_connection_totals()[0];
    assert_eq!((ta.peer_connects, ta.peer_forwards), (1, 5), "{ta:?}");
    let conns = a.tcp_connections();
    assert!(
        conns
            .iter()
            .any(|c| c.role == "peer" && c.peer == b.tcp_local_addr()),
        "{conns:?}"
    );
    // B goes away: what waits on it fails retryably, fast.
    b.stop(Duration::ZERO);
    drop(b);
    let ans = tcp_roundtrip(&mut s, &request(30, 1 << 18));
    assert_eq!(Frame::new_checked(&ans[..]).unwrap().request_id(), 30);
    assert_eq!(answer_kind(&ans), (Kind::Error, Some(ErrorCode::PeerDown)));
    a.stop(Duration::ZERO);
}

#[test]
fn without_a_tcp_address_a_large_forward_is_refused_clearly() {
    let b = appliance("gddr6");
    let mut a = appliance("hbm2");
    let mut live = a.live();
    live.peers.push(peer(&b, false));
    a.apply(live).unwrap();
    let mut s = tcp_client(a.tcp_local_addr().unwrap());
    check_echo(&tcp_roundtrip(&mut s, &request(1, 16)), 1, 16);
    let ans = tcp_roundtrip(&mut s, &request(2, 1 << 18));
    assert_eq!(
        answer_kind(&ans),
        (Kind::Error, Some(ErrorCode::FrameTooLarge))
    );
    let f = Frame::new_checked(&ans[..]).unwrap();
    let msg = f.error_body().unwrap().message.to_string();
    assert!(msg.contains("tcp_address"), "{msg}");
    a.stop(Duration::ZERO);
}
