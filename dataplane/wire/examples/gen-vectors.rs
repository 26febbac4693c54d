//! Prints the conformance vectors, `docs/vectors/frames.json`:
//!
//! cargo run -p sluice-wire --example gen-vectors > docs/vectors/frames.json
//!
//! The vectors are defined in `tests/vectors_gen/` (shared with the test
//! that keeps the committed file current); this is only the printer.
#![allow(
    clippy::expect_used,
    reason = "the shared test helpers' expects are test assertions: a vector that cannot be built is a bug"
)]

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/vectors_gen/mod.rs"]
mod vectors_gen;

fn main() {
    print!("{}", vectors_gen::render(&vectors_gen::vectors()));
}
