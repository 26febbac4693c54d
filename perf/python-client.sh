#!/usr/bin/env bash
# The Python client against the Rust client, in one run, on the same engine
# (busy poll, core 1; clients on core 0), the bundled MLP at batch 1:
#   latency:    Python Client.infer p50 (spin)  vs  loadgen --closed 1 (Rust sluice-client, spin)
#               added = python p50 - rust p50                   target: <= 5 us
#   throughput: Python infer_many (window 32, spin) and AsyncClient (32 in flight)
#               vs loadgen --closed 32; ratio = python / rust
#   perf/python-client.sh        (DURATION=5 seconds per run)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
DURATION=${DURATION:-5}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target/perf}
export SLUICE_ORT_LIB=${SLUICE_ORT_LIB:-$root/.cache/onnxruntime/libonnxruntime.so.1.31.1}
[ -f "$SLUICE_ORT_LIB" ] || scripts/setup-onnxruntime.sh >/dev/null
cargo build --release -q -p sluice-engine -p sluice-perf --bins
bash scripts/setup-python-client.sh
CARGO_TARGET_DIR=$root/target/python scripts/install-python-client.sh
PY=$root/.cache/python-client/bin/python
BIN=$CARGO_TARGET_DIR/release
OUT=$(mktemp -d)
cfg=$OUT/busy.toml
sed -e 's/^poll = "adaptive"/poll = "busy"/' -e "s|\"\.\./|\"$root/|g" -e 's/127.0.0.1:7070/127.0.0.1:17070/' \
    -e 's/127.0.0.1:7071/127.0.0.1:17071/' -e "s|data_dir = .*|data_dir = \"$OUT/data\"|" cfg/sluice.toml >"$cfg"
addr=127.0.0.1:17070
mix=perf/mixes/mlp-b1.toml

pid=
stop() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi; pid=; }
trap 'stop; rm -rf "$OUT"' EXIT
taskset -c 1 "$BIN/sluice-engine" --config "$cfg" >"$OUT/engine.log" 2>&1 & pid=$!
for _ in $(seq 100); do
    "$BIN/loadgen" --addr $addr --mix $mix --requests 1 --timeout 100ms --json 2>/dev/null | grep -q '"ok":1' && break
    sleep 0.1
done

rust() { taskset -c 0 "$BIN/loadgen" --addr $addr --mix $mix --closed "$1" --duration "${DURATION}s" --warmup 1s --json; }
rust 1 >"$OUT/rust-1.json"
taskset -c 0 "$PY" perf/python-client/bench.py latency $addr "$DURATION" >"$OUT/py-latency.json"
rust 32 >"$OUT/rust-32.json"
taskset -c 0 "$PY" perf/python-client/bench.py many $addr "$DURATION" 32 >"$OUT/py-many.json"
taskset -c 0 "$PY" perf/python-client/bench.py async $addr "$DURATION" 32 >"$OUT/py-async.json"
stop

"$PY" - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
j = lambda n: json.load(open(f"{out}/{n}.json"))
r1, r32, pl, pm, pa = j("rust-1"), j("rust-32"), j("py-latency"), j("py-many"), j("py-async")
for r in (r1, r32):
    errs = sum(r["errors"].values()) + r["timeouts"]
    assert errs == 0, r
rl, ql = r1["latency_us"], pl["latency_us"]
print(f"\nMLP batch 1, one request at a time (spin):")
print(f"  {'':<22}{'p50 µs':>10}{'p90 µs':>10}{'p99 µs':>10}")
print(f"  {'rust (loadgen)':<22}{rl['p50']:>10.1f}{rl['p90']:>10.1f}{rl['p99']:>10.1f}")
print(f"  {'python Client.infer':<22}{ql['p50']:>10.1f}{ql['p90']:>10.1f}{ql['p99']:>10.1f}")
print(f"  python adds {ql['p50'] - rl['p50']:.1f} µs at p50 (target <= 5), ratio {ql['p50'] / rl['p50']:.2f}")
rt = r32["throughput_per_sec"]
print(f"\nMLP batch 1, 32 in flight:")
print(f"  {'rust (loadgen --closed 32)':<30}{rt:>12.0f} req/s")
for name, p in (("python infer_many (spin)", pm), ("python AsyncClient", pa)):
    print(f"  {name:<30}{p['throughput_per_sec']:>12.0f} req/s   ratio {p['throughput_per_sec'] / rt:.2f}")
print(f"\nbinding copies: {pl['stats']['inputs_copied']} inputs copied, "
      f"{pl['stats']['outputs_viewed']} outputs viewed, {pl['stats']['outputs_copied']} outputs copied")
PY
