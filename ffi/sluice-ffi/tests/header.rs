//! The checked-in C header is what cbindgen makes of the crate today.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod header_gen;

#[test]
fn header_is_current() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let fresh = header_gen::generate(dir).unwrap();
    let path = dir.join("../include/sluice.h");
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        fresh == checked_in,
        "{} is stale: run `cargo run -p sluice-ffi --example gen-header` and commit it",
        path.display()
    );
}
