//! A front-door request that names no timeout gets
//! `frontdoor.request_timeout_ms` as its deadline, not the whole freshness
//! window; `X-AI-Timeout` overrides it.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

const BODY: &[u8] = br#"{"inputs":[{"name":"x","shape":[2],"datatype":"INT8","data":[1,2]}]}"#;

/// Headers, then the body `delay` later: the deadline runs from the
/// headers, so it has passed when the worker sees a frame whose deadline
/// is shorter than `delay`.
fn slow_post(addr: SocketAddr, extra: &str, delay: Duration) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(
        format!(
            "POST /v2/models/null/versions/1/infer HTTP/1.1\r\nhost: x\r\nconnection: close\r\n{extra}content-length: {}\r\n\r\n",
            BODY.len()
        )
        .as_bytes(),
    )
    .unwrap();
    std::thread::sleep(delay);
    s.write_all(BODY).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[test]
fn a_request_without_a_timeout_gets_request_timeout_ms() {
    let fd = common::start("request_timeout_ms = 100\nbody_timeout_ms = 5000\n", true);
    let bearer = format!("authorization: Bearer {}\r\n", common::TOKEN);
    let out = slow_post(fd.http, &bearer, Duration::from_millis(400));
    assert!(out.starts_with("HTTP/1.1 504"), "{out}");
    assert!(out.contains("deadline"), "{out}");
    // Within it, it runs.
    let out = slow_post(fd.http, &bearer, Duration::ZERO);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    // A timeout of its own overrides the default.
    let own = format!("{bearer}x-ai-timeout: 5s\r\n");
    let out = slow_post(fd.http, &own, Duration::from_millis(400));
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
}
