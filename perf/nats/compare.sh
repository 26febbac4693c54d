#!/usr/bin/env bash
# Sluice against NATS request-reply, on one machine in one run: the same
# request frames (perf/mixes/mlp.toml: the bundled MLP, x f32 [1,4] with 1 in
# 5 through the LoRA adapter; perf/nats/mlp-large.toml: x f32 [1024,4]), the
# same ONNX model run in place by sluice-infer, the same closed-loop HDR load
# loop (sluice-perf's driver). Only the path differs:
#   Sluice: loadgen -> UDP (io_uring engine, worker pinned) -> ORT -> reply
#   NATS:   nats-requester -> TCP -> nats-server -> TCP -> nats-responder -> ORT -> back the same way
# Then the fleet test's schema-change-to-use time (go-control/internal/fleet).
#
#   perf/nats/compare.sh            # everything (about 2 min plus builds)
#   perf/nats/compare.sh --setup    # fetch nats-server and ORT, build, exit
#
# Environment: DURATION (5s), WARMUP (1s), PIPELINE (32), MIXES, SERVER_CORE
# (1: engine worker / responder), CLIENT_CORE (0: loadgen / requester),
# NATS_CORES (cpu list for nats-server; default all), RESPONDER_SPIN_US
# (200, as the engine's adaptive spin_us), NATS_PORT (14222), FLEET (1: run
# the fleet test too), OUT (results dir).
set -euo pipefail
cd "$(dirname "$0")/../.."

DURATION=${DURATION:-5s}
WARMUP=${WARMUP:-1s}
PIPELINE=${PIPELINE:-32}
MIXES=${MIXES:-"perf/mixes/mlp.toml perf/nats/mlp-large.toml"}
SERVER_CORE=${SERVER_CORE:-1}
CLIENT_CORE=${CLIENT_CORE:-0}
NATS_CORES=${NATS_CORES:-0-$(($(nproc) - 1))}
RESPONDER_SPIN_US=${RESPONDER_SPIN_US:-200}
NATS_PORT=${NATS_PORT:-14222}
NATS_VERSION=${NATS_VERSION:-v2.15.3} # the version go-control/go.mod embeds
SLUICE_ADDR=127.0.0.1:7070            # cfg/sluice.toml
FLEET=${FLEET:-1}
OUT=${OUT:-target/perf-results/nats-$(date -u +%Y%m%dT%H%M%SZ)}
KEY=hex:73756963652d64656d6f2d6b65792d30303030303030303030303030303030 # demo tenant

# nats-server from the Go module proxy, into .cache/bin.
NATS_SERVER=${NATS_SERVER:-$PWD/.cache/bin/nats-server}
if [[ ! -x $NATS_SERVER ]]; then
    GOBIN=$PWD/.cache/bin go install "github.com/nats-io/nats-server/v2@$NATS_VERSION"
fi
export SLUICE_ORT_LIB=${SLUICE_ORT_LIB:-$(scripts/setup-onnxruntime.sh | tail -1)}
CARGO_TARGET_DIR=$PWD/target/perf cargo build --release -q -p sluice-perf --bins -p sluice-engine --bin sluice-engine
CARGO_TARGET_DIR=$PWD/target/perf-nats cargo build --release -q --manifest-path perf/nats-responder/Cargo.toml
B=$PWD/target/perf/release
N=$PWD/target/perf-nats/release
[[ ${1:-} == --setup ]] && exit 0
mkdir -p "$OUT"

pids=()
stop_all() {
    local i
    # Newest first: the responder goes before the server it talks to.
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
    echo "no answer from: $*"; tail "$OUT"/*.log; exit 1
}

for mix in $MIXES; do
    m=$(basename "$mix" .toml)
    echo "== $m: Sluice engine (core $SERVER_CORE) / loadgen (core $CLIENT_CORE)"
    taskset -c "$SERVER_CORE" "$B/sluice-engine" --config cfg/sluice.toml >"$OUT/engine-$m.log" 2>&1 &
    pids+=($!)
    ready "$B/loadgen" --addr "$SLUICE_ADDR" --mix "$mix" --timeout 100ms
    for load in closed1:1 pipelined:"$PIPELINE"; do
        taskset -c "$CLIENT_CORE" "$B/loadgen" --addr "$SLUICE_ADDR" --mix "$mix" --closed "${load#*:}" \
            --duration "$DURATION" --warmup "$WARMUP" --json >"$OUT/sluice-$m-${load%%:*}.json"
    done
    stop_all

    echo "== $m: nats-server (cores $NATS_CORES), nats-responder (core $SERVER_CORE) / nats-requester (core $CLIENT_CORE)"
    taskset -c "$NATS_CORES" "$NATS_SERVER" -a 127.0.0.1 -p "$NATS_PORT" >"$OUT/nats-server-$m.log" 2>&1 &
    pids+=($!)
    sleep 0.3
    taskset -c "$SERVER_CORE" "$N/nats-responder" --nats "127.0.0.1:$NATS_PORT" --model models/mlp.onnx \
        --adapter formal=models/mlp_formal.onnx_adapter --tenant "1=$KEY" --spin-us "$RESPONDER_SPIN_US" \
        >"$OUT/responder-$m.log" 2>&1 &
    pids+=($!)
    ready "$N/nats-requester" --nats "127.0.0.1:$NATS_PORT" --mix "$mix" --timeout 100ms
    for load in closed1:1 pipelined:"$PIPELINE"; do
        taskset -c "$CLIENT_CORE" "$N/nats-requester" --nats "127.0.0.1:$NATS_PORT" --mix "$mix" --closed "${load#*:}" \
            --duration "$DURATION" --warmup "$WARMUP" --json >"$OUT/nats-$m-${load%%:*}.json"
    done
    stop_all
done

python3 - "$OUT" $MIXES <<'PY'
import json, os, sys
out, mixes = sys.argv[1], [os.path.basename(m)[:-5] for m in sys.argv[2:]]
def load(name):
    p = os.path.join(out, name + ".json")
    return json.load(open(p)) if os.path.exists(p) else None
print(f"\n{'run':<34}{'p50 µs':>10}{'p99 µs':>10}{'req/s':>10}{'errors':>8}")
rows = []
for m in mixes:
    for load_ in ("closed1", "pipelined"):
        s, n = load(f"sluice-{m}-{load_}"), load(f"nats-{m}-{load_}")
        for name, r in ((f"sluice {m} {load_}", s), (f"nats {m} {load_}", n)):
            errs = sum(r["errors"].values()) + r["timeouts"] + r["malformed"] + r["io_errors"]
            print(f"{name:<34}{r['latency_us']['p50']:>10.1f}{r['latency_us']['p99']:>10.1f}{r['throughput_per_sec']:>10.0f}{errs:>8}")
        rows.append((m, load_, n["latency_us"]["p50"] / s["latency_us"]["p50"], n["latency_us"]["p99"] / s["latency_us"]["p99"],
                     s["throughput_per_sec"] / n["throughput_per_sec"]))
print(f"\n{'ratio (NATS / Sluice)':<34}{'p50':>10}{'p99':>10}{'tput S/N':>10}")
for m, l, a, b, c in rows:
    print(f"{m + ' ' + l:<34}{a:>10.2f}{b:>10.2f}{c:>10.2f}")
print(f"raw results: {out}")
PY

if [[ $FLEET == 1 ]]; then
    echo "== fleet: 3-node NATS cluster, 3 appliances (go-control/internal/fleet)"
    (cd go-control && go test -count=1 -run 'TestFleet$' -v ./internal/fleet | grep -E '^FLEET|fleet_test.go|^(ok|FAIL|---)')
fi
