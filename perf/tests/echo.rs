//! The echo servers and the echo transport over real loopback sockets.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::net::UdpSocket;
use std::time::Duration;

use sluice_perf::driver::{self, Load, RunConfig, Stop};
use sluice_perf::mix::Mix;
use sluice_perf::transport::EchoTransport;
use sluice_perf::uring::{self, UringEchoConfig};

const MIX: &str = r#"
[[request]]
model = "null"
version = "1"
tenant_id = 1
[[request.tensors]]
name = "x"
dtype = "f32"
shape = [1, 4]
"#;

fn blocking() -> UringEchoConfig {
    UringEchoConfig {
        busy_poll: false,
        ..UringEchoConfig::default()
    }
}

fn closed(outstanding: usize, requests: u64, spin: bool) -> RunConfig {
    RunConfig {
        load: Load::Closed { outstanding },
        stop: Stop::Requests(requests),
        spin,
        warmup: Duration::ZERO,
        seed: 7,
    }
}

fn echo_run(addr: std::net::SocketAddr, cfg: &RunConfig) -> driver::Report {
    let mix = Mix::parse(MIX).unwrap();
    let mut t = EchoTransport::connect(addr, &mix, Duration::from_secs(2)).unwrap();
    driver::run(&mut t, &|r| mix.pick(r), cfg)
}

#[test]
fn uring_echo_returns_every_datagram() {
    let server = common::uring_echo(blocking());
    for (outstanding, spin) in [(1, true), (16, true), (8, false)] {
        let r = echo_run(server.addr, &closed(outstanding, 500, spin));
        assert_eq!(
            (r.sent, r.ok, r.timeouts, r.malformed, r.io_errors),
            (500, 500, 0, 0, 0),
            "{outstanding}"
        );
        assert_eq!(r.latency_ns.len(), 500);
    }
    let stats = server.stop().unwrap();
    assert_eq!(stats.echoed, 1500);
    assert_eq!(stats.errors, 0);
    assert!(stats.clean_shutdown);
}

#[test]
fn busy_polling_uring_echo_works() {
    let server = common::uring_echo(UringEchoConfig::default());
    let r = echo_run(server.addr, &closed(4, 300, true));
    assert_eq!(r.ok, 300);
    let stats = server.stop().unwrap();
    assert_eq!(stats.echoed, 300);
    assert!(stats.clean_shutdown);
}

#[test]
fn adaptive_uring_echo_works() {
    // Spins 200 µs after each datagram, then sleeps: both paths run.
    let server = common::uring_echo(UringEchoConfig {
        busy_poll: false,
        spin_us: 200,
        ..UringEchoConfig::default()
    });
    let mut total = 0;
    for (outstanding, spin) in [(1, false), (8, true)] {
        let r = echo_run(server.addr, &closed(outstanding, 200, spin));
        assert_eq!((r.ok, r.timeouts), (200, 0));
        total += r.ok;
        std::thread::sleep(Duration::from_millis(5));
    }
    let stats = server.stop().unwrap();
    assert_eq!(stats.echoed, total);
    assert!(stats.clean_shutdown);
}

#[test]
fn std_echo_returns_every_datagram() {
    let server = common::std_echo();
    let r = echo_run(server.addr, &closed(4, 300, false));
    assert_eq!((r.ok, r.timeouts), (300, 0));
    assert_eq!(server.stop().unwrap().echoed, 300);
}

#[test]
fn uring_echo_survives_running_out_of_buffers() {
    // Two buffers and 64 datagrams in flight: receives fail with ENOBUFS or
    // the socket queue absorbs the burst; either way the server must keep
    // answering and every request must be accounted for.
    let server = common::uring_echo(UringEchoConfig {
        buffer_count: 2,
        ..blocking()
    });
    let mix = Mix::parse(MIX).unwrap();
    let mut t = EchoTransport::connect(server.addr, &mix, Duration::from_millis(200)).unwrap();
    let r = driver::run(&mut t, &|r| mix.pick(r), &closed(64, 2000, true));
    assert_eq!(r.ok + r.timeouts, 2000);
    assert!(r.ok > 0);
    let after = echo_run(server.addr, &closed(1, 100, true));
    assert_eq!(after.ok, 100, "the server still answers");
    // Timed-out requests may still have been echoed, late.
    let stats = server.stop().unwrap();
    assert!(
        stats.echoed >= r.ok + 100 && stats.echoed <= r.ok + r.timeouts + 100,
        "{stats:?} {r:?}"
    );
    assert!(stats.clean_shutdown);
}

#[test]
fn oversized_datagrams_are_dropped_not_echoed() {
    // 16 B recvmsg header + 28 B address + 64 B payload room.
    let server = common::uring_echo(UringEchoConfig {
        buffer_size: 108,
        ..blocking()
    });
    let c = UdpSocket::bind("127.0.0.1:0").unwrap();
    c.connect(server.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    c.send(&[7u8; 200]).unwrap();
    c.send(&[9u8; 64]).unwrap();
    let mut buf = [0u8; 512];
    let n = c.recv(&mut buf).unwrap();
    assert_eq!(
        &buf[..n],
        &[9u8; 64][..],
        "only the datagram that fits comes back"
    );
    let stats = server.stop().unwrap();
    assert_eq!((stats.echoed, stats.truncated), (1, 1));
}

#[test]
fn bad_uring_settings_are_errors() {
    let sock = uring::bind_reuse("127.0.0.1:0".parse().unwrap()).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(true);
    for cfg in [
        UringEchoConfig {
            buffer_count: 3,
            ..blocking()
        },
        UringEchoConfig {
            buffer_count: 0,
            ..blocking()
        },
        UringEchoConfig {
            buffer_size: 10,
            ..blocking()
        },
        UringEchoConfig {
            ring_entries: 0,
            ..blocking()
        },
    ] {
        let e = uring::run(&sock, &cfg, &stop).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{cfg:?}");
    }
    // Valid settings with `stop` already set: starts and shuts down cleanly,
    // including the largest buffer ring (its completion queue is capped).
    assert_eq!(uring::run(&sock, &blocking(), &stop).unwrap().echoed, 0);
    let most = UringEchoConfig {
        buffer_count: 32768,
        buffer_size: 128,
        ring_entries: 32768,
        ..blocking()
    };
    assert_eq!(uring::run(&sock, &most, &stop).unwrap().echoed, 0);
}

#[test]
fn reuse_bind_allows_an_immediate_rebind() {
    let a = uring::bind_reuse("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = a.local_addr().unwrap();
    drop(a);
    let b = uring::bind_reuse(addr).unwrap();
    assert_eq!(b.local_addr().unwrap(), addr);
}

#[test]
fn socket_buffers_are_enlarged() {
    let sock = uring::bind_reuse("127.0.0.1:0".parse().unwrap()).unwrap();
    let before = uring::set_socket_buffers(&sock, 64 << 10).unwrap();
    let granted = uring::set_socket_buffers(&sock, 1 << 20).unwrap();
    // Root may exceed rmem_max; others get at most rmem_max (doubled).
    let root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
    let rmem_max: usize = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    if root || rmem_max >= 1 << 20 {
        assert!(granted >= 1 << 20, "granted {granted}");
    }
    assert!(granted >= before, "{granted} < {before}");
    assert!(uring::set_socket_buffers(&sock, usize::MAX).is_err());
}

#[test]
fn echo_uring_binary_echoes_and_reports() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    for mode in [
        &["--block"][..],
        &["--std"],
        &["--block", "--spin-us", "100"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_echo-uring"))
            .args(["--listen", "127.0.0.1:0", "--duration-s", "1"])
            .args(mode)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        let addr = first.rsplit(' ').next().unwrap().to_string();
        let c = UdpSocket::bind("127.0.0.1:0").unwrap();
        c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        c.connect(&addr).unwrap();
        let mut buf = [0u8; 64];
        for i in 0..5u8 {
            c.send(&[i; 33]).unwrap();
            let n = c.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &[i; 33][..], "{mode:?}");
        }
        let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
        assert!(child.wait().unwrap().success(), "{mode:?} {rest:?}");
        let last = rest.last().map(String::as_str).unwrap_or("");
        assert!(
            last.contains("echoed: 5,") && last.contains("clean_shutdown: true"),
            "{mode:?} {last}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_echo-uring"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--buffers",
            "3",
            "--duration-s",
            "1",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("power of two"));
}

#[test]
fn uring_tcp_echo_returns_the_stream_through_the_echo_transport() {
    use sluice_perf::transport::EchoTcpTransport;
    use sluice_perf::uring_tcp::{self, TcpEchoConfig};
    let l = uring_tcp::listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = l.local_addr().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop.clone();
    let server = std::thread::spawn(move || {
        let cfg = TcpEchoConfig {
            busy_poll: false,
            buffer_size: 64 << 10,
            ..TcpEchoConfig::default()
        };
        uring_tcp::run(&l, &cfg, &s2).unwrap()
    });
    // Frames larger than the server's buffer: echoed in pieces, in order.
    let mix = Mix::parse(&MIX.replace("[1, 4]", "[1, 100000]")).unwrap();
    let mut t = EchoTcpTransport::connect(addr, &mix, Duration::from_secs(5), false).unwrap();
    let frame = t.frame_len(0);
    let r = driver::run(&mut t, &|r| mix.pick(r), &closed(4, 200, false));
    assert_eq!((r.ok, r.timeouts, r.malformed), (200, 0, 0));
    drop(t);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let st = server.join().unwrap();
    assert_eq!(st.accepted, 1);
    assert_eq!(st.bytes, 200 * frame as u64);
}
