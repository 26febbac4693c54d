//! The checked-in C header is what cbindgen makes of the crate today.

mod header_gen;

#[test]
fn header_is_current() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let fresh = header_gen::generate(dir);
    let path = dir.join("../include/sluice.h");
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        fresh == checked_in,
        "{} is stale: run `cargo run -p sluice-ffi --example gen-header` and commit it",
        path.display()
    );
}
