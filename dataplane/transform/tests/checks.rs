//! Modules refused before they are accepted, each with an error naming
//! what is wrong: not a component, imports outside the world, another major
//! version, the wrong export or import signature, too large.
// Tests may unwrap: a failed unwrap is a failed test (clippy.toml covers
// #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use common::*;
use sluice_transform::{Limits, LoadError};

fn refused(bytes: &[u8]) -> LoadError {
    let rt = runtime(small_limits());
    rt.load(bytes).unwrap_err()
}

#[test]
fn not_a_component() {
    assert_eq!(refused(b"not wasm at all"), LoadError::NotWasm);
    let core = wat::parse_str("(module (func (export \"transform\")))").unwrap();
    let e = refused(&core);
    assert_eq!(e, LoadError::CoreModule);
    assert!(e.to_string().contains("not a component"), "{e}");
}

#[test]
fn imports_outside_the_world() {
    let c = wat::parse_str(
        r#"(component
             (import "wasi:cli/environment@0.2.0"
               (instance (export "get-arguments" (func (result (list string)))))))"#,
    )
    .unwrap();
    let e = refused(&c);
    assert_eq!(
        e,
        LoadError::ImportOutsideWorld("wasi:cli/environment@0.2.0".into())
    );
    assert!(e.to_string().contains("wasi:cli/environment@0.2.0"), "{e}");
    // A name inside the package that the world does not have.
    let c = wat::parse_str(
        r#"(component (import "sluice:transform/clock@1.0.0" (instance (export "now" (func (result u64))))))"#,
    )
    .unwrap();
    assert!(matches!(refused(&c), LoadError::ImportOutsideWorld(_)));
}

/// A component exporting `iface` with one function `name` of type u32 -> u32.
fn exporting(iface: &str, name: &str) -> Vec<u8> {
    wat::parse_str(format!(
        r#"(component
             (core module $m (func (export "f") (param i32) (result i32) local.get 0))
             (core instance $i (instantiate $m))
             (func $f (param "x" u32) (result u32) (canon lift (core func $i "f")))
             (instance $e (export "{name}" (func $f)))
             (export "{iface}" (instance $e)))"#
    ))
    .unwrap()
}

#[test]
fn another_major_version() {
    let e = refused(&exporting(
        "sluice:transform/transformer@2.0.0",
        "transform",
    ));
    assert_eq!(
        e,
        LoadError::WrongMajor {
            name: "sluice:transform/transformer@2.0.0".into(),
            major: 2
        }
    );
    assert!(
        e.to_string().contains("version 2.x") && e.to_string().contains("runs 1.x"),
        "{e}"
    );
    let c = wat::parse_str(
        r#"(component (import "sluice:transform/host@3.1.0" (instance (export "log" (func)))))"#,
    )
    .unwrap();
    assert!(matches!(
        refused(&c),
        LoadError::WrongMajor { major: 3, .. }
    ));
}

#[test]
fn wrong_export_signature() {
    let e = refused(&exporting(
        "sluice:transform/transformer@1.0.0",
        "transform",
    ));
    assert!(matches!(e, LoadError::WrongSignature(_)), "{e}");
    assert!(e.to_string().contains("transform"), "{e}");
    let e = refused(&exporting("sluice:transform/transformer@1.0.0", "run"));
    assert!(matches!(e, LoadError::WrongSignature(_)), "{e}");
    assert!(
        e.to_string()
            .contains("does not export a function \"transform\""),
        "{e}"
    );
    let e = refused(&exporting("acme:other/thing@1.0.0", "transform"));
    assert!(matches!(e, LoadError::MissingExport { .. }), "{e}");
    assert!(e.to_string().contains("acme:other/thing@1.0.0"), "{e}");
}

#[test]
fn wrong_import_signature() {
    // `log` taking a u32 instead of (level, string).
    let c = wat::parse_str(
        r#"(component
             (import "sluice:transform/host@1.0.0" (instance $h (export "log" (func (param "x" u32)))))
             (core module $m (func (export "f") (param i32) (result i32) local.get 0))
             (core instance $i (instantiate $m))
             (func $f (param "x" u32) (result u32) (canon lift (core func $i "f")))
             (instance $e (export "transform" (func $f)))
             (export "sluice:transform/transformer@1.0.0" (instance $e)))"#,
    )
    .unwrap();
    let e = refused(&c);
    assert!(matches!(e, LoadError::WrongSignature(_)), "{e}");
    assert!(e.to_string().contains("log"), "{e}");
}

#[test]
fn too_large() {
    let rt = runtime(Limits {
        module_bytes_max: 1024,
        ..small_limits()
    });
    let e = rt.load(&guest("json-migrate")).unwrap_err();
    assert!(matches!(e, LoadError::TooLarge { max: 1024, .. }), "{e}");
}

#[test]
fn the_project_transforms_pass() {
    let rt = runtime(small_limits());
    for name in ["json-migrate", "tensor-migrate"] {
        let m = rt
            .load(&guest(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(m.len > 0);
    }
}
