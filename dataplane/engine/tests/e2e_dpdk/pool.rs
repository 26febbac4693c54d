//! Mbuf and heap accounting: every mbuf path of the transport returns to
//! the pool; the worker's DPDK hot path makes no allocation.

use super::*;

/// Every mbuf path of the transport, driven directly (no workers): slots
/// taken and given back, replies to unknown or IPv6 peers, oversize
/// replies, garbage, and a transport dropped while it still holds mbufs.
/// AF_PACKET keeps no mbufs in its rings, so the pool must be exactly full
/// again after each step.
#[test]
fn every_mbuf_path_returns_to_the_pool() {
    isolated("pool::every_mbuf_path_returns_to_the_pool", || {
        use sluice_engine::transport::{RxPacket, Transport, TxPacket};
        let vdev = format!("net_af_packet0,iface={}", env("SLUICE_IF0", "sldpdk0"));
        let rt = dpdk::DpdkRuntime::start(&config(&vdev, "sl-e2e-paths")).expect("runtime starts");
        let in_use = || dpdk::stats().pool_in_use.expect("running");
        let mut t = dpdk::DpdkTransport::new(rt.queue(0).unwrap()).unwrap();
        assert_eq!(in_use(), 0);

        // TX slots: take all, the table bounds them; give half back unsent.
        let mut held = Vec::new();
        while let Some(i) = t.tx_alloc() {
            held.push(i);
        }
        assert_eq!(held.len() as u32, t.counters().tx_capacity);
        assert_eq!(in_use(), held.len() as u64);
        for i in held.drain(256..) {
            t.tx_free(i);
        }
        assert_eq!(in_use(), 256);
        // Unknown neighbour, IPv6 peer, oversize: refused, freed, counted.
        let unknown: SocketAddr = "10.99.0.77:5000".parse().unwrap();
        let v6: SocketAddr = "[fd00::1]:5000".parse().unwrap();
        let mut pkts: Vec<TxPacket> = held
            .drain(..100)
            .map(|b| TxPacket {
                buf: b,
                len: 64,
                peer: unknown,
                conn: 0,
            })
            .collect();
        pkts.extend(held.drain(..100).map(|b| TxPacket {
            buf: b,
            len: 64,
            peer: v6,
            conn: 0,
        }));
        t.tx_burst(&pkts);
        assert_eq!(in_use(), 56);
        let s = dpdk::stats().total();
        assert_eq!((s.tx_no_neighbour, s.tx_invalid), (100, 100), "{s:?}");

        // Receive: garbage is freed in the burst, frames on release.
        let sock = peer_socket();
        let ns = env("SLUICE_NETNS", "sluice-dpdk");
        assert!(
            Command::new("ip")
                .args(["-n", &ns, "neigh", "flush", "all"])
                .status()
                .unwrap()
                .success()
        );
        let to = rt.local_addr();
        let mut frame = vec![0u8; 4096];
        let n = build(
            &Req {
                id: 1,
                model: "null",
                version: "1",
                ..Req::default()
            },
            &mut frame,
        );
        // The first send waits for ARP, which the transport answers in rx_burst.
        sock.send_to(&frame[..n], to).unwrap();
        for _ in 0..20 {
            sock.send_to(b"garbage", to).unwrap();
            sock.send_to(&frame[..n], to).unwrap();
        }
        let mut rx = vec![RxPacket::default(); 32];
        let mut got: Vec<RxPacket> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while got.len() < 21 && Instant::now() < deadline {
            let k = t.rx_burst(&mut rx);
            got.extend_from_slice(&rx[..k]);
        }
        assert_eq!(got.len(), 21, "{:?}", dpdk::stats().total());
        assert_eq!(t.rx_bytes(&got[0]), &frame[..n], "the frame as sent");
        assert_eq!(in_use(), 56 + 21, "garbage freed in the burst, frames held");
        // A reply to a learned peer goes out; its mbuf is the PMD's now.
        let tx = held.pop().unwrap();
        let (req, out) = t.frames(&got[0], tx);
        out[..req.len()].copy_from_slice(req);
        let len = req.len() as u32;
        t.tx_burst(&[TxPacket {
            buf: tx,
            len,
            peer: got[0].peer,
            conn: 0,
        }]);
        let mut buf = [0u8; 4096];
        let (m, from) = sock.recv_from(&mut buf).expect("the reply arrives");
        assert_eq!((&buf[..m], from), (&frame[..n], to));
        for p in &got[..10] {
            t.rx_release(p);
        }
        assert_eq!(in_use(), 55 + 11);

        // Dropping the transport frees what it still holds.
        drop(t);
        assert_eq!(in_use(), 0, "transport drop returned every held mbuf");
        drop(rt);
        let r = dpdk::last_stop_report().unwrap();
        assert_eq!(r.mbufs_missing, 0, "{r:?}");
    });
}

/// After warm-up, the worker's DPDK path (receive, classify, garbage drop,
/// reassembly, slot copy, reply build, fragmentation, send) makes no heap
/// allocation.
#[test]
fn dpdk_worker_hot_path_does_not_allocate() {
    isolated("pool::dpdk_worker_hot_path_does_not_allocate", || {
        let vdev = format!("net_af_xdp0,iface={}", env("SLUICE_IF0", "sldpdk0"));
        let opts = EngineOptions {
            worker_init: Some(mark_worker),
            no_pin: false,
            ..Default::default()
        };
        let mut engine = Engine::new(config(&vdev, "sl-e2e-alloc"), opts).unwrap();
        engine.start().expect("DPDK engine starts");
        let to = engine.local_addr().unwrap();
        let sock = peer_socket();
        let mut frame = vec![0u8; 4096];
        let mut buf = vec![0u8; 70_000];
        // An 8 KB echo request too: 6 fragments reassembled by
        // librte_ip_frag, copied into a slot, answered as 6 fragments.
        let big: Vec<f32> = (0..2000).map(|i| i as f32).collect();
        let traffic = |rounds: u64| {
            let mut frame = vec![0u8; 16384];
            let mut b = vec![0u8; 16384];
            for i in 0..rounds {
                for r in [
                    Req {
                        id: i,
                        model: "null",
                        version: "1",
                        ..Req::default()
                    },
                    Req {
                        id: i,
                        model: "echo",
                        version: "1",
                        ..Req::default()
                    },
                    Req {
                        id: i,
                        sign: false,
                        ..Req::default()
                    },
                    Req {
                        id: i,
                        model: "nope",
                        ..Req::default()
                    },
                    Req {
                        id: i,
                        model: "echo",
                        version: "1",
                        data: &big,
                        ..Req::default()
                    },
                ] {
                    let n = build(&r, &mut frame);
                    sock.send_to(&frame[..n], to).unwrap();
                    sock.recv_from(&mut b).expect("answered over DPDK");
                }
                sock.send_to(b"not a sluice frame", to).unwrap();
                sock.send_to(&frame[..64], SocketAddr::from(([10, 99, 0, 1], 9000)))
                    .unwrap();
            }
        };
        let n = build(&Req::default(), &mut frame);
        sock.send_to(&frame[..n], to).unwrap();
        sock.recv_from(&mut buf).expect("first answer (after ARP)");
        traffic(50);
        std::thread::sleep(Duration::from_millis(120));
        let before = sluice_testkit::watched_allocs();
        assert!(
            before > 0,
            "the counting allocator saw the worker's start-up"
        );
        traffic(500);
        std::thread::sleep(Duration::from_millis(120));
        let after = sluice_testkit::watched_allocs();
        let s = dpdk::stats().total();
        assert!(
            s.rx_sluice >= 2200 && s.dropped() >= 1000 && s.rx_reassembled >= 550,
            "traffic flowed: {s:?}"
        );
        assert_eq!(
            after - before,
            0,
            "worker allocated {} times during 2500 requests (500 reassembled) and 1000 garbage packets",
            after - before
        );
        engine.stop(Duration::ZERO);
    });
}
