//! What the freshness rule and the replay table add to classification, in
//! process, in one run: `classify_frame` on distinct signed requests with
//! the worker's replay table against the same frames with the tag check
//! alone (the baseline), with the table empty and filled to 50 % and 90 %
//! of its slots; the refusal of a replay; and `ReplayTable::check_insert`
//! by itself.

use std::hint::black_box;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use sluice_engine::auth::{ReplayGuard, ReplayTable, Seen};
use sluice_engine::config::Config;
use sluice_engine::schema::SchemaTable;
use sluice_engine::tables::{HostView, LiveConfig, Tables};
use sluice_engine::worker::{Immediate, Verdict, classify_frame};
use sluice_wire::{DType, Frame, FrameRepr, Kind, TenantKey, TensorRepr};

use crate::{KEY, Result, TENANT, median};

/// Distinct frames per round: more than fit the caches' view of a 6 MiB
/// table, fewer than the table holds.
const FRAMES: usize = 4096;

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// `FRAMES` signed requests to the null model, distinct request ids, one
/// deadline.
fn frames(deadline_us: u64) -> Result<Vec<Vec<u8>>> {
    let x: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
        .iter()
        .flat_map(|f| f.to_le_bytes())
        .collect();
    let key = TenantKey::new(&KEY);
    let mut out = Vec::with_capacity(FRAMES);
    for id in 0..FRAMES as u64 {
        let t = [TensorRepr {
            name: "x",
            dtype: DType::F32,
            dims: &[1, 4],
            data: Some(&x),
        }];
        let repr = FrameRepr {
            kind: Kind::Request,
            request_id: id + 1,
            tenant_id: TENANT,
            deadline_us,
            model: "null",
            model_version: "1",
            tensors: &t,
            ..FrameRepr::default()
        };
        let mut buf = vec![0u8; 512];
        let n = repr.emit(&mut buf)?.frame_len;
        buf.truncate(n);
        key.sign(&mut Frame::new_unchecked(&mut buf[..]));
        out.push(buf);
    }
    Ok(out)
}

/// Fills `fill` of the table's slots with tags no frame carries.
fn prefill(r: &mut ReplayTable, fill: f64, deadline_us: u64, now_us: u64) {
    let want = (r.capacity() as f64 * fill) as u64;
    let mut n = 0u64;
    let mut i = u64::MAX / 3;
    while n < want {
        i = i.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let mut tag = [0u8; 16];
        tag[..8].copy_from_slice(&i.to_le_bytes());
        tag[8..].copy_from_slice(&i.rotate_left(29).wrapping_mul(0x9e37_79b9).to_le_bytes());
        if r.check_insert(&tag, deadline_us, now_us) == Seen::Fresh {
            n += 1;
        }
    }
}

/// ns per frame of one pass over `frames`, median of `rounds`; `setup`
/// runs untimed before each pass.
fn pass<S>(
    frames: &[Vec<u8>],
    rounds: usize,
    state: &mut S,
    mut setup: impl FnMut(&mut S),
    mut each: impl FnMut(&mut S, &[u8]) -> Verdict,
) -> f64 {
    let mut v = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        setup(state);
        let t0 = Instant::now();
        for f in frames {
            black_box(each(state, black_box(f)));
        }
        v.push(t0.elapsed().as_nanos() as f64 / frames.len() as f64);
    }
    median(v)
}

/// Section 4 of the benchmark.
pub fn measure(cfg: &Config, quick: bool) -> Result<()> {
    let live = LiveConfig::of(cfg);
    let slots: Vec<usize> = (0..live.models.len()).collect();
    let t = Tables::build(&live, &HostView::of(cfg), &slots, SchemaTable::default())?;
    let now = now_us();
    let deadline = now + 5_000_000;
    let frames = frames(deadline)?;
    let entries = cfg.auth.replay_entries as usize;
    let rounds = if quick { 11 } else { 101 };
    println!(
        "\n## Freshness and replay check: classify_frame on {FRAMES} distinct signed requests, table of {entries} slots, median of {rounds} passes"
    );
    println!("| case | ns/request | ratio |");
    println!("| --- | ---: | ---: |");
    let admitted = |v: &Verdict| matches!(v, Verdict::Admit { .. });
    let base = pass(
        &frames,
        rounds,
        &mut (),
        |_| {},
        |_, f| classify_frame(f, false, &t, false, now, None),
    );
    assert!(admitted(&classify_frame(
        &frames[0], false, &t, false, now, None
    )));
    println!("| tag check only (baseline) | {base:.0} | 1.00× |");
    // Frames without a sender id: the tag table is what they meet.
    let guard = || {
        let a = &cfg.auth;
        ReplayGuard::new(
            entries,
            a.replay_senders as usize,
            a.replay_window_ids as usize,
        )
    };
    let mut r = guard();
    for fill in [0.0, 0.5, 0.9] {
        let mut filled = guard();
        prefill(filled.tags_mut(), fill, deadline, now);
        let ns = pass(
            &frames,
            rounds,
            &mut r,
            |r| r.clone_from(&filled),
            |r, f| {
                let v = classify_frame(f, false, &t, false, now, Some(r));
                debug_assert!(admitted(&v), "{v:?}");
                v
            },
        );
        println!(
            "| + freshness and replay table, {:.0} % full | {ns:.0} | {:.2}× |",
            fill * 100.0,
            ns / base
        );
    }
    // Every frame again without clearing: each is a replay, refused.
    r = guard();
    for f in &frames {
        classify_frame(f, false, &t, false, now, Some(&mut r));
    }
    let ns = pass(
        &frames,
        rounds,
        &mut r,
        |_| {},
        |r, f| {
            let v = classify_frame(f, false, &t, false, now, Some(r));
            debug_assert!(matches!(
                v,
                Verdict::Reply(Immediate::Refused(x)) if x.code == sluice_wire::ErrorCode::Replayed
            ));
            v
        },
    );
    println!("| a replay, refused | {ns:.0} | {:.2}× |", ns / base);
    // The table by itself, on the same tags.
    let tags: Vec<[u8; 16]> = frames
        .iter()
        .map(|f| {
            let mut tag = [0u8; 16];
            tag.copy_from_slice(&f[80..96]);
            tag
        })
        .collect();
    let mut r = ReplayTable::new(entries);
    let mut v = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        r.clear();
        let t0 = Instant::now();
        for tag in &tags {
            black_box(r.check_insert(black_box(tag), deadline, now));
        }
        v.push(t0.elapsed().as_nanos() as f64 / tags.len() as f64);
    }
    println!(
        "| ReplayTable::check_insert alone, empty table | {:.0} | – |",
        median(v)
    );
    Ok(())
}
