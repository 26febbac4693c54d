//! Makes components of the sluice:transform world from core modules: what
//! `wasm-tools component embed` and `component new` do, as a library for
//! scripts/build-transforms.sh and for tests that write core modules by hand.

use std::path::Path;

/// Wraps a core module that carries its world in a `component-type` custom
/// section into a validated component.
pub fn componentize(core: &[u8]) -> Result<Vec<u8>, String> {
    wit_component::ComponentEncoder::default()
        .validate(true)
        .module(core)
        .map_err(|e| format!("{e:#}"))?
        .encode()
        .map_err(|e| format!("{e:#}"))
}

/// Adds the world `world` of the WIT package in `wit_dir` to a core module
/// as its `component-type` custom section.
pub fn embed_world(core: &mut Vec<u8>, wit_dir: &Path, world: &str) -> Result<(), String> {
    let mut resolve = wit_parser::Resolve::default();
    let (pkg, _) = resolve
        .push_dir(wit_dir)
        .map_err(|e| format!("{}: {e:#}", wit_dir.display()))?;
    let world = resolve
        .select_world(&[pkg], Some(world))
        .map_err(|e| format!("{e:#}"))?;
    wit_component::embed_component_metadata(
        core,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .map_err(|e| format!("{e:#}"))
}
