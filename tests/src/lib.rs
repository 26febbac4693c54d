//! Helpers for the end-to-end tests: run `sluiced` as a process, talk to
//! its admin API over plain HTTP/1.1, and locate the repository's parts.
#![deny(unsafe_code)]
// Support for the end-to-end tests in tests/: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("repo root")
}

/// The sluiced binary built by scripts/build-ffi.sh. Missing is a failure
/// with a hint, never a skip.
pub fn sluiced_bin() -> PathBuf {
    let p = repo_root().join(".cache/bin/sluiced");
    assert!(
        p.is_file(),
        "{} missing: run scripts/build-ffi.sh",
        p.display()
    );
    p
}

/// cfg/sluice.toml rewritten for a test: absolute paths, ephemeral ports,
/// a private data dir, plus `extra` appended.
pub fn test_config(dir: &Path, extra: &str) -> PathBuf {
    let root = repo_root();
    let src = std::fs::read_to_string(root.join("cfg/sluice.toml")).expect("cfg/sluice.toml");
    let text =
        src.replace(
            "../.cache/onnxruntime/",
            &format!("{}/.cache/onnxruntime/", root.display()),
        )
        .replace("../models/", &format!("{}/models/", root.display()))
        .replace("listen = \"127.0.0.1:7070\"", "listen = \"127.0.0.1:0\"")
        .replace(
            "admin_listen = \"127.0.0.1:7071\"",
            "admin_listen = \"127.0.0.1:0\"",
        )
        .replace(
            "data_dir = \"../.cache/sluice-data\"",
            &format!("data_dir = \"{}/data\"", dir.display()),
        ) + extra;
    let path = dir.join("sluice.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

/// A running sluiced process, killed on drop.
pub struct Sluiced {
    /// The process.
    pub child: Child,
    /// Admin API address.
    pub admin: SocketAddr,
    /// Data-plane address.
    pub data: SocketAddr,
}

impl Sluiced {
    /// Starts sluiced with `config` and waits until it serves.
    pub fn start(config: &Path) -> Sluiced {
        let mut child = Command::new(sluiced_bin())
            .arg("-config")
            .arg(config)
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn sluiced");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("sluiced| {line}");
                if let Some(rest) = line.split("admin=").nth(1) {
                    let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                    let _ = tx.send(addr);
                }
            }
        });
        let admin: SocketAddr = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("sluiced reports its admin address")
            .parse()
            .expect("admin address");
        let status = http(admin, "GET", "/v1/status", None).1;
        let data = status["engine"]["listen"]
            .as_str()
            .expect("listen")
            .parse()
            .expect("data address");
        Sluiced { child, admin, data }
    }

    /// Sends a signal and waits for exit; returns the exit code.
    pub fn signal_and_wait(&mut self, sig: i32, timeout: Duration) -> Option<i32> {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(&pid)
            .status();
        let t0 = Instant::now();
        while t0.elapsed() < timeout {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Sluiced {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A minimal HTTP/1.1 request; returns the status and the body as JSON
/// (or as a JSON string when it is not JSON).
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, serde_json::Value) {
    let (code, text) = http_text(addr, method, path, body);
    let v = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    (code, v)
}

/// Like [`http`], with the raw body.
pub fn http_text(addr: SocketAddr, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect admin");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("send request");
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read response");
    let code = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = resp
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    let body = if resp
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(&body)
    } else {
        body
    };
    (code, body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((len, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(len.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}
