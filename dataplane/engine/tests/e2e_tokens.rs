//! Token streams (server-driven, docs/wire.md "Streams") through the whole
//! engine over io_uring with the real ONNX Runtime: the bundled byte-level
//! decoder (models/decoder.onnx) runs step by step inside the appliance,
//! its hidden state in the stream's slot. The tokens of a set of prompts
//! equal onnxruntime-python's greedy loop over the same model
//! (tests/streams/decoder_reference.py); a CANCEL stops generation within
//! one step; a client that disappears has its slot reclaimed after
//! `streams.idle_ms`; 64 concurrent streams on one worker interleave with
//! small requests, which are answered while the streams generate.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::tokens::*;
use common::*;
use sluice_wire::{EndReason, ErrorCode, Frame, Kind, stream_flags};

fn python_reference() -> BTreeMap<String, Vec<i64>> {
    let root = repo_root();
    let python = std::env::var("SLUICE_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(&python)
        .arg(root.join("tests/streams/decoder_reference.py"))
        .arg(root.join("models/decoder.onnx"))
        .arg(MAX_TOKENS.to_string())
        .args(PROMPTS)
        .output()
        .unwrap_or_else(|e| panic!("{python}: {e}"));
    assert!(
        out.status.success(),
        "decoder_reference.py failed (needs onnxruntime and numpy: scripts/setup.sh): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let body = text.trim().trim_start_matches('{').trim_end_matches('}');
    let mut map = BTreeMap::new();
    for part in body.split(']').filter(|p| p.contains('[')) {
        let (key, list) = part.split_once('[').unwrap();
        let key = key.trim_matches([',', ' ', ':', '"']);
        let toks = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().unwrap())
            .collect();
        map.insert(key.to_string(), toks);
    }
    assert_eq!(map.len(), PROMPTS.len());
    map
}

#[test]
fn token_streams_equal_onnxruntime_python() {
    let reference = python_reference();
    let (e, addr) = start(10_000);
    let s = client();
    let mut id = 1;
    for tpf in [1u16, 4] {
        for p in PROMPTS {
            let (rid, f) = open("decoder", id, p, tpf, 0);
            id += 1;
            s.send_to(&f, addr).unwrap();
            let (toks, reason) = collect(&s, rid, usize::from(tpf));
            assert_eq!(
                &toks, &reference[*p],
                "prompt {p:?}, tokens_per_frame {tpf}"
            );
            let want = if toks.len() == MAX_TOKENS as usize {
                EndReason::MaxTokens
            } else {
                EndReason::Eos
            };
            assert_eq!(reason, want as u8, "prompt {p:?}");
        }
    }
    // An OPEN asking for fewer tokens gets that many.
    let (rid, f) = open("decoder", id, "zz", 1, 5);
    s.send_to(&f, addr).unwrap();
    let (toks, reason) = collect(&s, rid, 1);
    assert_eq!(toks, reference["zz"][..5]);
    assert_eq!(reason, EndReason::MaxTokens as u8);

    let st = e.stats();
    let w = &st.workers[0];
    let total: usize = PROMPTS.iter().map(|p| reference[*p].len()).sum::<usize>() * 2 + 5;
    assert_eq!(w.tokens.tokens, total as u64);
    assert_eq!(w.tokens.running, 0);
    assert_eq!(w.tokens.by_tenant, vec![(7, total as u64)]);
    let m = st.models.iter().find(|m| m.name == "decoder").unwrap();
    assert_eq!(m.tokens.tokens, total as u64);
    assert_eq!(m.tokens.ttft_us.count(), (PROMPTS.len() * 2 + 1) as u64);
    assert_eq!(
        m.tokens.itl_us.count(),
        (total - (PROMPTS.len() * 2 + 1)) as u64
    );
    assert_eq!(st.shards[0].tokens, total as u64);
    // The histograms are published every 50 ms.
    let t0 = Instant::now();
    let (ttft, itl) = loop {
        let st = e.stats();
        let (t, i) = (st.shards[0].ttft.count, st.shards[0].itl.count);
        if t == m.tokens.ttft_us.count() || t0.elapsed() > Duration::from_secs(5) {
            break (t, i);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(ttft, m.tokens.ttft_us.count());
    assert_eq!(itl, m.tokens.itl_us.count());
}

/// The prompts opened at once (each twice, at 1 and 4 tokens a frame), so
/// the worker steps them together: batched (one ONNX Runtime call per
/// iteration for all of them) and with `step_batch_max = 1` (one call per
/// stream), both equal onnxruntime-python's loop token for token.
#[test]
fn concurrent_streams_batched_equal_unbatched_and_python() {
    let reference = python_reference();
    let mut runs = Vec::new();
    for batch in [64u32, 1] {
        let e = started(config_with(10_000, batch));
        let addr = e.local_addr().unwrap();
        let s = client();
        socket2::SockRef::from(&s)
            .set_recv_buffer_size(4 << 20)
            .unwrap();
        let mut want = BTreeMap::new();
        let mut id = 100;
        for tpf in [1u16, 4] {
            for p in PROMPTS {
                let (_, f) = open("decoder", id, p, tpf, 0);
                s.send_to(&f, addr).unwrap();
                want.insert(id, *p);
                id += 1;
            }
        }
        let got = collect_streams(&s, want.len());
        for (id, p) in &want {
            let (toks, reason) = &got[id];
            assert_eq!(toks, &reference[*p], "prompt {p:?}, step_batch_max {batch}");
            let end = if toks.len() == MAX_TOKENS as usize {
                EndReason::MaxTokens
            } else {
                EndReason::Eos
            };
            assert_eq!(*reason, end as u8);
        }
        let w = e.stats().workers[0].tokens.clone();
        if batch == 1 {
            // One call per step, each in the slot: nothing copied.
            assert_eq!(w.runs, w.steps);
            assert_eq!(w.state_bytes_copied, 0);
        } else {
            // Streams stepped together: fewer calls than steps, and each
            // step copies its 64-byte state in and out once.
            assert!(w.runs * 2 < w.steps, "not batched: {w:?}");
            assert_eq!(w.state_bytes_copied, w.steps * 2 * 64);
        }
        runs.push(got);
    }
    assert_eq!(runs[0], runs[1], "batched and one at a time differ");
}

/// Token streams over the io_uring TCP transport: OPENs pipelined on one
/// connection with a small request between them get their token frames on
/// that connection (each frame takes a new place in the connection's answer
/// order), the decoder's tokens; a connection that closes mid-stream ends
/// its stream and frees the slot (the same stream id opens again).
#[test]
fn token_streams_over_tcp() {
    use std::io::Write;
    let text = config_text(10_000, 64).replace(
        "tx_buffers = 256\n",
        "tx_buffers = 256\ntcp_listen = \"127.0.0.1:0\"\n",
    );
    let e = started(sluice_engine::Config::parse(&text, repo_root()).unwrap());
    let tcp = e.tcp_local_addr().unwrap();
    let mut a = tcp_client(tcp);
    let prompts = ["hello", "Sluice", "zz"];
    let mut want = BTreeMap::new();
    let mut bytes = Vec::new();
    for (k, p) in prompts.iter().enumerate() {
        let id = 300 + k as u64;
        let (_, f) = open("decoder", id, p, 1 + 3 * k as u16, 0);
        bytes.extend_from_slice(&f);
        let prompt: Vec<i64> = p.bytes().map(i64::from).collect();
        want.insert(id, sluice_models::decoder::decoder_generate(&prompt, 32));
        if k == 0 {
            bytes.extend_from_slice(&mlp_request(8_000_001));
        }
    }
    a.write_all(&bytes).unwrap();
    let mut got: BTreeMap<u64, (u32, Vec<i64>)> = BTreeMap::new();
    let (mut ended, mut small) = (0, false);
    while ended < prompts.len() || !small {
        let f = read_frame(&mut a).unwrap();
        let fr = Frame::new_checked(f.as_slice()).unwrap();
        if fr.request_id() == 8_000_001 {
            assert_eq!(fr.kind(), Kind::Response, "{:?}", fr.error_body());
            small = true;
            continue;
        }
        let (id, seq, end, toks) = token_frame(&f);
        let (next, all) = got.entry(id).or_default();
        assert_eq!(seq, *next, "stream {id}: frames in order");
        *next += 1;
        all.extend(toks);
        ended += usize::from(end.is_some());
    }
    for (id, w) in &want {
        assert_eq!(&got[id].1, w, "stream {id}");
    }
    // A connection that goes away mid-stream: its stream ends, its slot
    // is freed, nothing is sent for it any more.
    {
        let mut b = tcp_client(tcp);
        let (_, f) = open("endless", 77, "gone", 1, 0);
        b.write_all(&f).unwrap();
        for _ in 0..3 {
            assert_eq!(token_frame(&read_frame(&mut b).unwrap()).0, 77);
        }
    }
    let t0 = Instant::now();
    let w = loop {
        let w = e.stats().workers[0].tokens.clone();
        if (w.running == 0 && w.conn_closed == 1) || t0.elapsed() > Duration::from_secs(10) {
            break w;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!((w.running, w.conn_closed), (0, 1), "{w:?}");
    let tokens = e.stats().workers[0].tokens.tokens;
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        e.stats().workers[0].tokens.tokens,
        tokens,
        "generation stopped"
    );
    let mut c = tcp_client(tcp);
    let (rid, f) = open("endless", 77, "back", 1, 2);
    c.write_all(&f).unwrap();
    let mut n = 0;
    loop {
        let f = read_frame(&mut c).unwrap();
        assert_eq!(Frame::new_checked(f.as_slice()).unwrap().request_id(), rid);
        let (_, _, end, toks) = token_frame(&f);
        n += toks.len();
        if let Some(r) = end {
            assert_eq!((n, r), (2, EndReason::MaxTokens as u8));
            break;
        }
    }
}

#[test]
fn refusals_of_token_streams() {
    let (_e, addr) = start(10_000);
    let s = client();
    // A prompt of the wrong dtype or an empty one: bad_tensor, no stream.
    let (_, f) = stream_frame("decoder", 1, 0, stream_flags::OPEN, Some(&[]), 1, 0, 0);
    let (kind, code) = answer_kind(&roundtrip(&s, addr, &f));
    assert_eq!((kind, code), (Kind::Error, Some(ErrorCode::BadTensor)));
    // A CANCEL of no stream: unknown_stream.
    let (_, f) = cancel("decoder", 99);
    let (kind, code) = answer_kind(&roundtrip(&s, addr, &f));
    assert_eq!((kind, code), (Kind::Error, Some(ErrorCode::UnknownStream)));
    // A CONTINUE with tensors on a token stream: bad_tensor; the stream
    // goes on.
    let (rid, f) = open("endless", 5, "abc", 1, 3);
    s.send_to(&f, addr).unwrap();
    let (_, f) = stream_frame("endless", 5, 1, stream_flags::CONTINUE, Some(b"x"), 0, 0, 0);
    s.send_to(&f, addr).unwrap();
    let mut seen_error = false;
    let mut toks = 0;
    loop {
        let a = recv(&s);
        let fr = Frame::new_checked(a.as_slice()).unwrap();
        if fr.kind() == Kind::Error {
            assert_eq!(fr.error_body().unwrap().code(), Some(ErrorCode::BadTensor));
            seen_error = true;
            continue;
        }
        assert_eq!(fr.request_id(), rid);
        let (_, _, end, t) = token_frame(&a);
        toks += t.len();
        if end.is_some() {
            break;
        }
    }
    assert!(seen_error);
    assert_eq!(toks, 3);
}

#[test]
fn cancel_stops_generation_within_one_step() {
    let (e, addr) = start(10_000);
    let s = client();
    // The stream sends a frame per token until the cancel: room for them
    // all (the default buffer overflows on a loaded host, and a dropped
    // frame is a seq gap here).
    socket2::SockRef::from(&s)
        .set_recv_buffer_size(4 << 20)
        .unwrap();
    let (rid, f) = open("endless", 42, "hello", 1, 0);
    s.send_to(&f, addr).unwrap();
    let mut got = 0u32;
    for _ in 0..5 {
        let (id, seq, end, t) = token_frame(&recv(&s));
        assert_eq!((id, seq, end, t.len()), (42, got, None, 1));
        got += 1;
    }
    let (cid, f) = cancel("endless", 42);
    s.send_to(&f, addr).unwrap();
    // Token frames already on the way arrive first; then the answer to the
    // cancel, whose seq says how many token frames the stream sent.
    let sent = loop {
        let a = recv(&s);
        let fr = Frame::new_checked(a.as_slice()).unwrap();
        if fr.request_id() == rid {
            let (_, seq, end, _) = token_frame(&a);
            assert_eq!((seq, end), (got, None));
            got += 1;
            continue;
        }
        assert_eq!(fr.request_id(), cid);
        let h = fr.stream().unwrap();
        assert!(h.has(stream_flags::END));
        assert_eq!(h.end_reason, EndReason::Cancelled as u8);
        break h.seq;
    };
    // Nothing was sent after the cancel ran: every frame the stream sent
    // arrived before the answer, and no other follows.
    assert_eq!(sent, got);
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 2048];
    assert!(s.recv_from(&mut buf).is_err(), "a frame after the cancel");
    // The gauge is set at the worker's next iteration.
    let t0 = Instant::now();
    while e.stats().workers[0].tokens.running != 0 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let st = e.stats();
    assert_eq!(st.workers[0].tokens.running, 0);
    // The cancel is tallied under the token streams' end reasons.
    assert_eq!(
        st.workers[0].tokens.ended,
        vec![("cancelled".to_string(), 1)],
        "{:?}",
        st.workers[0].tokens.ended
    );
}

#[test]
fn a_client_that_disappears_frees_its_slot_after_idle_ms() {
    let (e, addr) = start(300);
    {
        let s = client();
        let (_, f) = open("endless", 9, "gone", 1, 0);
        s.send_to(&f, addr).unwrap();
        recv(&s);
        // The client stops reading and goes away.
    }
    let t0 = Instant::now();
    let freed = loop {
        let st = e.stats();
        let w = &st.workers[0];
        if w.tokens.running == 0 && w.streams.reclaimed >= 1 {
            break true;
        }
        if t0.elapsed() > Duration::from_secs(10) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        freed,
        "the slot was not reclaimed: {:?}",
        e.stats().workers[0].tokens
    );
    let st = e.stats();
    let tokens = st.workers[0].tokens.tokens;
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        e.stats().workers[0].tokens.tokens,
        tokens,
        "generation stopped"
    );
    // The slot is free again: a new stream of the same id opens.
    let s = client();
    let (rid, f) = open("endless", 9, "back", 1, 2);
    s.send_to(&f, addr).unwrap();
    let (toks, reason) = collect(&s, rid, 1);
    assert_eq!((toks.len(), reason), (2, EndReason::MaxTokens as u8));
}

#[test]
fn many_token_streams_interleave_with_small_requests() {
    const STREAMS: u64 = 64;
    const TOKENS: u32 = 200;
    let (e, addr) = start(10_000);
    let streams = client();
    // Read the token frames as they come (UDP: a socket nobody reads
    // overflows and drops them).
    socket2::SockRef::from(&streams)
        .set_recv_buffer_size(4 << 20)
        .unwrap();
    let reader_sock = streams.try_clone().unwrap();
    let reader = std::thread::spawn(move || {
        let mut done = BTreeMap::new();
        let (mut switches, mut last, mut ended) = (0usize, 0u64, 0u64);
        while ended < STREAMS {
            let (id, seq, end, t) = token_frame(&recv(&reader_sock));
            let (n, next) = done.entry(id).or_insert((0usize, 0u32));
            assert_eq!(seq, *next, "stream {id}: a lost or reordered frame");
            *next += 1;
            *n += t.len();
            if id != last {
                switches += 1;
                last = id;
            }
            if let Some(r) = end {
                assert_eq!(r, EndReason::MaxTokens as u8);
                assert_eq!(*n, TOKENS as usize);
                ended += 1;
            }
        }
        (done.len(), switches)
    });
    for id in 1..=STREAMS {
        let (_, f) = open("endless", id, &format!("p{id}"), 8, TOKENS);
        streams.send_to(&f, addr).unwrap();
    }
    // Small requests while the streams generate: each is answered, and the
    // streams are still running when it is (a generation does not hold a
    // small request up until it ends).
    let small = client();
    let mut answered_while_running = 0;
    for k in 0..20 {
        let id = 9_000_000 + k;
        let a = roundtrip(&small, addr, &mlp_request(id));
        let f = Frame::new_checked(a.as_slice()).unwrap();
        assert_eq!((f.kind(), f.request_id()), (Kind::Response, id));
        if e.stats().workers[0].tokens.running > 0 {
            answered_while_running += 1;
        }
    }
    assert!(
        answered_while_running > 0,
        "no small request was answered while streams ran"
    );
    // Every stream runs to its end, interleaved: frames of different
    // streams alternate rather than one stream's run after another's.
    let (n, switches) = reader.join().unwrap();
    assert_eq!(n, STREAMS as usize);
    let frames = STREAMS as usize * (TOKENS as usize).div_ceil(8);
    assert!(
        switches > frames / 2,
        "streams did not interleave ({switches} switches in {frames} frames)"
    );
    let st = e.stats();
    assert_eq!(st.workers[0].tokens.tokens, STREAMS * u64::from(TOKENS));
}
