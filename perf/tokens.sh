#!/usr/bin/env bash
# Token streams in one run (the bundled decoder, models/decoder.onnx):
#   added per token = the engine's CPU time per token (1 stream, 1 token a
#     frame) - the in-process step's CPU time (wall figures printed too)
#   TTFT at 1 and at 64 concurrent streams
#   ratio = tokens/s of 64 streams together / the same streams one at a time,
#     and 64 together batched / unbatched (endless1: step_batch_max = 1)
# Server pinned to core 1 (POLL=adaptive, the default, or POLL=busy), client
# to core 0 with a 4 MiB receive buffer (with the default 208 KiB, 64
# streams overflowed it on a loaded host: frames dropped, UdpRcvbufErrors,
# and the run waited for their END frames; a seq gap now fails the run).
# Fixed port: run under flock /tmp/sluice-sys.lock on a shared machine.
#   perf/tokens.sh   (TOKENS=2000 STREAMS=64 POLL=adaptive)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
TOKENS=${TOKENS:-2000}
STREAMS=${STREAMS:-64}
POLL=${POLL:-adaptive}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target/perf}
export SLUICE_ORT_LIB=${SLUICE_ORT_LIB:-$root/.cache/onnxruntime/libonnxruntime.so.1.31.1}
[ -f "$SLUICE_ORT_LIB" ] || scripts/setup-onnxruntime.sh >/dev/null
# The engine without its wasm feature (transforms play no part here; wasmtime
# is most of a release build).
cargo build --release -q -p sluice-engine --no-default-features --features onnx --bin sluice-engine
cargo build --release -q -p sluice-perf --bin token-bench
BIN=$CARGO_TARGET_DIR/release
OUT=$(mktemp -d)
cat >"$OUT/tokens.toml" <<TOML
[auth]
mode = "none"
[engine]
workers = [1]
poll = "$POLL"
[io_uring]
listen = "127.0.0.1:7076"
[onnxruntime]
library = "$SLUICE_ORT_LIB"
[streams]
per_worker = $STREAMS
per_tenant = $STREAMS
[[shards]]
name = "s"
[[routes]]
name = "all"
shard = "s"
[[models]]
name = "endless"
version = "1"
path = "$root/models/decoder.onnx"
[models.stream]
state = [{ input = "h", output = "hN", shape = [1, 16] }]
[models.stream.generate]
token_input = "token"
token_output = "next"
max_tokens = 1000000
[[models]]
name = "endless1"
version = "1"
path = "$root/models/decoder.onnx"
[models.stream]
state = [{ input = "h", output = "hN", shape = [1, 16] }]
[models.stream.generate]
token_input = "token"
token_output = "next"
max_tokens = 1000000
step_batch_max = 1
TOML
pid=
stop() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi; pid=; }
trap 'stop; rm -rf "$OUT"' EXIT
taskset -c 1 "$BIN/sluice-engine" --config "$OUT/tokens.toml" >"$OUT/engine.log" 2>&1 & pid=$!
sleep 1
taskset -c 0 "$BIN/token-bench" --addr 127.0.0.1:7076 --model "$root/models/decoder.onnx" \
    --tokens "$TOKENS" --streams "$STREAMS" --engine-pid "$pid" >"$OUT/bench.json" || { cat "$OUT/engine.log" >&2; exit 1; }
stop
python3 - "$OUT/bench.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
us = lambda ns: ns / 1000
print(f"in-process decode step p50        {us(r['in_process_step_p50_ns']):8.2f} us")
print(f"through Sluice, 1 stream, ITL p50 {us(r['itl_1_stream_p50_ns']):8.2f} us (p99 {us(r['itl_1_stream_p99_ns']):.2f})")
print(f"added per token (ITL p50 - step)  {us(r['added_per_token_ns']):8.2f} us")
print(f"in-process decode step mean       {us(r['in_process_step_mean_ns']):8.2f} us")
print(f"through Sluice, 1 stream, mean    {us(r['sluice_1_stream_mean_ns']):8.2f} us per token (elapsed / tokens)")
print(f"added per token (means)           {us(r['added_per_token_mean_ns']):8.2f} us")
print(f"in-process decode step, CPU       {us(r['in_process_step_cpu_ns']):8.2f} us")
print(f"engine CPU per token, 1 stream    {us(r['engine_cpu_per_token_ns']):8.2f} us (all its threads)")
print(f"added CPU per token               {us(r['added_cpu_per_token_ns']):8.2f} us")
print(f"TTFT 1 stream                     {us(r['ttft_1_stream_ns']):8.2f} us")
print(f"TTFT {r['streams']} streams p50            {us(r['ttft_n_streams_p50_ns']):8.2f} us")
t, o = r['tokens_per_s_together'], r['tokens_per_s_one_at_a_time']
u = r['tokens_per_s_together_unbatched']
print(f"tokens/s: {r['streams']} together {t:.0f}, one at a time {o:.0f}, ratio {t / o:.2f}")
print(f"tokens/s: {r['streams']} together batched {t:.0f}, unbatched {u:.0f}, ratio {t / u:.2f}")
PY
