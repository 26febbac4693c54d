//! After start-up, the worker's per-request path makes no heap allocation:
//! a counting global allocator counts allocations made on worker threads
//! while real io_uring traffic of every kind flows, over UDP and TCP,
//! signed, with the freshness rule and the replay table on (replays, stale
//! deadlines, negotiations, things outside a tenant's lists).
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::time::Duration;

use common::*;
use sluice_engine::{Engine, EngineOptions};
use sluice_wire::{FrameRepr, Kind};

#[global_allocator]
static GLOBAL: sluice_testkit::CountingAlloc = sluice_testkit::CountingAlloc;

fn mark_worker(_: usize) {
    sluice_testkit::watch_this_thread();
}

/// A trace context: flags, the caller's span, the trace id's low byte
/// (bytes 8.. decide head sampling).
fn trace(flags: u8, parent: [u8; 8], low: u8) -> sluice_wire::TraceContext {
    let mut trace_id = [0x5a; 16];
    trace_id[8] = low;
    sluice_wire::TraceContext {
        trace_id,
        parent_id: parent,
        flags,
    }
}

/// A signed stream frame for the null model (which keeps no streams).
fn stream_frame(i: u64, seq: u32, flags: u8, buf: &mut [u8]) -> usize {
    let h = sluice_wire::StreamHeader {
        stream_id: i + 1,
        seq,
        flags,
        ..Default::default()
    }
    .to_bytes();
    let ext = [sluice_wire::ExtRepr::stream(&h)];
    let n = FrameRepr {
        kind: Kind::Request,
        request_id: next_id(),
        tenant_id: 7,
        deadline_us: fresh_deadline(),
        model: "null",
        model_version: "1",
        extensions: &ext,
        ..FrameRepr::default()
    }
    .emit(buf)
    .unwrap()
    .frame_len;
    sluice_wire::TenantKey::new(&key_bytes())
        .sign(&mut sluice_wire::Frame::new_unchecked(&mut buf[..n]));
    n
}

/// The stream table's per-frame operations (open, step, commit, end,
/// cancel lookups, refusals, idle reclaim) allocate nothing: everything is
/// made with the table.
#[test]
fn stream_table_does_not_allocate() {
    use sluice_engine::streams::{StreamLimits, StreamTable};
    let mut t = StreamTable::new(
        StreamLimits {
            per_worker: 64,
            per_tenant: 16,
            idle_us: 1_000,
            frames_max: 1 << 20,
        },
        1024,
    );
    // This thread's own count: the worker test beside it watches others.
    let before = sluice_testkit::thread_allocs();
    for round in 0..200u64 {
        let now = round * 100;
        for id in 0..80u64 {
            // 5 tenants of 16: the per-tenant and per-worker limits refuse some.
            let tenant = (id % 5) as u32;
            if let Ok(slot) = t.open_stream(tenant, id + round * 1000, 0, now) {
                let (cur, next) = t.buffers(slot);
                next[0] = cur[0].wrapping_add(1);
                t.commit(slot, now);
                let _ = t.step(tenant, id + round * 1000, 7, now);
                if let Ok(slot) = t.step(tenant, id + round * 1000, 1, now) {
                    t.commit(slot, now);
                }
                if id % 3 == 0 {
                    t.end(slot);
                }
            }
        }
        t.reclaim_idle(now + 5_000, 64);
        let _ = t.take_counts();
    }
    let allocs = sluice_testkit::thread_allocs() - before;
    assert_eq!(allocs, 0, "allocations in 200 rounds of stream table churn");
    assert!(t.counts().reclaimed > 0 && t.counts().refused > 0);
}

fn traffic(e: &Engine, rounds: u64) {
    let addr = e.local_addr().unwrap();
    let s = client();
    let mut buf = vec![0u8; 4096];
    let mut rbuf = vec![0u8; 70_000];
    let ping = FrameRepr {
        kind: Kind::Ping,
        ..FrameRepr::default()
    };
    for i in 0..rounds {
        let reqs = [
            Req {
                id: i,
                ..Req::default()
            },
            Req {
                id: i,
                model: "echo",
                version: "1",
                ..Req::default()
            },
            Req {
                id: i,
                sign: false,
                ..Req::default()
            },
            Req {
                id: i,
                model: "nope",
                ..Req::default()
            },
            Req {
                id: i,
                version: "",
                ..Req::default()
            },
            Req {
                id: i,
                intent: "training",
                ..Req::default()
            },
            // Traced: sampled by the caller; undecided and kept by the
            // head-sampling ratio; decided against (only the flag test).
            Req {
                id: i,
                model: "echo",
                version: "1",
                trace: trace(1, [3; 8], 0x01),
                ..Req::default()
            },
            Req {
                id: i,
                trace: trace(0, [0; 8], 0x01),
                ..Req::default()
            },
            Req {
                id: i,
                trace: trace(0, [3; 8], 0x01),
                ..Req::default()
            },
        ];
        for r in &reqs {
            let n = build(r, &mut buf);
            s.send_to(&buf[..n], addr).unwrap();
            s.recv_from(&mut rbuf).expect("answered");
        }
        // Refused by authentication: a replay of the last frame, a stale
        // deadline, a model outside tenant 8's list.
        let n = build(&reqs[5], &mut buf);
        s.send_to(&buf[..n], addr).unwrap();
        s.recv_from(&mut rbuf).expect("replayed");
        let refused = [
            Req {
                id: i,
                deadline_us: 0,
                ..Req::default()
            },
            Req {
                id: i,
                tenant: 8,
                ..Req::default()
            },
        ];
        for r in &refused {
            let n = build(r, &mut buf);
            s.send_to(&buf[..n], addr).unwrap();
            s.recv_from(&mut rbuf).expect("answered");
        }
        // Stream frames to a model that keeps no streams: refused
        // (stream_unsupported) with the stream header echoed.
        for (seq, flags) in [
            (0, sluice_wire::stream_flags::OPEN),
            (1, sluice_wire::stream_flags::CONTINUE),
        ] {
            let n = stream_frame(i, seq, flags, &mut buf);
            s.send_to(&buf[..n], addr).unwrap();
            s.recv_from(&mut rbuf).expect("answered");
        }
        // Signed negotiations: answered, hidden from tenant 8, replayed.
        for (tenant, subject) in [(7, "llm-out"), (8, "llm-out")] {
            let n = build_negotiate(i, tenant, subject, true, &mut buf);
            s.send_to(&buf[..n], addr).unwrap();
            s.recv_from(&mut rbuf).expect("answered");
        }
        let n = build_negotiate(i, 7, "llm-out", true, &mut buf);
        for _ in 0..2 {
            s.send_to(&buf[..n], addr).unwrap();
            s.recv_from(&mut rbuf).expect("answered");
        }
        // Structured sections: validated, routed by content, refused.
        let sections: [(u32, &[u8]); 6] = [
            (
                21,
                br#"{"intent":"reasoning","text":"why \u00e9?","priority":2}"#,
            ),
            (21, br#"{"intent":"chat","text":"hi"}"#),
            (21, br#"{"intent":"chat"}"#),
            (22, b"\x08chat\x0a"),
            (23, b"\x0a\x04chat\x10\x05"),
            (23, b"\x08\x01"),
        ];
        for (id, section) in sections {
            let n = build_section(id, Some(section), &mut buf);
            s.send_to(&buf[..n], addr).unwrap();
            s.recv_from(&mut rbuf).expect("answered");
        }
        let n = ping.emit(&mut buf).unwrap().frame_len;
        s.send_to(&buf[..n], addr).unwrap();
        s.recv_from(&mut rbuf).expect("pong");
        s.send_to(b"not a sluice frame", addr).unwrap();
    }
}

/// TCP: small and large frames, pipelined, refused ones, a connection
/// opened and half-closed, one that sends a stream that is not frames.
fn tcp_traffic(e: &Engine, conns: &mut [std::net::TcpStream], rounds: u64) {
    use std::io::{Read, Write};
    let addr = e.tcp_local_addr().unwrap();
    let small: Vec<u8> = {
        let mut b = vec![0u8; 4096];
        let n = build(&Req::default(), &mut b);
        b.truncate(n);
        b
    };
    let data = vec![0.25f32; 1 << 18];
    let mut large = vec![0u8; (1 << 20) + 4096];
    let n = build(
        &Req {
            data: &data,
            ..Req::default()
        },
        &mut large,
    );
    large.truncate(n);
    let unknown = {
        let mut b = vec![0u8; 4096];
        let n = build(
            &Req {
                model: "nope",
                ..Req::default()
            },
            &mut b,
        );
        b.truncate(n);
        b
    };
    for _ in 0..rounds {
        for c in conns.iter_mut() {
            c.write_all(&small).unwrap();
            c.write_all(&unknown).unwrap();
            c.write_all(&small).unwrap();
        }
        for c in conns.iter_mut() {
            for _ in 0..3 {
                read_frame(c).expect("answered");
            }
        }
        tcp_roundtrip(&mut conns[0], &large);
    }
    // A new connection, half-closed after its requests.
    let mut c = tcp_client(addr);
    c.write_all(&small).unwrap();
    c.write_all(&large).unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    read_frame(&mut c).unwrap();
    read_frame(&mut c).unwrap();
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).unwrap();
    // Not frames at all: an error frame, then the end.
    let mut c = tcp_client(addr);
    c.write_all(&[0u8; 128]).unwrap();
    read_frame(&mut c).unwrap();
    c.read_to_end(&mut rest).unwrap();
}

#[test]
fn worker_hot_path_does_not_allocate() {
    let opts = EngineOptions {
        worker_init: Some(mark_worker),
        no_pin: true,
        ..Default::default()
    };
    // Tracing on, with a small ring nobody drains: recording and dropping
    // (a full ring) are both on the measured path.
    let mut cfg = test_config("[tracing]\nsample_ratio = 0.5\nring_spans = 64\n");
    cfg.io_uring.tcp_listen = "127.0.0.1:0".into();
    cfg.io_uring.tcp_connections_max = 16;
    cfg.io_uring.tcp_slots = vec![
        sluice_engine::config::TcpSlotCfg {
            size: 64 << 10,
            count: 32,
        },
        sluice_engine::config::TcpSlotCfg {
            size: 2 << 20,
            count: 2,
        },
    ];
    let mut e = Engine::new(cfg, opts).unwrap();
    e.start().unwrap();
    let mut routes = e.live().routes;
    routes.insert(
        0,
        serde_json::from_str(
            r#"{"name":"think","content":["$.intent == \"reasoning\""],"shard":"hbm2"}"#,
        )
        .unwrap(),
    );
    let doc = serde_json::json!({
        "routes": routes,
        "schemas": [
            schema(21, "llm-out", "JSON", JSON_SCHEMA),
            schema(22, "req-avro", "AVRO", AVRO_SCHEMA),
            schema(23, "req-proto", "PROTOBUF", PROTO_SCHEMA),
        ],
    });
    e.apply_json(doc.to_string().as_bytes()).unwrap();
    // Warm up: first touches of thread-locals, histogram publication, epoch loads.
    let mut conns: Vec<_> = (0..4)
        .map(|_| tcp_client(e.tcp_local_addr().unwrap()))
        .collect();
    traffic(&e, 50);
    tcp_traffic(&e, &mut conns, 20);
    std::thread::sleep(Duration::from_millis(120));
    let before = sluice_testkit::watched_allocs();
    // The counter works: start-up on the worker thread (pools, queues) allocated.
    assert!(
        before > 0,
        "the counting allocator saw the worker's start-up"
    );
    traffic(&e, 500);
    tcp_traffic(&e, &mut conns, 200);
    std::thread::sleep(Duration::from_millis(120));
    let after = sluice_testkit::watched_allocs();
    let st = e.stats();
    assert!(
        st.total(|w| w.ok) >= 1100,
        "traffic flowed: {}",
        st.total(|w| w.ok)
    );
    let t = &e.tcp_connection_totals()[0];
    assert!(
        t.rx_frames >= 2600 && t.malformed == 2,
        "tcp traffic flowed: {t:?}"
    );
    use sluice_wire::ErrorCode as C;
    for (code, n) in [
        (C::Replayed, 1000),
        (C::Stale, 500),
        (C::UnknownSubject, 500),
    ] {
        assert!(st.errors(code) >= n, "{code}: {}", st.errors(code));
    }
    assert!(st.total(|w| w.negotiations) >= 1000);
    // Two traced requests a round: 64 recorded (the ring), the rest dropped.
    assert_eq!(st.total(|w| w.spans_recorded), 64);
    assert_eq!(st.total(|w| w.spans_dropped), 2 * 550 - 64);
    assert_eq!(
        after - before,
        0,
        "worker threads allocated {} times during 12900 datagram frames and 2600 tcp requests",
        after - before
    );
    e.stop(Duration::ZERO);
}
