//! Regenerates ffi/include/sluice.h from this crate with cbindgen.
fn main() -> Result<(), String> {
    let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let header = sluice_ffi_header::generate(crate_dir)?;
    let out = crate_dir.join("../include/sluice.h");
    std::fs::write(&out, header).map_err(|e| format!("write {}: {e}", out.display()))?;
    println!("wrote {}", out.display());
    Ok(())
}

#[path = "../tests/header_gen.rs"]
mod sluice_ffi_header;
