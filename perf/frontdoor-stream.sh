#!/usr/bin/env bash
# Token streams through the front door against the native wire, one run,
# same appliance: one sluiced serving `endless` (the bundled decoder
# without EOS, models/decoder.onnx) on its UDP port and its gRPC front
# door, `[auth] mode = "none"`.
#   - gRPC ModelStreamInfer with the unmodified tritonclient (Python,
#     perf/frontdoor/stream_driver.py): one stream at a time, TOKENS tokens
#     one token per response (inter-token latency as the client's callback
#     sees it), and TOKENS/4 tokens 8 per response (tokens/s);
#   - the native wire (perf/src/bin/token-bench.rs, raw UDP frames, Rust):
#     inter-token latency of one stream at one token per frame, and
#     tokens/s of streams one at a time at TOKENS/4 tokens, 8 per frame.
#   ratio = native tokens/s / gRPC tokens/s of one stream of TOKENS tokens
#   at one token per frame (the same shape on both sides; TTFT included),
#   and the same at 8 tokens per frame (TOKENS/4 tokens, one at a time).
# Server on core 1, clients on core 0. Fixed ports: run under
# flock /tmp/sluice-sys.lock on a shared machine.
#   perf/frontdoor-stream.sh   (TOKENS=2000 ROUNDS=5)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
TOKENS=${TOKENS:-2000}
ROUNDS=${ROUNDS:-5}
export SLUICE_ORT_LIB=${SLUICE_ORT_LIB:-$root/.cache/onnxruntime/libonnxruntime.so.1.31.1}
[ -f "$SLUICE_ORT_LIB" ] || scripts/setup-onnxruntime.sh >/dev/null
bash scripts/setup-frontdoor.sh
[ -x .cache/bin/sluiced ] || eval "$(scripts/build-ffi.sh)"
cargo build --release -q -p sluice-perf --bin token-bench
PY=$root/.cache/frontdoor-venv/bin/python
OUT=$(mktemp -d)
cat >"$OUT/sluice.toml" <<TOML
[engine]
workers = [1]
[io_uring]
listen = "127.0.0.1:17076"
[onnxruntime]
library = "$SLUICE_ORT_LIB"
[auth]
mode = "none"
[streams]
per_worker = 64
per_tenant = 64
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
[frontdoor]
grpc_listen = "127.0.0.1:18071"
[control]
admin_listen = "127.0.0.1:17077"
data_dir = "$OUT/data"
TOML
pid=
stop() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi; pid=; }
trap 'stop; [ -n "${KEEP:-}" ] || rm -rf "$OUT"' EXIT
taskset -c 1 .cache/bin/sluiced -config "$OUT/sluice.toml" >"$OUT/sluiced.log" 2>&1 & pid=$!
for _ in $(seq 100); do
    grep -q "admin=" "$OUT/sluiced.log" 2>/dev/null && break
    sleep 0.1
done
sleep 1
taskset -c 0 "$PY" perf/frontdoor/stream_driver.py 127.0.0.1:18071 "$TOKENS" "$ROUNDS" 1 >"$OUT/grpc.json" ||
    { cat "$OUT/sluiced.log" >&2; exit 1; }
taskset -c 0 "$PY" perf/frontdoor/stream_driver.py 127.0.0.1:18071 $((TOKENS / 4)) "$ROUNDS" 8 >"$OUT/grpc8.json" ||
    { cat "$OUT/sluiced.log" >&2; exit 1; }
taskset -c 0 target/release/token-bench --addr 127.0.0.1:17076 --model "$root/models/decoder.onnx" \
    --tokens "$TOKENS" --streams 1 >"$OUT/native.json" || { echo "$OUT"; cat "$OUT/sluiced.log" >&2; exit 1; }
stop
"$PY" - "$OUT/grpc.json" "$OUT/grpc8.json" "$OUT/native.json" <<'PY'
import json, sys
g, g8, n = (json.load(open(p)) for p in sys.argv[1:4])
us = lambda ns: ns / 1000
print(f"1 token/frame  gRPC (tritonclient): ITL p50 {us(g['itl_p50_ns']):8.2f} us (p99 {us(g['itl_p99_ns']):.2f}), "
      f"{g['tokens_per_s']:.0f} tokens/s, TTFT p50 {us(g['ttft_p50_ns']):.0f} us")
print(f"1 token/frame  native (token-bench): ITL p50 {us(n['itl_1_stream_p50_ns']):8.2f} us (p99 {us(n['itl_1_stream_p99_ns']):.2f}), "
      f"TTFT {us(n['ttft_1_stream_ns']):.0f} us")
print(f"1 token/frame  tokens/s: gRPC {g['tokens_per_s']:.0f}, native {n['tokens_per_s_1_stream']:.0f}, "
      f"ratio native/gRPC {n['tokens_per_s_1_stream'] / g['tokens_per_s']:.2f}x")
print(f"8 tokens/frame tokens/s: gRPC {g8['tokens_per_s']:.0f}, native {n['tokens_per_s_one_at_a_time']:.0f}, "
      f"ratio native/gRPC {n['tokens_per_s_one_at_a_time'] / g8['tokens_per_s']:.2f}x")
PY
