#!/usr/bin/env bash
# The raw-echo floor of the io_uring UDP transport on loopback, measured with
# the same load generator and the same datagrams as Sluice requests.
#
#   perf/compare.sh                       # io_uring echo (busy, blocking), std echo
#   SLUICE_ENGINE_CMD='...' perf/compare.sh   # plus the engine, with ratios
#
# The server runs pinned to core 1, loadgen pinned to core 0, both spinning.
# Absolute times on a shared VM are noisy: compare the ratios of one run.
#
# Environment:
#   DURATION (5s), WARMUP (1s), PIPELINE (32 outstanding for throughput),
#   MIX (perf/mixes/null-small.toml), PORT (19090), OUT (results dir),
#   SERVER_CORE (1), CLIENT_CORE (0),
#   RT=1: run server and loadgen SCHED_FIFO (chrt -f 50), for dedicated
#   hosts: a busy-polling task then keeps its core against other load
#   (it starves everything else on those cores while it runs),
#   SLUICE_ENGINE_CMD: a command that runs the engine in the foreground,
#   listening on SLUICE_ADDR (127.0.0.1:7070); it is started pinned to
#   SERVER_CORE and stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-1s}
PIPELINE=${PIPELINE:-32}
MIX=${MIX:-perf/mixes/null-small.toml}
PORT=${PORT:-19090}
SERVER_CORE=${SERVER_CORE:-1}
CLIENT_CORE=${CLIENT_CORE:-0}
SLUICE_ADDR=${SLUICE_ADDR:-127.0.0.1:7070}
OUT=${OUT:-target/perf-results/$(date -u +%Y%m%dT%H%M%SZ)}
prio=()
if [[ ${RT:-0} == 1 ]]; then prio=(chrt -f 50); fi
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target/perf}

cargo build --release -q -p sluice-perf --bins
BIN=$CARGO_TARGET_DIR/release
mkdir -p "$OUT"

server_pid=
stop_server() {
    if [[ -n $server_pid ]]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
        server_pid=
    fi
}
trap stop_server EXIT

# start_server LOG CMD...: runs CMD pinned to the server core and waits until
# ADDR answers (a 1-request loadgen run in echo or sluice mode).
start_server() {
    local log=$1 mode=$2 addr=$3
    shift 3
    taskset -c "$SERVER_CORE" ${prio[@]+"${prio[@]}"} "$@" >"$log" 2>&1 &
    server_pid=$!
    for _ in $(seq 50); do
        if "$BIN/loadgen" --mode "$mode" --addr "$addr" --mix "$MIX" --requests 1 \
            --timeout 100ms --json 2>/dev/null | grep -q '"ok":1'; then
            return 0
        fi
        kill -0 "$server_pid" 2>/dev/null || { echo "server exited:"; cat "$log"; exit 1; }
        sleep 0.1
    done
    echo "server did not answer on $addr"; cat "$log"; exit 1
}

# run NAME MODE ADDR LOAD...: one loadgen run pinned to the client core.
run() {
    local name=$1 mode=$2 addr=$3
    shift 3
    taskset -c "$CLIENT_CORE" ${prio[@]+"${prio[@]}"} "$BIN/loadgen" --mode "$mode" --addr "$addr" --mix "$MIX" \
        --duration "$DURATION" --warmup "$WARMUP" --json "$@" >"$OUT/$name.json"
}

echo "io_uring echo on core $SERVER_CORE, loadgen on core $CLIENT_CORE, $DURATION per run, mix $MIX"

start_server "$OUT/echo-uring.log" echo "127.0.0.1:$PORT" "$BIN/echo-uring" --listen "127.0.0.1:$PORT"
run uring-closed1 echo "127.0.0.1:$PORT" --closed 1
run uring-pipelined echo "127.0.0.1:$PORT" --closed "$PIPELINE"
stop_server

start_server "$OUT/echo-uring-block.log" echo "127.0.0.1:$PORT" "$BIN/echo-uring" --block --listen "127.0.0.1:$PORT"
run uring-block-closed1 echo "127.0.0.1:$PORT" --closed 1
run uring-block-pipelined echo "127.0.0.1:$PORT" --closed "$PIPELINE"
stop_server

start_server "$OUT/echo-std.log" echo "127.0.0.1:$PORT" "$BIN/echo-uring" --std --listen "127.0.0.1:$PORT"
run std-closed1 echo "127.0.0.1:$PORT" --closed 1
run std-pipelined echo "127.0.0.1:$PORT" --closed "$PIPELINE"
stop_server

if [[ -n ${SLUICE_ENGINE_CMD:-} ]]; then
    # shellcheck disable=SC2086 # the command is meant to be word-split
    start_server "$OUT/engine.log" sluice "$SLUICE_ADDR" $SLUICE_ENGINE_CMD
    run sluice-closed1 sluice "$SLUICE_ADDR" --closed 1
    run sluice-pipelined sluice "$SLUICE_ADDR" --closed "$PIPELINE"
    stop_server
fi

python3 - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
def load(name):
    p = os.path.join(out, name + ".json")
    return json.load(open(p)) if os.path.exists(p) else None
rows = ["uring-closed1", "uring-pipelined", "uring-block-closed1", "uring-block-pipelined", "std-closed1", "std-pipelined", "sluice-closed1", "sluice-pipelined"]
base = {"closed1": load("uring-closed1"), "pipelined": load("uring-pipelined")}
print(f"{'run':<22}{'p50 µs':>10}{'p99 µs':>10}{'p99.9 µs':>10}{'req/s':>12}{'errors':>8}{'p50 ×floor':>12}{'req/s ×floor':>14}")
for name in rows:
    r = load(name)
    if r is None:
        continue
    b = base["closed1" if name.endswith("closed1") else "pipelined"]
    lat = r["latency_us"]
    errs = sum(r["errors"].values()) + r["timeouts"] + r["malformed"] + r["io_errors"]
    ratio = lat["p50"] / b["latency_us"]["p50"] if b and b["latency_us"]["p50"] else float("nan")
    tput = r["throughput_per_sec"] / b["throughput_per_sec"] if b and b["throughput_per_sec"] else float("nan")
    print(f"{name:<22}{lat['p50']:>10.1f}{lat['p99']:>10.1f}{lat['p99_9']:>10.1f}{r['throughput_per_sec']:>12.0f}{errs:>8}{ratio:>12.2f}{tput:>14.2f}")
print(f"raw results: {out}")
EOF
