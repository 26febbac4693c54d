#!/usr/bin/env bash
# The engine's USDT probes under a real bpftrace (root): mounts tracefs
# (else bpftrace prints a detach error at exit), then runs
# dataplane/engine/tests/usdt.rs, which attaches bpftrace to its own
# process, sends requests and checks how often each probe fired, then runs
# the shipped scripts/trace/*.bt on the same traffic. About 10 s once the
# test binary is built (the workspace tests build it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if [ "$(id -u)" != 0 ]; then
    echo "test-usdt: needs root (uprobes)" >&2
    exit 1
fi
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
cargo test -p sluice-engine --test usdt -- --ignored
