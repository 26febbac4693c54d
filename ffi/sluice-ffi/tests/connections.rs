//! Connection management through the C ABI: `SluiceQuery::Connections` and
//! `sluice_engine_close_connection`.
//!
//! On UDP-only io_uring the list is empty and every id is unknown. With
//! `tcp_listen`, TCP connections are listed with counters and closed
//! through the ABI. With the `rdma` feature and a device (the Soft-RoCE guest
//! sets SLUICE_RDMA_TEST_IP), a real appliance and a real client: the
//! connection is listed with counters, closed through the ABI, and the
//! client's request in flight fails with a retryable connection loss.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]
// Calls the C ABI as C would.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char};
use std::ptr;

use sluice_ffi::*;

fn msg(e: &[c_char]) -> String {
    // SAFETY: the library always NUL-terminates within the buffer.
    unsafe { CStr::from_ptr(e.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

fn open(cfg: &str) -> *mut SluiceEngine {
    let mut e = ptr::null_mut();
    let mut err = [0 as c_char; 512];
    // SAFETY: valid buffers and out pointer.
    let rc =
        unsafe { sluice_engine_open(cfg.as_ptr(), cfg.len(), &mut e, err.as_mut_ptr(), err.len()) };
    assert_eq!(rc, SluiceStatus::Ok as i32, "{}", msg(&err));
    e
}

fn connections(e: *mut SluiceEngine) -> Vec<serde_json::Value> {
    query(e, SluiceQuery::Connections)
}

fn totals(e: *mut SluiceEngine) -> Vec<serde_json::Value> {
    query(e, SluiceQuery::ConnectionTotals)
}

fn query(e: *mut SluiceEngine, what: SluiceQuery) -> Vec<serde_json::Value> {
    let (mut p, mut n) = (ptr::null_mut(), 0usize);
    let mut err = [0 as c_char; 512];
    // SAFETY: live handle, valid out pointers.
    let rc =
        unsafe { sluice_engine_query(e, what as i32, &mut p, &mut n, err.as_mut_ptr(), err.len()) };
    assert_eq!(rc, 0, "{}", msg(&err));
    // SAFETY: p/n returned by the query.
    let v: serde_json::Value =
        serde_json::from_slice(unsafe { std::slice::from_raw_parts(p, n) }).unwrap();
    // SAFETY: exactly what the query returned.
    unsafe { sluice_buf_free(p, n) };
    v.as_array().expect("the answer is a JSON array").clone()
}

fn close(e: *mut SluiceEngine, id: u64) -> (i32, String) {
    let mut err = [0 as c_char; 512];
    // SAFETY: `e` is live or null (refused); the buffer is valid.
    let rc = unsafe { sluice_engine_close_connection(e, id, err.as_mut_ptr(), err.len()) };
    (rc, msg(&err))
}

const UDP: &str = r#"{
  "engine": {"workers": [0], "poll": "adaptive", "rx_burst_max": 16},
  "io_uring": {"listen": "127.0.0.1:0", "rx_buffers": 16, "tx_buffers": 16, "buffer_size": 4096},
  "shards": [{"name": "s"}],
  "routes": [{"name": "null", "model": "null", "shard": "s"}],
  "models": [{"name": "null", "version": "1", "kind": "null"}]
}"#;

#[test]
fn udp_engine_has_no_connections_and_close_says_not_found() {
    let e = open(UDP);
    let mut err = [0 as c_char; 512];
    // SAFETY: live handle, valid buffer.
    let rc = unsafe { sluice_engine_start(e, err.as_mut_ptr(), err.len()) };
    assert_eq!(rc, 0, "{}", msg(&err));
    assert!(connections(e).is_empty());
    assert!(totals(e).is_empty());
    let (rc, m) = close(e, 7);
    assert_eq!(rc, SluiceStatus::NotFound as i32, "{m}");
    assert!(m.starts_with("no connection 7"), "{m}");
    assert!(m.contains("only with io_uring.tcp_listen set"), "{m}");
    // A null handle is refused, not dereferenced.
    let (rc, m) = close(ptr::null_mut(), 7);
    assert_eq!(rc, SluiceStatus::InvalidArgument as i32, "{m}");
    // SAFETY: live handle; freed once.
    unsafe {
        assert_eq!(sluice_engine_stop(e, 0, err.as_mut_ptr(), err.len()), 0);
        // Stopped: still an empty list, still not found.
        assert!(connections(e).is_empty());
        assert_eq!(close(e, 0).0, SluiceStatus::NotFound as i32);
        sluice_engine_free(e);
    }
}

const TCP: &str = r#"{
  "engine": {"workers": [0], "poll": "adaptive", "rx_burst_max": 16},
  "io_uring": {"listen": "127.0.0.1:0", "rx_buffers": 16, "tx_buffers": 16, "buffer_size": 4096,
               "tcp_listen": "127.0.0.1:0", "tcp_connections_max": 4,
               "tcp_slots": [{"size": 65536, "count": 4}]},
  "shards": [{"name": "s"}],
  "routes": [{"name": "null", "model": "null", "shard": "s"}],
  "models": [{"name": "null", "version": "1", "kind": "null"}]
}"#;

#[test]
fn tcp_connections_are_listed_counted_and_closed() {
    use std::io::{Read, Write};
    let e = open(TCP);
    let mut err = [0 as c_char; 512];
    // SAFETY: live handle, valid buffer.
    let rc = unsafe { sluice_engine_start(e, err.as_mut_ptr(), err.len()) };
    assert_eq!(rc, 0, "{}", msg(&err));
    let status = query_obj(e, SluiceQuery::Status);
    let addr: std::net::SocketAddr = status["tcp_listen"].as_str().unwrap().parse().unwrap();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let ping = sluice_wire::FrameRepr {
        kind: sluice_wire::Kind::Ping,
        request_id: 3,
        ..sluice_wire::FrameRepr::default()
    };
    let mut buf = [0u8; 128];
    let n = ping.emit(&mut buf).unwrap().frame_len;
    s.write_all(&buf[..n]).unwrap();
    let mut pong = [0u8; 96];
    s.read_exact(&mut pong).unwrap();
    assert_eq!(pong[5], sluice_wire::Kind::Pong as u8);
    // Counters are published once the answer is sent.
    std::thread::sleep(std::time::Duration::from_millis(50));
    let l = connections(e);
    assert_eq!(l.len(), 1, "{l:?}");
    assert_eq!(l[0]["transport"], "tcp");
    assert_eq!(l[0]["role"], "client");
    assert_eq!(l[0]["peer"], s.local_addr().unwrap().to_string());
    assert_eq!(
        (l[0]["rx_frames"].as_u64(), l[0]["tx_frames"].as_u64()),
        (Some(1), Some(1))
    );
    let t = totals(e);
    assert_eq!(
        (t[0]["transport"].as_str(), t[0]["accepted"].as_u64()),
        (Some("tcp"), Some(1))
    );
    let id = l[0]["id"].as_u64().unwrap();
    let (rc, m) = close(e, id);
    assert_eq!(rc, 0, "{m}");
    let mut one = [0u8; 1];
    assert!(
        matches!(s.read(&mut one), Ok(0) | Err(_)),
        "the stream ends"
    );
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !connections(e).is_empty() {
        assert!(std::time::Instant::now() < until, "still listed");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(close(e, id).0, SluiceStatus::NotFound as i32);
    // SAFETY: live handle; freed once.
    unsafe {
        assert_eq!(sluice_engine_stop(e, 0, err.as_mut_ptr(), err.len()), 0);
        sluice_engine_free(e);
    }
}

fn query_obj(e: *mut SluiceEngine, what: SluiceQuery) -> serde_json::Value {
    let (mut p, mut n) = (ptr::null_mut(), 0usize);
    let mut err = [0 as c_char; 512];
    // SAFETY: live handle, valid out pointers.
    let rc =
        unsafe { sluice_engine_query(e, what as i32, &mut p, &mut n, err.as_mut_ptr(), err.len()) };
    assert_eq!(rc, 0, "{}", msg(&err));
    // SAFETY: p/n returned by the query.
    let v = serde_json::from_slice(unsafe { std::slice::from_raw_parts(p, n) }).unwrap();
    // SAFETY: exactly what the query returned.
    unsafe { sluice_buf_free(p, n) };
    v
}

#[cfg(feature = "rdma")]
mod rdma {
    use super::*;
    use std::time::{Duration, Instant};

    use sluice_engine::transport::rdma::{ClientError, ClientOpts, RdmaClient, device_check};

    fn config(ip: &str, port: u16) -> String {
        format!(
            r#"{{
  "engine": {{"workers": [0], "transport": "rdma", "poll": "adaptive"}},
  "auth": {{"mode": "none"}},
  "rdma": {{"listen": "{ip}:{port}", "connections_max": 2, "slots_per_connection": 1,
            "slot_size": 2097152, "large_tx_buffers": 1, "rx_buffers": 32, "tx_buffers": 32}},
  "shards": [{{"name": "s"}}],
  "routes": [{{"name": "echo", "model": "echo", "shard": "s"}}],
  "models": [{{"name": "echo", "version": "1", "kind": "echo"}}]
}}"#
        )
    }

    fn request(buf: &mut [u8], id: u64) -> usize {
        let dims = [8u64];
        let data = [7u8; 8];
        let t = [sluice_wire::TensorRepr {
            name: "x",
            dtype: sluice_wire::DType::U8,
            dims: &dims,
            data: Some(&data),
        }];
        let repr = sluice_wire::FrameRepr {
            request_id: id,
            model: "echo",
            model_version: "1",
            tensors: &t,
            ..sluice_wire::FrameRepr::default()
        };
        repr.emit(buf).map(|l| l.frame_len).unwrap_or(usize::MAX)
    }

    /// Without a device the engine does not start; the list stays empty and
    /// the close says the engine is not running.
    #[test]
    fn rdma_engine_that_did_not_start_lists_nothing() {
        if device_check().is_ok() {
            return; // the guest run below covers a device
        }
        let e = open(&config("127.0.0.1", 7473));
        let mut err = [0 as c_char; 512];
        // SAFETY: live handle, valid buffer.
        let rc = unsafe { sluice_engine_start(e, err.as_mut_ptr(), err.len()) };
        assert_eq!(rc, SluiceStatus::Io as i32, "{}", msg(&err));
        assert!(msg(&err).contains("no RDMA device found"), "{}", msg(&err));
        assert!(connections(e).is_empty());
        assert!(totals(e).is_empty());
        let (rc, m) = close(e, 1);
        assert_eq!(rc, SluiceStatus::NotFound as i32, "{m}");
        assert!(m.contains("not running"), "{m}");
        // SAFETY: freed once.
        unsafe { sluice_engine_free(e) };
    }

    #[test]
    fn rdma_connection_is_listed_and_closed_through_the_abi() {
        let Ok(ip) = std::env::var("SLUICE_RDMA_TEST_IP") else {
            return; // needs the Soft-RoCE guest (scripts/rdma-e2e.sh)
        };
        let e = open(&config(&ip, 7473));
        let mut err = [0 as c_char; 512];
        // SAFETY: live handle, valid buffer.
        let rc = unsafe { sluice_engine_start(e, err.as_mut_ptr(), err.len()) };
        assert_eq!(rc, 0, "{}", msg(&err));
        let server = format!("{ip}:7473").parse().unwrap();
        let opts = ClientOpts {
            slots: 1,
            slot_size: 2 << 20,
            connect_timeout_ms: 30_000,
            ..ClientOpts::default()
        };
        let mut c = RdmaClient::connect(server, opts).unwrap();
        c.send(|b| request(b, 1)).unwrap();
        c.recv(Duration::from_secs(30), |_, _| ()).unwrap();

        let list = connections(e);
        let id = c.server().conn_id;
        let mine = list
            .iter()
            .find(|v| v["id"] == id)
            .unwrap_or_else(|| panic!("connection {id} is listed: {list:?}"));
        assert_eq!(mine["transport"], "rdma");
        assert_eq!(mine["role"], "client");
        assert_eq!(mine["state"], "up");
        assert_eq!(mine["device"], "rxe0");
        assert_eq!(mine["listen"], format!("{ip}:7473"));
        assert_eq!(mine["worker"], 0);
        for k in ["rx_frames", "tx_frames", "rx_bytes", "tx_bytes"] {
            assert!(mine[k].as_u64().unwrap() >= 1, "{k}: {mine}");
        }
        assert_eq!(mine["errors"], 0);
        assert!(mine["peer"].as_str().unwrap().starts_with(&ip), "{mine}");

        let (rc, m) = close(e, id.wrapping_add(1000));
        assert_eq!(rc, SluiceStatus::NotFound as i32, "{m}");

        // A request in flight when the control plane closes the connection.
        c.send(|b| request(b, 2)).ok();
        let (rc, m) = close(e, id);
        assert_eq!(rc, 0, "{m}");
        let mut lost = None;
        for _ in 0..4 {
            if let Err(err) = c.recv(Duration::from_secs(10), |_, _| ()) {
                lost = Some(err);
                break;
            }
        }
        let lost = lost.expect("the close reached the client");
        assert!(matches!(lost, ClientError::ConnectionLost { .. }), "{lost}");
        assert!(lost.retryable());
        let t = Instant::now();
        while connections(e).iter().any(|v| v["id"] == id) && t.elapsed() < Duration::from_secs(20)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!connections(e).iter().any(|v| v["id"] == id));
        // Its counts stay in worker 0's totals.
        let t = totals(e);
        assert_eq!(t.len(), 1, "{t:?}");
        let n = |k: &str| t[0][k].as_u64().unwrap();
        assert_eq!(
            (n("worker"), n("accepted"), n("closed"), n("open")),
            (0, 1, 1, 0),
            "{t:?}"
        );
        assert!(
            n("rx_frames") >= mine["rx_frames"].as_u64().unwrap(),
            "{t:?}"
        );
        assert!(n("tx_bytes") >= mine["tx_bytes"].as_u64().unwrap(), "{t:?}");
        // Served again on a new connection.
        let mut c2 = RdmaClient::connect(server, opts).unwrap();
        c2.send(|b| request(b, 3)).unwrap();
        c2.recv(Duration::from_secs(30), |_, _| ()).unwrap();
        assert_eq!(totals(e)[0]["open"], 1);
        assert!(
            connections(e)
                .iter()
                .any(|v| v["id"] == c2.server().conn_id)
        );
        drop(c2);
        drop(c);
        // SAFETY: live handle; freed once.
        unsafe {
            assert_eq!(sluice_engine_stop(e, 10, err.as_mut_ptr(), err.len()), 0);
            assert!(connections(e).is_empty());
            sluice_engine_free(e);
        }
    }
}
