#!/usr/bin/env bash
# The cost of request tracing and of the USDT probes, as p50/p99 ratios
# against the io_uring echo floor of the same run (docs/observability.md):
#
#   floor        raw echo of the same datagrams (perf/compare.sh's floor)
#   off          the engine, requests without a trace context
#   sampled 1%   1 request in 100 marked sampled by the caller
#   sampled 100% every request sampled: a span record each, drained
#   bpftrace     as "off", with bpftrace attached to all 11 USDT probes
#                (root; semaphores set, every probe fires)
#
# Closed loop, 1 outstanding; server pinned to SERVER_CORE, loadgen to
# CLIENT_CORE, both spinning. The standalone engine drains the span rings
# as sluiced does, without exporting (the export runs on the control side).
#
#   perf/tracing.sh           DURATION (5s), WARMUP (1s), PORT (19090), OUT
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-1s}
PORT=${PORT:-19090}
EPORT=$((PORT + 1))
SERVER_CORE=${SERVER_CORE:-1}
CLIENT_CORE=${CLIENT_CORE:-0}
OUT=${OUT:-target/perf-results/tracing-$(date -u +%Y%m%dT%H%M%SZ)}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target/perf}
cargo build --release -q -p sluice-perf --bins
cargo build --release -q -p sluice-engine --bin sluice-engine
BIN=$CARGO_TARGET_DIR/release
mkdir -p "$OUT"
# Beside cfg/sluice.toml: its relative paths (models, ONNX Runtime) resolve
# against the config's directory.
ecfg=cfg/.perf-tracing-$$.toml
sed -e "s/^listen = \"127.0.0.1:7070\"/listen = \"127.0.0.1:$EPORT\"/" cfg/sluice.toml >"$ecfg"
grep -q "127.0.0.1:$EPORT" "$ecfg"

server_pid=
bt_pid=
stop_all() {
    # bpftrace prints its maps on SIGINT; the servers stop on SIGTERM.
    [ -n "$bt_pid" ] && { kill -INT "$bt_pid" 2>/dev/null || true; wait "$bt_pid" 2>/dev/null || true; }
    [ -n "$server_pid" ] && { kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; }
    bt_pid= server_pid=
}
trap 'stop_all; rm -f "$ecfg"' EXIT

start_server() {
    local log=$1 mode=$2 addr=$3 mix=$4
    shift 4
    taskset -c "$SERVER_CORE" "$@" >"$log" 2>&1 &
    server_pid=$!
    for _ in $(seq 50); do
        if "$BIN/loadgen" --mode "$mode" --addr "$addr" --mix "$mix" --requests 1 \
            --timeout 100ms --json 2>/dev/null | grep -q '"ok":1'; then
            return 0
        fi
        kill -0 "$server_pid" 2>/dev/null || { echo "server exited:"; cat "$log"; exit 1; }
        sleep 0.1
    done
    echo "server did not answer on $addr"; cat "$log"; exit 1
}

run() {
    local name=$1 mode=$2 addr=$3 mix=$4
    taskset -c "$CLIENT_CORE" "$BIN/loadgen" --mode "$mode" --addr "$addr" --mix "$mix" \
        --duration "$DURATION" --warmup "$WARMUP" --json --closed 1 >"$OUT/$name.json"
}

echo "tracing cost: engine on core $SERVER_CORE, loadgen on core $CLIENT_CORE, $DURATION per run"
start_server "$OUT/echo.log" echo "127.0.0.1:$PORT" perf/mixes/null-small.toml "$BIN/echo-uring" --listen "127.0.0.1:$PORT"
run floor echo "127.0.0.1:$PORT" perf/mixes/null-small.toml
stop_all

for r in "off perf/mixes/null-small.toml" "sampled-1pct perf/mixes/null-traced-1pct.toml" "sampled-100pct perf/mixes/null-traced.toml"; do
    set -- $r
    start_server "$OUT/engine-$1.log" sluice "127.0.0.1:$EPORT" "$2" "$BIN/sluice-engine" --config "$ecfg"
    run "$1" sluice "127.0.0.1:$EPORT" "$2"
    stop_all
    tail -1 "$OUT/engine-$1.log"
done

if [ "$(id -u)" = 0 ] && command -v bpftrace >/dev/null; then
    mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
    start_server "$OUT/engine-bpftrace.log" sluice "127.0.0.1:$EPORT" perf/mixes/null-small.toml "$BIN/sluice-engine" --config "$ecfg"
    script=""
    for p in parse auth validate route admit infer_start infer_end send pool_alloc pool_free error; do
        script="$script usdt:$BIN/sluice-engine:sluice:$p { @$p = count(); }"
    done
    bpftrace -p "$server_pid" -e "$script" >"$OUT/bpftrace.out" 2>&1 &
    bt_pid=$!
    for _ in $(seq 100); do grep -q Attaching "$OUT/bpftrace.out" && break; sleep 0.1; done
    sleep 1 # the semaphores are set one probe at a time
    run bpftrace sluice "127.0.0.1:$EPORT" perf/mixes/null-small.toml
    stop_all
    grep -E "^@(parse|send|error):" "$OUT/bpftrace.out" || true
else
    echo "bpftrace run skipped (needs root and bpftrace)"
fi

python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
def load(n):
    p = os.path.join(out, n + ".json")
    return json.load(open(p)) if os.path.exists(p) else None
f = load("floor")
print(f"{'run':<16}{'p50 µs':>9}{'p99 µs':>9}{'req/s':>10}{'errors':>8}{'p50 ×floor':>12}{'p99 ×floor':>12}")
for n in ["floor", "off", "sampled-1pct", "sampled-100pct", "bpftrace"]:
    r = load(n)
    if r is None:
        continue
    l = r["latency_us"]
    errs = sum(r["errors"].values()) + r["timeouts"] + r["malformed"] + r["io_errors"]
    print(f"{n:<16}{l['p50']:>9.1f}{l['p99']:>9.1f}{r['throughput_per_sec']:>10.0f}{errs:>8}{l['p50']/f['latency_us']['p50']:>12.2f}{l['p99']/f['latency_us']['p99']:>12.2f}")
print(f"raw results: {out}")
PY
