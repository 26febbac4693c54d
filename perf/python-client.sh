#!/usr/bin/env bash
# The Python client against the Rust client, in one run, on the same engine
# (busy poll, core 1; clients on core 0), the bundled MLP at batch 1:
#   latency:    Python Client.infer p50 (spin)  vs  loadgen --closed 1 (Rust sluice-client, spin)
#               added = python p50 - rust p50                   target: <= 5 us
#   throughput: Python infer_many (window 32, spin) and AsyncClient (32 in flight)
#               vs loadgen --closed 32 (spinning, its default, and --block: AsyncClient
#               sleeps in epoll); ratio = python / rust
# The host is shared, so the runs alternate, ROUNDS times, and each figure is
# the median over the rounds.
#   perf/python-client.sh        (DURATION=3 seconds per run, ROUNDS=3)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
DURATION=${DURATION:-3}
ROUNDS=${ROUNDS:-3}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target/perf}
export SLUICE_ORT_LIB=${SLUICE_ORT_LIB:-$root/.cache/onnxruntime/libonnxruntime.so.1.31.1}
[ -f "$SLUICE_ORT_LIB" ] || scripts/setup-onnxruntime.sh >/dev/null
cargo build --release -q -p sluice-engine -p sluice-perf --bins
bash scripts/setup-python-client.sh
CARGO_TARGET_DIR=$root/target/python scripts/install-python-client.sh
PY=$root/.cache/python-client/bin/python
BIN=$CARGO_TARGET_DIR/release
OUT=$(mktemp -d)
cfg=$OUT/busy.toml
sed -e 's/^poll = "adaptive"/poll = "busy"/' -e "s|\"\.\./|\"$root/|g" -e 's/127.0.0.1:7070/127.0.0.1:17070/' \
    -e 's/127.0.0.1:7071/127.0.0.1:17071/' -e "s|data_dir = .*|data_dir = \"$OUT/data\"|" cfg/sluice.toml >"$cfg"
addr=127.0.0.1:17070
mix=perf/mixes/mlp-b1.toml

pid=
stop() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi; pid=; }
trap 'stop; rm -rf "$OUT"' EXIT
taskset -c 1 "$BIN/sluice-engine" --config "$cfg" >"$OUT/engine.log" 2>&1 & pid=$!
for _ in $(seq 100); do
    "$BIN/loadgen" --addr $addr --mix $mix --requests 1 --timeout 100ms --json 2>/dev/null | grep -q '"ok":1' && break
    sleep 0.1
done

rust() { taskset -c 0 "$BIN/loadgen" --addr $addr --mix $mix --closed "$1" --duration "${DURATION}s" --warmup 1s --json "${@:2}"; }
for r in $(seq "$ROUNDS"); do
    rust 1 >"$OUT/rust-1.$r.json"
    taskset -c 0 "$PY" perf/python-client/bench.py latency $addr "$DURATION" >"$OUT/py-latency.$r.json"
    rust 32 >"$OUT/rust-32.$r.json"
    rust 32 --block >"$OUT/rust-32-block.$r.json"
    taskset -c 0 "$PY" perf/python-client/bench.py many $addr "$DURATION" 32 >"$OUT/py-many.$r.json"
    taskset -c 0 "$PY" perf/python-client/bench.py async $addr "$DURATION" 32 >"$OUT/py-async.$r.json"
done
stop

"$PY" - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
runs = lambda n: [json.load(open(f"{out}/{n}.{r}.json")) for r in range(1, rounds + 1)]
med = lambda xs: statistics.median(xs)
r1, r32, r32b = runs("rust-1"), runs("rust-32"), runs("rust-32-block")
pl, pm, pa = runs("py-latency"), runs("py-many"), runs("py-async")
for r in r1 + r32 + r32b:
    assert sum(r["errors"].values()) == 0, r
lost = {n: sum(r["timeouts"] for r in rs) for n, rs in
        (("rust", r1 + r32 + r32b), ("python", pl + pm + pa))}
lat = lambda rs, q: med([r["latency_us"][q] for r in rs])
tput = lambda rs: med([r["throughput_per_sec"] for r in rs])
print(f"\nMLP batch 1, one request at a time (spin), median of {rounds} rounds:")
print(f"  {'':<22}{'p50 µs':>10}{'p90 µs':>10}{'p99 µs':>10}")
for name, rs in (("rust (loadgen)", r1), ("python Client.infer", pl)):
    print(f"  {name:<22}{lat(rs, 'p50'):>10.1f}{lat(rs, 'p90'):>10.1f}{lat(rs, 'p99'):>10.1f}")
added = lat(pl, "p50") - lat(r1, "p50")
print(f"  python adds {added:.1f} µs at p50 (target <= 5), ratio {lat(pl, 'p50') / lat(r1, 'p50'):.2f}")
print(f"  per round (rust p50, python p50): " + ", ".join(
    f"({a['latency_us']['p50']:.1f}, {b['latency_us']['p50']:.1f})" for a, b in zip(r1, pl)))
rt, rb, tm, ta = tput(r32), tput(r32b), tput(pm), tput(pa)
print(f"\nMLP batch 1, 32 in flight, median of {rounds} rounds:")
print(f"  {'rust loadgen (spin)':<28}{rt:>10.0f} req/s")
print(f"  {'rust loadgen --block':<28}{rb:>10.0f} req/s")
print(f"  {'python infer_many (spin)':<28}{tm:>10.0f} req/s   ratio {tm / rt:.2f} (vs spin)")
print(f"  {'python AsyncClient (epoll)':<28}{ta:>10.0f} req/s   ratio {ta / rb:.2f} (vs --block)")
print(f"\ntimeouts (datagrams lost on the loaded host), all rounds: rust {lost['rust']}, python {lost['python']}")
s = pl[-1]["stats"]
print(f"\nbinding copies (last latency run): {s['inputs_copied']} inputs copied, "
      f"{s['outputs_viewed']} outputs viewed, {s['outputs_copied']} outputs copied")
PY
