#!/usr/bin/env bash
# The main job on the embedded default: sluiced (Go control plane + Rust
# engine) on io_uring/loopback with the bundled MLP in ONNX Runtime; real
# requests with their outputs; the load generator against it and against a
# raw io_uring echo on the same transport (the floor), with ratios.
#
#   scripts/demo.sh            (DURATION=5s per load run)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh --runtime
export SLUICE_ORT_LIB="$root/.cache/onnxruntime/libonnxruntime.so.1.31.1"
echo "demo: building (release)"
eval "$(scripts/build-ffi.sh)"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target/perf}
cargo build --release -q -p sluice-client -p sluice-perf --bins
BIN=$CARGO_TARGET_DIR/release
cores=$(nproc)
client_core=0
server_core=$(( cores > 1 ? 1 : 0 ))

log=$(mktemp)
.cache/bin/sluiced -config cfg/sluice.toml >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    grep -q "sluiced serving" "$log" && break
    kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.1
done
.cache/bin/sluicectl status
echo
echo "== requests to the bundled model (cfg/sluice.toml, models/mlp.onnx)"
taskset -c $client_core "$BIN/sluice-demo" 127.0.0.1:7070
echo
echo "== 5 s of load through sluiced (closed loop, 1 outstanding)"
taskset -c $client_core "$BIN/loadgen" --addr 127.0.0.1:7070 --mix perf/mixes/mlp.toml --closed 1 --duration 5s --warmup 1s
echo
.cache/bin/sluicectl stats
kill -TERM $pid; wait $pid 2>/dev/null || true
trap - EXIT

echo
echo "== the same load against the raw io_uring echo floor, side by side"
MIX=perf/mixes/mlp.toml DURATION=${DURATION:-5s} SERVER_CORE=$server_core CLIENT_CORE=$client_core \
    SLUICE_ENGINE_CMD="$root/.cache/bin/sluiced -config cfg/sluice.toml" perf/compare.sh
