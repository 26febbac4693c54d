//! Replay windows on the real io_uring transport (docs/wire.md, "Replay
//! windows"): frames that name their sender are remembered as one window
//! per sender, so a tag table far smaller than the traffic of one deadline
//! horizon answers no `busy`; copies of a frame from other sockets are
//! still refused, on every worker; a sender the windows have no room for
//! falls back to the tag table.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::net::UdpSocket;
use std::time::Duration;

use common::*;
use sluice_engine::StatsSnapshot;
use sluice_wire::{
    DType, ErrorCode, ExtRepr, Frame, FrameRepr, Kind, TenantKey, TensorRepr, sender_value,
};

/// A signed request of tenant 7 naming `sender`, request id `id`.
fn frame(sender: u64, id: u64, deadline_us: u64) -> Vec<u8> {
    let data: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
        .iter()
        .flat_map(|f| f.to_le_bytes())
        .collect();
    let v = sender_value(sender);
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id: id,
        tenant_id: 7,
        model: "null",
        model_version: "1",
        deadline_us,
        extensions: &[ExtRepr::sender(&v)],
        tensors: &[TensorRepr {
            name: "x",
            dtype: DType::F32,
            dims: &[1, 4],
            data: Some(&data),
        }],
        ..FrameRepr::default()
    };
    let mut buf = vec![0u8; repr.layout().unwrap().frame_len];
    repr.emit(&mut buf).unwrap();
    TenantKey::new(&key_bytes()).sign(&mut Frame::new_unchecked(&mut buf[..]));
    buf
}

/// The answer's error code and message (`None` for a response).
fn answer(bytes: &[u8]) -> (Option<ErrorCode>, String) {
    let f = Frame::new_checked(bytes).unwrap();
    match f.error_body() {
        Some(b) => (b.code(), b.message.to_string()),
        None => {
            assert_eq!(f.kind(), Kind::Response);
            (None, String::new())
        }
    }
}

fn stats(e: &sluice_engine::Engine) -> StatsSnapshot {
    std::thread::sleep(Duration::from_millis(150));
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

/// 4 000 signed frames of one sender within one deadline, 8 in flight
/// (the test shard's queue depth),
/// against a tag table of 8 slots on each of two workers: every one is
/// served. Copies of them from other sockets are refused, within the
/// window as `replayed`, below it as too old (also `replayed`).
#[test]
fn one_sender_far_beyond_the_tag_table_is_never_busy_and_replays_are_refused() {
    let mut cfg =
        test_config("[auth]\nreplay_entries = 8\nreplay_senders = 8\nreplay_window_ids = 64\n");
    cfg.engine.workers = vec![0, 1];
    let e = started(cfg);
    let addr = e.local_addr().unwrap();
    let s = client();
    let sender = 0x5eed_0000_0000_0042;
    let deadline = now_us() + 5_000_000;
    let first = 1_000_000u64;
    let frames: Vec<Vec<u8>> = (0..4_000)
        .map(|i| frame(sender, first + i, deadline))
        .collect();
    let mut rbuf = vec![0u8; 65536];
    let mut codes = std::collections::HashMap::new();
    for batch in frames.chunks(8) {
        for f in batch {
            s.send_to(f, addr).unwrap();
        }
        for _ in batch {
            let (n, _) = s.recv_from(&mut rbuf).expect("an answer to every frame");
            *codes.entry(answer(&rbuf[..n])).or_insert(0u32) += 1;
        }
    }
    assert_eq!(codes.get(&(None, String::new())), Some(&4_000), "{codes:?}");
    // Copies, each from a new socket (another source port).
    let copy = |f: &[u8]| {
        let c: UdpSocket = client();
        answer(&roundtrip(&c, addr, f))
    };
    for f in &frames[frames.len() - 40..] {
        assert_eq!(
            copy(f),
            (
                Some(ErrorCode::Replayed),
                "frame already accepted (replay)".into()
            )
        );
    }
    let (code, msg) = copy(&frames[0]);
    assert_eq!(code, Some(ErrorCode::Replayed));
    assert!(msg.contains("replay window"), "{msg}");
    let st = stats(&e);
    assert_eq!(refusals(&st, "replay_table_full"), 0);
    assert_eq!(st.errors(ErrorCode::Busy), 0);
    assert_eq!(refusals(&st, "replayed"), 40);
    assert_eq!(refusals(&st, "replay_too_old"), 1);
    let window: u64 = st.workers.iter().map(|w| w.replay.window_frames).sum();
    let tags: u64 = st.workers.iter().map(|w| w.replay.tag_frames).sum();
    assert_eq!((window, tags), (4_000, 0));
    // Both workers took part (frames are steered by tag), each with its
    // own window for the sender.
    for w in &st.workers {
        assert!(
            w.replay.window_frames > 0,
            "worker {}: {:?}",
            w.index,
            w.replay
        );
        assert_eq!(w.replay.windows_opened, 1, "worker {}", w.index);
        assert_eq!(w.replay.windows_live, 1, "worker {}", w.index);
    }
}

/// Four windows (one bucket) on one worker: a fifth sender finds no room
/// and goes to the tag table, where its replays are refused too; once the
/// windows' deadlines pass it gets a window, and the frame it sent through
/// the tag table is still refused.
#[test]
fn a_sender_without_room_falls_back_to_the_tag_table() {
    let e = started(test_config("[auth]\nreplay_senders = 4\n"));
    let addr = e.local_addr().unwrap();
    let s = client();
    let ask = |f: &[u8]| answer(&roundtrip(&s, addr, f)).0;
    let soon = now_us() + 400_000;
    for sender in 1..=4 {
        assert_eq!(ask(&frame(sender, 10, soon)), None);
    }
    let later = now_us() + 5_000_000;
    let fallback = frame(99, 50, later);
    assert_eq!(ask(&fallback), None);
    assert_eq!(ask(&fallback), Some(ErrorCode::Replayed));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(ask(&frame(99, 60, later)), None);
    assert_eq!(ask(&fallback), Some(ErrorCode::Replayed));
    assert_eq!(ask(&frame(99, 55, later)), None);
    let st = stats(&e);
    let w = &st.workers[0].replay;
    assert_eq!(
        (w.fallbacks, w.tag_frames, w.window_frames),
        (1, 1, 6),
        "{w:?}"
    );
    assert_eq!(w.windows_opened, 5);
    assert_eq!(refusals(&st, "replayed"), 2);
}
