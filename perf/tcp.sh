#!/usr/bin/env bash
# TCP on io_uring against its floor, one run (docs: perf/README.md, "tcp.sh"):
#   1. 64 KiB, 1 MiB and 16 MiB requests to the engine over TCP (null model:
#      the answer is as large) against a raw io_uring TCP echo of the same
#      bytes (echo-uring --tcp), in requests/s and GB/s, closed loop with 1
#      and with PIPELINE requests outstanding on one connection;
#   2. small-request p50 over TCP against UDP (perf/mixes/null-small.toml);
#   3. the same 1 MiB tensor through the bundled large-input model over TCP
#      and through NATS request-reply (max_payload raised to 8 MiB).
#
#   perf/tcp.sh            # builds (release), then about 2 min of runs
#   perf/tcp.sh --setup    # fetch nats-server and ORT, build, exit
#
# The server (engine worker, echo, NATS responder) is pinned to core 1 and
# the client to core 0. Fixed ports: run it under the machine's lock
# (flock /tmp/sluice-sys.lock perf/tcp.sh) on a shared host.
# Environment: DURATION (5s), WARMUP (1s), PIPELINE (4), SERVER_CORE (1),
# CLIENT_CORE (0), NATS (1: run the NATS comparison), NATS_PORT (14223), OUT,
# POLL: "block" (default: every server and client sleeps in the kernel
# between completions; on a loaded shared host spinning processes starve
# each other and measure the scheduler) or "spin" (engine poll = "busy",
# echo and clients busy-poll: a dedicated host).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-1s}
PIPELINE=${PIPELINE:-4}
SERVER_CORE=${SERVER_CORE:-1}
CLIENT_CORE=${CLIENT_CORE:-0}
NATS=${NATS:-1}
NATS_PORT=${NATS_PORT:-14223}
NATS_VERSION=${NATS_VERSION:-v2.15.3}
ECHO_ADDR=127.0.0.1:19092
UDP_ADDR=127.0.0.1:17070 # perf/tcp.toml
TCP_ADDR=127.0.0.1:17072
KEY=hex:73756963652d64656d6f2d6b65792d30303030303030303030303030303030
OUT=${OUT:-target/perf-results/tcp-$(date -u +%Y%m%dT%H%M%SZ)}
POLL=${POLL:-block}
case $POLL in
block) spin=(--block) engine_poll='poll = "adaptive"\nspin_us = 0' ;;
spin) spin=() engine_poll='poll = "busy"' ;;
*) echo "POLL is block or spin" >&2; exit 2 ;;
esac

export SLUICE_ORT_LIB=${SLUICE_ORT_LIB:-$(scripts/setup-onnxruntime.sh | tail -1)}
# The worktree's own target dir (release), no extra one.
env -u CARGO_TARGET_DIR cargo build --release -q -p sluice-perf --bins -p sluice-engine --bin sluice-engine
B=$PWD/target/release
if [[ $NATS == 1 ]]; then
    NATS_SERVER=${NATS_SERVER:-$PWD/.cache/bin/nats-server}
    if [[ ! -x $NATS_SERVER ]]; then
        GOBIN=$PWD/.cache/bin go install "github.com/nats-io/nats-server/v2@$NATS_VERSION"
    fi
    CARGO_TARGET_DIR=$PWD/target/perf-nats cargo build --release -q --manifest-path perf/nats-responder/Cargo.toml
    N=$PWD/target/perf-nats/release
fi
[[ ${1:-} == --setup ]] && exit 0
mkdir -p "$OUT"
# The engine's config: perf/tcp.toml with the poll mode and absolute paths.
sed -e "s|^poll = .*|$engine_poll|" -e "s|\.\./models/|$PWD/models/|" perf/tcp.toml >"$OUT/engine.toml"
echo "POLL=$POLL; load before the runs: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/load.txt"

pids=()
stop_all() {
    local i
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill "${pids[i]}" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    pids=()
}
trap stop_all EXIT

# ready CMD...: retries a 1-request run until it answers ok.
ready() {
    for _ in $(seq 100); do
        if "$@" --requests 1 --warmup 0s --json 2>/dev/null | grep -q '"ok":1'; then return 0; fi
        sleep 0.1
    done
    echo "no answer from: $*"
    tail -n 20 "$OUT"/*.log
    exit 1
}

# cpu_ns PID: nanoseconds the process's threads have run (schedstat).
cpu_ns() {
    cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%.0f\n", s }'
}

# run NAME CMD...: one measured run pinned to the client core.
run() {
    local name=$1
    shift
    taskset -c "$CLIENT_CORE" "$@" ${spin[@]+"${spin[@]}"} --duration "$DURATION" --warmup "$WARMUP" --json >"$OUT/$name.json"
}

# cpu NAME N CMD...: N requests (no warm-up); the server's CPU time over
# them goes to NAME.cpu: a cost per request that the host's load hardly
# moves (the latencies and rates above it does, a lot).
cpu() {
    local name=$1 n=$2 before
    shift 2
    before=$(cpu_ns "$server")
    taskset -c "$CLIENT_CORE" "$@" ${spin[@]+"${spin[@]}"} --requests "$n" --warmup 0s --json >"$OUT/$name.json"
    echo $(($(cpu_ns "$server") - before)) >"$OUT/$name.cpu"
}
declare -A COUNT=([tcp-64k]=20000 [tcp-1m]=2000 [tcp-16m]=100)

SIZES="tcp-64k tcp-1m tcp-16m"
echo "== floor: io_uring TCP echo (core $SERVER_CORE)"
taskset -c "$SERVER_CORE" "$B/echo-uring" --tcp ${spin[@]+"${spin[@]}"} --listen "$ECHO_ADDR" >"$OUT/echo.log" 2>&1 &
server=$!
pids+=($server)
ready "$B/loadgen" --mode echo --transport tcp --addr "$ECHO_ADDR" --mix perf/mixes/tcp-64k.toml --timeout 1s
for m in $SIZES; do
    for k in 1 "$PIPELINE"; do
        run "echo-$m-c$k" "$B/loadgen" --mode echo --transport tcp --addr "$ECHO_ADDR" \
            --mix "perf/mixes/$m.toml" --closed "$k" --timeout 5s
    done
    cpu "cpu-echo-$m" "${COUNT[$m]}" "$B/loadgen" --mode echo --transport tcp --addr "$ECHO_ADDR" \
        --mix "perf/mixes/$m.toml" --closed "$PIPELINE" --timeout 5s
done
stop_all

echo "== engine over TCP and UDP (worker on core $SERVER_CORE)"
taskset -c "$SERVER_CORE" "$B/sluice-engine" --config "$OUT/engine.toml" >"$OUT/engine.log" 2>&1 &
server=$!
pids+=($server)
ready "$B/loadgen" --transport tcp --addr "$TCP_ADDR" --mix perf/mixes/tcp-64k.toml --timeout 1s
for m in $SIZES; do
    for k in 1 "$PIPELINE"; do
        run "sluice-$m-c$k" "$B/loadgen" --transport tcp --addr "$TCP_ADDR" \
            --mix "perf/mixes/$m.toml" --closed "$k" --timeout 5s
    done
    cpu "cpu-sluice-$m" "${COUNT[$m]}" "$B/loadgen" --transport tcp --addr "$TCP_ADDR" \
        --mix "perf/mixes/$m.toml" --closed "$PIPELINE" --timeout 5s
done
run small-udp "$B/loadgen" --transport udp --addr "$UDP_ADDR" --mix perf/mixes/null-small.toml --closed 1
run small-tcp "$B/loadgen" --transport tcp --addr "$TCP_ADDR" --mix perf/mixes/null-small.toml --closed 1
for k in 1 "$PIPELINE"; do
    run "sluice-large-1m-c$k" "$B/loadgen" --transport tcp --addr "$TCP_ADDR" \
        --mix perf/mixes/large-1m.toml --closed "$k" --timeout 5s
done
stop_all

if [[ $NATS == 1 ]]; then
    echo "== the 1 MiB tensor through NATS request-reply (responder on core $SERVER_CORE)"
    printf 'listen: 127.0.0.1:%s\nmax_payload: 8MB\n' "$NATS_PORT" >"$OUT/nats.conf"
    "$NATS_SERVER" -c "$OUT/nats.conf" >"$OUT/nats-server.log" 2>&1 &
    pids+=($!)
    sleep 0.3
    rspin=()
    [[ $POLL == block ]] && rspin=(--spin-us 0)
    taskset -c "$SERVER_CORE" "$N/nats-responder" --nats "127.0.0.1:$NATS_PORT" --model models/large.onnx \
        --name large --version 1.0.0 --tenant "1=$KEY" ${rspin[@]+"${rspin[@]}"} >"$OUT/responder.log" 2>&1 &
    server=$!
    pids+=($server)
    ready "$N/nats-requester" --nats "127.0.0.1:$NATS_PORT" --mix perf/mixes/large-1m.toml --timeout 1s
    for k in 1 "$PIPELINE"; do
        run "nats-large-1m-c$k" "$N/nats-requester" --nats "127.0.0.1:$NATS_PORT" \
            --mix perf/mixes/large-1m.toml --closed "$k" --timeout 5s
    done
    stop_all
fi

python3 - "$OUT" "$PIPELINE" <<'PY'
import json, os, sys
out, k = sys.argv[1], sys.argv[2]
def load(name):
    p = os.path.join(out, name + ".json")
    return json.load(open(p)) if os.path.exists(p) else None
frame = {"tcp-64k": 65536 + 256, "tcp-1m": (1 << 20) + 256, "tcp-16m": (16 << 20) + 256}
def errs(r):
    return sum(r["errors"].values()) + r["timeouts"] + r["malformed"] + r["io_errors"]
def cpu_per_req(name):
    # Server CPU per request over a fixed-count run (no warm-up).
    r, p = load(name), os.path.join(out, name + ".cpu")
    if r is None or not os.path.exists(p) or not r["ok"]:
        return float("nan")
    return int(open(p).read()) / 1e3 / r["ok"]
print(f"\n{'run':<24}{'p50 µs':>10}{'p99 µs':>10}{'req/s':>9}{'GB/s':>7}{'err':>5}{'req/s x floor':>14}")
for m in frame:
    for c in ("1", k):
        f, s = load(f"echo-{m}-c{c}"), load(f"sluice-{m}-c{c}")
        for name, r in ((f"echo {m} c{c}", f), (f"sluice {m} c{c}", s)):
            if r is None:
                continue
            # Bytes each way per second (the answer is as large as the request).
            gbs = r["throughput_per_sec"] * frame[m] / 1e9
            ratio = r["throughput_per_sec"] / f["throughput_per_sec"] if f and f["throughput_per_sec"] else float("nan")
            print(f"{name:<24}{r['latency_us']['p50']:>10.1f}{r['latency_us']['p99']:>10.1f}"
                  f"{r['throughput_per_sec']:>9.0f}{gbs:>7.2f}{errs(r):>5}{ratio:>14.2f}")
print(f"\n{'server CPU per request':<24}{'echo µs':>10}{'sluice µs':>11}{'sluice/echo':>13}{'floor/sluice':>14}")
for m in frame:
    e, s = cpu_per_req(f"cpu-echo-{m}"), cpu_per_req(f"cpu-sluice-{m}")
    print(f"{m + ' c' + k:<24}{e:>10.1f}{s:>11.1f}{s / e:>13.2f}{e / s:>14.2f}")
u, t = load("small-udp"), load("small-tcp")
if u and t:
    print(f"\nsmall request, closed 1: p50 UDP {u['latency_us']['p50']:.1f} µs, TCP {t['latency_us']['p50']:.1f} µs,"
          f" TCP/UDP {t['latency_us']['p50'] / u['latency_us']['p50']:.2f}; req/s UDP {u['throughput_per_sec']:.0f}, TCP {t['throughput_per_sec']:.0f}")
for c in ("1", k):
    s, n = load(f"sluice-large-1m-c{c}"), load(f"nats-large-1m-c{c}")
    if s and n:
        print(f"1 MiB through large.onnx c{c}: Sluice TCP p50 {s['latency_us']['p50']:.0f} µs {s['throughput_per_sec']:.0f} req/s,"
              f" NATS p50 {n['latency_us']['p50']:.0f} µs {n['throughput_per_sec']:.0f} req/s;"
              f" NATS/Sluice p50 {n['latency_us']['p50'] / s['latency_us']['p50']:.2f}, Sluice/NATS req/s {s['throughput_per_sec'] / n['throughput_per_sec']:.2f}"
              f" (errors {errs(s)}/{errs(n)})")
print(open(os.path.join(out, "load.txt")).read().strip(), f"; after: {open('/proc/loadavg').read().split()[:3]}")
print(f"raw results: {out}")
PY
