//! Regenerates the bundled models: `gen-models [DIR]` (default: the
//! repository's `models/`).
use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = std::env::args_os()
        .nth(1)
        .map(Into::into)
        .unwrap_or_else(sluice_models::models_dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("gen-models: cannot create {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    for (name, bytes) in sluice_models::bundled::bundled_files() {
        let path = dir.join(name);
        if let Err(e) = std::fs::write(&path, &bytes) {
            eprintln!("gen-models: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("{} ({} bytes)", path.display(), bytes.len());
    }
    ExitCode::SUCCESS
}
