//! `sluice-componentize IN.wasm OUT.wasm`: turns a core module built with
//! wit-bindgen (which embeds its world) into a component, validated. Used
//! by scripts/build-transforms.sh.

use std::process::ExitCode;

fn run(input: &str, output: &str) -> Result<(), String> {
    let core = std::fs::read(input).map_err(|e| format!("{input}: {e}"))?;
    let component =
        sluice_componentize::componentize(&core).map_err(|e| format!("{input}: {e}"))?;
    std::fs::write(output, component).map_err(|e| format!("{output}: {e}"))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let [_, input, output] = args.as_slice() else {
        eprintln!("usage: sluice-componentize IN.wasm OUT.wasm");
        return ExitCode::from(2);
    };
    match run(input, output) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice-componentize: {e}");
            ExitCode::FAILURE
        }
    }
}
