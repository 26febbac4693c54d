use std::collections::{BTreeSet, HashMap};

use proptest::prelude::*;

use super::*;

const T: u32 = 7;
const NOW: u64 = 1_000;
const DL: u64 = 5_000;

fn w() -> SenderWindows {
    SenderWindows::new(64, 128)
}

#[test]
fn ids_in_order_are_fresh_and_each_once() {
    let mut s = w();
    assert_eq!(s.check_mark(T, 1, 10, DL, NOW), Mark::Opened);
    for id in 11..1_000 {
        assert_eq!(s.check_mark(T, 1, id, DL, NOW), Mark::Fresh, "id {id}");
    }
    assert_eq!(s.check_mark(T, 1, 999, DL, NOW), Mark::Replayed);
    assert_eq!(s.check_mark(T, 1, 900, DL, NOW), Mark::Replayed);
    assert_eq!(s.live(NOW), 1);
}

#[test]
fn reordered_ids_within_the_window_are_fresh_once() {
    let mut s = w();
    assert_eq!(s.check_mark(T, 1, 100, DL, NOW), Mark::Opened);
    // Below the first id seen, and above it out of order.
    for id in [99, 105, 101, 104, 1, 102, 103, 227] {
        assert_eq!(s.check_mark(T, 1, id, DL, NOW), Mark::Fresh, "id {id}");
    }
    // 227 − 128 = 99 is the first id below the window now.
    for id in [100, 101, 105, 227] {
        assert_eq!(s.check_mark(T, 1, id, DL, NOW), Mark::Replayed, "id {id}");
    }
    assert_eq!(s.check_mark(T, 1, 99, DL, NOW), Mark::TooOld);
    assert_eq!(s.check_mark(T, 1, 106, DL, NOW), Mark::Fresh);
}

#[test]
fn an_id_below_the_window_is_too_old() {
    let mut s = w();
    assert_eq!(s.check_mark(T, 1, 1_000, DL, NOW), Mark::Opened);
    assert_eq!(s.check_mark(T, 1, 1_000 - 127, DL, NOW), Mark::Fresh);
    assert_eq!(s.check_mark(T, 1, 1_000 - 128, DL, NOW), Mark::TooOld);
    assert_eq!(s.check_mark(T, 1, 0, DL, NOW), Mark::TooOld);
}

#[test]
fn a_far_slide_clears_the_window() {
    let mut s = w();
    assert_eq!(s.check_mark(T, 1, 5, DL, NOW), Mark::Opened);
    for id in 6..100 {
        s.check_mark(T, 1, id, DL, NOW);
    }
    // Up by more than the window: nothing below the new top was seen.
    assert_eq!(s.check_mark(T, 1, 10_000, DL, NOW), Mark::Fresh);
    for id in 10_000 - 127..10_000 {
        assert_eq!(s.check_mark(T, 1, id, DL, NOW), Mark::Fresh, "id {id}");
    }
    // Up by less than the window, across the ring's end.
    assert_eq!(s.check_mark(T, 1, 10_100, DL, NOW), Mark::Fresh);
    for id in 10_001..10_100 {
        assert_eq!(s.check_mark(T, 1, id, DL, NOW), Mark::Fresh, "id {id}");
    }
    // Ids seen before the slide keep their marks; the window ends at 9 973.
    assert_eq!(s.check_mark(T, 1, 9_990, DL, NOW), Mark::Replayed);
    assert_eq!(s.check_mark(T, 1, 9_973, DL, NOW), Mark::Replayed);
    assert_eq!(s.check_mark(T, 1, 9_972, DL, NOW), Mark::TooOld);
    assert_eq!(s.check_mark(T, 1, u64::MAX, DL, NOW), Mark::Fresh);
    assert_eq!(s.check_mark(T, 1, u64::MAX, DL, NOW), Mark::Replayed);
}

#[test]
fn senders_and_tenants_have_their_own_windows() {
    let mut s = w();
    assert_eq!(s.check_mark(T, 1, 10, DL, NOW), Mark::Opened);
    assert_eq!(s.check_mark(T, 2, 10, DL, NOW), Mark::Opened);
    assert_eq!(s.check_mark(T + 1, 1, 10, DL, NOW), Mark::Opened);
    assert_eq!(s.check_mark(T, 1, 10, DL, NOW), Mark::Replayed);
    assert_eq!(s.live(NOW), 3);
}

#[test]
fn a_window_lives_until_its_latest_deadline_then_starts_afresh() {
    let mut s = w();
    assert_eq!(s.check_mark(T, 1, 10, 2_000, NOW), Mark::Opened);
    // An older id with a later deadline keeps the window longer.
    assert_eq!(s.check_mark(T, 1, 9, 3_000, NOW), Mark::Fresh);
    assert_eq!(s.check_mark(T, 1, 10, 3_000, 2_500), Mark::Replayed);
    assert_eq!(s.live(3_000), 1);
    assert_eq!(s.live(3_001), 0);
    // Past every deadline its frames are expired: the sender may restart.
    assert_eq!(s.check_mark(T, 1, 3, 9_000, 3_001), Mark::Opened);
    assert_eq!(s.check_mark(T, 1, 10, 9_000, 3_001), Mark::Fresh);
}

#[test]
fn a_full_table_has_no_room_until_a_window_expires() {
    let mut s = SenderWindows::new(WINDOW_WAYS, 64);
    for sender in 1..=WINDOW_WAYS as u64 {
        assert_eq!(s.check_mark(T, sender, 1, DL, NOW), Mark::Opened);
    }
    assert_eq!(s.check_mark(T, 99, 1, DL, NOW), Mark::NoRoom);
    // The senders that hold windows go on.
    assert_eq!(s.check_mark(T, 2, 2, DL, NOW), Mark::Fresh);
    assert_eq!(s.check_mark(T, 99, 1, DL + 10, DL + 1), Mark::Opened);
}

#[test]
fn a_forgotten_id_is_fresh_again() {
    let mut s = w();
    assert_eq!(s.check_mark(T, 1, 10, DL, NOW), Mark::Opened);
    assert_eq!(s.check_mark(T, 1, 11, DL, NOW), Mark::Fresh);
    s.forget(T, 1, 11);
    s.forget(T, 1, 500); // above the window: nothing changes
    s.forget(T, 2, 10); // no such sender
    assert_eq!(s.check_mark(T, 1, 11, DL, NOW), Mark::Fresh);
    assert_eq!(s.check_mark(T, 1, 10, DL, NOW), Mark::Replayed);
}

proptest! {
    /// Against a model that remembers every accepted id of every sender:
    /// an id is refused exactly when the model holds it (Replayed) or it
    /// lies a window or more below the highest id accepted (TooOld).
    #[test]
    fn matches_a_set_model(ops in proptest::collection::vec((1u64..4, 0u64..400), 1..600)) {
        let mut s = w();
        let n = s.window_ids();
        let mut model: HashMap<u64, (u64, BTreeSet<u64>)> = HashMap::new();
        for (sender, id) in ops {
            let got = s.check_mark(T, sender, id, DL, NOW);
            let want = match model.get(&sender) {
                None => Mark::Opened,
                Some((top, _)) if id <= *top && top - id >= n => Mark::TooOld,
                Some((_, seen)) if seen.contains(&id) => Mark::Replayed,
                Some(_) => Mark::Fresh,
            };
            prop_assert_eq!(got, want, "sender {} id {}", sender, id);
            if matches!(got, Mark::Opened | Mark::Fresh) {
                let e = model.entry(sender).or_insert((id, BTreeSet::new()));
                e.0 = e.0.max(id);
                e.1.insert(id);
            }
        }
    }
}
