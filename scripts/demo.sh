#!/usr/bin/env bash
# The main job on the embedded default: the appliance on io_uring/loopback
# with the bundled MLP (ONNX Runtime), real requests with printed outputs,
# then the load generator against it and against a raw io_uring echo on the
# same transport (the floor), with ratios.
#
#   scripts/demo.sh            (DURATION=5s per load run)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/setup.sh --runtime
export SLUICE_ORT_LIB="$root/.cache/onnxruntime/libonnxruntime.so.1.31.1"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target/perf}
echo "demo: building (release)"
cargo build --release -q -p sluice-engine -p sluice-client -p sluice-perf --bins
BIN=$CARGO_TARGET_DIR/release
cores=$(nproc)
server_core=$(( cores > 1 ? 1 : 0 ))

log=$(mktemp)
taskset -c "$server_core" "$BIN/sluice-engine" --config cfg/sluice.toml >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    grep -q "serving on" "$log" && break
    kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.1
done
cat "$log"
echo
echo "== requests to the bundled model (cfg/sluice.toml, models/mlp.onnx)"
taskset -c 0 "$BIN/sluice-demo" 127.0.0.1:7070
kill $pid; wait $pid 2>/dev/null || true
trap - EXIT

echo
echo "== load: Sluice (tenant check, routing, ONNX Runtime MLP) against raw io_uring echo"
MIX=perf/mixes/mlp.toml DURATION=${DURATION:-5s} SERVER_CORE=$server_core \
    SLUICE_ENGINE_CMD="$BIN/sluice-engine --config cfg/sluice.toml" perf/compare.sh
