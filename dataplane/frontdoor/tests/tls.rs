//! TLS on the front door: a client that trusts the test CA talks HTTP/1.1
//! over TLS; a cleartext client gets nowhere; a new certificate written
//! over the files is served to new connections without a restart; a
//! broken one is refused and the old one stays.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_engine::Engine;

mod common;

struct Ca {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

fn ca() -> Ca {
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let key = rcgen::KeyPair::generate().unwrap();
    Ca {
        cert: p.self_signed(&key).unwrap(),
        key,
    }
}

/// A leaf for 127.0.0.1 signed by `ca`, written as `dir/cert.pem` and
/// `dir/key.pem` (the key first, then the certificate, each renamed into
/// place whole).
fn write_leaf(ca: &Ca, dir: &Path, cn: &str) {
    let mut p = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    p.subject_alt_names
        .push(rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap()));
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, &ca.cert, &ca.key).unwrap();
    for (name, text) in [("key.pem", key.serialize_pem()), ("cert.pem", cert.pem())] {
        let tmp = dir.join(format!("{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, dir.join(name)).unwrap();
    }
}

fn start(dir: &Path) -> (Engine, SocketAddr) {
    let text = format!(
        r#"
[engine]
workers = [0]
poll = "adaptive"
spin_us = 50
[io_uring]
listen = "127.0.0.1:0"
rx_buffers = 64
tx_buffers = 64
[frontdoor]
http_listen = "127.0.0.1:0"
slots = 16
handshake_timeout_ms = 500
tls_cert = "{d}/cert.pem"
tls_key = "{d}/key.pem"
tls_reload_ms = 100
[auth]
mode = "none"
[[shards]]
name = "s"
[[routes]]
name = "all"
shard = "s"
[[models]]
name = "null"
version = "1"
kind = "null"
"#,
        d = dir.display()
    );
    let e = common::engine(&text, dir.to_path_buf());
    let http = e.frontdoor_addrs().0.unwrap();
    (e, http)
}

/// `GET /v2/health/live` over TLS, trusting only `ca`; the answer's status
/// line and the server certificate's common name.
fn get_live(addr: SocketAddr, ca: &Ca) -> Result<(String, String), String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.cert.der().clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(cfg), name).unwrap();
    let mut sock = TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut tls = rustls::Stream::new(&mut conn, &mut sock);
    tls.write_all(b"GET /v2/health/live HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text.lines().next().unwrap_or("").to_string();
    let cert = conn.peer_certificates().unwrap()[0].clone();
    let cn = String::from_utf8_lossy(&cert).to_string();
    Ok((status, cn))
}

fn stat(e: &Engine, k: &str) -> u64 {
    e.frontdoor_stats()[k].as_u64().unwrap_or(0)
}

#[test]
fn tls_serves_and_reloads() {
    let dir = std::env::temp_dir().join(format!("sluice-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = ca();
    write_leaf(&ca, &dir, "first-cert");
    let (e, http) = start(&dir);

    let (status, cn) = get_live(http, &ca).unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(cn.contains("first-cert"));

    // Cleartext gets no answer: the handshake fails and is counted.
    let before = stat(&e, "tls_handshake_failures");
    let mut s = TcpStream::connect(http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /v2/health/live HTTP/1.1\r\nhost: x\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).unwrap_or(0);
    assert!(!String::from_utf8_lossy(&buf[..n]).contains("200 OK"));
    let until = Instant::now() + Duration::from_secs(5);
    while stat(&e, "tls_handshake_failures") == before {
        assert!(Instant::now() < until);
        std::thread::sleep(Duration::from_millis(20));
    }

    // A new pair over the files: new connections get it, no restart.
    std::thread::sleep(Duration::from_millis(1100)); // a new mtime second
    write_leaf(&ca, &dir, "second-cert");
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, cn) = get_live(http, &ca).unwrap();
        assert_eq!(status, "HTTP/1.1 200 OK");
        if cn.contains("second-cert") {
            break;
        }
        assert!(Instant::now() < until, "the new certificate was not loaded");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(stat(&e, "tls_reloads") >= 1);

    // A broken file: refused, the second pair stays in use.
    std::thread::sleep(Duration::from_millis(1100));
    std::fs::write(dir.join("cert.pem"), "not a certificate").unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while stat(&e, "tls_reload_failures") == 0 {
        assert!(Instant::now() < until, "the broken file was not noticed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, cn) = get_live(http, &ca).unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(cn.contains("second-cert"));
    drop(e);
    let _ = std::fs::remove_dir_all(&dir);
}
