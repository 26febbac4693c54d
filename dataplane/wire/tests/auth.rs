//! `TenantKey`: signing, verification, and that the tag covers exactly the
//! header bytes the spec says it covers.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::collections::BTreeSet;

use common::{EXAMPLE_KEY, example};
use sluice_wire::{Frame, TenantKey, flags};

fn signed_request() -> Vec<u8> {
    example("request")
}

fn verifies(key: &TenantKey, bytes: &[u8]) -> Option<bool> {
    Frame::new_checked(bytes).ok().map(|f| key.verify(&f))
}

#[test]
fn sign_sets_flag_and_verifies() {
    let key = TenantKey::new(EXAMPLE_KEY);
    let mut buf = example("response");
    assert_eq!(verifies(&key, &buf), Some(false), "unsigned frame");
    let mut f = Frame::new_checked(&mut buf[..]).unwrap();
    key.sign(&mut f);
    assert_eq!(f.flags() & flags::AUTHENTICATED, flags::AUTHENTICATED);
    assert_eq!(verifies(&key, &buf), Some(true));
    assert_eq!(verifies(&TenantKey::new(b"other"), &buf), Some(false));
    // Signing twice gives the same tag: the tag field is not covered.
    let first = buf[80..96].to_vec();
    let mut f = Frame::new_checked(&mut buf[..]).unwrap();
    key.sign(&mut f);
    assert_eq!(&buf[80..96], &first[..]);
}

#[test]
fn keys_of_any_length() {
    let mut buf = example("ping");
    let long = [0x42u8; 200];
    for k in [&b""[..], &b"x"[..], &long[..64], &long[..65], &long[..]] {
        let key = TenantKey::new(k);
        let mut f = Frame::new_checked(&mut buf[..]).unwrap();
        key.sign(&mut f);
        assert_eq!(verifies(&key, &buf), Some(true), "key of {} bytes", k.len());
    }
    // Distinct keys give distinct tags.
    let tag = |k: &[u8]| {
        let f = Frame::new_checked(&buf[..]).unwrap();
        TenantKey::new(k).tag(&f)
    };
    assert_ne!(tag(b"a"), tag(b"b"));
    assert_ne!(tag(&long[..64]), tag(&long[..65]));
    assert!(
        format!("{:?}", TenantKey::new(b"secret"))
            .find("secret")
            .is_none()
    );
}

#[test]
fn clearing_the_flag_breaks_the_tag() {
    let key = TenantKey::new(EXAMPLE_KEY);
    let mut buf = signed_request();
    buf[6] &= !(flags::AUTHENTICATED as u8);
    assert_eq!(verifies(&key, &buf), Some(false));
}

#[test]
fn every_tag_byte_matters() {
    let key = TenantKey::new(EXAMPLE_KEY);
    for i in 80..96 {
        let mut buf = signed_request();
        buf[i] ^= 0x01;
        assert_eq!(verifies(&key, &buf), Some(false), "tag byte {i}");
    }
}

/// Changes each covered header byte in every way that keeps the frame valid
/// (a change that breaks the frame is caught by the parser before the tag
/// matters) and checks that the tag no longer verifies.
#[test]
fn every_covered_header_byte_is_covered() {
    let key = TenantKey::new(EXAMPLE_KEY);
    let orig = signed_request();
    let header_len = Frame::new_checked(&orig[..]).unwrap().header_len();
    let mut changed = BTreeSet::new();
    for i in (0..80).chain(96..header_len) {
        for x in 1..=255u8 {
            if i == 6 && x == 0x02 {
                continue; // FORWARDED alone is outside the tag; tested below
            }
            let mut buf = orig.clone();
            buf[i] ^= x;
            if let Some(ok) = verifies(&key, &buf) {
                assert!(!ok, "byte {i} ^ {x:#x} keeps the tag valid");
                changed.insert(i);
            }
        }
    }
    // Every field a receiver acts on was changed validly at least once: the
    // kind, tenant, request id, deadline, schema, token count, trace context,
    // the FORWARDED flag, routing strings, extension key and value, dtype and
    // tensor name.
    let must: Vec<usize> = [5, 6]
        .into_iter()
        .chain(12..32)
        .chain(36..73)
        .chain(96..120)
        .chain(122..132)
        .chain([132])
        .chain(160..165)
        .collect();
    let missing: Vec<usize> = must
        .iter()
        .copied()
        .filter(|i| !changed.contains(i))
        .collect();
    assert!(missing.is_empty(), "never changed validly: {missing:?}");
}

#[test]
fn tensor_data_is_not_covered() {
    let key = TenantKey::new(EXAMPLE_KEY);
    let mut buf = signed_request();
    let f = Frame::new_checked(&buf[..]).unwrap();
    let range = f.tensor("input").unwrap().data_range();
    let padding = f.header_len()..range.start;
    for i in range.chain(padding) {
        buf[i] ^= 0xff;
    }
    assert_eq!(verifies(&key, &buf), Some(true));
}

/// A relaying appliance sets FORWARDED without the tenant key; the tag
/// stays valid, and every other flag bit still breaks it.
#[test]
fn forwarded_flag_is_outside_the_tag() {
    let key = TenantKey::new(EXAMPLE_KEY);
    let mut buf = signed_request();
    buf[6] |= 0x02;
    assert_eq!(verifies(&key, &buf), Some(true));
    buf[6] ^= 0x01;
    assert_ne!(verifies(&key, &buf), Some(true));
}

/// A negotiate request's tag covers its body: every byte of the version
/// hint and the subject that keeps the frame valid breaks the tag. Bodies
/// of other kinds are not covered (an error frame's message, for one).
#[test]
fn a_negotiate_requests_body_is_covered() {
    let key = TenantKey::new(EXAMPLE_KEY);
    let orig = example("negotiate_request_signed");
    assert_eq!(verifies(&key, &orig), Some(true));
    let f = Frame::new_checked(&orig[..]).unwrap();
    let body = f.header_len()..f.frame_len();
    let mut changed = 0;
    for i in body {
        for x in 1..=255u8 {
            let mut buf = orig.clone();
            buf[i] ^= x;
            if let Some(ok) = verifies(&key, &buf) {
                assert!(!ok, "body byte {i} ^ {x:#x} keeps the tag valid");
                changed += 1;
            }
        }
    }
    assert!(
        changed > 1000,
        "the hint and the subject were changed validly"
    );
    let mut err = example("error");
    let mut f = Frame::new_checked(&mut err[..]).unwrap();
    key.sign(&mut f);
    let last = err.len() - 1;
    err[last] = b'X';
    assert_eq!(
        verifies(&key, &err),
        Some(true),
        "an error body is not covered"
    );
}
