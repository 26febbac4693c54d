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
# Load generator client paths, each measured against its own ceiling:
# "plain" (sluice-client: one send and one receive system call per request)
# and "mmsg" (loadgen --mmsg: requests queued since the last answers leave
# in one sendmmsg, answers come in by recvmmsg; each request still encoded
# and signed, each answer parsed and its tag verified).
CLIENTS=${CLIENTS:-plain mmsg}
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
[auth]
# Tags of accepted frames are kept until their deadlines (2 s from the
# client); 1 Mi holds ~500k signed frames/s, beyond what 2 cores reach.
replay_entries = 1048576
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
flag() { [ "$1" = mmsg ] && echo --mmsg || true; }
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$ROUNDS"); do
    for c in $CLIENTS; do
        for m in "${models[@]}"; do
            for mode in off on; do
                # shellcheck disable=SC2046
                taskset -c 0 "$BIN/loadgen" --addr "127.0.0.1:$port" --mix "$OUT/$m-$mode.toml" --closed "$INFLIGHT" \
                    --duration "$DURATION" --warmup 500ms $(flag "$c") --json >"$OUT/$c-$m-$mode-$r.json"
            done
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
    for c in $CLIENTS; do
        # shellcheck disable=SC2046
        taskset -c 0 "$BIN/loadgen" --mode echo --addr "127.0.0.1:$port" --mix "$OUT/mlp-off.toml" --closed "$INFLIGHT" \
            --duration "$DURATION" --warmup 500ms $(flag "$c") --json >"$OUT/$c-echo-$r.json"
    done
done
stop
echo "load average before the runs: $load_before; after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT" "$DELAY_US" "$BATCH_MAX" "$INFLIGHT" "$ROUNDS" "$CLIENTS" "${models[@]}" <<'PY'
import json, re, statistics, sys
out, delay_us, batch_max, inflight, rounds, clients, models = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6].split(), sys.argv[7:]
log = open(f"{out}/engine.log").read()
runs = {(m[0], m[1]): (int(m[2]), int(m[4])) for m in re.findall(r"model (\S+) (\S+): requests=(\d+) inferences=(\d+) executions=(\d+)", log)}
service = {m[0]: int(m[1]) for m in re.findall(r"shard (\S+): .*service_p99_us=(\d+)", log)}
def med_of(name, f):
    return statistics.median(f(json.load(open(f"{out}/{name}-{r}.json"))) for r in range(1, rounds + 1))
print(f"dynamic batching: {inflight} in flight, batch_max {batch_max}, batch_delay_us {delay_us}, one worker core; median of {rounds} rounds")
print("mean batch = requests / executions from the engine's per-model counters, over the whole run (both clients)")
print(f"{'client':<7}{'case':<14}{'req/s':>10}{'p50 µs':>9}{'p99 µs':>10}{'errors':>8}{'mean batch':>12}")
for c in clients:
    echo = med_of(f"{c}-echo", lambda j: j["throughput_per_sec"])
    for model in models:
        res = {}
        for mode in ("off", "on"):
            n = f"{c}-{model}-{mode}"
            tput = med_of(n, lambda j: j["throughput_per_sec"])
            p50, p99 = med_of(n, lambda j: j["latency_us"]["p50"]), med_of(n, lambda j: j["latency_us"]["p99"])
            errs = sum(sum(j["errors"].values()) + j["timeouts"] for j in (json.load(open(f"{out}/{n}-{r}.json")) for r in range(1, rounds + 1)))
            key = next((k for k in runs if k[0] == model and k[1].endswith("-batched") == (mode == "on")), None)
            req, ex = runs.get(key, (0, 0))
            res[mode] = (tput, p50, p99)
            print(f"{c:<7}{model + ' ' + mode:<14}{tput:>10.0f}{p50:>9.1f}{p99:>10.1f}{errs:>8}{(req / ex if ex else float('nan')):>12.1f}")
        off, on = res["off"], res["on"]
        if model == "mlp":
            how = ("pre-encoded datagrams, id stamped, echo length checked" if c == "plain" else
                   "each request encoded and signed, each echo parsed and its tag verified")
            print(f"{c}: the generator's ceiling (the raw io_uring echo of the same requests, {how}):"
                  f" {echo:.0f} req/s = {echo / off[0]:.2f}x the unbatched engine; batched reached {on[0] / echo:.0%} of it")
        run = service.get(f"{model}-batched", 0)
        bound = delay_us + run + off[1]
        print(f"{c}: {model}: throughput {on[0] / off[0]:.2f}x, p50 {on[1] / off[1]:.2f}x, p99 {on[2] / off[2]:.2f}x;"
              f" p99 {on[2]:.0f} µs vs bound {bound:.0f} µs (delay {delay_us} + batched run p99 {run}"
              f" + unbatched p50 {off[1]:.0f}): {'within' if on[2] <= bound else 'ABOVE'}")
PY
# The worker core alone, no network: N requests one by one against one
# batched run, in one process (the engine's share of the cost).
taskset -c 1 "$BIN/examples/batch" --n "$INFLIGHT"
echo "raw results: $OUT"
