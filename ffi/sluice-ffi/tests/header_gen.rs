//! Header generation shared by the staleness test and the regeneration example.
#![allow(dead_code)]

pub fn generate(crate_dir: &std::path::Path) -> Result<String, String> {
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .map_err(|e| format!("cbindgen.toml: {e}"))?;
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .map_err(|e| format!("cbindgen cannot generate the header: {e}"))?
        .write(&mut out);
    String::from_utf8(out).map_err(|_| "the header is not UTF-8".to_string())
}
