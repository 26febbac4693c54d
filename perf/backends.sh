#!/usr/bin/env bash
# The backend hop (docs/backends.md): what Sluice's OpenAI front door adds
# over calling a model server directly, against vllm-router and
# sglang-router (Rust, from PyPI) in front of the same server, same load,
# same run.
#
# The server is perf/backends' openai-echo: an OpenAI-shaped answer at
# once (or --tokens events 1 ms apart for streams), fast enough not to be
# the limit, and, called directly, the floor. The load is openai-load:
# open loop at RATE req/s (latency from each request's intended send time,
# no coordinated omission), and a closed loop of 32 in flight for req/s.
# Servers and routers share core 1 (taskset), the load runs on core 0.
# With a real model server (scripts/backends.sh start), also the hop over
# llama.cpp: a 4-token chat at 5 req/s, direct and through Sluice.
#   perf/backends.sh      (DURATION=5 s per run, RATE=1000)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
DURATION=${DURATION:-5}
RATE=${RATE:-1000}
export SLUICE_ORT_LIB=${SLUICE_ORT_LIB:-$root/.cache/onnxruntime/libonnxruntime.so.1.31.1}
[ -x .cache/bin/sluiced ] || eval "$(scripts/build-ffi.sh)"
cargo build --release -q -p sluice-perf-backends
LOAD=$root/target/release/openai-load
ECHO=$root/target/release/openai-echo
VENV=$root/.cache/backends-venv/bin
OUT=$(mktemp -d)
pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done; pids=(); }
trap 'stop; rm -rf "$OUT"' EXIT

# Sluice: cfg/backends.toml with one more pool (the echo) and a model
# served by it, its own ports, on core 1.
cfg=$OUT/sluice.toml
sed -e "s|\"\.\./|\"$root/|g" -e 's/127.0.0.1:7070/127.0.0.1:17070/' -e 's/127.0.0.1:7071/127.0.0.1:17071/' \
    -e "s|data_dir = .*|data_dir = \"$OUT/data\"|" -e 's/127.0.0.1:8000/127.0.0.1:18000/' \
    -e 's/^spin_us = 200/spin_us = 0/' cfg/backends.toml >"$cfg"
python3 - "$cfg" <<'EOF'
import sys
p = sys.argv[1]
s = open(p).read()
i = s.index("[fleet]")
s = s[:i]  # no jobs here
s += '''
[[models]]
name = "echo-llm"
version = "1"
kind = "backend"
upstream = "echo-model"

[[backends]]
name = "echo"
protocol = "openai"
endpoints = ["http://127.0.0.1:18401"]
labels = { "hardware.gpu.memory" = "hbm2" }
models = ["echo-model"]
max_concurrency = 256
queue_depth = 1024
'''
s = s.replace('default_versions = { "qwen3-72b" = "1" }', 'default_versions = { "qwen3-72b" = "1", "echo-llm" = "1" }')
s = s.replace('[[routes]]\nname = "llm"', '[[routes]]\nname = "echo-llm"\nmodel = "echo-llm"\nshard = "hbm2-inference"\n\n[[routes]]\nname = "llm"', 1)
open(p, "w").write(s)
EOF
taskset -c 1 "$ECHO" --listen 127.0.0.1:18401 --tokens 16 --itl-us 1000 >"$OUT/echo.log" 2>&1 &
pids+=($!)
taskset -c 1 .cache/bin/sluiced -config "$cfg" >"$OUT/sluiced.log" 2>&1 &
pids+=($!)
routers=()
if [ -x "$VENV/vllm-router" ]; then
    taskset -c 1 "$VENV/vllm-router" --host 127.0.0.1 --port 18501 --worker-urls http://127.0.0.1:18401 \
        --policy round_robin --prometheus-port 18601 >"$OUT/vllm-router.log" 2>&1 &
    pids+=($!)
    routers+=("vllm-router=http://127.0.0.1:18501")
fi
if [ -x "$VENV/sglang-router" ]; then
    taskset -c 1 "$VENV/sglang-router" launch --host 127.0.0.1 --port 18502 --worker-urls http://127.0.0.1:18401 \
        --policy round_robin --prometheus-port 18602 >"$OUT/sglang-router.log" 2>&1 &
    pids+=($!)
    routers+=("sglang-router=http://127.0.0.1:18502")
fi
[ ${#routers[@]} -gt 0 ] || echo "backends.sh: no routers (run scripts/setup-backends.sh): Sluice against the floor only" >&2
AUTH="Authorization: Bearer sluice-demo-token-0000"
ready() { curl -sf -m 2 "$@" >/dev/null 2>&1; }
for _ in $(seq 150); do
    ready -H "$AUTH" 127.0.0.1:18000/v1/models && ready 127.0.0.1:18401/v1/models && break
    sleep 0.2
done
# Sluice's pool is ready once a health check saw the echo.
for _ in $(seq 50); do
    curl -sf -m 2 -H "$AUTH" 127.0.0.1:18000/v1/chat/completions -d '{"model":"echo-llm","messages":[]}' >/dev/null && break
    sleep 0.2
done
for r in "${routers[@]}"; do
    for _ in $(seq 100); do
        ready "${r#*=}/v1/chat/completions" -H 'content-type: application/json' -d '{"model":"echo-model","messages":[]}' && break
        sleep 0.2
    done
done

run() { # label url model [args]
    local label=$1 url=$2 model=$3
    shift 3
    taskset -c 0 "$LOAD" --url "$url" --model "$model" --duration-s "$DURATION" --label "$label" "$@"
}
targets=("direct=http://127.0.0.1:18401=echo-model" "sluice=http://127.0.0.1:18000=echo-llm")
for r in "${routers[@]}"; do targets+=("$r=echo-model"); done

echo "== plain chat at $RATE req/s (open loop), 32 in flight (closed), stream TTFT/ITL at 100 req/s"
: >"$OUT/results"
for t in "${targets[@]}"; do
    IFS='=' read -r label url model <<<"$t"
    h=()
    [ "$label" = sluice ] && h=(--header "$AUTH")
    run "$label open" "$url" "$model" "${h[@]}" --rate "$RATE" --concurrency 64 | tee -a "$OUT/results"
    run "$label closed32" "$url" "$model" "${h[@]}" --concurrency 32 | tee -a "$OUT/results"
    run "$label stream" "$url" "$model" "${h[@]}" --rate 100 --concurrency 64 --stream | tee -a "$OUT/results"
done

if curl -sf -m 2 127.0.0.1:8101/v1/models >/dev/null; then
    echo "== llama.cpp (scripts/backends.sh): 4-token chat at 5 req/s, direct and through Sluice"
    run "llama direct" http://127.0.0.1:8101 gemma-3-270m --rate 5 --concurrency 4 | tee -a "$OUT/results"
    # Sluice's llama pool has both servers; both run the same model.
    run "llama sluice" http://127.0.0.1:18000 qwen3-72b --header "$AUTH" --rate 5 --concurrency 4 | tee -a "$OUT/results"
fi

python3 - "$OUT/results" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {r["label"]: r for r in rows}
def ratio(a, b, k):
    return by[a][k] / by[b][k] if by.get(a) and by.get(b) and by[b][k] else float("nan")
print()
print("| run | p50 µs | p99 µs | added p50 µs | added p99 µs | req/s | errors |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in rows:
    base = by.get("direct " + r["label"].split(" ", 1)[1]) if " " in r["label"] else None
    if r["label"].startswith("llama"):
        base = by.get("llama direct")
    add50 = r["p50_us"] - base["p50_us"] if base else 0
    add99 = r["p99_us"] - base["p99_us"] if base else 0
    print(f"| {r['label']} | {r['p50_us']} | {r['p99_us']} | {add50} | {add99} | {r['req_s']:.0f} | {r['errors']} |")
print()
print("| stream | TTFT p50 µs | TTFT p99 µs | ITL p50 µs | ITL p99 µs |")
print("| --- | ---: | ---: | ---: | ---: |")
for r in rows:
    if r["label"].endswith("stream"):
        print(f"| {r['label']} | {r['ttft_p50_us']} | {r['ttft_p99_us']} | {r['itl_p50_us']} | {r['itl_p99_us']} |")
print()
print(f"closed-loop req/s ×floor: sluice {ratio('sluice closed32', 'direct closed32', 'req_s'):.2f}" +
      "".join(f", {n} {ratio(n + ' closed32', 'direct closed32', 'req_s'):.2f}" for n in ("vllm-router", "sglang-router") if n + " closed32" in by))
EOF
