//! Two appliances on loopback: a request for a shard whose labels only the
//! peer carries is forwarded there, and the peer's answer is relayed back
//! with its request id; a peer that stops answering gets retryable errors.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::time::{Duration, Instant};

use common::*;
use sluice_engine::Engine;
use sluice_wire::{ErrorCode, Frame, Kind};

fn appliance(host_label: &str, peers: &str) -> Engine {
    started(peer_config(
        host_label,
        "spin_us = 50\nforward_timeout_ms = 150",
        "",
        peers,
    ))
}

#[test]
fn forwards_to_the_peer_with_the_labels_and_relays_the_answer() {
    let mut b = appliance("gddr6", "");
    let b_addr = b.local_addr().unwrap();
    let a = appliance(
        "hbm2",
        &format!(
            "[[peers]]\nname = \"b\"\naddress = \"{b_addr}\"\nlabels = {{ \"hardware.gpu.memory\" = \"gddr6\" }}"
        ),
    );
    let a_addr = a.local_addr().unwrap();
    let s = client();
    let mut buf = vec![0u8; 4096];

    // Served locally on A.
    let n = build(
        &Req {
            id: 1,
            version: "1",
            ..Req::default()
        },
        &mut buf,
    );
    assert_eq!(
        answer_kind(&roundtrip(&s, a_addr, &buf[..n])),
        (Kind::Response, None)
    );

    // Forwarded to B and relayed back, request id preserved.
    for id in 10..20 {
        let n = build(
            &Req {
                id,
                version: "1",
                intent: "training",
                ..Req::default()
            },
            &mut buf,
        );
        let ans = roundtrip(&s, a_addr, &buf[..n]);
        let f = Frame::new_checked(&ans[..]).unwrap();
        assert_eq!(
            (f.kind(), f.request_id()),
            (Kind::Response, id),
            "{:?}",
            f.error_body()
        );
    }
    std::thread::sleep(Duration::from_millis(120));
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(sa.total(|w| w.forwarded), 10);
    assert_eq!(sa.total(|w| w.relayed), 10);
    assert_eq!(sb.total(|w| w.ok), 10, "B ran the forwarded requests");
    assert_eq!(sa.total(|w| w.ok), 1, "A ran only its own");

    // B stops answering: the client gets a retryable peer_down, quickly.
    b.stop(Duration::ZERO);
    drop(b);
    let n = build(
        &Req {
            id: 30,
            version: "1",
            intent: "training",
            ..Req::default()
        },
        &mut buf,
    );
    let t0 = Instant::now();
    let ans = roundtrip(&s, a_addr, &buf[..n]);
    let f = Frame::new_checked(&ans[..]).unwrap();
    assert_eq!(f.request_id(), 30);
    let code = f.error_body().and_then(|e| e.code());
    assert_eq!(code, Some(ErrorCode::PeerDown));
    assert!(code.unwrap().retryable());
    assert!(t0.elapsed() < Duration::from_secs(2));
    // While marked down, requests fail at once, without waiting.
    let n = build(
        &Req {
            id: 31,
            version: "1",
            intent: "training",
            ..Req::default()
        },
        &mut buf,
    );
    assert_eq!(
        answer_kind(&roundtrip(&s, a_addr, &buf[..n])),
        (Kind::Error, Some(ErrorCode::PeerDown))
    );
    assert!(a.stats().total(|w| w.forward_timeouts) >= 1);
}

#[test]
fn requests_from_a_peer_are_not_forwarded_again() {
    // A and B both lack gddr6 and name each other as gddr6 peers: a loop
    // unless the second hop is refused.
    let mut b = appliance("hbm2", "");
    let b_addr = b.local_addr().unwrap();
    let a = appliance(
        "hbm2",
        &format!(
            "[[peers]]\nname = \"b\"\naddress = \"{b_addr}\"\nlabels = {{ \"hardware.gpu.memory\" = \"gddr6\" }}"
        ),
    );
    let a_addr = a.local_addr().unwrap();
    // B learns A as a peer through a live change.
    let mut live = b.live();
    live.peers.push(sluice_engine::config::PeerCfg {
        name: "a".into(),
        address: a_addr.to_string(),
        tcp_address: None,
        labels: [("hardware.gpu.memory".to_string(), "gddr6".to_string())].into(),
        transport: Default::default(),
    });
    b.apply(live).unwrap();
    // A marks the request FORWARDED (outside the tag); B, which lacks the
    // labels too, refuses a second hop, and A relays B's answer.
    let s = client();
    let mut buf = vec![0u8; 4096];
    let n = build(
        &Req {
            id: 5,
            version: "1",
            intent: "training",
            ..Req::default()
        },
        &mut buf,
    );
    let ans = roundtrip(&s, a_addr, &buf[..n]);
    let f = Frame::new_checked(&ans[..]).unwrap();
    assert_eq!(f.request_id(), 5);
    assert_eq!(
        f.error_body().and_then(|e| e.code()),
        Some(ErrorCode::NoRouteToShard)
    );
    std::thread::sleep(Duration::from_millis(120));
    assert_eq!(a.stats().total(|w| w.forwarded), 1, "A forwarded once");
    assert_eq!(
        b.stats().total(|w| w.forwarded),
        0,
        "B did not forward again"
    );
    b.stop(Duration::ZERO);
}

/// A worker whose burst holds `rx_burst_max` frames, facing a peer that
/// answers many forwarded requests at once: every answer is relayed, none
/// is written past the burst (issue 13.1: the io_uring receive path counted
/// only service-port completions against the room left in the burst).
#[test]
fn a_peer_answering_more_forwards_than_one_burst_holds_is_relayed() {
    const N: u64 = 24;
    for burst in 1..=4u32 {
        // The peer: a plain socket that collects N forwards, then answers
        // them all back to back, so they land in one completion batch.
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        peer.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let peer_addr = peer.local_addr().unwrap();
        let engine = format!(
            "poll = \"adaptive\"\nspin_us = 0\nrx_burst_max = {burst}\nforward_timeout_ms = 10000"
        );
        let peers = format!(
            "[[peers]]\nname = \"b\"\naddress = \"{peer_addr}\"\n\
             labels = {{ \"hardware.gpu.memory\" = \"gddr6\" }}"
        );
        let mut a = started(peer_config("hbm2", &engine, "", &peers));
        let a_addr = a.local_addr().unwrap();
        let s = client();
        let mut buf = vec![0u8; 4096];
        for id in 1..=N {
            let n = build(
                &Req {
                    id,
                    version: "1",
                    intent: "training",
                    ..Req::default()
                },
                &mut buf,
            );
            s.send_to(&buf[..n], a_addr).unwrap();
        }
        // Collect every forward, then answer them all at once.
        let mut forwards = Vec::new();
        let mut rb = vec![0u8; 65536];
        let mut from = None;
        while (forwards.len() as u64) < N {
            let (n, src) = peer.recv_from(&mut rb).expect("every request is forwarded");
            from = Some(src);
            let f = Frame::new_checked(&rb[..n]).unwrap();
            forwards.push(f.request_id());
        }
        let from = from.unwrap();
        let mut answers = Vec::new();
        for &id in &forwards {
            let mut out = vec![0u8; 512];
            let n = sluice_wire::FrameRepr {
                kind: Kind::Response,
                request_id: id,
                tenant_id: 7,
                model: "null",
                model_version: "1",
                ..sluice_wire::FrameRepr::default()
            }
            .emit(&mut out)
            .unwrap()
            .frame_len;
            out.truncate(n);
            answers.push(out);
        }
        for ans in &answers {
            peer.send_to(ans, from).unwrap();
        }
        // Every answer comes back to the client, each once.
        let mut got = std::collections::BTreeSet::new();
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        while (got.len() as u64) < N {
            let Ok((n, _)) = s.recv_from(&mut rb) else {
                break;
            };
            let f = Frame::new_checked(&rb[..n]).unwrap();
            assert_eq!(
                f.kind(),
                Kind::Response,
                "burst {burst}: {:?}",
                f.error_body()
            );
            assert!(got.insert(f.request_id()), "burst {burst}: answered twice");
        }
        assert_eq!(
            got.len() as u64,
            N,
            "burst {burst}: every forwarded request's answer is relayed"
        );
        let st = a.stats();
        assert_eq!(st.total(|w| w.relayed), N, "burst {burst}");
        a.stop(Duration::ZERO);
    }
}
