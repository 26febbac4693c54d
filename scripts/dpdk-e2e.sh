#!/usr/bin/env bash
# Runs the DPDK end-to-end tests for real, as root: reserves hugepages,
# builds a veth pair with the client end in its own namespace, runs
# `cargo test --features dpdk --test e2e_dpdk --test e2e_dpdk_large`
# (AF_XDP, AF_PACKET and net_pcap vdevs; fragments, jumbo frames, nftables
# loss), and tears everything down on every exit path, failures included.
#
#   sudo scripts/dpdk-e2e.sh [test name filter] [extra cargo test args]
#
# Needs: libdpdk-dev pkg-config clang libclang-dev iproute2 nftables, and
# DPDK's ip_frag sources (scripts/setup-dpdk-src.sh; scripts/setup.sh runs both).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "dpdk-e2e: run as root (hugepages, namespaces, AF_XDP)" >&2; exit 1; }
export SLUICE_NETNS=${SLUICE_NETNS:-sluice-dpdk}
export SLUICE_IF0=${SLUICE_IF0:-sldpdk0}
export SLUICE_IF1=${SLUICE_IF1:-sldpdk1}
export SLUICE_PEER_IP=10.99.0.2 SLUICE_APP_IP=10.99.0.1
pages=${SLUICE_HUGEPAGES:-256}

cleanup() {
    rc=$?
    "$root/scripts/netns-teardown.sh"
    "$root/scripts/hugepages.sh" release >/dev/null || true
    # testpmd (the flood scenario's generator) leaves its EAL runtime dir.
    rm -rf /var/run/dpdk/sl-e2e-*
    echo "dpdk-e2e: cleaned up (HugePages_Free $(awk '/^HugePages_Free:/ {print $2}' /proc/meminfo)); exit $rc" >&2
    exit $rc
}
trap cleanup EXIT INT TERM

# A previous run killed hard may have left its topology behind.
"$root/scripts/netns-teardown.sh"
# The largest scenario maps up to 192 MiB (96 pages). With fewer free
# (fragmented memory on a shared host), every scenario runs with --no-huge
# instead and the hugepage accounting checks are skipped; it says so.
if ! "$root/scripts/hugepages.sh" reserve "$pages" "${SLUICE_HUGEPAGES_MIN:-96}"; then
    echo "dpdk-e2e: NOTE: too few hugepages: running every scenario with --no-huge (pools in normal pages; hugepage accounting not checked)" >&2
    export SLUICE_DPDK_NO_HUGE=1
fi
"$root/scripts/netns-setup.sh"

# librte_ip_frag is built from DPDK's sources with 64 fragments per
# datagram (Debian's takes 8; a 60 KB datagram at MTU 1500 is 41).
"$root/scripts/setup-dpdk-src.sh" >/dev/null
command -v nft >/dev/null || { echo "dpdk-e2e: nft missing (apt-get install nftables)" >&2; exit 1; }

cd "$root"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
SLUICE_DPDK_E2E=1 cargo test -p sluice-engine --features dpdk --test e2e_dpdk --test e2e_dpdk_large "$@" -- --test-threads=1
