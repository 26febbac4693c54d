#!/usr/bin/env bash
# The latency Sluice adds to an inference, in one run: for the bundled MLP at
# batch 1 and batch 32, the round trip through Sluice (io_uring, tenant
# check, routing, ONNX Runtime in place) against the raw io_uring echo of the
# same bytes plus the same ONNX Runtime run called in-process.
#   added = sluice p50 - (echo p50 + direct p50)      target: <= 2 us
# Server pinned to core 1 (busy poll), clients to core 0.
#   perf/inference.sh   (DURATION=5s per run)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
DURATION=${DURATION:-5s}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target/perf}
export SLUICE_ORT_LIB=${SLUICE_ORT_LIB:-$root/.cache/onnxruntime/libonnxruntime.so.1.31.1}
[ -f "$SLUICE_ORT_LIB" ] || scripts/setup-onnxruntime.sh >/dev/null
cargo build --release -q -p sluice-engine -p sluice-perf --bins
cargo build --release -q -p sluice-infer --example direct
BIN=$CARGO_TARGET_DIR/release
OUT=$(mktemp -d)
cfg=$OUT/busy.toml
sed -e 's/^poll = "adaptive"/poll = "busy"/' -e "s|\"\.\./|\"$root/|g" cfg/sluice.toml >"$cfg"

pid=
stop() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi; pid=; }
trap stop EXIT
wait_up() { # mode addr mix
    for _ in $(seq 100); do
        "$BIN/loadgen" --mode "$1" --addr "$2" --mix "$3" --requests 1 --timeout 100ms --json 2>/dev/null | grep -q '"ok":1' && return 0
        sleep 0.1
    done
    echo "server on $2 did not answer" >&2; exit 1
}
load() { # name mode addr mix
    taskset -c 0 "$BIN/loadgen" --mode "$2" --addr "$3" --mix "$4" --closed 1 --duration "$DURATION" --warmup 1s --json >"$OUT/$1.json"
}

taskset -c 1 "$BIN/echo-uring" --listen 127.0.0.1:19091 >/dev/null 2>&1 & pid=$!
wait_up echo 127.0.0.1:19091 perf/mixes/mlp-b1.toml
load echo-b1 echo 127.0.0.1:19091 perf/mixes/mlp-b1.toml
load echo-b32 echo 127.0.0.1:19091 perf/mixes/mlp-b32.toml
stop

taskset -c 1 "$BIN/sluice-engine" --config "$cfg" >"$OUT/engine.log" 2>&1 & pid=$!
wait_up sluice 127.0.0.1:7070 perf/mixes/mlp-b1.toml
load sluice-b1 sluice 127.0.0.1:7070 perf/mixes/mlp-b1.toml
load sluice-b32 sluice 127.0.0.1:7070 perf/mixes/mlp-b32.toml
stop

taskset -c 0 "$BIN/examples/direct" --only batch >"$OUT/direct.txt"
cat "$OUT/direct.txt"
python3 - "$OUT" <<'PY'
import json, re, sys
out = sys.argv[1]
direct = {}
for line in open(f"{out}/direct.txt"):
    m = re.match(r"(mlp batch (\d+))\s+(\d+)", line.strip(), re.I)
    if m:
        direct[m.group(2)] = int(m.group(3)) / 1000.0
print(f"\n{'batch':<6}{'echo p50':>10}{'direct p50':>12}{'sluice p50':>12}{'added µs':>10}{'sluice p99':>12}{'errors':>8}")
for b in ("1", "32"):
    e = json.load(open(f"{out}/echo-b{b}.json"))["latency_us"]
    s = json.load(open(f"{out}/sluice-b{b}.json"))
    sl = s["latency_us"]
    errs = sum(s["errors"].values()) + s["timeouts"]
    d = direct.get(b, float("nan"))
    print(f"{b:<6}{e['p50']:>10.1f}{d:>12.1f}{sl['p50']:>12.1f}{sl['p50'] - e['p50'] - d:>10.1f}{sl['p99']:>12.1f}{errs:>8}")
print("added = sluice p50 - echo p50 - direct p50 (target <= 2 µs); payload bytes copied = 0 (asserted by the direct run and the engine tests)")
PY
