//! TCP on io_uring beside UDP: the same engine, the same frames, framed by
//! the frame itself; large frames placed whole in slots.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::time::Duration;

use common::*;
use sluice_engine::Engine;
use sluice_wire::{Frame, FrameRepr, Kind};

/// The test config with TCP beside UDP: small pools, an idle timeout longer
/// than a connection sits unused while children spawn and 16 MiB requests
/// are built in a debug build.
fn tcp_config(extra: &str) -> sluice_engine::Config {
    let mut cfg = test_config(extra);
    let u = &mut cfg.io_uring;
    u.tcp_listen = "127.0.0.1:0".into();
    u.tcp_connections_max = 64;
    u.tcp_idle_timeout_ms = 30_000;
    u.tcp_slots = vec![slot(64 << 10, 32), slot(2 << 20, 4), slot(18 << 20, 1)];
    cfg.validate().unwrap();
    cfg
}

fn slot(size: u32, count: u32) -> sluice_engine::config::TcpSlotCfg {
    sluice_engine::config::TcpSlotCfg { size, count }
}

fn engine(extra: &str) -> Engine {
    let cfg = tcp_config(extra);
    started(cfg)
}

#[test]
fn ping_and_requests_over_tcp() {
    let mut e = engine("");
    let addr = e.tcp_local_addr().expect("tcp listens");
    let mut s = tcp_client(addr);
    let mut buf = vec![0u8; 4096];
    let ping = FrameRepr {
        kind: Kind::Ping,
        request_id: 9,
        ..FrameRepr::default()
    };
    let n = ping.emit(&mut buf).unwrap().frame_len;
    let a = tcp_roundtrip(&mut s, &buf[..n]);
    let f = Frame::new_checked(&a[..]).unwrap();
    assert_eq!((f.kind(), f.request_id()), (Kind::Pong, 9));
    for id in 0..50 {
        let n = build(
            &Req {
                id,
                model: "echo",
                ..Req::default()
            },
            &mut buf,
        );
        let a = tcp_roundtrip(&mut s, &buf[..n]);
        let f = Frame::new_checked(&a[..]).unwrap();
        assert_eq!(
            (f.kind(), f.request_id()),
            (Kind::Response, id),
            "{:?}",
            f.error_body()
        );
    }
    e.stop(Duration::ZERO);
}

/// A signed request to `model` with one f32 tensor of `n` elements.
fn big(id: u64, model: &str, n: usize, fill: f32) -> Vec<u8> {
    let data: Vec<f32> = (0..n).map(|i| fill + (i % 7) as f32).collect();
    let mut buf = vec![0u8; n * 4 + 4096];
    let len = build(
        &Req {
            id,
            model,
            data: &data,
            ..Req::default()
        },
        &mut buf,
    );
    buf.truncate(len);
    buf
}

fn tensor_f32(a: &[u8]) -> Vec<f32> {
    let f = Frame::new_checked(a).unwrap();
    assert_eq!(f.kind(), Kind::Response, "{:?}", f.error_body());
    let d = f.tensors().next().expect("one tensor");
    f.tensor_data(&d)
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Waits until the workers have published a state that satisfies `ok`.
fn eventually(e: &Engine, what: &str, ok: impl Fn(&Engine) -> bool) {
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while !ok(e) {
        assert!(
            std::time::Instant::now() < until,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn idle(e: &Engine) -> bool {
    let t = e.tcp_connection_totals();
    let st = e.stats();
    t.iter().all(|t| t.slots.iter().all(|s| s.in_use == 0)) && st.total(|w| w.rx_in_use) == 0
}

#[test]
fn large_frames_land_whole_and_answers_keep_request_order() {
    let mut e = engine("");
    let addr = e.tcp_local_addr().unwrap();
    let mut s = tcp_client(addr);
    // 1 MiB and 16 MiB tensors, echoed back byte for byte.
    // Bytes staged per frame: 96, or the whole header for a frame too
    // large for the smallest class.
    let staged_of = |f: &[u8]| {
        let h = Frame::new_unchecked(f).header_len() as u64;
        if f.len() > 64 << 10 { h } else { 96 }
    };
    let mut staged = 0;
    for (id, n) in [(1u64, 1 << 18), (2, 1 << 22), (3, 100)] {
        let req = big(id, "echo", n, 0.5);
        staged += staged_of(&req);
        let a = tcp_roundtrip(&mut s, &req);
        let f = Frame::new_checked(&a[..]).unwrap();
        assert_eq!(f.request_id(), id);
        let want: Vec<f32> = (0..n).map(|i| 0.5 + (i % 7) as f32).collect();
        assert_eq!(tensor_f32(&a), want, "request {id}");
    }
    // Pipelined, mixed sizes, sent back to back: answers come in order.
    use std::io::Write;
    let sizes = [4usize, 1 << 18, 16, 1 << 16, 8, 1 << 20, 4, 300];
    let mut all = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let req = big(100 + i as u64, "null", n, 1.0);
        staged += staged_of(&req);
        all.extend(req);
    }
    s.write_all(&all).unwrap();
    for (i, &n) in sizes.iter().enumerate() {
        let a = read_frame(&mut s).unwrap();
        let f = Frame::new_checked(&a[..]).unwrap();
        assert_eq!(f.request_id(), 100 + i as u64, "answers in request order");
        assert_eq!(tensor_f32(&a), vec![0.0; n]);
    }
    // The echo model copies by definition (counted); null copies nothing,
    // and neither does the transport.
    let st = e.stats();
    assert_eq!(
        st.total(|w| w.payload_bytes_copied),
        ((1u64 << 18) + (1 << 22) + 100) * 4
    );
    let t = &e.tcp_connection_totals()[0];
    assert_eq!(
        t.header_bytes_copied, staged,
        "the fixed header once per frame; the whole header of a large one, \
         whose tag was checked before it got a slot"
    );
    assert!(t.rx_large >= 4 && t.tx_large >= 4, "{t:?}");
    eventually(&e, "slots back", idle);
    e.stop(Duration::ZERO);
}

#[test]
fn many_connections_at_once() {
    let mut e = engine("");
    let addr = e.tcp_local_addr().unwrap();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                let mut conns: Vec<_> = (0..12).map(|_| tcp_client(addr)).collect();
                use std::io::Write;
                for round in 0..10u64 {
                    for (k, s) in conns.iter_mut().enumerate() {
                        let id = (t * 1000 + k as u64) * 100 + round;
                        s.write_all(&big(id, "null", 64, 0.0)).unwrap();
                    }
                    for (k, s) in conns.iter_mut().enumerate() {
                        let a = read_frame(s).unwrap();
                        let id = (t * 1000 + k as u64) * 100 + round;
                        assert_eq!(Frame::new_checked(&a[..]).unwrap().request_id(), id);
                    }
                }
                conns.len() * 10
            })
        })
        .collect();
    let n: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(n, 480);
    let t = &e.tcp_connection_totals()[0];
    assert_eq!(t.accepted, 48);
    assert!(t.sends <= t.send_frames, "{t:?}");
    eventually(&e, "connections closed", |e| {
        e.tcp_connection_totals()[0].closed == 48 && idle(e)
    });
    e.stop(Duration::ZERO);
}

#[test]
fn a_stalled_frame_closes_its_connection_after_the_idle_timeout() {
    use std::io::{Read, Write};
    let mut cfg = tcp_config("");
    cfg.io_uring.tcp_idle_timeout_ms = 300;
    let mut e = started(cfg);
    let addr = e.tcp_local_addr().unwrap();
    // Half a fixed header; a whole header and part of the body.
    let req = big(5, "null", 1 << 16, 0.0);
    let mut a = tcp_client(addr);
    a.write_all(&req[..40]).unwrap();
    let mut b = tcp_client(addr);
    b.write_all(&req[..4000]).unwrap();
    // A good client is served meanwhile.
    let mut good = tcp_client(addr);
    let started = std::time::Instant::now();
    for id in 0..20 {
        let a2 = tcp_roundtrip(&mut good, &big(id, "null", 4, 0.0));
        assert_eq!(Frame::new_checked(&a2[..]).unwrap().request_id(), id);
    }
    let mut one = [0u8; 1];
    for s in [&mut a, &mut b] {
        // The server closes: end of stream (or a reset), not a timeout.
        match s.read(&mut one) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("expected the connection closed, got {other:?}"),
        }
    }
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(250),
        "closed too early: {waited:?}"
    );
    let t = &e.tcp_connection_totals()[0];
    assert_eq!(t.idle_timeouts, 2, "{t:?}");
    eventually(&e, "slots back", idle);
    e.stop(Duration::ZERO);
}

#[test]
fn a_declared_length_over_the_limit_gets_an_error_then_the_end() {
    use std::io::{Read, Write};
    let mut cfg = tcp_config("");
    cfg.io_uring.tcp_frame_len_max = 1 << 20;
    let mut e = started(cfg);
    let addr = e.tcp_local_addr().unwrap();
    let mut s = tcp_client(addr);
    // A request answered first, then a header that declares 200 MiB.
    let ok = big(1, "null", 4, 0.0);
    let mut hdr = big(2, "null", 4, 0.0)[..96].to_vec();
    hdr[32..36].copy_from_slice(&(200u32 << 20).to_le_bytes());
    s.write_all(&ok).unwrap();
    s.write_all(&hdr).unwrap();
    // Keep sending: the server drains what follows until we close.
    s.write_all(&vec![0u8; 100_000]).unwrap();
    let a = read_frame(&mut s).unwrap();
    assert_eq!(Frame::new_checked(&a[..]).unwrap().request_id(), 1);
    let a = read_frame(&mut s).unwrap();
    let f = Frame::new_checked(&a[..]).unwrap();
    assert_eq!(f.request_id(), 2);
    assert_eq!(
        answer_kind(&a),
        (Kind::Error, Some(sluice_wire::ErrorCode::FrameTooLarge))
    );
    let mut rest = Vec::new();
    assert_eq!(
        s.read_to_end(&mut rest).unwrap(),
        0,
        "the write side is shut"
    );
    drop(s);
    // Not a frame at all: malformed, then the end.
    let mut s = tcp_client(addr);
    s.write_all(&[0x47u8; 200]).unwrap();
    let a = read_frame(&mut s).unwrap();
    assert_eq!(
        answer_kind(&a),
        (Kind::Error, Some(sluice_wire::ErrorCode::MalformedFrame))
    );
    assert_eq!(s.read_to_end(&mut rest).unwrap(), 0);
    drop(s);
    let t = &e.tcp_connection_totals()[0];
    assert_eq!((t.oversized, t.malformed), (1, 1), "{t:?}");
    eventually(&e, "connections closed", |e| {
        e.tcp_connection_totals()[0].open == 0 && idle(e)
    });
    e.stop(Duration::ZERO);
}

#[test]
fn a_half_closed_connection_gets_every_answer() {
    use std::io::{Read, Write};
    let mut e = engine("");
    let addr = e.tcp_local_addr().unwrap();
    let mut s = tcp_client(addr);
    let mut all = Vec::new();
    for id in 0..30 {
        all.extend(big(
            id,
            if id % 3 == 0 { "echo" } else { "null" },
            1 << (id % 16),
            0.0,
        ));
    }
    s.write_all(&all).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    for id in 0..30 {
        let a = read_frame(&mut s).unwrap();
        assert_eq!(Frame::new_checked(&a[..]).unwrap().request_id(), id);
    }
    let mut rest = Vec::new();
    assert_eq!(
        s.read_to_end(&mut rest).unwrap(),
        0,
        "closed once all is answered"
    );
    eventually(&e, "closed", |e| {
        e.tcp_connection_totals()[0].closed == 1 && idle(e)
    });
    e.stop(Duration::ZERO);
}

#[test]
fn full_queues_and_pools_push_back_instead_of_answering_busy() {
    use std::io::Write;
    // queue_depth 8 per burst on shard hbm2 (test config); one 2 MiB slot.
    let mut cfg = tcp_config("");
    cfg.io_uring.tcp_slots = vec![slot(64 << 10, 64), slot(2 << 20, 1)];
    let mut e = started(cfg);
    let addr = e.tcp_local_addr().unwrap();
    let mut a = tcp_client(addr);
    let mut b = tcp_client(addr);
    let mut small = Vec::new();
    for id in 0..60 {
        small.extend(big(id, "null", 4, 0.0));
    }
    // Signed frames: each connection sends its own (the same bytes twice
    // would be refused as a replay).
    let (mut la, mut large) = (Vec::new(), Vec::new());
    for id in 0..4 {
        la.extend(big(1000 + id, "null", 1 << 18, 0.0));
        large.extend(big(2000 + id, "null", 1 << 18, 0.0));
    }
    // Writers apart from readers: a client that stops reading while it
    // writes would see its own answers push back on it.
    let (mut wa, mut wb) = (a.try_clone().unwrap(), b.try_clone().unwrap());
    let ta = std::thread::spawn(move || {
        wa.write_all(&la).unwrap();
        wa.write_all(&small).unwrap();
    });
    let tb = std::thread::spawn(move || wb.write_all(&large).unwrap());
    let rb = std::thread::spawn(move || {
        for id in 2000..2004 {
            let f = read_frame(&mut b).unwrap();
            assert_eq!(answer_kind(&f), (Kind::Response, None));
            assert_eq!(Frame::new_checked(&f[..]).unwrap().request_id(), id);
        }
    });
    for id in (1000..1004).chain(0..60) {
        let f = read_frame(&mut a).unwrap();
        assert_eq!(
            answer_kind(&f),
            (Kind::Response, None),
            "request {id}: not busy"
        );
        assert_eq!(Frame::new_checked(&f[..]).unwrap().request_id(), id);
    }
    rb.join().unwrap();
    ta.join().unwrap();
    tb.join().unwrap();
    // Many connections pipelining at once: more frames for the shard in
    // one burst than its queue holds.
    let mut conns: Vec<_> = (0..16).map(|_| tcp_client(addr)).collect();
    for (i, c) in conns.iter_mut().enumerate() {
        let mut wire = Vec::new();
        for id in 0..20 {
            wire.extend(big(100 * i as u64 + id, "null", 4, 0.0));
        }
        c.write_all(&wire).unwrap();
    }
    for c in conns.iter_mut() {
        for id in 0..20 {
            let f = read_frame(c).unwrap();
            assert_eq!(
                answer_kind(&f),
                (Kind::Response, None),
                "request {id}: not busy"
            );
        }
    }
    let t = &e.tcp_connection_totals()[0];
    assert!(t.slot_waits > 0, "the 2 MiB slot ran out: {t:?}");
    assert!(t.deferred > 0, "the shard queue filled: {t:?}");
    assert_eq!(e.stats().errors(sluice_wire::ErrorCode::Busy), 0);
    // A frame held back was checked again when read again, not taken for
    // a replay of itself.
    assert_eq!(e.stats().errors(sluice_wire::ErrorCode::Replayed), 0);
    eventually(&e, "slots back", idle);
    e.stop(Duration::ZERO);
}

#[test]
fn connections_are_listed_and_closed_by_id() {
    use std::io::Read;
    let mut e = engine("");
    let addr = e.tcp_local_addr().unwrap();
    let mut s: Vec<_> = (0..3).map(|_| tcp_client(addr)).collect();
    for (i, c) in s.iter_mut().enumerate() {
        tcp_roundtrip(c, &big(i as u64, "null", 4, 0.0));
    }
    let l = e.tcp_connections();
    assert_eq!(l.len(), 3, "{l:?}");
    let mine = s[1].local_addr().unwrap();
    let c = l
        .iter()
        .find(|c| c.peer == Some(mine))
        .expect("listed by its address");
    assert_eq!(
        (c.transport, c.role, c.state, c.rx_frames, c.tx_frames),
        ("tcp", "client", "up", 1, 1)
    );
    e.close_tcp_connection(c.id).unwrap();
    let mut one = [0u8; 1];
    assert!(matches!(s[1].read(&mut one), Ok(0) | Err(_)));
    eventually(&e, "listed no more", |e| e.tcp_connections().len() == 2);
    assert!(matches!(
        e.close_tcp_connection(c.id),
        Err(sluice_engine::EngineError::NotFound(_))
    ));
    let a = tcp_roundtrip(&mut s[2], &big(9, "null", 4, 0.0));
    assert_eq!(Frame::new_checked(&a[..]).unwrap().request_id(), 9);
    e.stop(Duration::ZERO);
}

/// Run as a child process by `clients_killed_mid_frame_and_mid_answer`:
/// connects, sends what `SLUICE_TCP_CHILD` asks for, says READY and waits
/// to be killed.
#[test]
#[ignore = "a child process of another test"]
fn child_client() {
    use std::io::Write;
    let Ok(spec) = std::env::var("SLUICE_TCP_CHILD") else {
        return;
    };
    let (mode, addr) = spec.split_once('@').unwrap();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    match mode {
        "mid_header" => s.write_all(&big(1, "null", 4, 0.0)[..50]).unwrap(),
        "mid_frame" => {
            let req = big(1, "null", 1 << 22, 0.0);
            s.write_all(&req[..req.len() / 2]).unwrap();
        }
        "mid_answer" => {
            // Answered with 16 MiB it never reads.
            s.write_all(&big(1, "echo", 1 << 22, 0.0)).unwrap();
            s.write_all(&big(2, "null", 1 << 18, 0.0)).unwrap();
        }
        m => panic!("unknown child mode {m}"),
    }
    println!("READY");
    std::io::stdout().flush().unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn spawn_child(mode: &str, addr: std::net::SocketAddr) -> std::process::Child {
    use std::io::BufRead;
    let mut c = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_client", "--ignored", "--nocapture"])
        .env("SLUICE_TCP_CHILD", format!("{mode}@{addr}"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = c.stdout.take().unwrap();
    for line in std::io::BufReader::new(out).lines() {
        if line.unwrap().trim() == "READY" {
            return c;
        }
    }
    let _ = c.kill();
    let _ = c.wait();
    panic!("child {mode} ended before it was ready");
}

#[test]
fn clients_killed_mid_frame_and_mid_answer_lose_nothing_accepted() {
    use std::io::Write;
    // mid_frame holds the one 16 MiB slot until its frame deadline, then
    // mid_answer's request takes it.
    let mut cfg = tcp_config("");
    cfg.io_uring.tcp_frame_timeout_ms = 3_000;
    let mut e = started(cfg);
    let addr = e.tcp_local_addr().unwrap();
    // A good client pipelines all through.
    let mut good = tcp_client(addr);
    let mut writer = good.try_clone().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<u64>();
    let reader = std::thread::spawn(move || {
        let mut n = 0u64;
        while let Ok(id) = rx.recv() {
            let f = read_frame(&mut good).unwrap();
            assert_eq!(answer_kind(&f), (Kind::Response, None));
            assert_eq!(Frame::new_checked(&f[..]).unwrap().request_id(), id);
            n += 1;
        }
        n
    });
    let mut send = |id: u64, n: usize| {
        writer.write_all(&big(id, "null", n, 0.0)).unwrap();
        tx.send(id).unwrap();
    };
    for id in 0..10 {
        send(id, if id % 2 == 0 { 1 << 18 } else { 16 });
    }
    let mut kids = Vec::new();
    for mode in ["mid_header", "mid_frame", "mid_answer"] {
        kids.push(spawn_child(mode, addr));
        for id in 0..5 {
            send(1000 + id + 10 * kids.len() as u64, 1 << 16);
        }
    }
    // Let mid_answer's two requests be run and its 16 MiB answer start (it
    // is not read), then kill all: 25 of the good client's and those 2.
    eventually(&e, "mid_answer's requests answered", |e| {
        e.stats().total(|w| w.ok) >= 27
    });
    std::thread::sleep(Duration::from_millis(50));
    for k in &mut kids {
        k.kill().unwrap();
        k.wait().unwrap();
    }
    // The 16 MiB slot those held is free again: a 16 MiB request goes through.
    for id in 2000..2003 {
        send(id, 1 << 22);
    }
    drop(tx);
    assert_eq!(reader.join().unwrap(), 10 + 15 + 3);
    drop(writer);
    let t = e.tcp_connection_totals()[0].clone();
    assert_eq!(t.accepted, 4);
    assert!(t.partial_frames >= 2, "{t:?}");
    // The answers to the killed client were accepted requests too: they
    // were answered (and the kernel refused them), not lost in the engine.
    let st = e.stats();
    assert_eq!(st.total(|w| w.ok), 28 + 2);
    assert_eq!(st.total(|w| w.tx_no_buffers), 0);
    // Every slot and buffer is back.
    eventually(&e, "all closed and idle", |e| {
        e.tcp_connection_totals()[0].closed == 4 && idle(e)
    });
    e.stop(Duration::ZERO);
}
