//! Finds the system DPDK with pkg-config, generates bindings with bindgen and
//! compiles the C shim with the raw DPDK cflags (the pkg-config crate would
//! drop `-include rte_config.h -march=...`, which DPDK headers need).
#![allow(
    clippy::expect_used,
    reason = "a build script reports failure by panicking; cargo prints the message"
)]

use std::env;
use std::path::PathBuf;
use std::process::Command;

/// DPDK libraries the engine calls into; PMDs are loaded by EAL as plugins.
const LIBS: &[&str] = &[
    "rte_eal",
    "rte_mempool",
    "rte_mbuf",
    "rte_ethdev",
    "rte_net",
    "rte_ring",
    "rte_kvargs",
];

/// `pkg-config ARG libdpdk`, or why it failed.
fn pkg_config(arg: &str) -> Result<Vec<String>, String> {
    let tool = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".into());
    match Command::new(&tool).args([arg, "libdpdk"]).output() {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect()),
        Ok(o) => Err(format!(
            "`{tool} {arg} libdpdk` failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("cannot run {tool}: {e}")),
    }
}

fn main() {
    println!("cargo:rerun-if-changed=src/shim.c");
    println!("cargo:rerun-if-changed=src/shim.h");
    println!("cargo:rerun-if-changed=src/wrapper.h");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    println!("cargo:rerun-if-env-changed=PKG_CONFIG");
    println!("cargo::rustc-check-cfg=cfg(dpdk_missing)");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let (cflags, libs) = match pkg_config("--cflags").and_then(|c| Ok((c, pkg_config("--libs")?))) {
        Ok(v) => v,
        Err(e) => {
            // The workspace must build on hosts without DPDK: this crate is
            // then empty, and only the engine's `dpdk` feature (which needs
            // it) fails, pointing here.
            println!(
                "cargo:warning=dpdk-sys: DPDK not found ({e}); built empty. \
                 Install libdpdk-dev and pkg-config (Debian) to use the engine's `dpdk` feature."
            );
            println!("cargo:rustc-cfg=dpdk_missing");
            std::fs::write(out.join("bindings.rs"), "").expect("write empty bindings");
            return;
        }
    };
    for l in libs {
        if let Some(dir) = l.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
        }
    }
    for l in LIBS {
        println!("cargo:rustc-link-lib=dylib={l}");
    }

    let mut cc = cc::Build::new();
    cc.file("src/shim.c")
        .include("src")
        .opt_level(2)
        .warnings(true);
    for f in &cflags {
        cc.flag(f);
    }
    cc.compile("sluice_dpdk_shim");

    bindgen::Builder::default()
        .header("src/wrapper.h")
        .clang_args(cflags.iter().cloned())
        .clang_arg("-Isrc")
        .allowlist_function("sl_.*")
        .allowlist_function("rte_eal_(init|cleanup|process_type)")
        .allowlist_function("rte_eth_(dev_count_avail|dev_configure|rx_queue_setup|tx_queue_setup|dev_start|dev_stop|dev_close|dev_info_get|macaddr_get|link_get_nowait|dev_get_port_by_name|stats_get|stats_reset|dev_socket_id|promiscuous_enable|dev_set_mtu|dev_get_mtu|dev_adjust_nb_rx_tx_desc|find_next_owned_by|xstats_get_names|xstats_get)")
        .allowlist_function("rte_pktmbuf_(pool_create|free_bulk)")
        .allowlist_function("rte_mempool_(free|avail_count|in_use_count)")
        .allowlist_function("rte_thread_(register|unregister)")
        .allowlist_function("rte_(strerror|socket_id|lcore_count|version)")
        .allowlist_type("rte_eth_(conf|dev_info|link|stats|txconf|rxconf|xstat|xstat_name)")
        .allowlist_type("rte_ether_addr")
        .allowlist_var("RTE_ETH_.*")
        .allowlist_var("RTE_MAX_ETHPORTS|RTE_MBUF_DEFAULT_BUF_SIZE|RTE_PKTMBUF_HEADROOM|RTE_MAX_LCORE|SOCKET_ID_ANY|LCORE_ID_ANY")
        .opaque_type("rte_l2tpv2_combined_msg_hdr")
        .derive_debug(false)
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false)
        .generate()
        .expect("dpdk-sys: bindgen over DPDK headers failed")
        .write_to_file(out.join("bindings.rs"))
        .expect("dpdk-sys: cannot write bindings");
}
