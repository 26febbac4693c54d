//! Frames larger than one mbuf over DPDK, on the real veth pair with kernel
//! UDP clients in the peer namespace (run through `scripts/dpdk-e2e.sh`):
//! 60 KB requests as IPv4 fragments over AF_XDP (librte_ip_frag) and over
//! AF_PACKET (the kernel reassembles: the PMD's fanout DEFRAG flag), a
//! 9000-byte frame with MTU 9000 on both veth ends (net_pcap: multi-segment
//! mbufs), hostile fragments from a raw socket, fragment loss injected with
//! nftables, and frames over 64 KiB. Every scenario checks that the pools
//! hold what they held when the port had just started.
#![cfg(feature = "dpdk")]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]
// setns through libc for the raw socket in the peer namespace.
#![allow(unsafe_code)]

mod common;

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use common::dpdk::*;
use common::{Req, answer_kind, build};
use sluice_engine::transport::dpdk::{self, net::Drop as Garbage};
use sluice_engine::{Config, Engine, EngineOptions};
use sluice_wire::{ErrorCode, Frame, Kind};

/// An echo request carrying `n` f32 values; returns the frame and values.
fn echo_request(id: u64, n: usize) -> (Vec<u8>, Vec<f32>) {
    let data: Vec<f32> = (0..n)
        .map(|i| (i % 1000) as f32 * 0.5 + id as f32)
        .collect();
    let mut frame = vec![0u8; n * 4 + 4096];
    let len = build(
        &Req {
            id,
            model: "echo",
            version: "1",
            data: &data,
            ..Req::default()
        },
        &mut frame,
    );
    frame.truncate(len);
    (frame, data)
}

/// A started DPDK engine on `vdev`, the peer socket and the pool count at idle.
fn start(text: &str) -> (Engine, UdpSocket, SocketAddr, u64) {
    let cfg = Config::parse(text, std::env::temp_dir()).expect("config parses");
    let mut engine = Engine::new(cfg, EngineOptions::default()).unwrap();
    engine.start().expect("DPDK engine starts");
    let to = engine.local_addr().unwrap();
    flush_peer_neighbours();
    let sock = peer_socket();
    // Room for a few 60 KB answers: the kernel counts every fragment's
    // buffer against the socket's (SO_RCVBUFFORCE: root may exceed rmem_max).
    let size: libc::c_int = 16 << 20;
    // SAFETY: setsockopt on our socket with a valid int option.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "SO_RCVBUFFORCE: {}", std::io::Error::last_os_error());
    // Warm the neighbour entries both ways with a small request.
    let (f, _) = echo_request(1, 16);
    assert_eq!(answer_kind(&roundtrip(&sock, to, &f)).0, Kind::Response);
    std::thread::sleep(Duration::from_millis(50));
    let idle = dpdk::stats().pool_in_use.expect("running");
    (engine, sock, to, idle)
}

/// `count` echo requests of `n` values, `window` outstanding, every one
/// answered with its own values.
fn pipelined(sock: &UdpSocket, to: SocketAddr, count: u64, window: u64, n: usize) {
    let mut buf = vec![0u8; 70_000];
    let mut sent = 0u64;
    let mut got = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while (got.len() as u64) < count {
        assert!(
            Instant::now() < deadline,
            "stalled at {} of {count}",
            got.len()
        );
        while sent < count && sent - got.len() as u64 <= window {
            let (f, _) = echo_request(1000 + sent, n);
            sock.send_to(&f, to).unwrap();
            sent += 1;
        }
        match sock.recv_from(&mut buf) {
            Ok((k, _)) => {
                let id = Frame::new_checked(&buf[..k]).unwrap().request_id();
                let (_, want) = echo_request(id, n);
                assert_eq!(tensor_f32(&buf[..k]), want, "answer {id}");
                got.insert(id);
            }
            // A datagram lost on the veth (UDP): send what is missing again.
            Err(_) => sent = got.len() as u64,
        }
    }
}

/// Pool count back at idle and no fragment held (after timeouts).
fn quiet(idle: u64) {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let s = dpdk::stats();
        let in_use = s.pool_in_use.unwrap();
        let held = s.total().frag_held;
        if (in_use <= idle + TX_RECLAIM_SLACK && held == 0) || Instant::now() > deadline {
            assert_eq!(held, 0, "fragments held: {:?}", s.total());
            assert!(
                in_use <= idle + TX_RECLAIM_SLACK,
                "mbufs in use {in_use}, idle {idle}: leak"
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn af_xdp_text(prefix: &str) -> String {
    let vdev = format!("net_af_xdp0,iface={}", env("SLUICE_IF0", "sldpdk0"));
    config_text("dpdk", &vdev, prefix)
}

/// 60 KB over AF_XDP: 41 fragments at MTU 1500, reassembled by
/// librte_ip_frag into a slot, answered with 41 fragments made by copy
/// (AF_XDP takes no chains); the largest datagram; a frame over 64 KiB.
#[test]
fn af_xdp_60k_as_fragments() {
    isolated("af_xdp_60k_as_fragments", || {
        let (mut engine, sock, to, idle) = start(&af_xdp_text("sl-e2e-x60"));
        let before = dpdk::stats().total();
        let (f, data) = echo_request(7, 15_000);
        assert!(f.len() > 60_000, "{}", f.len());
        let answer = roundtrip(&sock, to, &f);
        assert_eq!(tensor_f32(&answer), data, "60 KB echo");
        let s = wait_stats(|s| s.tx_fragmented > before.tx_fragmented);
        eprintln!("after one 60 KB request: {s:?}");
        assert_eq!(s.rx_reassembled - before.rx_reassembled, 1, "{s:?}");
        assert!(s.rx_fragments - before.rx_fragments >= 41, "{s:?}");
        assert!(
            s.rx_copied_bytes - before.rx_copied_bytes >= f.len() as u64,
            "{s:?}"
        );
        assert!(s.tx_fragments - before.tx_fragments >= 41, "{s:?}");
        assert!(
            s.tx_copied_bytes - before.tx_copied_bytes >= 60_000,
            "copy mode: {s:?}"
        );
        assert_eq!(s.frag_invalid + s.frag_table_full, 0, "{s:?}");

        // The largest request a kernel client sends in one datagram.
        let (f, data) = echo_request(8, 16_200);
        assert!(f.len() > 64_000 && f.len() <= 65_507, "{}", f.len());
        let answer = roundtrip(&sock, to, &f);
        assert_eq!(tensor_f32(&answer), data, "64 KB echo");

        // A frame larger than any datagram: its first 1400 bytes arrive; the
        // answer names the transports that carry it.
        let (huge, _) = echo_request(9, 300_000);
        let (code, msg) = error_of(&roundtrip(&sock, to, &huge[..1400]));
        assert_eq!(code, Some(ErrorCode::FrameTooLarge));
        assert!(msg.contains("TCP") && msg.contains("RDMA"), "{msg}");

        pipelined(&sock, to, 200, 4, 15_000);
        quiet(idle);
        eprintln!("dpdk stats: {:?}", dpdk::stats().total());
        engine.stop(Duration::from_millis(50));
        let r = dpdk::last_stop_report().unwrap();
        assert!(
            r.eal_cleaned && r.mbufs_missing <= idle + TX_RECLAIM_SLACK,
            "{r:?}, idle {idle}"
        );
    });
}

/// 60 KB over AF_PACKET: the kernel reassembles (DPDK 22.11's PMD sets
/// PACKET_FANOUT_FLAG_DEFRAG) and the PMD delivers the whole datagram in
/// one 64 KiB mbuf; the answer leaves as zero-copy fragments (AF_PACKET
/// takes chains: a header mbuf and indirect mbufs on the slot). The PMD
/// assumes its ring's frames are contiguous, so the block must be a whole
/// number of frames: 32 frames of 65,408 bytes in one 2,093,056-byte block.
#[test]
fn af_packet_60k_kernel_reassembled() {
    isolated("af_packet_60k_kernel_reassembled", || {
        let vdev = format!(
            "net_af_packet0,iface={},framesz=65408,blocksz=2093056,framecnt=32",
            env("SLUICE_IF0", "sldpdk0")
        );
        let text = config_text("dpdk", &vdev, "sl-e2e-p60")
            .replace(
                "memory_mb = 128",
                "memory_mb = 192\nmbuf_data_bytes = 65376\nmbuf_cache = 32\nfrag_mbufs_max = 256",
            )
            .replace("mbufs_per_worker = 4095", "mbufs_per_worker = 1023")
            .replace("rx_desc = 1024", "rx_desc = 128")
            .replace("tx_desc = 1024", "tx_desc = 128");
        let (mut engine, sock, to, idle) = start(&text);
        assert_eq!(idle, 0, "AF_PACKET holds no mbufs");
        // Every size up to 60 KB, each in one mbuf, answered in full.
        for n in [300usize, 2000, 4000, 8000, 12000] {
            let (f, data) = echo_request(70, n);
            assert_eq!(
                tensor_f32(&roundtrip(&sock, to, &f)),
                data,
                "{} bytes",
                f.len()
            );
        }
        // The worker publishes its counters just after sending.
        std::thread::sleep(Duration::from_millis(50));
        let before = dpdk::stats().total();
        let (f, data) = echo_request(7, 15_000);
        let answer = roundtrip(&sock, to, &f);
        assert_eq!(tensor_f32(&answer), data, "60 KB echo");
        let s = wait_stats(|s| s.tx_fragmented > before.tx_fragmented);
        eprintln!("after one 60 KB request: {s:?}");
        assert_eq!(
            (s.rx_fragments, s.rx_multi_seg),
            (0, 0),
            "the kernel reassembled: {s:?}"
        );
        assert_eq!(s.tx_fragmented - before.tx_fragmented, 1, "{s:?}");
        assert!(s.tx_fragments - before.tx_fragments >= 41, "{s:?}");
        assert_eq!(
            s.tx_copied_bytes, before.tx_copied_bytes,
            "zero-copy fragments: {s:?}"
        );
        pipelined(&sock, to, 200, 4, 15_000);
        quiet(idle);
        engine.stop(Duration::from_millis(50));
        let r = dpdk::last_stop_report().unwrap();
        assert_eq!(r.mbufs_missing, 0, "{r:?}");
    });
}

/// MTU 9000 on both veth ends, net_pcap (the PMD here that takes MTU 9000
/// and scatters frames over mbufs): a request filling one 9000-byte IP
/// packet arrives in several 2 KB mbufs and is copied once into a slot;
/// 60 KB arrive as 7 jumbo fragments, each itself a chain. net_pcap does
/// not advertise multi-segment transmit: by default answers leave as
/// fragments copied into one mbuf each; with `tx_multi_seg = "on"` (it
/// linearizes chains itself) the 9000-byte answer leaves whole as a chain
/// (headers + the slot) and 60 KB as zero-copy jumbo fragments.
fn jumbo_9000_over_pcap(multi_seg: bool) {
    let _mtu = VethMtu::set(9000);
    let if0 = env("SLUICE_IF0", "sldpdk0");
    let vdev = format!("net_pcap0,rx_iface_in={if0},tx_iface={if0}");
    let extra = if multi_seg {
        "mtu = 9000\ntx_multi_seg = \"on\""
    } else {
        "mtu = 9000"
    };
    let text = config_text(
        "dpdk",
        &vdev,
        if multi_seg {
            "sl-e2e-j9c"
        } else {
            "sl-e2e-j9k"
        },
    )
    .replace("udp_port = 7070", &format!("udp_port = 7070\n{extra}"));
    let (mut engine, sock, to, idle) = start(&text);
    // The largest frame one 9000-byte packet carries (9000 - 28).
    let mut n = 2300;
    let (f, data) = loop {
        let (f, d) = echo_request(5, n);
        if f.len() <= 8972 {
            break (f, d);
        }
        n -= 1;
    };
    assert!(f.len() > 8900, "{}", f.len());
    let before = dpdk::stats().total();
    let answer = roundtrip(&sock, to, &f);
    assert_eq!(tensor_f32(&answer), data, "jumbo echo");
    let s =
        wait_stats(|s| s.tx_packets > before.tx_packets && s.rx_multi_seg > before.rx_multi_seg);
    eprintln!("after one 9000-byte frame: {s:?}");
    assert_eq!(s.rx_fragments, 0, "one jumbo packet, not fragments: {s:?}");
    assert!(
        s.rx_multi_seg >= 1 && s.rx_copied_bytes >= f.len() as u64,
        "{s:?}"
    );
    if multi_seg {
        assert_eq!(
            s.tx_chained - before.tx_chained,
            1,
            "one chained packet: {s:?}"
        );
        assert_eq!(s.tx_packets - before.tx_packets, 1, "{s:?}");
        assert_eq!(s.tx_fragmented, before.tx_fragmented, "{s:?}");
    } else {
        assert_eq!(s.tx_fragmented - before.tx_fragmented, 1, "{s:?}");
        assert!(s.tx_copied_bytes > before.tx_copied_bytes, "{s:?}");
    }

    let before = dpdk::stats().total();
    let (f, data) = echo_request(6, 15_000);
    let answer = roundtrip(&sock, to, &f);
    assert_eq!(tensor_f32(&answer), data, "60 KB at MTU 9000");
    std::thread::sleep(Duration::from_millis(50));
    let s = dpdk::stats().total();
    assert!(
        s.rx_fragments - before.rx_fragments >= 7 && s.rx_reassembled > before.rx_reassembled,
        "{s:?}"
    );
    if multi_seg {
        assert_eq!(
            s.tx_fragments - before.tx_fragments,
            7,
            "jumbo fragments: {s:?}"
        );
        assert_eq!(
            s.tx_copied_bytes, before.tx_copied_bytes,
            "zero copy: {s:?}"
        );
    }
    pipelined(&sock, to, 50, 2, 15_000);
    quiet(idle);
    engine.stop(Duration::from_millis(50));
    let r = dpdk::last_stop_report().unwrap();
    assert_eq!(r.mbufs_missing, 0, "{r:?}");
}

#[test]
fn jumbo_9000_over_pcap_copied_fragments() {
    isolated("jumbo_9000_over_pcap_copied_fragments", || {
        jumbo_9000_over_pcap(false)
    });
}

#[test]
fn jumbo_9000_over_pcap_chains() {
    isolated("jumbo_9000_over_pcap_chains", || jumbo_9000_over_pcap(true));
}

/// An MTU the port cannot take is refused at start, naming the port's limit.
#[test]
fn mtu_beyond_the_port_fails_cleanly() {
    isolated("mtu_beyond_the_port_fails_cleanly", || {
        let text =
            af_xdp_text("sl-e2e-mtu").replace("udp_port = 7070", "udp_port = 7070\nmtu = 9000");
        let cfg = Config::parse(&text, std::env::temp_dir()).unwrap();
        let mut engine = Engine::new(cfg, EngineOptions::default()).unwrap();
        let e = engine
            .start()
            .expect_err("AF_XDP in DPDK 22.11 takes no MTU 9000");
        let text = e.to_string();
        eprintln!("{text}");
        assert!(
            text.contains("dpdk.mtu = 9000") && text.contains("net_af_xdp"),
            "{text}"
        );
        assert!(!engine.is_running());
        assert_eq!(
            own_hugetlb_kb(),
            0,
            "no hugepage mapped after a failed start"
        );
    });
}

/// A raw IPv4 socket in the peer namespace (the kernel fills in the total
/// length and header checksum, and keeps our id, flags and offset).
fn raw_socket() -> socket2::Socket {
    let ns = env("SLUICE_NETNS", "sluice-dpdk");
    std::thread::spawn(move || {
        let f = std::fs::File::open(format!("/run/netns/{ns}")).expect("peer namespace exists");
        // SAFETY: setns with a valid namespace fd, affecting this thread only.
        let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
        socket2::Socket::new(
            socket2::Domain::IPV4,
            socket2::Type::RAW,
            Some(socket2::Protocol::from(libc::IPPROTO_RAW)),
        )
        .expect("raw socket (root)")
    })
    .join()
    .unwrap()
}

/// One IPv4 fragment from the peer to the appliance: `payload` at byte
/// `offset` of datagram `id`.
fn send_fragment(raw: &socket2::Socket, id: u16, offset: usize, more: bool, payload: &[u8]) {
    let peer: Ipv4Addr = env("SLUICE_PEER_IP", "10.99.0.2").parse().unwrap();
    let app: Ipv4Addr = env("SLUICE_APP_IP", "10.99.0.1").parse().unwrap();
    let mut p = vec![0u8; 20];
    p[0] = 0x45;
    p[4..6].copy_from_slice(&id.to_be_bytes());
    let flags = (offset / 8) as u16 | if more { 0x2000 } else { 0 };
    p[6..8].copy_from_slice(&flags.to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&peer.octets());
    p[16..20].copy_from_slice(&app.octets());
    p.extend_from_slice(payload);
    let to = socket2::SockAddr::from(SocketAddrV4::new(app, 0));
    raw.send_to(&p, &to).expect("raw send");
}

/// The start of a UDP datagram of `datagram` payload bytes to our port.
fn udp_start(datagram: usize, body: &[u8]) -> Vec<u8> {
    let mut u = vec![0u8; 8];
    u[0..2].copy_from_slice(&40001u16.to_be_bytes());
    u[2..4].copy_from_slice(&7070u16.to_be_bytes());
    u[4..6].copy_from_slice(&((8 + datagram) as u16).to_be_bytes());
    u.extend_from_slice(body);
    u
}

/// Hostile fragments through the real port: teardrop (overlap), a
/// duplicate, more fragments than the library takes, the ping of death, a
/// tiny first fragment, and datagrams never completed. Each is counted,
/// every mbuf is freed (incomplete ones at the timeout), and serving goes on.
#[test]
fn hostile_fragments_are_counted_and_freed() {
    isolated("hostile_fragments_are_counted_and_freed", || {
        let text = af_xdp_text("sl-e2e-hostile")
            .replace("udp_port = 7070", "udp_port = 7070\nfrag_timeout_ms = 200");
        let (mut engine, sock, to, idle) = start(&text);
        let raw = raw_socket();
        let body = {
            let (f, _) = echo_request(3, 64);
            f[..120].to_vec()
        };
        let before = dpdk::stats().total();
        // Teardrop: the second fragment lies inside the first.
        send_fragment(&raw, 101, 0, true, &udp_start(200, &body[..112]));
        send_fragment(&raw, 101, 64, false, &[0u8; 144]);
        // A duplicate middle fragment.
        let first = udp_start(400, &body[..104]);
        send_fragment(&raw, 102, 0, true, &first[..112]);
        send_fragment(&raw, 102, 112, true, &[1u8; 96]);
        send_fragment(&raw, 102, 112, true, &[1u8; 96]);
        send_fragment(&raw, 102, 208, false, &[2u8; 200]);
        // 70 fragments of 8 bytes: more than librte_ip_frag keeps (64).
        send_fragment(&raw, 103, 0, true, &udp_start(70 * 8, &body[..8])[..16]);
        for k in 2..70 {
            send_fragment(&raw, 103, k * 8, true, &[3u8; 8]);
        }
        // The ping of death, a tiny first fragment.
        send_fragment(&raw, 104, 65_528, true, &[4u8; 1000]);
        send_fragment(&raw, 105, 0, true, &udp_start(400, &[])[..8]);
        // First fragments never followed: they wait for the timeout.
        for id in 110..120u16 {
            send_fragment(&raw, id, 0, true, &udp_start(4000, &body[..104])[..112]);
        }
        let s = wait_stats(|s| s.frag_expired >= before.frag_expired + 10);
        eprintln!("after hostile fragments: {s:?}");
        assert!(
            s.frag_invalid - before.frag_invalid >= 2 + 4 + 64,
            "teardrop, duplicate, too many: {s:?}"
        );
        assert!(s.drops[Garbage::FragOversize as usize] >= 1, "{s:?}");
        assert!(s.drops[Garbage::FragMalformed as usize] >= 1, "{s:?}");
        assert!(s.frag_expired - before.frag_expired >= 10, "{s:?}");
        assert_eq!(
            s.rx_reassembled, before.rx_reassembled,
            "nothing hostile reassembled: {s:?}"
        );
        // Still serving, large frames included.
        let (f, data) = echo_request(11, 15_000);
        assert_eq!(tensor_f32(&roundtrip(&sock, to, &f)), data);
        quiet(idle);
        engine.stop(Duration::from_millis(50));
        let r = dpdk::last_stop_report().unwrap();
        assert!(r.mbufs_missing <= idle + TX_RECLAIM_SLACK, "{r:?}");
    });
}

/// Removes the nftables table on drop.
struct Nft;

impl Drop for Nft {
    fn drop(&mut self) {
        in_peer(&["nft", "delete", "table", "netdev", "sluice_loss"]);
    }
}

/// 5% of the peer's outgoing fragments dropped by nftables (netdev egress
/// of the peer's veth: the output hook sees datagrams before the kernel
/// fragments them). Most 41-fragment datagrams never complete (0.95^41:
/// about 12% do): the fragments of the others are freed at the timeout,
/// nothing leaks, and the complete ones are answered.
#[test]
fn fragment_loss_is_reclaimed_by_timeouts() {
    isolated("fragment_loss_is_reclaimed_by_timeouts", || {
        let text = af_xdp_text("sl-e2e-loss")
            .replace("udp_port = 7070", "udp_port = 7070\nfrag_timeout_ms = 200");
        let (mut engine, sock, to, idle) = start(&text);
        let if1 = env("SLUICE_IF1", "sldpdk1");
        in_peer(&["nft", "add", "table", "netdev", "sluice_loss"]);
        let _nft = Nft;
        in_peer(&[
            "nft",
            &format!(
                "add chain netdev sluice_loss egress {{ type filter hook egress device {if1} priority 0 ; }}"
            ),
        ]);
        in_peer(&[
            "nft",
            "add rule netdev sluice_loss egress ip daddr 10.99.0.1 numgen random mod 100 < 5 drop",
        ]);
        sock.set_read_timeout(Some(Duration::from_millis(150)))
            .unwrap();
        let before = dpdk::stats().total();
        let (mut sent, mut answered) = (0u64, 0u64);
        let mut buf = vec![0u8; 70_000];
        // Waves of 4 datagrams (164 fragments): veth's XDP ring holds 256.
        for wave in 0..40u64 {
            for k in 0..4u64 {
                let (f, _) = echo_request(100 + wave * 4 + k, 15_000);
                sock.send_to(&f, to).unwrap();
                sent += 1;
            }
            while let Ok((n, _)) = sock.recv_from(&mut buf) {
                assert_eq!(answer_kind(&buf[..n]).0, Kind::Response);
                answered += 1;
            }
        }
        // Past the timeout, everything incomplete is gone.
        std::thread::sleep(Duration::from_millis(400));
        let s = wait_stats(|s| s.frag_held == 0);
        eprintln!("5% fragment loss: {answered} of {sent} answered; {s:?}");
        // The peer kernel stops sending a datagram's fragments at the first
        // one the hook refuses (ip_do_fragment gives up on an error), so
        // what arrives of an incomplete datagram is its head.
        let fed = s.rx_fragments - before.rx_fragments;
        assert!(fed >= sent * 5, "fragments arrived: {fed}");
        assert!(
            s.frag_expired - before.frag_expired > 0,
            "timeouts freed fragments: {s:?}"
        );
        assert!(answered > 0 && answered < sent, "{answered} of {sent}");
        assert!(
            s.rx_reassembled - before.rx_reassembled >= answered,
            "{s:?}"
        );
        quiet(idle);
        drop(_nft);
        sock.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let (f, data) = echo_request(999, 15_000);
        assert_eq!(
            tensor_f32(&roundtrip(&sock, to, &f)),
            data,
            "no loss, answered"
        );
        engine.stop(Duration::from_millis(50));
        let r = dpdk::last_stop_report().unwrap();
        assert!(r.mbufs_missing <= idle + TX_RECLAIM_SLACK, "{r:?}");
    });
}
