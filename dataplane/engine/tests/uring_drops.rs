//! Datagrams the kernel drops in a worker's socket queue are counted
//! (issue 13.4): a flood into a socket nobody reads overflows its receive
//! buffer, and the io_uring transport's `rx_kernel_drops` (from SO_RXQ_OVFL)
//! matches the kernel's own count for that socket in /proc/net/udp.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use sluice_engine::config::{HugepageMode, UringCfg};
use sluice_engine::transport::uring::{RX_DATA_OFFSET_V4, RxLayout, UringTransport};
use sluice_engine::transport::{RxPacket, Transport};

/// The kernel's drop count of the UDP socket bound to `addr`, from
/// /proc/net/udp (last column).
fn proc_drops(addr: SocketAddr) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/udp").ok()?;
    let want = format!(":{:04X}", addr.port());
    text.lines().skip(1).find_map(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        (cols.get(1)?.ends_with(&want)).then(|| cols.last()?.parse().ok())?
    })
}

/// Polls (releasing what arrives) until nothing came for `quiet`; returns
/// the number of frames received.
fn drain(t: &mut UringTransport, out: &mut [RxPacket], quiet: Duration) -> usize {
    let mut got = 0;
    let mut last = Instant::now();
    while last.elapsed() < quiet {
        let n = t.rx_burst(out);
        for p in &out[..n] {
            t.rx_release(p);
        }
        if n > 0 {
            got += n;
            last = Instant::now();
        }
    }
    got
}

#[test]
fn a_flood_into_a_full_socket_queue_is_counted_as_kernel_drops() {
    assert_eq!(
        RxLayout::for_addr(&"127.0.0.1:1".parse().unwrap()).data_offset(),
        RX_DATA_OFFSET_V4
    );
    let cfg = UringCfg {
        listen: "127.0.0.1:0".into(),
        rx_buffers: 64,
        tx_buffers: 64,
        buffer_size: 4096,
        ..UringCfg::default()
    };
    let mut t = UringTransport::new("127.0.0.1:0".parse().unwrap(), &cfg, HugepageMode::Off)
        .expect("transport starts");
    let to = t.local_addr();
    let mut out = vec![RxPacket::default(); 32];
    assert_eq!(t.counters().rx_kernel_drops, 0);

    // Nobody polls while the flood arrives (task work runs only when the
    // worker enters the kernel), so the socket's queue overflows.
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let payload = [0u8; 512];
    for _ in 0..60_000 {
        let _ = s.send_to(&payload, to);
    }
    let kernel = proc_drops(to).expect("the socket is in /proc/net/udp");
    assert!(kernel > 0, "the flood overflowed the socket queue");
    let received = drain(&mut t, &mut out, Duration::from_millis(300));
    assert!(received > 0);
    // The count rides on the next datagram queued after the drops.
    s.send_to(&payload, to).unwrap();
    let received_after = drain(&mut t, &mut out, Duration::from_millis(300));
    assert_eq!(received_after, 1);
    let ours = t.counters().rx_kernel_drops;
    let kernel = proc_drops(to).unwrap();
    eprintln!("flood: {received} received, {kernel} dropped by the kernel, {ours} counted");
    assert_eq!(
        ours, kernel,
        "rx_kernel_drops ({ours}) is the kernel's count for the socket ({kernel})"
    );
    // A datagram without new drops adds nothing.
    s.send_to(&payload, to).unwrap();
    drain(&mut t, &mut out, Duration::from_millis(200));
    assert_eq!(t.counters().rx_kernel_drops, ours);
}

/// Sleeps on every request: a worker that falls behind.
struct Slow;

impl sluice_engine::handler::Handler for Slow {
    fn handle(
        &mut self,
        _req: &sluice_wire::Frame<&[u8]>,
        _adapter: Option<&str>,
        _tx: &mut [u8],
        _acct: &mut sluice_engine::handler::RunAccount,
    ) -> Result<usize, sluice_engine::handler::Reject> {
        std::thread::sleep(Duration::from_millis(300));
        Err(sluice_engine::handler::Reject::new(
            sluice_wire::ErrorCode::Busy,
            "slow on purpose",
        ))
    }
}

fn slow_factory(
    m: &sluice_engine::config::ModelCfg,
    cfg: &sluice_engine::Config,
) -> Result<Box<dyn sluice_engine::handler::Handler>, String> {
    if m.name == "slow" {
        return Ok(Box::new(Slow));
    }
    sluice_engine::engine::default_factory(m, cfg)
}

/// The engine publishes the count per worker in its stats.
#[test]
fn a_worker_that_falls_behind_reports_kernel_drops_in_its_stats() {
    // An unsigned request must reach the slow model: no tag checks.
    let text = r#"
[auth]
mode = "none"
[engine]
workers = [0]
poll = "adaptive"
spin_us = 50
[io_uring]
listen = "127.0.0.1:0"
rx_buffers = 64
tx_buffers = 64
buffer_size = 4096
[[shards]]
name = "main"
[[routes]]
name = "all"
shard = "main"
[[models]]
name = "slow"
version = "1"
kind = "null"
"#;
    let cfg = sluice_engine::Config::parse(text, std::env::temp_dir()).unwrap();
    let opts = sluice_engine::EngineOptions {
        no_pin: true,
        ..Default::default()
    };
    let mut e = sluice_engine::Engine::with_factory(cfg, opts, slow_factory).unwrap();
    e.start().unwrap();
    let to = e.local_addr().unwrap();
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    // One request keeps the worker in its handler; the flood meanwhile fills
    // the socket queue (the worker reads nothing while it is busy).
    let mut frame = vec![0u8; 512];
    let n = sluice_wire::FrameRepr {
        request_id: 1,
        model: "slow",
        model_version: "1",
        ..sluice_wire::FrameRepr::default()
    }
    .emit(&mut frame)
    .unwrap()
    .frame_len;
    s.send_to(&frame[..n], to).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let junk = [0u8; 512];
    for _ in 0..60_000 {
        let _ = s.send_to(&junk, to);
    }
    let kernel = proc_drops(to).expect("the socket is in /proc/net/udp");
    assert!(kernel > 0, "the flood overflowed the socket queue");
    // After the slow request, one more datagram carries the count.
    std::thread::sleep(Duration::from_millis(600));
    s.send_to(&junk, to).unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut seen = 0;
    while Instant::now() < deadline {
        seen = e.stats().total(|w| w.rx_kernel_drops);
        if seen >= kernel {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        seen,
        proc_drops(to).unwrap(),
        "stats carry the kernel's count"
    );
    e.stop(Duration::ZERO);
}
