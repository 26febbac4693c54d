#!/usr/bin/env bash
# The streaming mix in one run (loadgen --stream-rate), against the engine
# serving the bundled decoder (models/decoder.onnx, "endless": no EOS) and
# the null model, UDP, [auth] mode = "none". Every latency is measured
# from the intended send time of its open-loop schedule (coordinated
# omission corrected). Three runs of DURATION each:
#   plain   : plain requests only at PLAIN_RATE/s          -> p99 baseline
#   mix     : the same plain requests + STREAM_RATE streams/s of MAX_TOKENS
#             tokens (at most 64 at once)                   -> plain p99, TTFT, ITL
#   single  : streams one at a time at 5/s                  -> TTFT at 1 stream
#   many    : 64 streams opened together (64 slots in 1 ms), no plain
#             requests                                      -> TTFT at 64 streams
# ratios: plain p99 in the mix / plain-only p99; TTFT p50 of 64 streams
# opened together / TTFT p50 of one stream at a time.
# Server pinned to core 1, loadgen to core 0. Fixed port: run under
# flock /tmp/sluice-sys.lock on a shared machine.
#   perf/streammix.sh   (PLAIN_RATE=2000 STREAM_RATE=100 MAX_TOKENS=256 DURATION=5s)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
PLAIN_RATE=${PLAIN_RATE:-2000}
STREAM_RATE=${STREAM_RATE:-100}
MAX_TOKENS=${MAX_TOKENS:-256}
DURATION=${DURATION:-5s}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target/perf}
export SLUICE_ORT_LIB=${SLUICE_ORT_LIB:-$root/.cache/onnxruntime/libonnxruntime.so.1.31.1}
[ -f "$SLUICE_ORT_LIB" ] || scripts/setup-onnxruntime.sh >/dev/null
cargo build --release -q -p sluice-engine -p sluice-perf --bin sluice-engine --bin loadgen
BIN=$CARGO_TARGET_DIR/release
OUT=$(mktemp -d)
cat >"$OUT/engine.toml" <<TOML
[auth]
mode = "none"
[engine]
workers = [1]
[io_uring]
listen = "127.0.0.1:7077"
[onnxruntime]
library = "$SLUICE_ORT_LIB"
[streams]
per_worker = 64
per_tenant = 64
[[shards]]
name = "s"
[[routes]]
name = "all"
shard = "s"
[[models]]
name = "null"
version = "1"
kind = "null"
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
TOML
cat >"$OUT/plain.toml" <<TOML
[[request]]
model = "null"
version = "1"
tenant_id = 0
[[request.tensors]]
name = "x"
dtype = "f32"
shape = [1, 4]
fill = 0.5
TOML
pid=
stop() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi; pid=; }
trap 'stop; rm -rf "$OUT"' EXIT
taskset -c 1 "$BIN/sluice-engine" --config "$OUT/engine.toml" >"$OUT/engine.log" 2>&1 & pid=$!
sleep 1
lg() { taskset -c 0 "$BIN/loadgen" --addr 127.0.0.1:7077 --json --block --warmup 500ms --duration "$DURATION" "$@"; }
lg --mix "$OUT/plain.toml" --rate "$PLAIN_RATE" >"$OUT/plain.json" || { cat "$OUT/engine.log" >&2; exit 1; }
lg --mix "$OUT/plain.toml" --rate "$PLAIN_RATE" --stream-rate "$STREAM_RATE" --stream-model endless \
    --max-tokens "$MAX_TOKENS" --streams-max 64 >"$OUT/mix.json" || { cat "$OUT/engine.log" >&2; exit 1; }
lg --stream-rate 5 --stream-model endless --max-tokens "$MAX_TOKENS" --streams-max 1 >"$OUT/single.json" \
    || { cat "$OUT/engine.log" >&2; exit 1; }
taskset -c 0 "$BIN/loadgen" --addr 127.0.0.1:7077 --json --block --stream-rate 64000 --duration 1ms \
    --stream-model endless --max-tokens "$MAX_TOKENS" --streams-max 64 >"$OUT/many.json" \
    || { cat "$OUT/engine.log" >&2; exit 1; }
stop
python3 - "$OUT" <<'PY'
import json, sys, pathlib
d = pathlib.Path(sys.argv[1])
plain, mix, single, many = (json.loads((d / f"{n}.json").read_text()) for n in ("plain", "mix", "single", "many"))
p = plain["latency_us"]; m = mix["plain"]["latency_us"]; s = mix["streams"]; o = single["streams"]
print("latency from the intended send time (coordinated omission corrected)")
print(f"plain only      : {plain['sent']} sent, {plain['ok']} ok, {plain['timeouts']} timeouts, "
      f"p50 {p['p50']:.1f} p99 {p['p99']:.1f} max {p['max']:.1f} us, errors {plain['errors']}")
print(f"mix, plain part : {mix['plain']['sent']} sent, {mix['plain']['ok']} ok, {mix['plain']['timeouts']} timeouts, "
      f"p50 {m['p50']:.1f} p99 {m['p99']:.1f} max {m['max']:.1f} us, errors {mix['plain']['errors']}")
print(f"mix, streams    : {s['opened']} opened (at most {s['running_max']} at once), ended {s['ended']}, errors {s['errors']}, "
      f"{s['per_sec']:.1f} streams/s, {s['tokens_per_sec']:.0f} tokens/s")
for name, h in (("TTFT", s["ttft_us"]), ("ITL ", s["itl_us"])):
    print(f"  {name} us: p50 {h['p50']:.1f} p90 {h['p90']:.1f} p99 {h['p99']:.1f} max {h['max']:.1f}")
t1 = o["ttft_us"]
print(f"load average    : {open('/proc/loadavg').read().split()[0]} (after the runs)")
print(f"one at a time   : TTFT p50 {t1['p50']:.1f} p99 {t1['p99']:.1f} us, ITL p50 {o['itl_us']['p50']:.1f} us")
n = many["streams"]
print(f"64 together     : {n['opened']} opened (at most {n['running_max']} at once), ended {n['ended']}, errors {n['errors']}, "
      f"{n['tokens_per_sec']:.0f} tokens/s, TTFT p50 {n['ttft_us']['p50']:.1f} p99 {n['ttft_us']['p99']:.1f} us, "
      f"ITL p50 {n['itl_us']['p50']:.1f} p99 {n['itl_us']['p99']:.1f} us")
print(f"ratio plain p99 mix / plain only : {m['p99'] / p['p99']:.2f}")
print(f"ratio TTFT p50 64 streams / one  : {n['ttft_us']['p50'] / t1['p50']:.2f}")
PY
