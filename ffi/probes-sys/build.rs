//! Compiles the probe shim. With sys/sdt.h (Debian's systemtap-sdt-dev,
//! installed by scripts/setup.sh) the probes are real USDT probes with
//! semaphores; without it they compile to nothing and the build says so.
#![allow(
    clippy::expect_used,
    reason = "a build script reports failure by panicking; cargo prints the message"
)]

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=src/shim.c");
    println!("cargo:rustc-check-cfg=cfg(sluice_probes)");
    let have_sdt = [
        "/usr/include/sys/sdt.h",
        "/usr/include/x86_64-linux-gnu/sys/sdt.h",
        "/usr/include/aarch64-linux-gnu/sys/sdt.h",
    ]
    .iter()
    .any(|p| Path::new(p).exists());
    let mut b = cc::Build::new();
    b.file("src/shim.c").opt_level(2);
    if have_sdt {
        b.define("SLUICE_HAVE_SDT", "1");
        println!("cargo:rustc-cfg=sluice_probes");
    } else {
        println!(
            "cargo:warning=sys/sdt.h not found (apt-get install systemtap-sdt-dev): USDT probes are compiled out"
        );
    }
    b.compile("sluice_probes");
}
