//! Queues and bursts: two queue pairs on AF_PACKET, a burst of one under
//! a pipelined flood.

use super::*;

/// Two workers, two queue pairs (AF_PACKET `qpairs=2`, PACKET_FANOUT):
/// both start on their own queue, requests from many source ports are all
/// answered, and stop returns every mbuf of both pools.
#[test]
fn two_queue_pairs_af_packet() {
    isolated("queues::two_queue_pairs_af_packet", || {
        let vdev = format!(
            "net_af_packet0,iface={},qpairs=2",
            env("SLUICE_IF0", "sldpdk0")
        );
        let text = config_text("dpdk", &vdev, "sl-e2e-2q")
            .replace("workers = [1]", "workers = [0, 1]")
            .replace("poll = \"busy\"", "poll = \"adaptive\"");
        let cfg = Config::parse(&text, std::env::temp_dir()).unwrap();
        let mut engine = Engine::new(cfg, EngineOptions::default()).unwrap();
        engine.start().expect("two queue pairs start");
        assert_eq!(engine.status().workers.len(), 2);
        let to = engine.local_addr().unwrap();
        let ns = env("SLUICE_NETNS", "sluice-dpdk");
        assert!(
            Command::new("ip")
                .args(["-n", &ns, "neigh", "flush", "all"])
                .status()
                .unwrap()
                .success()
        );
        let mut frame = vec![0u8; 4096];
        for (k, sock) in (0..16).map(|_| peer_socket()).enumerate() {
            for i in 0..20u64 {
                let id = k as u64 * 100 + i;
                let n = build(
                    &Req {
                        id,
                        model: "echo",
                        version: "1",
                        ..Req::default()
                    },
                    &mut frame,
                );
                let f = roundtrip(&sock, to, &frame[..n]);
                assert_eq!(Frame::new_checked(&f[..]).unwrap().request_id(), id);
            }
        }
        let st = dpdk::stats();
        assert_eq!(st.queues.len(), 2);
        let per_queue: Vec<u64> = st.queues.iter().map(|q| q.rx_sluice).collect();
        eprintln!("requests per queue: {per_queue:?}");
        assert_eq!(per_queue.iter().sum::<u64>(), 320);
        // 16 flows hashed over 2 queues: all on one has odds 2^-15.
        assert!(
            per_queue.iter().all(|&n| n > 0),
            "both queues served: {per_queue:?}"
        );
        engine.stop(Duration::from_millis(50));
        let r = dpdk::last_stop_report().unwrap();
        assert_eq!((r.mbufs_total, r.mbufs_missing), (2 * 4095, 0), "{r:?}");
    });
}

/// A burst of one frame (rx_burst_max = 1) under a pipelined flood: the
/// PMD is asked for no more than the burst holds, every request is
/// answered once, and every mbuf comes back (issue 13.1's pattern, checked
/// on DPDK).
#[test]
fn burst_of_one_under_a_pipelined_flood() {
    isolated("queues::burst_of_one_under_a_pipelined_flood", || {
        let vdev = format!("net_af_packet0,iface={}", env("SLUICE_IF0", "sldpdk0"));
        let text = config_text("dpdk", &vdev, "sl-e2e-b1")
            .replace("rx_burst_max = 32", "rx_burst_max = 1");
        let cfg = Config::parse(&text, std::env::temp_dir()).unwrap();
        let mut engine = Engine::new(cfg, EngineOptions::default()).unwrap();
        engine.start().expect("starts with a burst of one");
        let to = engine.local_addr().unwrap();
        let sock = peer_socket();
        let mut frame = vec![0u8; 4096];
        // Warm the neighbour entry, then send 64 without waiting.
        let n = build(
            &Req {
                id: 0,
                model: "echo",
                version: "1",
                ..Req::default()
            },
            &mut frame,
        );
        roundtrip(&sock, to, &frame[..n]);
        for id in 1..=64u64 {
            let n = build(
                &Req {
                    id,
                    model: "echo",
                    version: "1",
                    ..Req::default()
                },
                &mut frame,
            );
            sock.send_to(&frame[..n], to).unwrap();
        }
        let mut got = std::collections::BTreeSet::new();
        let mut buf = vec![0u8; 70_000];
        while got.len() < 64 {
            let Ok((n, _)) = sock.recv_from(&mut buf) else {
                break;
            };
            let f = Frame::new_checked(&buf[..n]).unwrap();
            assert_eq!(f.kind(), Kind::Response, "{:?}", f.error_body());
            assert!(got.insert(f.request_id()), "answered twice");
        }
        assert_eq!(got.len(), 64, "every pipelined request answered");
        engine.stop(Duration::from_millis(50));
        let r = dpdk::last_stop_report().unwrap();
        assert_eq!(r.mbufs_missing, 0, "{r:?}");
    });
}
