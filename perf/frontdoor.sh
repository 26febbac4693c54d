#!/usr/bin/env bash
# Sluice's front door against KServe's own Python ModelServer (kserve 0.21,
# onnxruntime), same ONNX model, same client, same run: the small
# tritonclient driver (perf/frontdoor/driver.py; perf_analyzer needs a newer
# glibc than Debian 12 has) over HTTP (binary tensors) and gRPC, closed loop
# (1 in flight) and 32 in flight; plus Sluice's native wire for the same
# model (loadgen, the Rust client, closed 1 and 32).
#
# Both servers get the same CPU: core 1 (taskset; the Sluice worker pins
# itself there too, and sleeps at once when idle, spin_us = 0, so its
# front-door thread gets the core). The drivers run on core 0. The host is
# shared, so the runs alternate, ROUNDS times, and each figure is the median
# over the rounds.
#   perf/frontdoor.sh        (DURATION=4 seconds per run, ROUNDS=3, MODEL=mlp)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
DURATION=${DURATION:-4}
ROUNDS=${ROUNDS:-3}
# The worker remembers every accepted signed frame's tag until its deadline
# (the client's default horizon: 2 s) to refuse replays; when the table is
# full, new frames are answered `busy`. The demo's 262,144 tags hold about
# 130k frames/s; the native wire at 32 in flight goes past that on a quiet
# host (16% `busy` in one run). Sized here as cfg/sluice.toml tells an
# operator to: above peak signed frames/s x deadline horizon (1 Mi tags,
# 24 MiB, for up to ~500k frames/s).
REPLAY_ENTRIES=${REPLAY_ENTRIES:-1048576}
export SLUICE_ORT_LIB=${SLUICE_ORT_LIB:-$root/.cache/onnxruntime/libonnxruntime.so.1.31.1}
[ -f "$SLUICE_ORT_LIB" ] || scripts/setup-onnxruntime.sh >/dev/null
bash scripts/setup-frontdoor.sh
bash perf/frontdoor/setup-kserve.sh
[ -x .cache/bin/sluiced ] || eval "$(scripts/build-ffi.sh)"
cargo build --release -q -p sluice-perf --bin loadgen
LOADGEN=$root/target/release/loadgen
PY=$root/.cache/frontdoor-venv/bin/python
KPY=$root/.cache/kserve-venv/bin/python
OUT=$(mktemp -d)
cfg=$OUT/sluice.toml
sed -e 's/^spin_us = 200/spin_us = 0/' -e "s|\"\.\./|\"$root/|g" -e 's/127.0.0.1:7070/127.0.0.1:17070/' \
    -e 's/127.0.0.1:7071/127.0.0.1:17071/' -e "s|data_dir = .*|data_dir = \"$OUT/data\"|" \
    -e 's/^http_listen = ""/http_listen = "127.0.0.1:18000"/' -e 's/^grpc_listen = ""/grpc_listen = "127.0.0.1:18001"/' \
    -e "s/^replay_entries = .*/replay_entries = $REPLAY_ENTRIES/" \
    cfg/sluice.toml >"$cfg"
grep -q "^replay_entries = $REPLAY_ENTRIES" "$cfg" || { echo "frontdoor.sh: cfg/sluice.toml has no replay_entries line to size" >&2; exit 1; }
pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done; pids=(); }
trap 'stop; rm -rf "$OUT"' EXIT
taskset -c 1 .cache/bin/sluiced -config "$cfg" >"$OUT/sluiced.log" 2>&1 &
pids+=($!)
# KServe binds 0.0.0.0:18080 / [::]:18081 (its ModelServer has no host
# option); the driver only sends to 127.0.0.1.
taskset -c 1 "$KPY" perf/frontdoor/kserve_server.py --model_name mlp --model_path models/mlp.onnx \
    --http_port 18080 --grpc_port 18081 >"$OUT/kserve.log" 2>&1 &
pids+=($!)
for _ in $(seq 150); do
    curl -sf 127.0.0.1:18000/v2/health/ready >/dev/null && curl -sf 127.0.0.1:18080/v2/health/ready >/dev/null && break
    sleep 0.2
done
TOKEN="Authorization: Bearer sluice-demo-token-0000"
# Both answer the same numbers before anything is timed.
"$PY" - <<'PY'
import numpy as np, tritonclient.http as h
x = np.array([[0.5, -0.25, 1, 0]], np.float32)
def ask(url, version, headers):
    c = h.InferenceServerClient(url)
    i = h.InferInput("x", [1, 4], "FP32"); i.set_data_from_numpy(x)
    return c.infer("mlp", [i], model_version=version, headers=headers).as_numpy("y")
a = ask("127.0.0.1:18000", "1", {"Authorization": "Bearer sluice-demo-token-0000"})
b = ask("127.0.0.1:18080", "", None)
assert np.array_equal(a, b), (a, b)
print("frontdoor.sh: Sluice and KServe answer the same:", a.tolist())
PY
drive() { # name url proto conc version [header]
    local name=$1 url=$2 proto=$3 c=$4 v=$5
    shift 5
    taskset -c 0 "$PY" perf/frontdoor/driver.py --url "$url" --protocol "$proto" --concurrency "$c" \
        --version "$v" --duration "$DURATION" --warmup 1 "$@" >"$OUT/$name.$r.json"
}
for r in $(seq "$ROUNDS"); do
    for proto in http grpc; do
        port=0; [ $proto = grpc ] && port=1
        for c in 1 32; do
            drive "kserve-$proto-$c" "127.0.0.1:1808$port" $proto $c ""
            drive "sluice-$proto-$c" "127.0.0.1:1800$port" $proto $c 1 --header "$TOKEN"
        done
    done
    for c in 1 32; do
        taskset -c 0 "$LOADGEN" --addr 127.0.0.1:17070 --mix perf/mixes/mlp-b1.toml --closed $c \
            --duration "${DURATION}s" --warmup 1s --json >"$OUT/native-$c.$r.json"
    done
done
curl -s 127.0.0.1:17071/v1/status >"$OUT/status.json" || true
stop
"$PY" - "$OUT" "$ROUNDS" "$DURATION" <<'PY'
import json, statistics, sys
out, rounds, duration = sys.argv[1], int(sys.argv[2]), sys.argv[3]
runs = lambda n: [json.load(open(f"{out}/{n}.{r}.json")) for r in range(1, rounds + 1)]
med = statistics.median
def summary(n):
    rs = runs(n)
    for r in rs:
        assert r["errors"] == 0, (n, r)
    return {k: med([r[k] for r in rs]) for k in ("p50_us", "p99_us", "rps")}
print(f"\nmlp [1,4] f32, median of {rounds} rounds, each run 1 s warm-up + {duration} s timed")
print(f"{'':18}{'KServe p50/p99 us':>20}{'req/s':>9}{'Sluice p50/p99 us':>20}{'req/s':>9}{'p50 ratio':>11}{'req/s ratio':>13}")
for proto in ("http", "grpc"):
    for c in (1, 32):
        k, s = summary(f"kserve-{proto}-{c}"), summary(f"sluice-{proto}-{c}")
        print(f"{proto+' x'+str(c):18}{k['p50_us']:>10.0f}/{k['p99_us']:<9.0f}{k['rps']:>9.0f}"
              f"{s['p50_us']:>10.0f}/{s['p99_us']:<9.0f}{s['rps']:>9.0f}"
              f"{k['p50_us']/s['p50_us']:>10.2f}x{s['rps']/k['rps']:>12.2f}x")
def find(o, key):
    # The first value under `key` anywhere in the status document.
    if isinstance(o, dict):
        for k, v in o.items():
            if k == key:
                return v
            got = find(v, key)
            if got is not None:
                return got
    elif isinstance(o, list):
        for v in o:
            got = find(v, key)
            if got is not None:
                return got
    return None
try:
    status = json.load(open(f"{out}/status.json"))
except Exception as e:
    status = {}
    print("engine status: unavailable:", e)
bad = []
for c in (1, 32):
    rs = runs(f"native-{c}")
    errors = {}
    for r in rs:
        for k, v in r["errors"].items():
            errors[k] = errors.get(k, 0) + v
        errors["timeouts"] = errors.get("timeouts", 0) + r["timeouts"]
    p50 = med([r["latency_us"]["p50"] for r in rs]); p99 = med([r["latency_us"]["p99"] for r in rs])
    # Answers that are results: loadgen sends the next request as soon as
    # any answer (a `busy` too) comes, so only ok answers count here.
    rps = med([r["ok"] / r["elapsed_s"] for r in rs if r["elapsed_s"]])
    print(f"{'native wire x'+str(c):18}{'':29}{p50:>10.0f}/{p99:<9.0f}{rps:>9.0f}   (loadgen, the Rust client; ok answers/s)")
    if any(errors.values()):
        bad.append((c, errors))
try:
    print("front door counters:", json.dumps(status["engine"]["frontdoor"]["stats"]))
except Exception as e:
    print("front door counters: unavailable:", e)
print("p50 ratio = KServe p50 / Sluice p50; req/s ratio = Sluice req/s / KServe req/s")
if bad:
    for c, errors in bad:
        print(f"native wire x{c}: answers other than results: {errors}")
    print("worker refusals:", find(status, "refusals") or {},
          "(replay_table_full: busy from a full replay table, raise REPLAY_ENTRIES;"
          " otherwise busy is a full shard queue)")
    sys.exit(1)
PY
