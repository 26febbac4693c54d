#!/usr/bin/env bash
# Token streams through the front door against the native wire, one run,
# same appliance: one sluiced serving `endless` (the bundled decoder
# without EOS, models/decoder.onnx) on its UDP port and its gRPC front
# door, `[auth] mode = "none"`.
#   - gRPC ModelStreamInfer with the unmodified tritonclient (Python,
#     perf/frontdoor/stream_driver.py): one stream at a time, TOKENS tokens,
#     one token per response; inter-token latency as the client's callback
#     sees it, tokens/s;
#   - the native wire (perf/src/bin/token-bench.rs, raw UDP frames, the
#     Rust side): inter-token latency of one stream, tokens/s one at a time.
#   ratio = native tokens/s / gRPC tokens/s (and the ITL ratio).
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
trap 'stop; rm -rf "$OUT"' EXIT
taskset -c 1 .cache/bin/sluiced -config "$OUT/sluice.toml" >"$OUT/sluiced.log" 2>&1 & pid=$!
for _ in $(seq 100); do
    grep -q "admin=" "$OUT/sluiced.log" 2>/dev/null && break
    sleep 0.1
done
sleep 0.5
taskset -c 0 "$PY" perf/frontdoor/stream_driver.py 127.0.0.1:18071 "$TOKENS" "$ROUNDS" >"$OUT/grpc.json" ||
    { cat "$OUT/sluiced.log" >&2; exit 1; }
taskset -c 0 target/release/token-bench --addr 127.0.0.1:17076 --model "$root/models/decoder.onnx" \
    --tokens "$TOKENS" --streams 1 >"$OUT/native.json" || { cat "$OUT/sluiced.log" >&2; exit 1; }
stop
"$PY" - "$OUT/grpc.json" "$OUT/native.json" <<'PY'
import json, sys
g, n = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
us = lambda ns: ns / 1000
print(f"gRPC ModelStreamInfer (tritonclient): ITL p50 {us(g['itl_p50_ns']):8.2f} us (p99 {us(g['itl_p99_ns']):.2f}), "
      f"{g['tokens_per_s']:.0f} tokens/s, TTFT {us(g['ttft_p50_ns']):.0f} us")
print(f"native wire (UDP, token-bench):       ITL p50 {us(n['itl_1_stream_p50_ns']):8.2f} us (p99 {us(n['itl_1_stream_p99_ns']):.2f}), "
      f"{n['tokens_per_s_one_at_a_time']:.0f} tokens/s, TTFT {us(n['ttft_1_stream_ns']):.0f} us")
print(f"ratio native/gRPC: tokens/s {n['tokens_per_s_one_at_a_time'] / g['tokens_per_s']:.2f}x, "
      f"ITL p50 gRPC/native {g['itl_p50_ns'] / n['itl_1_stream_p50_ns']:.2f}x")
PY
