//! The client over TCP against the real engine (io_uring, TCP beside UDP):
//! large tensors, pipelining in order, the automatic choice of transport,
//! and reconnecting after the server closes the connection. Every request
//! is signed (the appliance's default `auth.mode = "tenants"`): over TCP
//! the tag is computed on a header whose tensor data is sent from the
//! caller's memory.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use std::time::Duration;

use sluice_client::{
    Client, ClientConfig, ClientError, DType, Endpoints, PollMode, Request, TransportMode,
};
use sluice_engine::{Config, Engine, EngineOptions};

fn engine() -> Engine {
    let text = r#"
[engine]
workers = [0]
spin_us = 50
[io_uring]
listen = "127.0.0.1:0"
rx_buffers = 64
tx_buffers = 64
tcp_listen = "127.0.0.1:0"
tcp_connections_max = 8
tcp_slots = [{ size = 65536, count = 32 }, { size = 2097152, count = 8 }, { size = 18874368, count = 2 }]
[[shards]]
name = "s"
[[routes]]
name = "all"
shard = "s"
[[tenants]]
name = "t"
id = 7
key = "hex:000102030405060708090a0b0c0d0e0f"
models = ["*"]
routes = ["*"]
[[models]]
name = "echo"
version = "1"
kind = "echo"
[[models]]
name = "null"
version = "1"
kind = "null"
"#;
    let mut e = Engine::new(
        Config::parse(text, std::env::temp_dir()).unwrap(),
        EngineOptions {
            no_pin: true,
            ..Default::default()
        },
    )
    .unwrap();
    e.start().unwrap();
    e
}

/// The tenant's key, as in the config above.
const KEY: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];

fn cfg(poll: PollMode) -> ClientConfig {
    ClientConfig {
        tenant_id: 7,
        key: Some(KEY.to_vec()),
        timeout: Duration::from_secs(20),
        poll,
        ..ClientConfig::default()
    }
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n * 4)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn large_tensors_over_tcp_and_pipelined_in_order() {
    let mut e = engine();
    for poll in [PollMode::Block, PollMode::Spin] {
        let mut c = Client::connect_tcp(e.tcp_local_addr().unwrap(), cfg(poll)).unwrap();
        for n in [16usize, 1 << 18, 1 << 22] {
            let data = bytes(n, n as u8);
            let req = Request::new("echo", "1").tensor_raw("x", DType::F32, &[1, n as u64], &data);
            let before = c.stats();
            let resp = c.call(&req).unwrap();
            assert_eq!(resp.tensor("x").unwrap().data, &data[..], "{n} floats");
            // Small answers are copied out of the read buffer; large ones
            // are read by the kernel into their own memory.
            let copied = c.stats().answers_copied - before.answers_copied;
            assert_eq!(copied, u64::from(n * 4 < 60_000), "{n} floats");
            assert!(c.stats().answer_bytes_copied - before.answer_bytes_copied <= 64 << 10);
        }
        assert!(c.ping().is_ok());
        // Pipelined on the one connection: answers in request order.
        let data = bytes(1 << 16, 9);
        let req = Request::new("null", "1").tensor_raw("x", DType::F32, &[1 << 16], &data);
        let ids: Vec<u64> = (0..40).map(|_| c.send(&req).unwrap()).collect();
        for want in &ids {
            let (got, res) = c.recv().unwrap();
            assert_eq!(got, *want);
            res.unwrap();
        }
        let st = c.stats();
        assert_eq!((st.tcp_sent, st.received), (44, 44));
    }
    e.stop(Duration::ZERO);
}

#[test]
fn a_recycled_buffer_takes_the_next_large_answer_and_small_ones_are_not_kept() {
    let mut e = engine();
    let mut c = Client::connect_tcp(e.tcp_local_addr().unwrap(), cfg(PollMode::Block)).unwrap();
    let (a, b) = (bytes(1 << 18, 1), bytes(1 << 18, 2));
    let first = c
        .call(&Request::new("echo", "1").tensor_raw("x", DType::F32, &[1 << 18], &a))
        .unwrap();
    assert_eq!(first.tensor("x").unwrap().data, &a[..]);
    let buf = first.into_frame().into_inner();
    let at = buf.as_ptr();
    c.recycle(buf);
    // A small answer's buffer is not worth keeping; it does not replace
    // the large one.
    let small = c
        .call(&Request::new("echo", "1").tensor_raw("x", DType::F32, &[4], &a[..16]))
        .unwrap();
    c.recycle(small.into_frame().into_inner());
    assert_eq!(c.stats().answers_recycled, 0);
    let second = c
        .call(&Request::new("echo", "1").tensor_raw("x", DType::F32, &[1 << 18], &b))
        .unwrap();
    // The next large answer landed in the memory given back, whole and right.
    assert_eq!(second.tensor("x").unwrap().data, &b[..]);
    assert_eq!(c.stats().answers_recycled, 1);
    let again = second.into_frame().into_inner();
    assert_eq!(again.as_ptr(), at);
    e.stop(Duration::ZERO);
}

#[test]
fn auto_sends_what_fits_a_datagram_by_udp_and_the_rest_over_tcp() {
    let mut e = engine();
    let ep = Endpoints {
        udp: e.local_addr(),
        tcp: e.tcp_local_addr(),
    };
    let mut c = Client::connect_endpoints(ep, cfg(PollMode::Spin)).unwrap();
    let small = bytes(64, 1);
    let large = bytes(1 << 18, 2);
    let rs = Request::new("echo", "1").tensor_raw("x", DType::F32, &[64], &small);
    let rl = Request::new("echo", "1").tensor_raw("x", DType::F32, &[1 << 18], &large);
    c.call(&rs).unwrap();
    assert_eq!(c.stats().tcp_sent, 0, "a small frame goes by UDP");
    assert_eq!(c.call(&rl).unwrap().tensor("x").unwrap().data, &large[..]);
    assert_eq!(c.stats().tcp_sent, 1, "a large one over TCP");
    // Mixed, outstanding on both at once.
    let mut ids = Vec::new();
    for i in 0..10 {
        ids.push(c.send(if i % 2 == 0 { &rs } else { &rl }).unwrap());
    }
    let mut got = Vec::new();
    for _ in 0..10 {
        let (id, res) = c.recv().unwrap();
        res.unwrap();
        got.push(id);
    }
    got.sort();
    assert_eq!(got, ids);
    // UDP only refuses the large one; TCP only takes both.
    let mut u = Client::connect_endpoints(
        ep,
        ClientConfig {
            transport: TransportMode::Udp,
            ..cfg(PollMode::Block)
        },
    )
    .unwrap();
    assert!(matches!(
        u.send(&rl),
        Err(ClientError::InvalidRequest(sluice_wire::Error::TooLarge))
    ));
    let mut t = Client::connect_endpoints(
        ep,
        ClientConfig {
            transport: TransportMode::Tcp,
            ..cfg(PollMode::Block)
        },
    )
    .unwrap();
    t.call(&rs).unwrap();
    assert_eq!(t.stats().tcp_sent, 1);
    e.stop(Duration::ZERO);
}

#[test]
fn a_closed_connection_fails_what_waits_on_it_and_the_next_send_reconnects() {
    let mut e = engine();
    let mut c = Client::connect_tcp(e.tcp_local_addr().unwrap(), cfg(PollMode::Block)).unwrap();
    let data = bytes(1 << 22, 3);
    let req = Request::new("echo", "1").tensor_raw("x", DType::F32, &[1 << 22], &data);
    c.call(&req).unwrap();
    // Many 16 MiB answers queued, then the server closes the connection.
    for _ in 0..12 {
        c.send(&req).unwrap();
    }
    let id = e.tcp_connections()[0].id;
    e.close_tcp_connection(id).unwrap();
    let (mut ok, mut lost) = (0, 0);
    while c.outstanding() > 0 {
        match c.recv().unwrap().1 {
            Ok(_) => ok += 1,
            Err(ClientError::ConnectionLost) => lost += 1,
            Err(e) => panic!("{e}"),
        }
    }
    // Every request is answered or failed, none left silent. How many fail
    // depends on timing: the engine still answers the frames it had read
    // when it closes, so on a fast host all twelve may be answered.
    assert_eq!(ok + lost, 12);
    eprintln!("closed with 12 sent: {ok} answered, {lost} failed as connection_lost");
    assert!(ClientError::ConnectionLost.retryable());
    let t0 = std::time::Instant::now();
    while !e.tcp_connections().is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the connection never closed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The next call opens a new connection; a client that had not yet seen
    // the close learns of it from that call (connection_lost, retryable).
    let small = bytes(4, 0);
    let r2 = Request::new("null", "1").tensor_raw("x", DType::F32, &[4], &small);
    match c.call(&r2) {
        Err(ClientError::ConnectionLost) => {
            assert_eq!(lost, 0, "the loss was reported twice");
            c.call(&r2).unwrap();
        }
        r => {
            r.unwrap();
        }
    }
    let st = c.stats();
    assert_eq!((st.connection_losses, st.tcp_reconnects), (1, 1));
    // Polling (as an event loop does) hears of a loss at once, not at the
    // request's timeout (20 s here).
    let id = e.tcp_connections()[0].id;
    e.close_tcp_connection(id).unwrap();
    let t0 = std::time::Instant::now();
    while !e.tcp_connections().is_empty() {
        std::thread::sleep(Duration::from_millis(5));
    }
    match c.send(&r2) {
        Err(ClientError::ConnectionLost) => {}
        Err(e) => panic!("{e}"),
        Ok(_) => loop {
            match c.try_recv().unwrap() {
                Some((_, Err(ClientError::ConnectionLost))) => break,
                Some((_, r)) => panic!("{r:?}"),
                None => std::thread::sleep(Duration::from_millis(1)),
            }
            assert!(t0.elapsed() < Duration::from_secs(5), "loss not reported");
        },
    }
    assert_eq!(c.stats().connection_losses, 2);
    e.stop(Duration::ZERO);
}
