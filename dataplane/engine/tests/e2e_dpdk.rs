//! End to end over DPDK on a real veth pair: the engine's DPDK port sits on
//! one end (AF_XDP or AF_PACKET vdev), clients are kernel UDP sockets in the
//! peer namespace. Needs root, hugepages and the topology of
//! `scripts/netns-setup.sh`; run through `scripts/dpdk-e2e.sh`, which sets
//! it up and tears it down. Without `SLUICE_DPDK_E2E=1` every test says it
//! was skipped.
//!
//! DPDK's EAL can be initialized once per process, so each scenario runs in
//! a child process of this test binary.
#![cfg(feature = "dpdk")]
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]
// setns and kill through libc for the scenarios in child processes.
#![allow(unsafe_code)]

mod common;

use common::dpdk::*;

use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Req, answer_kind, build};
use sluice_engine::transport::dpdk::{self, net::Drop as Garbage};
use sluice_engine::{Config, Engine, EngineOptions};
use sluice_wire::{ErrorCode, Frame, Kind};


/// Counts heap allocations made on threads marked as workers.
#[global_allocator]
static GLOBAL: sluice_testkit::CountingAlloc = sluice_testkit::CountingAlloc;

fn mark_worker(_: usize) {
    sluice_testkit::watch_this_thread();
}

/// The whole life of a DPDK engine on one vdev: ARP, requests, garbage,
/// errors, oversize frames, a pipelined burst, then a stop that returns
/// every mbuf and every hugepage.
fn end_to_end(vdev_kind: &str) {
    let iface = env("SLUICE_IF0", "sldpdk0");
    let vdev = format!("net_{vdev_kind}0,iface={iface}");
    let huge_before = hugepages_free();
    let mut engine = Engine::new(
        config(&vdev, &format!("sl-e2e-{vdev_kind}")),
        EngineOptions::default(),
    )
    .unwrap();
    engine.start().expect("DPDK engine starts");
    let to = engine.local_addr().expect("listening");
    assert_eq!(to, SocketAddr::from(([10, 99, 0, 1], 7070)));
    if no_huge() {
        eprintln!("NOTE: --no-huge run (scripts/dpdk-e2e.sh found too few hugepages): hugepage accounting not checked");
    } else {
        assert!(own_hugetlb_kb() > 0, "pools sit in hugepages");
    }
    // The peer must resolve us afresh through our ARP reply.
    let ns = env("SLUICE_NETNS", "sluice-dpdk");
    let flushed = Command::new("ip")
        .args(["-n", &ns, "neigh", "flush", "all"])
        .status()
        .expect("run ip");
    assert!(flushed.success());
    let sock = peer_socket();
    // Mbufs out of the pools before traffic: what the PMD keeps in its rings
    // (AF_XDP fills its fill ring at start; AF_PACKET copies and holds none).
    let in_use_idle = dpdk::stats().pool_in_use.expect("running");
    eprintln!("mbufs held by the PMD at start: {in_use_idle}");

    let request = echo_and_arp(&sock, to);
    garbage_is_dropped(&sock, to, &request);
    errors_are_answered(&sock, to);
    fragments_are_reassembled(&sock, to, vdev_kind);
    mlp_matches_io_uring(&sock, to, &vdev);
    pipelined_burst(&sock, to, in_use_idle);
    stop_returns_everything(engine, vdev_kind, &vdev, in_use_idle, huge_before);
}

/// Step 1: A request; the peer resolves the appliance through its ARP reply.
/// Returns the request, for more of the same.
fn echo_and_arp(sock: &UdpSocket, to: SocketAddr) -> Vec<u8> {
    // 1. A request: the peer kernel resolves 10.99.0.1 through our ARP reply.
    let mut frame = vec![0u8; 8192];
    let data: Vec<f32> = (0..64).map(|i| i as f32 * 0.5).collect();
    let n = build(
        &Req {
            id: 1,
            model: "echo",
            version: "1",
            data: &data,
            ..Req::default()
        },
        &mut frame,
    );
    let answer = roundtrip(sock, to, &frame[..n]);
    let f = Frame::new_checked(&answer[..]).expect("reply parses");
    assert_eq!(f.kind(), Kind::Response);
    assert_eq!(f.request_id(), 1);
    let t = f.tensors().next().expect("echo returns the tensor");
    let got: Vec<f32> = f
        .tensor_data(&t)
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(got, data);
    let s = wait_stats(|s| s.arp_replies >= 1);
    assert!(s.arp_replies >= 1, "answered ARP: {s:?}");
    frame.truncate(n);
    frame
}

/// Step 2: Garbage is counted and dropped; the engine keeps serving.
fn garbage_is_dropped(sock: &UdpSocket, to: SocketAddr, request: &[u8]) {
    // 2. Garbage to the port: wrong UDP port, no Sluice magic. Counted and
    //    dropped; the engine keeps serving.
    for _ in 0..200 {
        sock.send_to(b"definitely not sluice", to).unwrap();
        sock.send_to(request, SocketAddr::from(([10, 99, 0, 1], 9000)))
            .unwrap();
    }
    // A new request: the same signed bytes again would be a replay.
    let mut frame = vec![0u8; 8192];
    let data: Vec<f32> = (0..64).map(|i| i as f32 * 0.5).collect();
    let n = build(
        &Req {
            id: 2,
            model: "echo",
            version: "1",
            data: &data,
            ..Req::default()
        },
        &mut frame,
    );
    let answer = roundtrip(sock, to, &frame[..n]);
    assert_eq!(answer_kind(&answer).0, Kind::Response);
    let s = wait_stats(|s| {
        s.drops[Garbage::NotSluice as usize] >= 200 && s.drops[Garbage::WrongPort as usize] >= 200
    });
    assert!(s.drops[Garbage::NotSluice as usize] >= 200, "{s:?}");
    assert!(s.drops[Garbage::WrongPort as usize] >= 200, "{s:?}");
}

/// Step 3: Errors are answered (and their mbufs freed).
fn errors_are_answered(sock: &UdpSocket, to: SocketAddr) {
    let mut frame = vec![0u8; 8192];
    // 3. Errors are answered (and their mbufs freed): bad tag, unknown model.
    let n2 = build(
        &Req {
            id: 2,
            sign: false,
            model: "echo",
            version: "1",
            ..Req::default()
        },
        &mut frame,
    );
    let (kind, code) = answer_kind(&roundtrip(sock, to, &frame[..n2]));
    assert_eq!(
        (kind, code),
        (Kind::Error, Some(ErrorCode::Unauthenticated))
    );
    let n3 = build(
        &Req {
            id: 3,
            model: "nope",
            version: "1",
            ..Req::default()
        },
        &mut frame,
    );
    assert_eq!(
        answer_kind(&roundtrip(sock, to, &frame[..n3])).0,
        Kind::Error
    );
}

/// Step 4: A datagram larger than the MTU arrives as IPv4 fragments.
fn fragments_are_reassembled(sock: &UdpSocket, to: SocketAddr, vdev_kind: &str) {
    // 4. AF_XDP sees the fragments: librte_ip_frag reassembles them, the
    //    echo answer (8 KB) leaves as fragments the peer kernel reassembles.
    //    AF_PACKET: DPDK 22.11's PMD joins a fanout group with the kernel's
    //    DEFRAG flag, so the kernel reassembles and the PMD truncates the
    //    datagram to its 2 KB frame: answered frame_too_large.
    let big: Vec<f32> = (0..2000).map(|i| i as f32).collect();
    let mut big_frame = vec![0u8; 16384];
    let nb = build(
        &Req {
            id: 4,
            model: "echo",
            version: "1",
            data: &big,
            ..Req::default()
        },
        &mut big_frame,
    );
    let answer = roundtrip(sock, to, &big_frame[..nb]);
    if vdev_kind == "af_xdp" {
        assert_eq!(answer_kind(&answer).0, Kind::Response);
        assert_eq!(tensor_f32(&answer), big, "8 KB echo over fragments");
        let s = wait_stats(|s| s.rx_reassembled >= 1 && s.tx_fragmented >= 1);
        assert!(s.rx_reassembled >= 1 && s.rx_fragments >= 6, "{s:?}");
        assert!(s.tx_fragmented >= 1 && s.tx_fragments >= 6, "{s:?}");
    } else {
        let (kind, code) = answer_kind(&answer);
        assert_eq!((kind, code), (Kind::Error, Some(ErrorCode::FrameTooLarge)));
        let s = wait_stats(|s| s.rx_truncated >= 1);
        assert!(s.rx_truncated >= 1 && s.rx_fragments == 0, "{s:?}");
    }
}

/// Step 5: ONNX Runtime over DPDK answers what io_uring answers.
fn mlp_matches_io_uring(sock: &UdpSocket, to: SocketAddr, vdev: &str) {
    let mut frame = vec![0u8; 8192];
    // 5. ONNX Runtime over DPDK: the MLP reads its input in place from the
    //    (realigned) receive mbuf and writes into the reply mbuf; the answer
    //    is bit-identical to the same request over io_uring.
    let x: Vec<f32> = (0..4).map(|i| i as f32 * 0.25 - 1.0).collect();
    let nm = build(
        &Req {
            id: 5,
            model: "mlp",
            version: "1.0.0",
            data: &x,
            ..Req::default()
        },
        &mut frame,
    );
    let over_dpdk = roundtrip(sock, to, &frame[..nm]);
    let mut reference = Engine::new(
        config_for("io_uring", vdev, "unused"),
        EngineOptions::default(),
    )
    .unwrap();
    reference.start().expect("io_uring reference engine");
    let over_uring = common::roundtrip(
        &common::client(),
        reference.local_addr().unwrap(),
        &frame[..nm],
    );
    reference.stop(Duration::ZERO);
    let y = |a: &[u8]| {
        let f = Frame::new_checked(a).expect("reply parses");
        assert_eq!(
            f.kind(),
            Kind::Response,
            "{:?}",
            f.error_body().and_then(|b| b.code())
        );
        let t = f.tensor("y").expect("output y");
        f.tensor_data(&t).to_vec()
    };
    let (yd, yu) = (y(&over_dpdk), y(&over_uring));
    assert!(!yd.is_empty());
    assert_eq!(yd, yu, "MLP output over DPDK equals the io_uring reference");
}

/// Step 6: A pipelined burst: every request answered; no mbuf leaked since
/// the start (`in_use_idle` mbufs were out of the pools then).
fn pipelined_burst(sock: &UdpSocket, to: SocketAddr, in_use_idle: u64) {
    let mut frame = vec![0u8; 8192];
    // 6. A pipelined burst: every request answered, ids matched.
    let total = 2000u64;
    let window = 32u64;
    let mut sent = 0u64;
    let mut got = std::collections::HashSet::new();
    let mut buf = vec![0u8; 70_000];
    let deadline = Instant::now() + Duration::from_secs(30);
    while (got.len() as u64) < total {
        assert!(
            Instant::now() < deadline,
            "burst stalled at {} of {total}",
            got.len()
        );
        while sent < total && sent - got.len() as u64 <= window {
            let k = build(
                &Req {
                    id: 1000 + sent,
                    model: "null",
                    version: "1",
                    ..Req::default()
                },
                &mut frame,
            );
            sock.send_to(&frame[..k], to).unwrap();
            sent += 1;
        }
        match sock.recv_from(&mut buf) {
            Ok((k, _)) => {
                let f = Frame::new_checked(&buf[..k]).expect("reply parses");
                assert_eq!(f.kind(), Kind::Response);
                got.insert(f.request_id());
            }
            // A reply lost on the veth: resend what is missing.
            Err(_) => sent = got.len() as u64,
        }
    }
    let s = dpdk::stats();
    eprintln!("dpdk stats before stop: {:?}", s.total());
    eprintln!("port stats: {:?}", s.port);
    let realigned = s.total().rx_realigned;
    eprintln!(
        "frames realigned to 64 B: {realigned} of {}",
        s.total().rx_sluice
    );
    // Quiet again: no mbuf leaked on any path above (2000+ requests, 400
    // garbage packets, errors, fragments). The slack covers transmitted
    // mbufs a PMD reclaims lazily on its next send.
    std::thread::sleep(Duration::from_millis(200));
    let in_use = dpdk::stats().pool_in_use.unwrap();
    assert!(
        in_use <= in_use_idle + TX_RECLAIM_SLACK,
        "mbufs in use {in_use}, at start {in_use_idle}"
    );
}

/// Step 7: Stop: every mbuf back in its pool, EAL cleaned, hugepages returned.
fn stop_returns_everything(
    mut engine: Engine,
    vdev_kind: &str,
    vdev: &str,
    in_use_idle: u64,
    huge_before: u64,
) {
    // 7. Stop: every mbuf back in its pool, EAL cleaned, hugepages returned.
    engine.stop(Duration::from_millis(50));
    let r = dpdk::last_stop_report().expect("stop report");
    eprintln!("stop: {r:?}");
    if vdev_kind == "af_packet" {
        assert_eq!(r.mbufs_missing, 0, "{r:?}");
    } else {
        // AF_XDP zero-copy: DPDK 22.11 does not return the fill ring's mbufs
        // on close; nothing beyond them may be missing.
        assert!(
            r.mbufs_missing <= in_use_idle + TX_RECLAIM_SLACK,
            "{r:?}, PMD held {in_use_idle}"
        );
    }
    assert!(r.eal_cleaned, "{r:?}");
    assert_eq!(own_hugetlb_kb(), 0, "no hugepage mapped after stop");
    let after = wait_hugepages(huge_before);
    eprintln!("HugePages_Free: {huge_before} before start, {after} after stop");
    if vdev_kind == "af_packet" {
        assert!(
            after >= huge_before,
            "every hugepage returned after stop: {after} free, {huge_before} before"
        );
    } else {
        // DPDK 22.11's AF_XDP PMD leaves the umem (the mbuf pool's pages)
        // registered with the kernel until the process exits; everything
        // else is back. The parent checks the rest after exit.
        let pool_pages = 4095 * 2560 / (2 << 20) + 1;
        assert!(
            huge_before.saturating_sub(after) <= pool_pages as u64,
            "{after} of {huge_before} free after stop"
        );
    }
    // EAL cannot come back in this process: a second start says so.
    let mut again = Engine::new(config(vdev, "sl-e2e-again"), EngineOptions::default()).unwrap();
    let e = again
        .start()
        .expect_err("second EAL in one process is refused");
    assert!(e.to_string().contains("cannot initialize it twice"), "{e}");
}

#[test]
fn af_xdp_end_to_end() {
    isolated("af_xdp_end_to_end", || end_to_end("af_xdp"));
}

#[test]
fn af_packet_end_to_end() {
    isolated("af_packet_end_to_end", || end_to_end("af_packet"));
}

/// A vdev on an interface that does not exist: start fails with a clear
/// error and leaves no hugepage behind.
#[test]
fn missing_interface_fails_cleanly() {
    isolated("missing_interface_fails_cleanly", || {
        let before = hugepages_free();
        let mut engine = Engine::new(
            config("net_af_packet0,iface=sl-nonexistent", "sl-e2e-missing"),
            EngineOptions::default(),
        )
        .unwrap();
        let e = engine.start().expect_err("no such interface");
        let text = e.to_string();
        assert!(text.contains("dpdk"), "{text}");
        assert!(!engine.is_running());
        assert_eq!(
            own_hugetlb_kb(),
            0,
            "no hugepage mapped after a failed start"
        );
        assert!(
            hugepages_free() >= before,
            "no hugepage kept after a failed start"
        );
    });
}

/// testpmd in the peer namespace, killed (SIGINT, then SIGKILL) on drop.
struct Generator(std::process::Child);

impl Generator {
    /// txonly flood of 64-byte UDP 10.99.0.2:9000 -> 10.99.0.1:9000 from an
    /// AF_PACKET vdev on the peer end (the peer kernel still gets replies).
    fn testpmd(log: &std::path::Path) -> Generator {
        let ns = env("SLUICE_NETNS", "sluice-dpdk");
        let if1 = env("SLUICE_IF1", "sldpdk1");
        let mac0 = std::fs::read_to_string(format!(
            "/sys/class/net/{}/address",
            env("SLUICE_IF0", "sldpdk0")
        ))
        .unwrap();
        let out = std::fs::File::create(log).unwrap();
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &ns,
                "dpdk-testpmd",
                "--lcores=0@0,1@0",
                "--no-pci",
                "--no-huge",
                "-m",
                "256",
            ])
            .args([
                "--file-prefix=sl-e2e-gen",
                &format!("--vdev=net_af_packet1,iface={if1}"),
                "--",
            ])
            .args([
                "--total-num-mbufs=8192",
                "--forward-mode=txonly",
                "--tx-ip=10.99.0.2,10.99.0.1",
            ])
            .args([
                "--tx-udp=9000,9000",
                &format!("--eth-peer=0,{}", mac0.trim()),
                "--stats-period=1",
            ])
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("dpdk-testpmd runs (apt-get install dpdk-dev)");
        Generator(child)
    }

    fn stop(&mut self) {
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Generator {
    fn drop(&mut self) {
        self.stop();
    }
}

/// testpmd floods the port with garbage while real requests keep being
/// answered; the garbage is counted and dropped, nothing crashes, no mbuf
/// leaks.
#[test]
fn testpmd_flood_while_serving() {
    isolated("testpmd_flood_while_serving", || {
        let vdev = format!("net_af_xdp0,iface={}", env("SLUICE_IF0", "sldpdk0"));
        let mut engine =
            Engine::new(config(&vdev, "sl-e2e-flood"), EngineOptions::default()).unwrap();
        engine.start().expect("DPDK engine starts");
        let to = engine.local_addr().unwrap();
        let ns = env("SLUICE_NETNS", "sluice-dpdk");
        assert!(
            Command::new("ip")
                .args(["-n", &ns, "neigh", "flush", "all"])
                .status()
                .unwrap()
                .success()
        );
        let sock = peer_socket();
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
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
        assert_eq!(
            answer_kind(&roundtrip(&sock, to, &frame[..n])).0,
            Kind::Response
        );
        let idle = dpdk::stats().pool_in_use.unwrap();

        let log = std::env::temp_dir().join("sluice-e2e-testpmd.log");
        let mut generator = Generator::testpmd(&log);
        // testpmd's own EAL start takes seconds on a busy host.
        let s = wait_stats_for(Duration::from_secs(30), |s| {
            s.drops[Garbage::WrongPort as usize] >= 1000
        });
        assert!(
            s.drops[Garbage::WrongPort as usize] >= 1000,
            "the flood arrives: {s:?}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let before = dpdk::stats().total();
        let start = Instant::now();
        let (mut ok, mut lost) = (0u64, 0u64);
        let mut buf = vec![0u8; 70_000];
        let mut id = 10u64;
        while start.elapsed() < Duration::from_secs(3) {
            id += 1;
            let k = build(
                &Req {
                    id,
                    model: "null",
                    version: "1",
                    ..Req::default()
                },
                &mut frame,
            );
            sock.send_to(&frame[..k], to).unwrap();
            // Skip stale answers of requests that timed out earlier.
            loop {
                match sock.recv_from(&mut buf) {
                    Ok((m, _))
                        if Frame::new_checked(&buf[..m]).map(|f| f.request_id()) == Ok(id) =>
                    {
                        ok += 1;
                        break;
                    }
                    Ok(_) => continue,
                    Err(_) => {
                        lost += 1;
                        break;
                    }
                }
            }
        }
        let secs = start.elapsed().as_secs_f64();
        let after = dpdk::stats().total();
        generator.stop();
        let flood =
            after.drops[Garbage::WrongPort as usize] - before.drops[Garbage::WrongPort as usize];
        eprintln!(
            "under flood: {ok} answered, {lost} lost in {secs:.1} s ({:.0} req/s); appliance counted {:.0} pkt/s, dropped {:.0} garbage pkt/s",
            ok as f64 / secs,
            (after.rx_packets - before.rx_packets) as f64 / secs,
            flood as f64 / secs
        );
        eprintln!("port: {:?}", dpdk::stats().port);
        assert!(
            ok >= 50,
            "requests answered under the flood: {ok} ok, {lost} lost"
        );
        assert!(
            flood >= 1000,
            "garbage kept arriving and was counted: {flood}"
        );
        assert_eq!(after.tx_invalid + after.tx_no_neighbour, 0, "{after:?}");

        std::thread::sleep(Duration::from_millis(200));
        let in_use = dpdk::stats().pool_in_use.unwrap();
        assert!(
            in_use <= idle + TX_RECLAIM_SLACK,
            "mbufs in use {in_use}, idle {idle}: leak under flood"
        );
        engine.stop(Duration::from_millis(50));
        let r = dpdk::last_stop_report().unwrap();
        assert!(
            r.eal_cleaned && r.mbufs_missing <= idle + TX_RECLAIM_SLACK,
            "{r:?}"
        );
    });
}

/// Every mbuf path of the transport, driven directly (no workers): slots
/// taken and given back, replies to unknown or IPv6 peers, oversize
/// replies, garbage, and a transport dropped while it still holds mbufs.
/// AF_PACKET keeps no mbufs in its rings, so the pool must be exactly full
/// again after each step.
#[test]
fn every_mbuf_path_returns_to_the_pool() {
    isolated("every_mbuf_path_returns_to_the_pool", || {
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
    isolated("dpdk_worker_hot_path_does_not_allocate", || {
        let vdev = format!("net_af_xdp0,iface={}", env("SLUICE_IF0", "sldpdk0"));
        let opts = EngineOptions {
            worker_init: Some(mark_worker),
            no_pin: false,
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

/// Two workers, two queue pairs (AF_PACKET `qpairs=2`, PACKET_FANOUT):
/// both start on their own queue, requests from many source ports are all
/// answered, and stop returns every mbuf of both pools.
#[test]
fn two_queue_pairs_af_packet() {
    isolated("two_queue_pairs_af_packet", || {
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
    isolated("burst_of_one_under_a_pipelined_flood", || {
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
