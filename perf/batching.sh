#!/usr/bin/env bash
# Dynamic batching against no batching, in one run: the bundled MLP and a
# published model (NudeNet's detector at 64x64, when scripts/setup-models.sh
# has fetched it), 32 requests in flight (closed loop), one worker core.
# One engine serves each model twice: version A in shard "plain" (no
# batching), version B in shard "batched" (batch_max, batch_delay_us); the
# load generator alternates between them for ROUNDS rounds so drift on a
# shared host hits both alike; medians are reported.
#   ratio = batched req/s / unbatched req/s            target: >= 3x (MLP)
# and, without the network, the worker core's time per request one by one
# against batched (examples/batch.rs in sluice-infer).
#   p99 bound = batch_delay_us + one batched run (the batched shard's
#               service p99) + the unbatched round trip (its p50)
# Server pinned to core 1 (busy poll), load generator to core 0.
#   perf/batching.sh   (DURATION=3s per run, ROUNDS=3, DELAY_US=200, BATCH_MAX=32)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
DURATION=${DURATION:-3s}
ROUNDS=${ROUNDS:-3}
DELAY_US=${DELAY_US:-200}
BATCH_MAX=${BATCH_MAX:-32}
INFLIGHT=${INFLIGHT:-32}
# The worktree's own target dir (release profile): no extra build tree.
export SLUICE_ORT_LIB=${SLUICE_ORT_LIB:-$root/.cache/onnxruntime/libonnxruntime.so.1.31.1}
[ -f "$SLUICE_ORT_LIB" ] || scripts/setup-onnxruntime.sh >/dev/null
cargo build --release -q -p sluice-engine -p sluice-perf --bins
cargo build --release -q -p sluice-infer --example batch
BIN=${CARGO_TARGET_DIR:-$root/target}/release
OUT=$(mktemp -d)
nudenet=$root/.cache/models/nudenet_320n.onnx
port=$((20000 + RANDOM % 20000))
models=(mlp)
[ -f "$nudenet" ] && models+=(nudenet)

cat >"$OUT/engine.toml" <<TOML
[engine]
workers = [1]
poll = "busy"
rx_burst_max = 64
[io_uring]
listen = "127.0.0.1:$port"
rx_buffers = 256
tx_buffers = 256
[onnxruntime]
library = "$SLUICE_ORT_LIB"
[[shards]]
name = "plain"
queue_depth = 256
[[shards]]
name = "mlp-batched"
queue_depth = 256
batch_max = $BATCH_MAX
batch_delay_us = $DELAY_US
[[shards]]
name = "nudenet-batched"
queue_depth = 256
batch_max = $BATCH_MAX
batch_delay_us = $DELAY_US
[[routes]]
name = "mlp-batched"
model = "mlp"
version = "*-batched"
shard = "mlp-batched"
[[routes]]
name = "nudenet-batched"
model = "nudenet"
version = "*-batched"
shard = "nudenet-batched"
[[routes]]
name = "plain"
shard = "plain"
[[models]]
name = "mlp"
version = "1.0.0"
path = "$root/models/mlp.onnx"
[[models]]
name = "mlp"
version = "1.0.0-batched"
path = "$root/models/mlp.onnx"
[[tenants]]
name = "demo"
id = 1
key = "hex:73756963652d64656d6f2d6b65792d30303030303030303030303030303030"
TOML
if [ -f "$nudenet" ]; then
    for v in 3.4.2 3.4.2-batched; do
        printf '[[models]]\nname = "nudenet"\nversion = "%s"\npath = "%s"\n' "$v" "$nudenet" >>"$OUT/engine.toml"
    done
fi
# Mixes: the same request, to the plain and to the batched version.
sed 's/^version = "1.0.0"/version = "1.0.0-batched"/' perf/mixes/mlp-b1.toml >"$OUT/mlp-on.toml"
cp perf/mixes/mlp-b1.toml "$OUT/mlp-off.toml"
sed 's/^version = "3.4.2"/version = "3.4.2-batched"/' perf/mixes/nudenet-64.toml >"$OUT/nudenet-on.toml"
cp perf/mixes/nudenet-64.toml "$OUT/nudenet-off.toml"

pid=
stop() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi; pid=; }
trap stop EXIT
taskset -c 1 "$BIN/sluice-engine" --config "$OUT/engine.toml" >"$OUT/engine.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
    "$BIN/loadgen" --addr "127.0.0.1:$port" --mix "$OUT/mlp-off.toml" --requests 1 --timeout 200ms --json 2>/dev/null | grep -q '"ok":1' && break
    sleep 0.1
done
for r in $(seq "$ROUNDS"); do
    for m in "${models[@]}"; do
        for mode in off on; do
            taskset -c 0 "$BIN/loadgen" --addr "127.0.0.1:$port" --mix "$OUT/$m-$mode.toml" --closed "$INFLIGHT" \
                --duration "$DURATION" --warmup 500ms --json >"$OUT/$m-$mode-$r.json"
        done
    done
done
stop
# The load generator's own ceiling on this host: the same MLP datagrams
# echoed by the raw io_uring echo server on the same core, same in-flight
# count (no engine can answer faster than this generator can ask).
taskset -c 1 "$BIN/echo-uring" --listen "127.0.0.1:$port" >"$OUT/echo.log" 2>&1 &
pid=$!
for _ in $(seq 100); do
    "$BIN/loadgen" --mode echo --addr "127.0.0.1:$port" --mix "$OUT/mlp-off.toml" --requests 1 --timeout 200ms --json 2>/dev/null | grep -q '"ok":1' && break
    sleep 0.1
done
for r in $(seq "$ROUNDS"); do
    taskset -c 0 "$BIN/loadgen" --mode echo --addr "127.0.0.1:$port" --mix "$OUT/mlp-off.toml" --closed "$INFLIGHT" \
        --duration "$DURATION" --warmup 500ms --json >"$OUT/echo-$r.json"
done
stop
python3 - "$OUT" "$DELAY_US" "$BATCH_MAX" "$INFLIGHT" "$ROUNDS" "${models[@]}" <<'PY'
import json, re, statistics, sys
out, delay_us, batch_max, inflight, rounds, models = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6:]
log = open(f"{out}/engine.log").read()
runs = {(m[0], m[1]): (int(m[2]), int(m[4])) for m in re.findall(r"model (\S+) (\S+): requests=(\d+) inferences=(\d+) executions=(\d+)", log)}
service = {m[0]: int(m[1]) for m in re.findall(r"shard (\S+): .*service_p99_us=(\d+)", log)}
echo = statistics.median(json.load(open(f"{out}/echo-{r}.json"))["throughput_per_sec"] for r in range(1, rounds + 1))
print(f"dynamic batching: {inflight} in flight, batch_max {batch_max}, batch_delay_us {delay_us}, one worker core; median of {rounds} rounds")
print(f"{'case':<14}{'req/s':>10}{'p50 µs':>9}{'p99 µs':>10}{'errors':>8}{'mean batch':>12}")
for model in models:
    res = {}
    for mode, version in (("off", None), ("on", "batched")):
        js = [json.load(open(f"{out}/{model}-{mode}-{r}.json")) for r in range(1, rounds + 1)]
        med = lambda f: statistics.median(f(j) for j in js)
        tput, p50, p99 = med(lambda j: j["throughput_per_sec"]), med(lambda j: j["latency_us"]["p50"]), med(lambda j: j["latency_us"]["p99"])
        errs = sum(sum(j["errors"].values()) + j["timeouts"] for j in js)
        key = next((k for k in runs if k[0] == model and k[1].endswith("-batched") == (mode == "on")), None)
        req, ex = runs.get(key, (0, 0))
        res[mode] = (tput, p50, p99)
        print(f"{model + ' ' + mode:<14}{tput:>10.0f}{p50:>9.1f}{p99:>10.1f}{errs:>8}{(req / ex if ex else float('nan')):>12.1f}")
    off, on = res["off"], res["on"]
    if model == "mlp":
        print(f"mlp: the generator's ceiling (raw io_uring echo of the same datagrams): {echo:.0f} req/s,"
              f" {echo / off[0]:.2f}x the unbatched engine")
    run = service.get(f"{model}-batched", 0)
    bound = delay_us + run + off[1]
    print(f"{model}: throughput {on[0] / off[0]:.2f}x, p50 {on[1] / off[1]:.2f}x, p99 {on[2] / off[2]:.2f}x;"
          f" p99 {on[2]:.0f} µs vs bound {bound:.0f} µs (delay {delay_us} + batched run p99 {run}"
          f" + unbatched p50 {off[1]:.0f}): {'within' if on[2] <= bound else 'ABOVE'}")
PY
# The worker core alone, no network: N requests one by one against one
# batched run, in one process (the engine's share of the cost).
taskset -c 1 "$BIN/examples/batch" --n "$INFLIGHT"
echo "raw results: $OUT"
