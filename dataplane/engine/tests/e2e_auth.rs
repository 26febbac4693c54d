//! Authentication on the real io_uring transport (docs/wire.md,
//! "Authentication"): negotiations need a tag and see only the tenant's
//! subjects; outside a tenant's lists is answered as not existing; the
//! freshness rule and the replay table; pings stay unchecked; and
//! `auth.mode = "none"`.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use common::*;
use sluice_engine::config::Config;
use sluice_engine::{Engine, StatsSnapshot};
use sluice_wire::{ErrorCode, Frame, FrameRepr, Kind, TenantKey, flags};

fn start_cfg(cfg: Config) -> Engine {
    started(cfg)
}

/// The common test config plus a tenant 10 allowed the `echo` model and
/// the `echo-*` subjects only, and the schemas of two subjects.
fn start(extra: &str) -> Engine {
    let e = start_cfg(test_config(&format!(
        r#"
[[tenants]]
name = "echo-only"
id = 10
key = "hex:{KEY_HEX}"
models = ["echo"]
subjects = ["echo-*"]
{extra}"#
    )));
    e.set_schemas(
        vec![
            schema(31, "null-input", "JSON", r#"{"type":"object"}"#),
            schema(32, "echo-input", "JSON", r#"{"type":"object"}"#),
        ],
        60_000,
    )
    .unwrap();
    e
}

/// Sends `frame` and returns (kind, error code, error message).
fn ask(s: &UdpSocket, to: SocketAddr, frame: &[u8]) -> (Kind, Option<ErrorCode>, String) {
    let a = roundtrip(s, to, frame);
    let f = Frame::new_checked(&a[..]).unwrap();
    let body = f.error_body();
    (
        f.kind(),
        body.and_then(|b| b.code()),
        body.map(|b| b.message.to_string()).unwrap_or_default(),
    )
}

/// Waits for the workers to publish, then reads the stats.
fn stats(e: &Engine) -> StatsSnapshot {
    std::thread::sleep(Duration::from_millis(120));
    e.stats()
}

fn refusals(st: &StatsSnapshot, cause: &str) -> u64 {
    st.workers
        .iter()
        .flat_map(|w| w.refusals.iter())
        .filter(|(n, _)| n == cause)
        .map(|(_, v)| *v)
        .sum()
}

fn negotiate_frame(tenant: u32, subject: &str, key: Option<&[u8]>, buf: &mut [u8]) -> usize {
    let n = build_negotiate(next_id(), tenant, subject, false, buf);
    if let Some(k) = key {
        TenantKey::new(k).sign(&mut Frame::new_unchecked(&mut buf[..n]));
    }
    n
}

#[test]
fn negotiation_needs_a_valid_tag_and_sees_only_the_tenants_subjects() {
    let e = start("");
    let addr = e.local_addr().unwrap();
    let s = client();
    let mut buf = vec![0u8; 1024];
    let key = key_bytes();
    let refused = |code| (Kind::Error, Some(code));

    // Without tenants' tags nothing is revealed: unsigned, wrong key,
    // unknown tenant.
    let cases: [(u32, Option<&[u8]>, &str); 3] = [
        (7, None, "unsigned"),
        (7, Some(b"not the key at all, 32 bytes...."), "bad_tag"),
        (99, Some(&key), "unknown_tenant"),
    ];
    for (tenant, k, cause) in cases {
        let n = negotiate_frame(tenant, "null-input", k, &mut buf);
        let (kind, code, msg) = ask(&s, addr, &buf[..n]);
        assert_eq!((kind, code), refused(ErrorCode::Unauthenticated), "{cause}");
        assert_eq!(msg, "authentication failed", "{cause}: one message for all");
    }
    // The tag covers the subject: a signed frame whose subject was changed
    // after signing does not verify.
    let n = negotiate_frame(7, "null-input", Some(&key), &mut buf);
    buf[n - 1] ^= 0x01; // "null-inpuu"
    let (kind, code, _) = ask(&s, addr, &buf[..n]);
    assert_eq!((kind, code), refused(ErrorCode::Unauthenticated));

    // A tenant allowed echo-* sees echo-input; null-input exists but is not
    // its, and gets exactly the answer of a subject that does not exist.
    let n = negotiate_frame(10, "echo-input", Some(&key), &mut buf);
    let a = roundtrip(&s, addr, &buf[..n]);
    let f = Frame::new_checked(&a[..]).unwrap();
    assert_eq!(f.negotiate_response().map(|n| n.schema_id), Some(32));
    let n = negotiate_frame(10, "null-input", Some(&key), &mut buf);
    let hidden = ask(&s, addr, &buf[..n]);
    let n = negotiate_frame(10, "echo-nothing", Some(&key), &mut buf);
    let missing = ask(&s, addr, &buf[..n]);
    assert_eq!(hidden.1, Some(ErrorCode::UnknownSubject));
    assert_eq!(hidden, missing, "not yours and does not exist answer alike");
    // Tenant 7 (subjects default to "*") sees null-input.
    let n = negotiate_frame(7, "null-input", Some(&key), &mut buf);
    let a = roundtrip(&s, addr, &buf[..n]);
    assert_eq!(answer_kind(&a), (Kind::NegotiateResponse, None));

    // Every refusal is an error frame counted by code; the operator also
    // sees why.
    let st = stats(&e);
    assert_eq!(st.errors(ErrorCode::Unauthenticated), 4);
    assert_eq!(st.errors(ErrorCode::UnknownSubject), 2);
    assert_eq!(st.total(|w| w.negotiations), 2, "answers only");
    for (cause, n) in [
        ("unsigned", 1),
        ("bad_tag", 2),
        ("unknown_tenant", 1),
        ("tenant_subject", 1),
    ] {
        assert_eq!(refusals(&st, cause), n, "{cause}");
    }
}

#[test]
fn outside_the_tenants_lists_is_answered_as_not_existing() {
    // Tenant 11 may use the "echo" route only; tenant 12 the null model
    // through a second route "null-b" listed after the first, and the
    // echo-* subjects only.
    let e = start(&format!(
        r#"
[[tenants]]
name = "routes-echo"
id = 11
key = "hex:{KEY_HEX}"
routes = ["echo"]

[[tenants]]
name = "routes-b"
id = 12
key = "hex:{KEY_HEX}"
routes = ["null-b"]
subjects = ["echo-*"]

[[routes]]
name = "null-b"
model = "null"
shard = "hbm2"
"#
    ));
    let addr = e.local_addr().unwrap();
    let s = client();
    let mut buf = vec![0u8; 4096];
    let mut send = |r: Req<'_>| {
        let n = build(&Req { id: next_id(), ..r }, &mut buf);
        ask(&s, addr, &buf[..n])
    };
    // Models: "null" exists but is not tenant 10's; "ghost" exists for
    // nobody. Same code, same message.
    let hidden = send(Req {
        tenant: 10,
        ..Req::default()
    });
    let missing = send(Req {
        tenant: 10,
        model: "ghost",
        ..Req::default()
    });
    assert_eq!(hidden.1, Some(ErrorCode::UnknownModel));
    assert_eq!(hidden, missing);
    // Adapters: "formal" exists for null but tenant 8 may use none.
    let hidden = send(Req {
        tenant: 8,
        model: "echo",
        adapter: "formal",
        ..Req::default()
    });
    let missing = send(Req {
        tenant: 8,
        model: "echo",
        adapter: "casual",
        ..Req::default()
    });
    assert_eq!(hidden.1, Some(ErrorCode::UnknownAdapter));
    assert_eq!(hidden.2, missing.2);
    // Routes: only "null" (not tenant 11's) takes null 1 → answered as if
    // no route matched; a later route the tenant may use takes it.
    let hidden = send(Req {
        tenant: 11,
        ..Req::default()
    });
    assert_eq!(hidden.1, Some(ErrorCode::NoRoute));
    assert_eq!(hidden.2, "no route matches the request");
    let served = send(Req {
        tenant: 12,
        ..Req::default()
    });
    assert_eq!((served.0, served.1), (Kind::Response, None));
    // Schemas: a request naming schema 31 (subject null-input, not tenant
    // 12's) gets the answer of an unknown schema id.
    let hidden_schema = {
        let n = build_section(31, Some(b"{}"), &mut buf);
        let mut f = Frame::new_unchecked(&mut buf[..n]);
        f.set_tenant_id(12);
        TenantKey::new(&key_bytes()).sign(&mut f);
        ask(&s, addr, &buf[..n])
    };
    let missing_schema = {
        let n = build_section(999, Some(b"{}"), &mut buf);
        let mut f = Frame::new_unchecked(&mut buf[..n]);
        f.set_tenant_id(12);
        TenantKey::new(&key_bytes()).sign(&mut f);
        ask(&s, addr, &buf[..n])
    };
    assert_eq!(hidden_schema.1, Some(ErrorCode::UnknownSchema));
    assert_eq!(hidden_schema, missing_schema);
    // The operator sees what the tenant cannot.
    let st = stats(&e);
    for (cause, n) in [
        ("tenant_model", 2),
        ("tenant_adapter", 2),
        ("tenant_route", 1),
        ("tenant_schema", 1),
    ] {
        assert_eq!(refusals(&st, cause), n, "{cause}");
    }
    assert_eq!(
        st.errors(ErrorCode::Forbidden),
        0,
        "forbidden is never sent"
    );
}

#[test]
fn a_replayed_frame_is_refused_and_a_fresh_one_accepted() {
    let e = start("");
    let addr = e.local_addr().unwrap();
    let (s, other) = (client(), client());
    let mut buf = vec![0u8; 4096];
    let n = build(&Req::default(), &mut buf);
    let frame = buf[..n].to_vec();
    assert_eq!(ask(&s, addr, &frame).0, Kind::Response);
    // The same bytes again, from the same and from another socket.
    let (kind, code, msg) = ask(&s, addr, &frame);
    assert_eq!((kind, code), (Kind::Error, Some(ErrorCode::Replayed)));
    assert_eq!(msg, "frame already accepted (replay)");
    assert_eq!(ask(&other, addr, &frame).1, Some(ErrorCode::Replayed));
    // With FORWARDED set (outside the tag) it is the same frame.
    let mut fwd = frame.clone();
    let mut f = Frame::new_unchecked(&mut fwd[..]);
    f.set_flags(f.flags() | flags::FORWARDED);
    assert_eq!(ask(&s, addr, &fwd).1, Some(ErrorCode::Replayed));
    // With other tensor data (not covered by the tag) too.
    let mut data = frame.clone();
    *data.last_mut().unwrap() ^= 0x40;
    assert_eq!(ask(&s, addr, &data).1, Some(ErrorCode::Replayed));
    // A new request id is a new frame: a client's retry is accepted.
    let n = build(
        &Req {
            id: 2,
            ..Req::default()
        },
        &mut buf,
    );
    assert_eq!(ask(&s, addr, &buf[..n]).0, Kind::Response);
    // Negotiations are replay-checked too.
    let n = build_negotiate(next_id(), 7, "null-input", true, &mut buf);
    let neg = buf[..n].to_vec();
    assert_eq!(
        answer_kind(&roundtrip(&s, addr, &neg)),
        (Kind::NegotiateResponse, None)
    );
    assert_eq!(ask(&s, addr, &neg).1, Some(ErrorCode::Replayed));
    let st = stats(&e);
    assert_eq!(st.errors(ErrorCode::Replayed), 5);
    assert_eq!(refusals(&st, "replayed"), 5);
    assert_eq!(st.total(|w| w.ok), 2);
}

#[test]
fn the_freshness_rule_refuses_stale_deadlines() {
    let e = start("");
    let addr = e.local_addr().unwrap();
    let s = client();
    let mut buf = vec![0u8; 4096];
    let now = now_us();
    let window = 10_000_000; // the default auth.freshness_window_ms
    let cases: [(u64, Option<ErrorCode>, &str); 5] = [
        (0, Some(ErrorCode::Stale), "no_deadline"),
        (
            now + window + 5_000_000,
            Some(ErrorCode::Stale),
            "far_deadline",
        ),
        (now - 1_000, Some(ErrorCode::DeadlineExceeded), "expired"),
        (now + window - 1_000_000, None, ""),
        (now + 500_000, None, ""),
    ];
    for (i, (deadline_us, want, _)) in cases.iter().enumerate() {
        let n = build(
            &Req {
                id: 700 + i as u64,
                deadline_us: *deadline_us,
                ..Req::default()
            },
            &mut buf,
        );
        let (kind, code, _) = ask(&s, addr, &buf[..n]);
        match want {
            Some(c) => assert_eq!(code, Some(*c), "case {i}"),
            None => assert_eq!(kind, Kind::Response, "case {i}: {code:?}"),
        }
    }
    // After a stale answer the client fixes the deadline and resends the
    // same request id: a new tag, accepted.
    let n = build(
        &Req {
            id: 700,
            ..Req::default()
        },
        &mut buf,
    );
    assert_eq!(ask(&s, addr, &buf[..n]).0, Kind::Response);
    let st = stats(&e);
    assert_eq!(st.errors(ErrorCode::Stale), 2);
    for (_, _, cause) in cases.iter().take(3) {
        assert_eq!(refusals(&st, cause), 1, "{cause}");
    }
}

#[test]
fn a_full_replay_table_answers_busy_and_frees_room_at_the_deadlines() {
    // One bucket: exactly 8 live tags fit.
    let e = start("[auth]\nreplay_entries = 8\n");
    let addr = e.local_addr().unwrap();
    let s = client();
    let mut buf = vec![0u8; 4096];
    let deadline = now_us() + 600_000;
    for id in 0..8 {
        let n = build(
            &Req {
                id: 800 + id,
                deadline_us: deadline,
                ..Req::default()
            },
            &mut buf,
        );
        assert_eq!(ask(&s, addr, &buf[..n]).0, Kind::Response, "tag {id}");
    }
    let n = build(
        &Req {
            id: 900,
            ..Req::default()
        },
        &mut buf,
    );
    let full = buf[..n].to_vec();
    let (_, code, msg) = ask(&s, addr, &full);
    assert_eq!(code, Some(ErrorCode::Busy));
    assert!(code.unwrap().retryable());
    assert_eq!(msg, "replay table full");
    // A replay is still recognized while the table is full.
    let n = build(
        &Req {
            id: 800,
            deadline_us: deadline,
            ..Req::default()
        },
        &mut buf,
    );
    assert_eq!(ask(&s, addr, &buf[..n]).1, Some(ErrorCode::Replayed));
    // The refused frame was not remembered: after the first eight expire,
    // the very same bytes are accepted.
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(ask(&s, addr, &full).0, Kind::Response);
    let st = stats(&e);
    assert_eq!(refusals(&st, "replay_table_full"), 1);
    assert_eq!(st.errors(ErrorCode::Busy), 1);
}

#[test]
fn pings_are_never_checked_and_reveal_nothing() {
    let e = start("");
    let addr = e.local_addr().unwrap();
    let s = client();
    let mut buf = vec![0u8; 256];
    let mut pongs = Vec::new();
    for (tenant, key) in [
        (7u32, Some(key_bytes())),
        (7, Some(b"wrong key, wrong key, wrong key!".to_vec())),
        (99, None),
    ] {
        let n = FrameRepr {
            kind: Kind::Ping,
            request_id: 4,
            tenant_id: tenant,
            ..FrameRepr::default()
        }
        .emit(&mut buf)
        .unwrap()
        .frame_len;
        if let Some(k) = key {
            TenantKey::new(&k).sign(&mut Frame::new_unchecked(&mut buf[..n]));
        }
        let a = roundtrip(&s, addr, &buf[..n]);
        assert_eq!(answer_kind(&a), (Kind::Pong, None));
        assert_eq!(a.len(), n, "a pong is as long as its ping");
        let mut a = a;
        a[12..16].fill(0); // the echoed tenant id
        pongs.push(a);
    }
    assert!(pongs.windows(2).all(|w| w[0] == w[1]), "identical pongs");
    assert_eq!(stats(&e).total(|w| w.pings), 3);
}

#[test]
fn tenants_mode_without_tenants_refuses_everything_but_pings() {
    let mut cfg = test_config("");
    cfg.tenants.clear();
    let e = start_cfg(cfg);
    let addr = e.local_addr().unwrap();
    let s = client();
    let mut buf = vec![0u8; 4096];
    for sign in [true, false] {
        let n = build(
            &Req {
                id: next_id(),
                sign,
                ..Req::default()
            },
            &mut buf,
        );
        assert_eq!(ask(&s, addr, &buf[..n]).1, Some(ErrorCode::Unauthenticated));
    }
}

#[test]
fn mode_none_checks_nothing_and_refuses_tenants() {
    let mut cfg = test_config("");
    cfg.tenants.clear();
    cfg.auth.mode = sluice_engine::config::AuthMode::None;
    let mut e = start_cfg(cfg);
    let addr = e.local_addr().unwrap();
    let s = client();
    let mut buf = vec![0u8; 4096];
    // Unsigned, any tenant id, deadline 0, the same bytes twice: all served.
    let n = build(
        &Req {
            tenant: 12345,
            sign: false,
            deadline_us: 0,
            ..Req::default()
        },
        &mut buf,
    );
    for _ in 0..2 {
        assert_eq!(ask(&s, addr, &buf[..n]).0, Kind::Response);
    }
    let n = build_negotiate(1, 0, "anything", false, &mut buf);
    assert_eq!(ask(&s, addr, &buf[..n]).1, Some(ErrorCode::UnknownSubject));
    // Tenants would check nothing: a live change that adds one is refused.
    let mut live = e.live();
    live.tenants = test_config("").tenants;
    let err = e.apply(live).unwrap_err().to_string();
    assert!(err.contains("auth.mode is \"none\""), "{err}");
    e.stop(Duration::ZERO);
    // And so is a config file that has both, at its line.
    let text = "[auth]\nmode = \"none\"\n\n[[tenants]]\nname = \"t\"\nid = 1\nkey = \"hex:000102030405060708090a0b0c0d0e0f\"\n";
    let err = Config::parse(text, std::env::temp_dir()).unwrap_err();
    assert_eq!(
        (err.key.as_str(), err.line),
        ("tenants[0]", Some(4)),
        "{err}"
    );
}

/// Two workers: the kernel would spread a client's copies of one frame over
/// both by source address and port; the tag steering makes every copy meet
/// the same worker, so a frame is accepted once per appliance. Distinct
/// frames of one socket still spread over both workers.
#[test]
fn copies_of_a_frame_from_any_address_meet_one_worker() {
    let mut cfg = test_config("");
    cfg.engine.workers = vec![0, 1];
    let e = start_cfg(cfg);
    let addr = e.local_addr().unwrap();
    let mut buf = vec![0u8; 4096];
    for round in 0..8 {
        let n = build(
            &Req {
                id: next_id(),
                ..Req::default()
            },
            &mut buf,
        );
        let mut answers = Vec::new();
        for _ in 0..16 {
            let s = client(); // a new source port each time
            answers.push(ask(&s, addr, &buf[..n]).1);
        }
        let served = answers.iter().filter(|c| c.is_none()).count();
        let replayed = answers
            .iter()
            .filter(|c| **c == Some(ErrorCode::Replayed))
            .count();
        assert_eq!((served, replayed), (1, 15), "round {round}: {answers:?}");
    }
    let s = client();
    for _ in 0..64 {
        let n = build(
            &Req {
                id: next_id(),
                ..Req::default()
            },
            &mut buf,
        );
        assert_eq!(ask(&s, addr, &buf[..n]).0, Kind::Response);
    }
    let st = stats(&e);
    let ok: Vec<u64> = st.workers.iter().map(|w| w.ok).collect();
    assert!(
        ok.iter().all(|&n| n > 0),
        "one socket's frames reach both workers: {ok:?}"
    );
    assert_eq!(ok.iter().sum::<u64>(), 8 + 64);
}
