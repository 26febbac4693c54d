#!/usr/bin/env bash
# Stateful streams in one run: Silero VAD 6.2.3 (16 kHz, 576-sample steps)
# chunk by chunk as a stream whose recurrent state stays in the appliance,
# against plain requests that carry the state both ways (state in, stateN
# out: 1 KiB more each way). Same engine, same socket, alternating rounds.
#   ratio = plain p50 / stream p50      (the saving of keeping context)
# Server pinned to core 1 (busy poll), client to core 0.
#   perf/streams.sh   (ROUNDS=20 STEPS=312)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
ROUNDS=${ROUNDS:-20}
STEPS=${STEPS:-312}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target/perf}
export SLUICE_ORT_LIB=${SLUICE_ORT_LIB:-$root/.cache/onnxruntime/libonnxruntime.so.1.31.1}
[ -f "$SLUICE_ORT_LIB" ] || scripts/setup-onnxruntime.sh >/dev/null
models=$(scripts/setup-models.sh)
cargo build --release -q -p sluice-engine -p sluice-perf --bins
BIN=$CARGO_TARGET_DIR/release
OUT=$(mktemp -d)
key=000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f
cat >"$OUT/streams.toml" <<TOML
[engine]
workers = [1]
poll = "busy"
[io_uring]
listen = "127.0.0.1:7075"
[onnxruntime]
library = "$SLUICE_ORT_LIB"
[[shards]]
name = "s"
[[routes]]
name = "all"
shard = "s"
[[models]]
name = "silero"
version = "6.2.3"
path = "$models/silero_vad_16k_op15.onnx"
aliases = ["6"]
[models.stream]
state = [{ input = "state", output = "stateN", shape = [2, 1, 128] }]
[[tenants]]
name = "t"
id = 7
key = "hex:$key"
TOML
pid=
stop() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi; pid=; }
trap 'stop; rm -rf "$OUT"' EXIT
taskset -c 1 "$BIN/sluice-engine" --config "$OUT/streams.toml" >"$OUT/engine.log" 2>&1 & pid=$!
for _ in $(seq 100); do
    "$BIN/stream-bench" --addr 127.0.0.1:7075 --key-hex "$key" --rounds 1 --steps 2 >/dev/null 2>&1 && break
    sleep 0.2
done
taskset -c 0 "$BIN/stream-bench" --addr 127.0.0.1:7075 --key-hex "$key" --rounds "$ROUNDS" --steps "$STEPS" >"$OUT/bench.json"
stop
python3 - "$OUT/bench.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s, p = r["stream"], r["plain"]
print(f"{'':<28}{'steps':>7}{'p50 µs':>9}{'p99 µs':>9}{'req body B':>12}{'answer body B':>15}")
for name, x in (("stream (state in appliance)", s), ("plain (state both ways)", p)):
    print(f"{name:<28}{x['n']:>7}{x['p50_us']:>9.1f}{x['p99_us']:>9.1f}{x['request_body_bytes']:>12}{x['answer_body_bytes']:>15}")
print(f"ratio plain/stream p50 = {p['p50_us'] / s['p50_us']:.3f}, p99 = {p['p99_us'] / s['p99_us']:.3f}; errors {r['errors']}")
PY
