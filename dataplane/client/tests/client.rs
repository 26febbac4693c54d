//! The client against a real UDP responder thread on 127.0.0.1.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod responder;

use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use responder::{KEY, Responder, TENANT_ID};
use sluice_client::{
    Client, ClientConfig, ClientError, DType, Deadline, ErrorCode, PollMode, Request, SchemaType,
    TenantKey, TraceContext,
};

fn config(poll: PollMode) -> ClientConfig {
    ClientConfig {
        tenant_id: TENANT_ID,
        key: Some(KEY.to_vec()),
        timeout: Duration::from_secs(2),
        poll,
        ..ClientConfig::default()
    }
}

fn client(r: &Responder) -> Client {
    Client::connect(r.addr, config(PollMode::Block)).unwrap()
}

fn ext(resp: &sluice_client::Response, key: &str) -> Vec<u8> {
    resp.extension(key)
        .unwrap_or_else(|| panic!("no extension {key}"))
        .to_vec()
}

#[test]
fn tensors_and_headers_round_trip() {
    let r = Responder::start();
    let mut c = client(&r);
    let xs: Vec<f32> = (0..12).map(|i| i as f32 * 0.25 - 1.0).collect();
    let ids = [3i64, -7, i64::MAX, i64::MIN];
    let raw = [1u8, 0, 1];
    let trace = TraceContext {
        trace_id: [0xab; 16],
        parent_id: [0xcd; 8],
        flags: 1,
    };
    let req = Request::new("echo", "1.2.3")
        .adapter("formal")
        .intent("chat")
        .schema(42, 3)
        .token_count(99)
        .trace(trace)
        .extension("x-user", b"alice")
        .tensor_f32("input", &[3, 4], &xs)
        .tensor_i64("ids", &[4], &ids)
        .tensor_raw("mask", DType::Bool, &[1, 3], &raw);
    let before = now_us();
    let resp = c.call(&req).unwrap();
    let after = now_us();

    assert_eq!(resp.model(), "echo");
    assert_eq!(resp.model_version(), "1.2.3");
    assert_eq!(resp.adapter(), "formal");
    assert_eq!(resp.trace(), trace);
    assert_eq!(resp.token_count(), 99);
    assert_eq!(resp.schema(), (42, 3));
    assert_eq!(ext(&resp, "intent"), b"chat");
    assert_eq!(ext(&resp, "x-user"), b"alice");
    assert_eq!(ext(&resp, "tokens"), 99u32.to_le_bytes());
    assert_eq!(
        ext(&resp, "schema"),
        [42u32.to_le_bytes(), 3u32.to_le_bytes()].concat()
    );
    // Signed and without a deadline of its own: now + 2 s.
    let d = u64::from_le_bytes(ext(&resp, "deadline_us").try_into().unwrap());
    assert!((before + 2_000_000..=after + 2_000_000).contains(&d), "{d}");

    let names: Vec<&str> = resp.tensors().map(|t| t.name).collect();
    assert_eq!(names, ["input", "ids", "mask"]);
    let input = resp.tensor("input").unwrap();
    assert_eq!(input.dtype, DType::F32);
    assert_eq!(input.dims(), [3, 4]);
    assert_eq!(input.elem_count(), 12);
    assert_eq!(input.to_f32_vec().unwrap(), xs);
    assert!(matches!(input.to_i64_vec(), Err(ClientError::Malformed(_))));
    let got_ids = resp.tensor("ids").unwrap();
    assert_eq!(got_ids.to_i64_vec().unwrap(), ids);
    assert!(matches!(
        got_ids.to_f32_vec(),
        Err(ClientError::Malformed(_))
    ));
    let mask = resp.tensor("mask").unwrap();
    assert_eq!(
        (mask.dtype, mask.dims(), mask.data),
        (DType::Bool, &[1u64, 3][..], &raw[..])
    );
    assert!(resp.tensor("nope").is_none());
    assert_eq!(c.stats().sent, 1);
    assert_eq!(c.stats().received, 1);
    assert_eq!(c.outstanding(), 0);
    // The frame by value is the same buffer, moved rather than copied.
    let (bytes, at) = (
        resp.frame().as_bytes().to_vec(),
        resp.frame().as_bytes().as_ptr(),
    );
    let frame = resp.into_frame();
    assert_eq!(frame.as_bytes(), &bytes[..]);
    let buffer = frame.into_inner();
    assert_eq!(buffer.as_ptr(), at);
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// A signed client names its sender in every request, its request ids
/// growing (docs/wire.md, "Replay windows").
#[test]
fn signed_requests_name_the_client_as_their_sender() {
    let r = Responder::start();
    let sender = |resp: &sluice_client::Response| {
        u64::from_le_bytes(ext(resp, "sender_id").try_into().unwrap())
    };
    let mut c = Client::connect(r.addr, config(PollMode::Block)).unwrap();
    assert_ne!(c.sender_id(), 0);
    let a = c.call(&Request::new("echo", "1")).unwrap();
    let b = c.call(&Request::new("echo", "1")).unwrap();
    assert_eq!((sender(&a), sender(&b)), (c.sender_id(), c.sender_id()));
    assert!(b.request_id() > a.request_id());
    let other = Client::connect(r.addr, config(PollMode::Block)).unwrap();
    assert_ne!(other.sender_id(), c.sender_id(), "random per client");
}

fn deadline_of(resp: &sluice_client::Response) -> u64 {
    u64::from_le_bytes(ext(resp, "deadline_us").try_into().unwrap())
}

/// A signed frame always carries a deadline the appliance's freshness rule
/// accepts: the request's own when earlier, else now + signed_deadline;
/// negotiations and pings too (the responder refuses them as stale
/// otherwise).
#[test]
fn signed_frames_carry_a_fresh_deadline() {
    let r = Responder::start();
    for ahead in [Duration::from_secs(2), Duration::from_millis(300)] {
        let mut c = Client::connect(
            r.addr,
            ClientConfig {
                signed_deadline: ahead,
                ..config(PollMode::Block)
            },
        )
        .unwrap();
        let ahead_us = ahead.as_micros() as u64;
        for req in [
            Request::new("echo", "1"),
            Request::new("echo", "1").deadline_after(Duration::from_secs(60)),
        ] {
            let before = now_us();
            let d = deadline_of(&c.call(&req).unwrap());
            assert!(
                (before + ahead_us..=now_us() + ahead_us).contains(&d),
                "{ahead:?}: {d}"
            );
        }
        // An earlier deadline of the request's own is kept.
        let before = now_us();
        let req = Request::new("echo", "1").deadline_after(Duration::from_millis(100));
        let d = deadline_of(&c.call(&req).unwrap());
        assert!((before + 100_000..=now_us() + 100_000).contains(&d));
        c.negotiate("short", 0).unwrap();
        c.ping().unwrap();
    }
    // Encoding by hand (load generators) is fresh by default as well.
    let key = TenantKey::new(KEY);
    // A signed frame names its sender by hand with Request::sender.
    let mut buf = vec![0u8; 4096];
    let n = Request::new("echo", "1")
        .sender(77)
        .encode(&mut buf, 1, 7, Some(&key))
        .unwrap();
    let f = sluice_wire::Frame::new_checked(&buf[..n]).unwrap();
    assert_eq!(f.sender_id(), Some(77));
    assert!(key.verify(&f), "the tag covers the sender header");
    let n = Request::new("echo", "1")
        .sender(77)
        .encode(&mut buf, 1, 7, None)
        .unwrap();
    let f = sluice_wire::Frame::new_checked(&buf[..n]).unwrap();
    assert_eq!(f.sender_id(), None, "an unsigned frame names no sender");
    let mut buf = vec![0u8; 4096];
    let before = now_us();
    let n = Request::new("echo", "1")
        .encode(&mut buf, 1, 7, Some(&key))
        .unwrap();
    let f = sluice_wire::Frame::new_checked(&buf[..n]).unwrap();
    let d = f.deadline_us();
    assert!((before + 2_000_000..=now_us() + 2_000_000).contains(&d));
    let n = Request::new("echo", "1")
        .encode(&mut buf, 1, 7, None)
        .unwrap();
    let f = sluice_wire::Frame::new_checked(&buf[..n]).unwrap();
    assert_eq!(f.deadline_us(), 0, "unsigned frames keep no deadline");
}

#[test]
fn relative_deadline_is_absolute_on_the_wire() {
    let r = Responder::start();
    let mut c = client(&r);
    let before = now_us();
    let req = Request::new("echo", "1").deadline_after(Duration::from_millis(1500));
    let resp = c.call(&req).unwrap();
    let after = now_us();
    let d = deadline_of(&resp);
    assert!(
        d >= before + 1_500_000 && d <= after + 1_500_000,
        "deadline {d} not in [{before}, {after}] + 1.5 s"
    );

    let req = Request::new("echo", "1").deadline(Deadline::AtUnixUs(123_456));
    let resp = c.call(&req).unwrap();
    assert_eq!(ext(&resp, "deadline_us"), 123_456u64.to_le_bytes());
}

#[test]
fn every_error_code_maps_to_a_typed_error() {
    let r = Responder::start();
    let mut c = client(&r);
    for &code in ErrorCode::ALL {
        let v = (code as u16).to_le_bytes();
        let req = Request::new("error", "1").extension("code", &v);
        match c.call(&req) {
            Err(ClientError::Server {
                code: got,
                message,
                retryable,
            }) => {
                assert_eq!(got, code);
                assert_eq!(retryable, code.retryable(), "{code}");
                assert_eq!(message, format!("forced {}", code.as_str()));
            }
            other => panic!("{code}: expected a server error, got {other:?}"),
        }
    }
    // A code from a newer server.
    let v = 999u16.to_le_bytes();
    match c.call(&Request::new("error", "1").extension("code", &v)) {
        Err(ClientError::ServerUnknownCode {
            code_raw: 999,
            message,
        }) => assert_eq!(message, "from the future"),
        other => panic!("expected an unknown code, got {other:?}"),
    }
    assert_eq!(c.stats().retries, 0);
}

#[test]
fn retryable_errors_are_retried_only_when_asked() {
    let r = Responder::start();
    let busy2 = [2u8];
    let req = Request::new("busy-once", "1").extension("busy", &busy2);

    // The responder answers Busy twice, then succeeds, and starts over.
    let mut c = client(&r);
    let e = c.call(&req).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Busy));
    assert!(e.retryable());
    assert_eq!(c.call(&req).unwrap_err().code(), Some(ErrorCode::Busy));
    assert_eq!(c.call(&req).unwrap().model(), "busy-once");
    assert_eq!(c.stats().retries, 0);

    let mut c = Client::connect(
        r.addr,
        ClientConfig {
            retries_max: 1,
            ..config(PollMode::Block)
        },
    )
    .unwrap();
    assert_eq!(c.call(&req).unwrap_err().code(), Some(ErrorCode::Busy));
    assert_eq!(c.stats().retries, 1);
    assert_eq!(c.stats().sent, 2);
    assert_eq!(c.call(&req).unwrap().model(), "busy-once");
    assert_eq!(c.stats().retries, 1);

    let mut c = Client::connect(
        r.addr,
        ClientConfig {
            retries_max: 5,
            ..config(PollMode::Block)
        },
    )
    .unwrap();
    let resp = c.call(&req).unwrap();
    assert_eq!(resp.model(), "busy-once");
    assert_eq!(c.stats().retries, 2);

    // Not retryable: sent once.
    let v = (ErrorCode::UnknownModel as u16).to_le_bytes();
    let before = c.stats().sent;
    let e = c
        .call(&Request::new("error", "1").extension("code", &v))
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::UnknownModel));
    assert_eq!(c.stats().sent, before + 1);
}

#[test]
fn signing_is_checked_by_the_server() {
    let r = Responder::start();
    let unsigned = ClientConfig {
        key: None,
        ..config(PollMode::Block)
    };
    let mut c = Client::connect(r.addr, unsigned).unwrap();
    assert_eq!(
        c.call(&Request::new("echo", "1")).unwrap_err().code(),
        Some(ErrorCode::Unauthenticated)
    );

    let wrong = ClientConfig {
        key: Some(b"wrong key".to_vec()),
        ..config(PollMode::Block)
    };
    let mut c = Client::connect(r.addr, wrong).unwrap();
    assert_eq!(
        c.call(&Request::new("echo", "1")).unwrap_err().code(),
        Some(ErrorCode::Unauthenticated)
    );

    // A per-request tenant overrides the client's.
    let key = sluice_client::TenantKey::new(KEY);
    let resp = c
        .call(&Request::new("echo", "1").tenant(TENANT_ID, Some(&key)))
        .unwrap();
    assert_eq!(resp.model(), "echo");
}

#[test]
fn timeout_then_late_answer_is_counted_stale() {
    let r = Responder::start();
    let cfg = ClientConfig {
        timeout: Duration::from_millis(50),
        ..config(PollMode::Block)
    };
    let mut c = Client::connect(r.addr, cfg).unwrap();
    assert!(matches!(
        c.call(&Request::new("late", "1")),
        Err(ClientError::Timeout)
    ));
    assert_eq!(c.stats().timeouts, 1);
    assert_eq!(c.outstanding(), 0);
    // The responder now answers the timed-out id first, then this one.
    c.set_timeout(Duration::from_secs(2));
    let resp = c.call(&Request::new("echo", "1")).unwrap();
    assert_eq!(resp.model(), "echo");
    assert_eq!(c.stats().stale, 1);
    assert_eq!(c.stats().received, 1);
}

#[test]
fn foreign_ids_and_garbage_are_ignored() {
    let r = Responder::start();
    for poll in [PollMode::Block, PollMode::Spin] {
        let mut c = Client::connect(r.addr, config(poll)).unwrap();
        let resp = c.call(&Request::new("noise", "1")).unwrap();
        assert_eq!(resp.model(), "noise");
        let s = c.stats();
        assert_eq!((s.stale, s.malformed, s.received), (1, 1, 1), "{poll:?}");
    }
}

#[test]
fn forged_answers_are_dropped() {
    let r = Responder::start();
    let mut c = client(&r);
    // A response signed with another key arrives first; the genuine one next.
    let resp = c.call(&Request::new("forged", "1")).unwrap();
    assert_eq!(resp.model(), "forged");
    assert_eq!(c.stats().bad_tag, 1);
    assert_eq!(c.stats().received, 1);
}

#[test]
fn wrong_frame_kind_is_malformed() {
    let r = Responder::start();
    let mut c = client(&r);
    assert!(matches!(
        c.call(&Request::new("wrongkind", "1")),
        Err(ClientError::Malformed(_))
    ));
}

#[test]
fn pipelined_answers_out_of_order_are_matched() {
    let r = Responder::start();
    for poll in [PollMode::Block, PollMode::Spin] {
        let mut c = Client::connect(r.addr, config(poll)).unwrap();
        const N: usize = 16;
        let n = [N as u8];
        let values: Vec<[f32; 2]> = (0..N).map(|i| [i as f32, -(i as f32)]).collect();
        let reqs: Vec<Request<'_>> = values
            .iter()
            .map(|v| {
                Request::new("reverse", "1")
                    .extension("n", &n)
                    .tensor_f32("x", &[2], v)
            })
            .collect();
        let mut sent = Vec::new();
        for req in &reqs {
            sent.push(c.send(req).unwrap());
        }
        assert_eq!(c.outstanding(), N);
        assert_eq!(
            sent.iter().collect::<HashSet<_>>().len(),
            N,
            "ids are unique"
        );
        let mut seen = Vec::new();
        for _ in 0..N {
            let (id, res) = c.recv().unwrap();
            let resp = res.unwrap();
            assert_eq!(resp.request_id(), id);
            let i = sent.iter().position(|&s| s == id).expect("an id we sent");
            assert_eq!(resp.tensor("x").unwrap().to_f32_vec().unwrap(), values[i]);
            seen.push(i);
        }
        // The responder answers newest first.
        assert_eq!(seen, (0..N).rev().collect::<Vec<_>>(), "{poll:?}");
        assert_eq!(c.outstanding(), 0);
        assert!(matches!(c.recv(), Err(ClientError::NothingPending)));
        assert!(c.try_recv().unwrap().is_none());
    }
}

#[test]
fn pipelined_timeouts_come_back_per_request() {
    let r = Responder::start();
    let cfg = ClientConfig {
        timeout: Duration::from_millis(50),
        ..config(PollMode::Spin)
    };
    let mut c = Client::connect(r.addr, cfg).unwrap();
    // Sent first but with the longer timeout: expiries are not in send order.
    c.set_timeout(Duration::from_secs(5));
    let echo_first = c.send(&Request::new("echo", "1")).unwrap();
    c.set_timeout(Duration::from_millis(50));
    let silent = c.send(&Request::new("silent", "1")).unwrap();
    c.set_timeout(Duration::from_secs(5));
    let echo = c.send(&Request::new("echo", "1")).unwrap();
    let mut got = Vec::new();
    while c.outstanding() > 0 {
        let (id, res) = c.recv().unwrap();
        got.push((id, res.is_ok()));
    }
    got.sort();
    let mut want = vec![(echo_first, true), (silent, false), (echo, true)];
    want.sort();
    assert_eq!(got, want);
    assert_eq!(c.stats().timeouts, 1);
}

#[test]
fn a_sync_call_parks_pipelined_answers() {
    let r = Responder::start();
    let mut c = client(&r);
    let first = c.send(&Request::new("echo", "1")).unwrap();
    // The answer to `first` arrives while `call` waits for its own.
    c.ping().unwrap();
    let (id, res) = c.recv().unwrap();
    assert_eq!(id, first);
    assert_eq!(res.unwrap().model(), "echo");
}

#[test]
fn negotiation_is_cached_for_its_ttl() {
    let r = Responder::start();
    let mut c = client(&r);
    let t0 = Instant::now();
    let a = c.negotiate_at("short", 2, t0).unwrap();
    assert_eq!(a.schema_id, 101);
    assert_eq!(a.version, 2);
    assert_eq!(a.ttl, Duration::from_millis(1000));
    assert_eq!(a.schema_type, SchemaType::Json);
    assert_eq!(a.bytes, br#"{"subject":"short","hint":2}"#);

    // Within the ttl: served from the cache.
    let b = c
        .negotiate_at("short", 2, t0 + Duration::from_millis(999))
        .unwrap();
    assert_eq!(b, a);
    assert_eq!(r.negotiations.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(c.stats().schema_cache_hits, 1);

    // Another hint is another cache entry.
    let other = c.negotiate_at("short", 0, t0).unwrap();
    assert_eq!((other.schema_id, other.version), (102, 1));

    // After the ttl: renegotiated.
    let d = c
        .negotiate_at("short", 2, t0 + Duration::from_millis(1000))
        .unwrap();
    assert_eq!(d.schema_id, 103);
    assert_eq!(r.negotiations.load(std::sync::atomic::Ordering::Relaxed), 3);

    // ttl 0 is never cached.
    let e1 = c.negotiate_at("nocache", 1, t0).unwrap();
    let e2 = c.negotiate_at("nocache", 1, t0).unwrap();
    assert_ne!(e1.schema_id, e2.schema_id);

    // Clearing the cache forces a renegotiation of a long-lived entry.
    let l1 = c.negotiate("long", 1).unwrap();
    assert_eq!(c.negotiate("long", 1).unwrap(), l1);
    c.clear_schema_cache();
    assert_ne!(c.negotiate("long", 1).unwrap().schema_id, l1.schema_id);

    match c.negotiate("missing", 0) {
        Err(ClientError::Server {
            code: ErrorCode::UnknownSubject,
            ..
        }) => {}
        other => panic!("expected UnknownSubject, got {other:?}"),
    }
}

#[test]
fn ping_answers() {
    let r = Responder::start();
    let mut c = Client::connect(r.addr, config(PollMode::Spin)).unwrap();
    c.ping().unwrap();
    assert_eq!(c.stats().received, 1);
}

#[test]
fn invalid_requests_fail_before_sending() {
    let r = Responder::start();
    let mut c = client(&r);
    let xs = [0f32; 3];
    let e = c
        .send(&Request::new("echo", "1").tensor_f32("x", &[2, 2], &xs))
        .unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::InvalidRequest(sluice_wire::Error::BadTensorLen)
        ),
        "{e:?}"
    );

    let big = vec![0f32; 20_000];
    let e = c
        .send(&Request::new("echo", "1").tensor_f32("x", &[20_000], &big))
        .unwrap_err();
    assert!(
        matches!(e, ClientError::InvalidRequest(sluice_wire::Error::TooLarge)),
        "{e:?}"
    );

    let e = c
        .send(&Request::new("echo", "1").tensor_f32("x", &[1; 9], &xs[..1]))
        .unwrap_err();
    assert!(
        matches!(e, ClientError::InvalidRequest(sluice_wire::Error::BadRank)),
        "{e:?}"
    );

    let long = "m".repeat(65);
    let e = c.send(&Request::new(&long, "1")).unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::InvalidRequest(sluice_wire::Error::FieldTooLong)
        ),
        "{e:?}"
    );

    let e = c.send(&Request::new("has space", "1")).unwrap_err();
    assert!(
        matches!(
            e,
            ClientError::InvalidRequest(sluice_wire::Error::BadString)
        ),
        "{e:?}"
    );

    let mut req = Request::new("echo", "1");
    for _ in 0..17 {
        req = req.extension("k", b"v");
    }
    assert!(matches!(
        c.send(&req),
        Err(ClientError::InvalidRequest(
            sluice_wire::Error::TooManyExtensions
        ))
    ));
    assert_eq!(c.stats().sent, 0);
    assert_eq!(c.outstanding(), 0);

    // The largest frame that fits one datagram still goes through.
    let fits = vec![1f32; 16_000];
    let resp = c
        .call(&Request::new("echo", "1").tensor_f32("x", &[16_000], &fits))
        .unwrap();
    assert_eq!(resp.tensor("x").unwrap().to_f32_vec().unwrap(), fits);
}

#[test]
fn nothing_listening_is_an_io_error() {
    // Bind and drop to find a port with no listener.
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut c = Client::connect(("127.0.0.1", port), config(PollMode::Block)).unwrap();
    match c.call(&Request::new("echo", "1")) {
        Err(ClientError::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused),
        other => panic!("expected connection refused, got {other:?}"),
    }
    // The failed call leaves nothing behind.
    assert_eq!(c.outstanding(), 0);
}

#[test]
fn recv_timeout_gives_up_without_losing_the_request() {
    let r = Responder::start();
    for poll in [PollMode::Block, PollMode::Spin] {
        let mut c = Client::connect(r.addr, config(poll)).unwrap();
        assert!(
            c.recv_timeout(Duration::from_millis(5)).unwrap().is_none(),
            "nothing outstanding"
        );
        let id = c.send(&Request::new("silent", "1")).unwrap();
        assert!(c.recv_timeout(Duration::from_millis(20)).unwrap().is_none());
        assert_eq!(c.outstanding(), 1, "still waiting for {id}");
        let echo = c.send(&Request::new("echo", "1")).unwrap();
        let (got, res) = loop {
            if let Some(a) = c.recv_timeout(Duration::from_millis(100)).unwrap() {
                break a;
            }
        };
        assert_eq!(got, echo);
        assert!(res.is_ok());
        assert_eq!(c.outstanding(), 1);
    }
}

#[test]
fn debug_output_hides_the_key() {
    let cfg = config(PollMode::Block);
    let text = format!("{cfg:?}");
    assert!(
        text.contains("redacted") && text.contains("tenant_id: 7"),
        "{text}"
    );
    assert!(
        !text.contains(&format!("{:?}", KEY.to_vec())) && !text.contains("116, 101, 115, 116"),
        "{text}"
    );
}

#[test]
fn outstanding_requests_are_bounded() {
    let r = Responder::start();
    let cfg = ClientConfig {
        outstanding_max: 2,
        timeout: Duration::from_millis(30),
        ..config(PollMode::Block)
    };
    let mut c = Client::connect(r.addr, cfg).unwrap();
    let silent = Request::new("silent", "1");
    c.send(&silent).unwrap();
    c.send(&silent).unwrap();
    assert!(matches!(
        c.send(&silent),
        Err(ClientError::TooManyOutstanding)
    ));
    assert!(matches!(c.ping(), Err(ClientError::TooManyOutstanding)));
    assert_eq!(c.stats().sent, 2);
    // Timeouts free the slots.
    assert!(matches!(c.recv().unwrap().1, Err(ClientError::Timeout)));
    assert!(matches!(c.recv().unwrap().1, Err(ClientError::Timeout)));
    c.set_timeout(Duration::from_secs(2));
    assert_eq!(c.call(&Request::new("echo", "1")).unwrap().model(), "echo");
}

#[test]
fn schema_cache_is_bounded() {
    let r = Responder::start();
    let cfg = ClientConfig {
        schema_cache_max: 1,
        ..config(PollMode::Block)
    };
    let mut c = Client::connect(r.addr, cfg).unwrap();
    let t0 = Instant::now();
    let count = || r.negotiations.load(std::sync::atomic::Ordering::Relaxed);
    c.negotiate_at("long", 1, t0).unwrap();
    c.negotiate_at("long", 1, t0).unwrap();
    assert_eq!(count(), 1, "cached");
    // The cache is full of a live entry: hint 2 is answered, not cached.
    c.negotiate_at("long", 2, t0).unwrap();
    c.negotiate_at("long", 2, t0).unwrap();
    assert_eq!(count(), 3);
    c.negotiate_at("long", 1, t0).unwrap();
    assert_eq!(count(), 3, "hint 1 stayed cached");
    // Once hint 1 has expired, hint 2 takes its place.
    let later = t0 + Duration::from_secs(7200);
    c.negotiate_at("long", 2, later).unwrap();
    c.negotiate_at("long", 2, later).unwrap();
    assert_eq!(count(), 4);
}

#[test]
fn client_and_answers_can_move_between_threads() {
    fn send<T: Send>() {}
    send::<Client>();
    send::<sluice_client::Response>();
    send::<ClientError>();
    let r = Responder::start();
    let mut c = client(&r);
    let h = std::thread::spawn(move || {
        c.call(&Request::new("echo", "1"))
            .map(|resp| resp.request_id())
    });
    assert!(h.join().unwrap().is_ok());
}
