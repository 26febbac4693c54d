//! Connections that send nothing, send slowly or never read cannot hold
//! the front door: each is closed at its timeout and counted by cause, and
//! one source address holds at most `connections_per_source_max`. Short
//! timeouts; loops are bounded; nothing here asserts on speed.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const TIMEOUTS: &str = "handshake_timeout_ms = 300\nidle_timeout_ms = 500\n\
    header_timeout_ms = 400\nbody_timeout_ms = 300\nwrite_timeout_ms = 400\n";

/// Whether the server closes `s` within `within` (what it sends first is
/// read and dropped).
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let t = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut b = [0u8; 4096];
    while t.elapsed() < within {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
    }
    false
}

/// `GET /v2/health/ready` on a fresh connection: the status, or None if
/// the connection was refused or closed.
fn ready(addr: SocketAddr) -> Option<u16> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    s.write_all(b"GET /v2/health/ready HTTP/1.1\r\nhost: x\r\n\r\n")
        .ok()?;
    let mut buf = Vec::new();
    let mut b = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&b[..n]),
        }
    }
    let head = String::from_utf8_lossy(&buf);
    head.split(' ').nth(1)?.parse().ok()
}

#[test]
fn idle_sockets_do_not_lock_out_a_request_and_are_closed_and_counted() {
    let fd = common::start(
        &format!("{TIMEOUTS}connections_max = 16\nconnections_per_source_max = 1000\n"),
        false,
    );
    // 200 sockets that send nothing, far more than connections_max.
    let mut idle: Vec<TcpStream> = (0..200)
        .map(|_| TcpStream::connect(fd.http).unwrap())
        .collect();
    // A legitimate request is admitted at once: at connections_max the
    // socket idle longest is closed to make room (no waiting for the
    // handshake timeout). Retried only for the accept queue's order.
    let mut status = None;
    for _ in 0..20 {
        status = ready(fd.http);
        if status.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(status, Some(200), "a legitimate request is answered");
    // Every idle socket is closed: evicted to make room, or at the
    // handshake timeout.
    for s in &mut idle {
        assert!(closed_within(s, Duration::from_secs(5)));
    }
    // Each close is counted just after its socket closes: wait (bounded)
    // for the counts to add up rather than read them at once.
    let t = Instant::now();
    let (mut evicted, mut timed_out) = (0, 0);
    while t.elapsed() < Duration::from_secs(5) {
        evicted = fd.stat("closed_evicted");
        timed_out = fd.stat("closed_handshake_timeout");
        if evicted + timed_out >= 200 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let refused = fd.stat("connections_refused");
    assert!(evicted >= 200 - 16, "{evicted}");
    assert_eq!(refused, 0, "nothing refused while an idle one could go");
    assert!(timed_out + evicted >= 200, "{timed_out} + {evicted}");

    // A keep-alive connection with nothing in flight is closed at
    // idle_timeout_ms.
    let mut s = TcpStream::connect(fd.http).unwrap();
    s.write_all(b"GET /v2/health/live HTTP/1.1\r\nhost: x\r\n\r\n")
        .unwrap();
    assert!(closed_within(&mut s, Duration::from_secs(5)));
    assert_eq!(
        fd.wait_stat("closed_idle_timeout", 1, Duration::from_secs(2)),
        1
    );
}

#[test]
fn slowloris_headers_are_cut_at_header_timeout() {
    let fd = common::start(TIMEOUTS, false);
    let mut s = TcpStream::connect(fd.http).unwrap();
    let head = b"GET /v2/health/ready HTTP/1.1\r\nhost: x\r\nx-slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    // One byte every 100 ms: the headers would take 8 s.
    for b in head {
        if s.write_all(&[*b]).is_err() {
            break;
        }
        if fd.stat("closed_header_timeout") > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(closed_within(&mut s, Duration::from_secs(3)));
    // Counted just after the socket is dropped.
    assert_eq!(
        fd.wait_stat("closed_header_timeout", 1, Duration::from_secs(2)),
        1
    );
    assert_eq!(fd.stat("http_requests"), 0, "no request was served");
}

#[test]
fn slowloris_bodies_are_cut_at_body_timeout() {
    let fd = common::start(TIMEOUTS, false);
    let mut s = TcpStream::connect(fd.http).unwrap();
    s.write_all(
        b"POST /v2/models/null/versions/1/infer HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n",
    )
    .unwrap();
    let mut answer = Vec::new();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut b = [0u8; 1024];
    for _ in 0..50 {
        let _ = s.write_all(b" ");
        match s.read(&mut b) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&b[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
        if answer.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert_eq!(fd.stat("slow_clients"), 1);
}

#[test]
fn grpc_port_handshake_must_finish_in_time() {
    let fd = common::start(TIMEOUTS, false);
    // Nothing after connecting.
    let mut a = TcpStream::connect(fd.grpc).unwrap();
    // The HTTP/2 preface, and never a SETTINGS frame.
    let mut b = TcpStream::connect(fd.grpc).unwrap();
    b.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
    // The preface and half a SETTINGS frame.
    let mut c = TcpStream::connect(fd.grpc).unwrap();
    c.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00")
        .unwrap();
    for s in [&mut a, &mut b, &mut c] {
        assert!(closed_within(s, Duration::from_secs(5)));
    }
    assert_eq!(
        fd.wait_stat("closed_handshake_timeout", 3, Duration::from_secs(2)),
        3
    );
    // The same on the HTTP port, which also speaks HTTP/2.
    let mut d = TcpStream::connect(fd.http).unwrap();
    d.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
    assert!(closed_within(&mut d, Duration::from_secs(5)));
    assert_eq!(
        fd.wait_stat("closed_handshake_timeout", 4, Duration::from_secs(2)),
        4
    );
}

#[test]
fn a_client_that_never_reads_is_closed_at_write_timeout() {
    let fd = common::start(TIMEOUTS, false);
    // A small receive window, so the server's writes block soon.
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    sock.connect(&fd.http.into()).unwrap();
    let mut s: TcpStream = sock.into();
    // Pipelined requests whose answers (some 12 MB of JSON: more than
    // the socket buffers hold) the client never reads.
    let n = 30_000;
    let header = format!(
        "{{\"inputs\":[{{\"name\":\"x\",\"shape\":[1,{n}],\"datatype\":\"UINT8\",\"parameters\":{{\"binary_data_size\":{n}}}}}]}}"
    );
    let mut one = format!(
        "POST /v2/models/null/versions/1/infer HTTP/1.1\r\nhost: x\r\n\
         inference-header-content-length: {}\r\ncontent-length: {}\r\n\r\n{header}",
        header.len(),
        header.len() + n
    )
    .into_bytes();
    one.resize(one.len() + n, 1);
    s.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
    for _ in 0..200 {
        if s.write_all(&one).is_err() {
            break;
        }
    }
    let n = fd.wait_stat("closed_write_timeout", 1, Duration::from_secs(10));
    assert_eq!(n, 1, "{}", fd.e.frontdoor_stats());
    assert_eq!(fd.stat("closed_idle_timeout"), 0);
}

#[test]
fn one_source_holds_at_most_connections_per_source_max() {
    let fd = common::start(
        &format!(
            "{}idle_timeout_ms = 10000\nconnections_per_source_max = 4\n",
            TIMEOUTS.replace("idle_timeout_ms = 500\n", "")
        ),
        false,
    );
    let req = b"GET /v2/health/live HTTP/1.1\r\nhost: x\r\n\r\n";
    let mut open: Vec<TcpStream> = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(fd.http).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(req).unwrap();
        let mut b = [0u8; 512];
        assert!(s.read(&mut b).unwrap() > 0, "answered");
        open.push(s);
    }
    // The fifth from 127.0.0.1 is closed at once, and counted.
    let mut fifth = TcpStream::connect(fd.http).unwrap();
    let _ = fifth.write_all(req);
    assert!(closed_within(&mut fifth, Duration::from_secs(5)));
    assert_eq!(fd.stat("refused_per_source"), 1);
    // A closed connection gives its place back.
    drop(open.pop());
    let t = Instant::now();
    let mut status = None;
    while status.is_none() && t.elapsed() < Duration::from_secs(5) {
        status = ready(fd.http);
        if status.is_none() {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    assert_eq!(status, Some(200));
}
