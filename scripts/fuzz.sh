#!/usr/bin/env bash
# Runs each cargo-fuzz target of fuzz/ for a bounded time and exits non-zero
# if any of them finds a crash (panic, abort, leak, timeout or OOM).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 60, all targets)
#
# Needs a nightly toolchain and cargo-fuzz:
#   rustup toolchain install nightly --profile minimal
#   cargo install cargo-fuzz --locked
# Environment: FUZZ_TARGET_DIR (build dir, default target/fuzz),
# FUZZ_MAX_LEN_BYTES (default 8192).
set -euo pipefail

seconds=${1:-60}
shift || true
case $seconds in
    ''|*[!0-9]*) echo "usage: $0 [SECONDS_PER_TARGET] [TARGET...]" >&2; exit 2 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
targets=("$@")
# The DPDK fragment target needs DPDK (libdpdk-dev) and its ip_frag sources.
features=()
if pkg-config --exists libdpdk 2>/dev/null && "$root/scripts/setup-dpdk-src.sh" >/dev/null; then
    features=(--features dpdk)
fi
if [ ${#targets[@]} -eq 0 ]; then
    targets=(parse_frame roundtrip validate_json compile_json validate_avro validate_protobuf)
    if [ ${#features[@]} -gt 0 ]; then
        targets+=(frag_reassembly)
    else
        echo "fuzz: DPDK not found: frag_reassembly skipped (apt-get install libdpdk-dev pkg-config)" >&2
    fi
fi
if ! command -v cargo-fuzz >/dev/null; then
    echo "cargo-fuzz missing: cargo install cargo-fuzz --locked" >&2
    exit 2
fi
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "nightly toolchain missing: rustup toolchain install nightly --profile minimal" >&2
    exit 2
fi

target_dir=${FUZZ_TARGET_DIR:-$root/target/fuzz}
max_len=${FUZZ_MAX_LEN_BYTES:-8192}
cd "$root/fuzz"
cargo +nightly fuzz build "${features[@]}" --target-dir "$target_dir"

# Targets run FUZZ_PARALLEL at a time (default: one per core), each for
# its full time on a core of its own: the same fuzzing per target, in a
# fraction of the wall time. Each one's output goes to its own log,
# printed whole when it ends.
parallel=${FUZZ_PARALLEL:-$(nproc)}
logs=$target_dir/fuzz-logs
mkdir -p "$logs"
fuzz_one() {
    local t=$1
    # New inputs go to a scratch corpus under target/; the checked-in seeds
    # are only read.
    local work=$target_dir/corpus/$t
    # Checked-in seeds: the target's own, else the wire examples.
    local seeds=$root/fuzz/corpus/$t
    [ -d "$seeds" ] || seeds=$root/fuzz/corpus/parse_frame
    local artifacts=$root/fuzz/artifacts/$t
    mkdir -p "$work" "$artifacts"
    echo "== fuzz $t for ${seconds}s"
    if cargo +nightly fuzz run "${features[@]}" --target-dir "$target_dir" "$t" "$work" "$seeds" -- \
        -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$artifacts/" -print_final_stats=1; then
        echo "== $t: no crash"
    else
        echo "== $t: CRASH, reproducer in $artifacts/" >&2
        ls -l "$artifacts" >&2
        return 1
    fi
}

failed=()
pids=()
names=()
wait_one() {
    local pid=${pids[0]} t=${names[0]}
    pids=("${pids[@]:1}")
    names=("${names[@]:1}")
    local rc=0
    wait "$pid" || rc=$?
    cat "$logs/$t.log"
    [ $rc -eq 0 ] || failed+=("$t")
}
for t in "${targets[@]}"; do
    if [ ${#pids[@]} -ge "$parallel" ]; then
        wait_one
    fi
    fuzz_one "$t" >"$logs/$t.log" 2>&1 &
    pids+=($!)
    names+=("$t")
done
while [ ${#pids[@]} -gt 0 ]; do
    wait_one
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz targets that crashed: ${failed[*]}" >&2
    exit 1
fi
