//! Unit tests of the RDMA transport: config, hellos, and (with a device)
//! connections, forwarding and closing through the real verbs stack.

use super::proto::*;
use super::*;

fn cfg_with(rdma: &str) -> Result<RdmaCfg, ConfigError> {
    let text = format!("[engine]\nworkers = [0]\ntransport = \"rdma\"\n[rdma]\n{rdma}\n");
    let cfg = Config::parse(&text, std::path::PathBuf::new())?;
    RdmaCfg::from_config(&cfg)
}

#[test]
fn defaults_fill_in_and_pool_is_2mib_granular() {
    let c = cfg_with("listen = \"10.0.2.15:7471\"").unwrap();
    assert_eq!(c.rx_buffers, 256);
    assert_eq!(c.slot_size, 18 << 20);
    assert_eq!(c.pool_bytes() % (2 << 20), 0);
    // 32 MiB small + 16*2 slots + 2 large tx, 18 MiB each.
    assert_eq!(c.pool_bytes(), (32 << 20) + 34 * (18 << 20));
}

#[test]
fn bad_tables_name_the_key() {
    let e = cfg_with("listen = \"10.0.2.15:7471\"\nbogus = 1").unwrap_err();
    assert!(e.message.contains("bogus"), "{e}");
    let e = cfg_with("listen = \"10.0.2.15:7471\"\nslot_size = 3145728").unwrap_err();
    assert_eq!(e.key, "rdma.slot_size");
    let e = cfg_with("listen = \"10.0.2.15:7471\"\nrx_buffers = 0").unwrap_err();
    assert_eq!(e.key, "rdma.rx_buffers");
    let e = cfg_with("listen = \"10.0.2.15:7471\"\nbuffer_size = 5000").unwrap_err();
    assert_eq!(e.key, "rdma.buffer_size");
    let e = cfg_with("listen = \"0.0.0.0:7471\"").unwrap_err();
    assert_eq!(e.key, "rdma.listen");
    let e = cfg_with("listen = \"nope\"").unwrap_err();
    assert_eq!(e.key, "rdma.listen");
    let e = cfg_with("listen = \"10.0.2.15:1\"\nconnections_max = 1024\nslots_per_connection = 64\nslot_size = 268435456")
        .unwrap_err();
    assert_eq!(e.key, "rdma");
    let cfg = Config::parse(
        "[engine]\nworkers = [0]\ntransport = \"rdma\"\n",
        std::path::PathBuf::new(),
    )
    .unwrap();
    assert_eq!(RdmaCfg::from_config(&cfg).unwrap_err().key, "rdma");
}

#[test]
fn hellos_round_trip_and_reject_foreign_bytes() {
    let s = ServerHello {
        conn_id: 0x1122_3344_5566_7788,
        slot_base: 0x7f00_0020_0000,
        slot_rkey: 0xabcd,
        slot_count: 2,
        slot_size: 18 << 20,
        buffer_size: 65536,
        credits: 64,
    };
    assert_eq!(ServerHello::decode(&s.encode()), Some(s));
    let c = ClientHello {
        reply_base: 1 << 40,
        reply_rkey: 7,
        reply_count: 2,
        reply_size: 18 << 20,
        buffer_size: 65536,
    };
    assert_eq!(ClientHello::decode(&c.encode()), Some(c));
    assert!(ServerHello::decode(&c.encode()).is_none());
    assert!(ClientHello::decode(&[0u8; 10]).is_none());
    let mut other = c.encode();
    other[4] = 9;
    assert!(ClientHello::decode(&other).is_none());
}

/// Start-up on a host without an RDMA device fails with a clear error
/// and leaves nothing running; with a device (the Soft-RoCE guest), a
/// listen address on no RDMA device is refused just as clearly.
#[test]
fn engine_start_says_why_rdma_is_unavailable() {
    let text = "[engine]\nworkers = [0]\ntransport = \"rdma\"\n[rdma]\nlisten = \"127.0.0.1:7471\"\n\
                slot_size = 2097152\nconnections_max = 1\n";
    let cfg = Config::parse(text, std::path::PathBuf::new()).unwrap();
    let opts = crate::EngineOptions {
        no_pin: true,
        ..Default::default()
    };
    let mut e = crate::Engine::new(cfg, opts).unwrap();
    let err = e.start().unwrap_err().to_string();
    match device_check() {
        Err(_) => {
            assert!(err.contains("no RDMA device found"), "{err}");
            assert!(
                err.contains("rdma link add"),
                "the error says how to get a device: {err}"
            );
        }
        Ok(_) => assert!(err.contains("rdma.listen 127.0.0.1:7471"), "{err}"),
    }
    assert!(!e.is_running());
    assert!(connections().is_empty());
    assert!(connection_totals().is_empty());
}

/// With a device: a request for a shard only a UDP peer carries cannot
/// be forwarded by an rdma appliance; the client gets a retryable
/// `peer_down` at once, never silence.
#[test]
fn requests_for_peer_shards_fail_with_peer_down() {
    let Ok(ip) = std::env::var("SLUICE_RDMA_TEST_IP") else {
        return; // needs the Soft-RoCE guest (scripts/rdma-e2e.sh)
    };
    let text = format!(
        "[engine]\nworkers = [0]\ntransport = \"rdma\"\npoll = \"adaptive\"\nforward_timeout_ms = 50\n\
         [auth]\nmode = \"none\"\n\
         [rdma]\nlisten = \"{ip}:7474\"\nconnections_max = 1\nslots_per_connection = 0\nslot_size = 2097152\n\
         large_tx_buffers = 0\nrx_buffers = 16\ntx_buffers = 16\n\
         [[shards]]\nname = \"far\"\nlabels = {{ gpu = \"x\" }}\n\
         [[routes]]\nname = \"echo\"\nmodel = \"echo\"\nshard = \"far\"\n\
         [[models]]\nname = \"echo\"\nversion = \"1\"\nkind = \"echo\"\n\
         [[peers]]\nname = \"p\"\naddress = \"127.0.0.1:9\"\nlabels = {{ gpu = \"x\" }}\n"
    );
    let cfg = Config::parse(&text, std::path::PathBuf::new()).unwrap();
    let mut e = crate::Engine::new(
        cfg,
        crate::EngineOptions {
            no_pin: true,
            ..Default::default()
        },
    )
    .unwrap();
    e.start().unwrap();
    let opts = ClientOpts {
        slots: 0,
        connect_timeout_ms: 30_000,
        ..ClientOpts::default()
    };
    let mut c = RdmaClient::connect(format!("{ip}:7474").parse().unwrap(), opts).unwrap();
    for id in [41u64, 42] {
        c.send(echo_request(id)).unwrap();
        let (rid, code) = c
            .recv(std::time::Duration::from_secs(30), |b, _| {
                let f = sluice_wire::Frame::new_checked(b).unwrap();
                (f.request_id(), f.error_body().and_then(|e| e.code()))
            })
            .unwrap();
        assert_eq!(rid, id);
        let code = code.expect("an error frame");
        assert_eq!(code, sluice_wire::ErrorCode::PeerDown);
        assert!(code.retryable());
    }
    drop(c);
    e.stop(std::time::Duration::from_millis(10));
}

fn echo_request(id: u64) -> impl FnOnce(&mut [u8]) -> usize {
    move |b: &mut [u8]| {
        let dims = [4u64];
        let data = [id as u8, 2, 3, 4];
        let t = [sluice_wire::TensorRepr {
            name: "x",
            dtype: sluice_wire::DType::U8,
            dims: &dims,
            data: Some(&data),
        }];
        sluice_wire::FrameRepr {
            request_id: id,
            model: "echo",
            model_version: "1",
            tensors: &t,
            ..sluice_wire::FrameRepr::default()
        }
        .emit(b)
        .map(|l| l.frame_len)
        .unwrap_or(usize::MAX)
    }
}

/// (request id, error code or None, first tensor's bytes or the error
/// message) of an answer.
fn answer(c: &mut RdmaClient) -> (u64, Option<sluice_wire::ErrorCode>, Vec<u8>) {
    c.recv(std::time::Duration::from_secs(30), |b, _| {
        let f = sluice_wire::Frame::new_checked(b).unwrap();
        match f.error_body() {
            Some(e) => (f.request_id(), e.code(), e.message.as_bytes().to_vec()),
            None => {
                let data = f
                    .tensors()
                    .next()
                    .map(|t| f.tensor_data(&t).to_vec())
                    .unwrap_or_default();
                (f.request_id(), None, data)
            }
        }
    })
    .unwrap()
}

/// With a device: appliance A lacks the shard's labels and forwards to
/// B over an RC connection it opened; the client gets B's answer
/// through A. A lists the connection as a peer connection with
/// counters; closing it fails nothing that is not in flight and A
/// reconnects; with B gone, requests get a retryable `peer_down` at
/// once.
#[test]
fn forwards_to_an_rdma_peer_and_relays_its_answer() {
    let Ok(ip) = std::env::var("SLUICE_RDMA_TEST_IP") else {
        return; // needs the Soft-RoCE guest (scripts/rdma-e2e.sh)
    };
    let common = "[rdma]\nconnections_max = 2\nslots_per_connection = 0\nslot_size = 2097152\n\
                  large_tx_buffers = 0\nrx_buffers = 16\ntx_buffers = 16\n";
    let b_text = format!(
        "[engine]\nworkers = [0]\ntransport = \"rdma\"\npoll = \"adaptive\"\n\
         [auth]\nmode = \"none\"\n\
         [host]\nlabels = {{ gpu = \"x\" }}\n{common}listen = \"{ip}:7476\"\n\
         [[shards]]\nname = \"far\"\nlabels = {{ gpu = \"x\" }}\n\
         [[routes]]\nname = \"echo\"\nmodel = \"echo\"\nshard = \"far\"\n\
         [[models]]\nname = \"echo\"\nversion = \"1\"\nkind = \"echo\"\n"
    );
    let a_text = format!(
        "[engine]\nworkers = [0]\ntransport = \"rdma\"\npoll = \"adaptive\"\nforward_timeout_ms = 60000\n\
         rx_burst_max = 1\n\
         [auth]\nmode = \"none\"\n\
         {common}listen = \"{ip}:7475\"\n\
         [[shards]]\nname = \"far\"\nlabels = {{ gpu = \"x\" }}\n\
         [[routes]]\nname = \"echo\"\nmodel = \"echo\"\nshard = \"far\"\n\
         [[models]]\nname = \"echo\"\nversion = \"1\"\nkind = \"echo\"\n\
         [[peers]]\nname = \"b\"\naddress = \"{ip}:7476\"\ntransport = \"rdma\"\nlabels = {{ gpu = \"x\" }}\n"
    );
    let start = |text: &str| {
        let cfg = Config::parse(text, std::path::PathBuf::new()).unwrap();
        let mut e = crate::Engine::new(
            cfg,
            crate::EngineOptions {
                no_pin: true,
                ..Default::default()
            },
        )
        .unwrap();
        e.start().unwrap();
        e
    };
    let b_addr: SocketAddr = format!("{ip}:7476").parse().unwrap();
    let mut b = start(&b_text);
    let mut a = start(&a_text);
    let peer_up = |since: Option<u64>| {
        let t = std::time::Instant::now();
        loop {
            let up = connections().into_iter().find(|s| {
                s.role == "peer" && s.state == "up" && s.peer == Some(b_addr) && Some(s.id) != since
            });
            if up.is_some() || t.elapsed() > std::time::Duration::from_secs(30) {
                return up;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    let first = peer_up(None).expect("A connects to B");
    let opts = ClientOpts {
        slots: 0,
        connect_timeout_ms: 30_000,
        ..ClientOpts::default()
    };
    let mut c = RdmaClient::connect(format!("{ip}:7475").parse().unwrap(), opts).unwrap();
    for id in [7u64, 8, 9] {
        c.send(echo_request(id)).unwrap();
        let (rid, code, data) = answer(&mut c);
        assert_eq!((rid, code), (id, None), "B's answer, relayed by A");
        assert_eq!(data, [id as u8, 2, 3, 4], "the echo model's output");
    }
    // Pipelined: B's answers land on A's completion queue together while A
    // takes one frame per burst (rx_burst_max = 1); each is relayed once.
    for id in 20..28u64 {
        c.send(echo_request(id)).unwrap();
    }
    let mut got: Vec<u64> = (0..8).map(|_| answer(&mut c).0).collect();
    got.sort_unstable();
    assert_eq!(
        got,
        (20..28).collect::<Vec<u64>>(),
        "every pipelined answer"
    );
    let listed = connections();
    let p = listed.iter().find(|s| s.id == first.id).expect("listed");
    assert_eq!((p.role, p.transport, p.worker), ("peer", "rdma", 0));
    assert!(p.tx_frames >= 3 && p.rx_frames >= 3, "{p:?}");
    // B lists A's connection as one of its clients.
    assert!(
        listed
            .iter()
            .any(|s| s.role == "client" && s.listen == b_addr && s.rx_frames >= 3),
        "{listed:?}"
    );
    // Closed from the control plane: A reconnects by itself.
    close_connection(first.id).unwrap();
    let second = peer_up(Some(first.id)).expect("A reconnects to B");
    assert_ne!(second.id, first.id);
    c.send(echo_request(10)).unwrap();
    assert_eq!(answer(&mut c).1, None, "served over the new connection");
    // B stops: A's connection is lost, requests fail at once.
    b.stop(std::time::Duration::from_millis(10));
    drop(b);
    let t = std::time::Instant::now();
    while connections()
        .iter()
        .any(|s| s.role == "peer" && s.state == "up")
        && t.elapsed() < std::time::Duration::from_secs(30)
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // forward_timeout_ms is 60 s and `answer` waits 30 s: the answer
    // comes from the lost connection, not from a timeout.
    c.send(echo_request(11)).unwrap();
    let (rid, code, message) = answer(&mut c);
    assert_eq!(rid, 11);
    let code = code.expect("an error frame");
    assert_eq!(code, sluice_wire::ErrorCode::PeerDown);
    assert!(code.retryable());
    let message = String::from_utf8_lossy(&message).into_owned();
    assert!(message.contains("no connection to the peer"), "{message}");
    drop(c);
    a.stop(std::time::Duration::from_millis(10));
}

#[test]
fn client_without_device_says_so() {
    if device_check().is_ok() {
        // The guest run covers connecting for real.
        return;
    }
    let err = RdmaClient::connect("127.0.0.1:7471".parse().unwrap(), ClientOpts::default())
        .err()
        .unwrap();
    assert!(matches!(err, ClientError::NoDevice(_)), "{err}");
    assert!(!err.retryable());
    assert!(err.to_string().contains("no RDMA device found"), "{err}");
}

#[test]
fn only_transient_client_errors_are_retryable() {
    assert!(ClientError::ConnectionLost { outstanding: 3 }.retryable());
    assert!(ClientError::Timeout.retryable());
    assert!(!ClientError::TooLarge { len: 2, max: 1 }.retryable());
    assert!(!ClientError::Refused("x".into()).retryable());
    assert!(
        ClientError::ConnectionLost { outstanding: 3 }
            .to_string()
            .contains("3 request(s) in flight failed")
    );
}

/// With a device (the Soft-RoCE guest sets SLUICE_RDMA_TEST_IP): a real
/// appliance in this process, a real client; the connection is listed
/// with counters, closed from the control side, and the client's
/// request in flight fails with a retryable connection loss.
#[test]
fn connections_are_listed_counted_and_closed() {
    let Ok(ip) = std::env::var("SLUICE_RDMA_TEST_IP") else {
        // No device here: the start-up error is what there is to test.
        assert!(
            device_check().is_err()
                || RdmaClient::connect("127.0.0.1:1".parse().unwrap(), ClientOpts::default())
                    .is_err()
        );
        return;
    };
    let text = format!(
        "[engine]\nworkers = [0]\ntransport = \"rdma\"\npoll = \"adaptive\"\n\
         [auth]\nmode = \"none\"\n\
         [rdma]\nlisten = \"{ip}:7472\"\nconnections_max = 2\nslots_per_connection = 1\nslot_size = 2097152\n\
         large_tx_buffers = 1\nrx_buffers = 32\ntx_buffers = 32\n\
         [[shards]]\nname = \"s\"\nmax_concurrency = 4\nqueue_depth = 16\n\
         [[routes]]\nname = \"echo\"\nmodel = \"echo\"\nshard = \"s\"\n\
         [[models]]\nname = \"echo\"\nversion = \"1\"\nkind = \"echo\"\n"
    );
    let cfg = Config::parse(&text, std::path::PathBuf::new()).unwrap();
    let mut e = crate::Engine::new(
        cfg,
        crate::EngineOptions {
            no_pin: true,
            ..Default::default()
        },
    )
    .unwrap();
    e.start().unwrap();
    let server: SocketAddr = format!("{ip}:7472").parse().unwrap();
    let opts = ClientOpts {
        slots: 1,
        slot_size: 2 << 20,
        connect_timeout_ms: 30_000,
        ..ClientOpts::default()
    };
    let mut c = RdmaClient::connect(server, opts).unwrap();
    let request = |buf: &mut [u8], id: u64| {
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
    };
    c.send(|b| request(b, 1)).unwrap();
    let kind = c
        .recv(std::time::Duration::from_secs(30), |b, _| {
            sluice_wire::Frame::new_checked(b).map(|f| f.kind())
        })
        .unwrap();
    assert_eq!(kind, Ok(sluice_wire::Kind::Response));
    let conn_id = c.server().conn_id;
    let list = connections();
    let mine = list
        .iter()
        .find(|s| s.id == conn_id)
        .expect("the connection is listed");
    assert_eq!(mine.state, "up");
    assert_eq!(mine.device, "rxe0");
    assert!(mine.rx_frames >= 1 && mine.tx_frames >= 1, "{mine:?}");
    assert!(mine.rx_bytes > 0 && mine.tx_bytes > 0, "{mine:?}");
    assert!(matches!(
        close_connection(u64::MAX),
        Err(RdmaError::UnknownConnection(_))
    ));
    // A request in flight when the control plane closes the connection.
    c.send(|b| request(b, 2)).ok();
    close_connection(conn_id).unwrap();
    let mut lost = None;
    for _ in 0..4 {
        match c.recv(std::time::Duration::from_secs(10), |_, _| ()) {
            Ok(()) => continue,
            Err(err) => {
                lost = Some(err);
                break;
            }
        }
    }
    let err = lost.expect("the close reached the client");
    assert!(matches!(err, ClientError::ConnectionLost { .. }), "{err}");
    assert!(err.retryable());
    let t = std::time::Instant::now();
    while connections().iter().any(|s| s.id == conn_id)
        && t.elapsed() < std::time::Duration::from_secs(20)
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        !connections().iter().any(|s| s.id == conn_id),
        "closed connections leave the list"
    );
    // Their counts stay in the worker's totals: counters only grow.
    let listen: SocketAddr = format!("{ip}:7472").parse().unwrap();
    let t = connection_totals()
        .into_iter()
        .find(|t| t.listen == listen && t.worker == 0)
        .expect("worker 0 has totals");
    assert_eq!((t.accepted, t.closed, t.open), (1, 1, 0), "{t:?}");
    assert!(
        t.rx_frames >= mine.rx_frames && t.tx_bytes >= mine.tx_bytes,
        "{t:?}"
    );
    // The slot is free again: a new client connects.
    let c2 = RdmaClient::connect(server, opts).unwrap();
    assert_ne!(c2.server().conn_id, conn_id);
    drop(c2);
    drop(c);
    e.stop(std::time::Duration::from_millis(10));
}
