#!/usr/bin/env bash
# The Go client (clients/go) against loadgen (the Rust client's load
# generator) on the bundled MLP, batch 1, in one run and against one engine:
# closed loop with 32 requests in flight (one client, one UDP socket: Go
# with 32 goroutines, loadgen with 32 outstanding), and with 1.
#   ratio = Go / loadgen        (p50: lower is better; req/s: higher is better)
# Engine pinned to core 1 (busy poll), both clients to core 0 (the Go
# client therefore runs with GOMAXPROCS=1). loadgen busy-polls its socket
# (its default); the Go client waits in the runtime's netpoller (epoll).
#   perf/goclient.sh            (DURATION=5s per run)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
DURATION=${DURATION:-5s}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target/perf}
export SLUICE_ORT_LIB=${SLUICE_ORT_LIB:-$root/.cache/onnxruntime/libonnxruntime.so.1.31.1}
[ -f "$SLUICE_ORT_LIB" ] || scripts/setup-onnxruntime.sh >/dev/null
cargo build --release -q -p sluice-engine -p sluice-perf --bins
BIN=$CARGO_TARGET_DIR/release
OUT=$(mktemp -d)
(cd perf/goclient && go build -o "$OUT/goclient-bench" .)
cfg=$OUT/busy.toml
sed -e 's/^poll = "adaptive"/poll = "busy"/' -e "s|\"\.\./|\"$root/|g" \
    -e 's/^listen = "127.0.0.1:7070"/listen = "127.0.0.1:0"/' cfg/sluice.toml >"$cfg"

pid=
stop() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi; pid=; }
trap 'stop; rm -rf "$OUT"' EXIT
taskset -c 1 "$BIN/sluice-engine" --config "$cfg" >"$OUT/engine.log" 2>&1 &
pid=$!
addr=
for _ in $(seq 100); do
    addr=$(sed -n 's/^sluice-engine: serving on \([0-9.:]*\) .*/\1/p' "$OUT/engine.log")
    [ -n "$addr" ] && break
    sleep 0.1
done
[ -n "$addr" ] || { echo "engine did not start:" >&2; cat "$OUT/engine.log" >&2; exit 1; }
mix=perf/mixes/mlp-b1.toml
for n in 32 1; do
    taskset -c 0 "$BIN/loadgen" --addr "$addr" --mix "$mix" --closed $n --duration "$DURATION" --warmup 1s --json >"$OUT/loadgen-$n.json"
    taskset -c 0 "$OUT/goclient-bench" --addr "$addr" --closed $n --duration "$DURATION" --warmup 1s >"$OUT/go-$n.json"
done
stop
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
print(f"\n{'in flight':<10}{'client':<9}{'p50 µs':>9}{'p99 µs':>9}{'req/s':>10}{'errors':>8}")
rows = []
for n in ("32", "1"):
    r = json.load(open(f"{out}/loadgen-{n}.json"))
    g = json.load(open(f"{out}/go-{n}.json"))
    rerr = sum(r["errors"].values()) + r["timeouts"] + r["malformed"] + r["io_errors"]
    for name, d, e in (("loadgen", r, rerr), ("go", g, g["errors"])):
        l = d["latency_us"]
        print(f"{n:<10}{name:<9}{l['p50']:>9.1f}{l['p99']:>9.1f}{d['throughput_per_sec']:>10.0f}{e:>8}")
    rows.append((n, g["latency_us"]["p50"] / r["latency_us"]["p50"], g["throughput_per_sec"] / r["throughput_per_sec"]))
    if g["errors"]:
        print("  go errors:", g["error_kinds"])
print()
for n, p50, rps in rows:
    print(f"{n} in flight: Go/loadgen p50 ratio {p50:.2f}, req/s ratio {rps:.2f}")
PY
