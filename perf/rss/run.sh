#!/usr/bin/env bash
# Measures sluiced's RSS across model load/unload cycles through the admin
# API, for the bundled ONNX model and for the "null" kind (no ONNX Runtime),
# with glibc's default arenas and with MALLOC_ARENA_MAX=1 plus a low trim
# threshold. docs/operations.md ("Memory across model reloads") has the
# figures and what they mean.
#
#   perf/rss/run.sh            (CYCLES=1000 per run; after scripts/build-ffi.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$root/.cache/bin/sluiced
[ -x "$bin" ] || { echo "rss: $bin missing: run scripts/build-ffi.sh" >&2; exit 2; }
export SLUICE_ORT_LIB="${SLUICE_ORT_LIB:-$root/.cache/onnxruntime/libonnxruntime.so.1.31.1}"
cycles=${CYCLES:-1000}
work=$(mktemp -d)
pid=
stop() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; pid=; }
trap 'stop; rm -rf "$work"' EXIT

one() { # label kind [env...]
    local label=$1 kind=$2
    shift 2
    rm -rf "$work/data"
    sed -e 's|^listen = "127.0.0.1:7070"|listen = "127.0.0.1:0"|' \
        -e 's|^admin_listen = "127.0.0.1:7071"|admin_listen = "127.0.0.1:0"|' \
        -e "s|\"\\.\\./models/|\"$root/models/|g" \
        -e "s|\"\\.\\./\\.cache/onnxruntime/|\"$root/.cache/onnxruntime/|" \
        -e 's|^data_dir = .*|data_dir = "data"|' \
        "$root/cfg/sluice.toml" >"$work/sluice.toml"
    env "$@" "$bin" -config "$work/sluice.toml" >"$work/log" 2>&1 &
    pid=$!
    local addr=
    for _ in $(seq 200); do
        addr=$(sed -n 's/.*sluiced serving" admin=\([^ ]*\).*/\1/p' "$work/log" | head -1)
        [ -n "$addr" ] && break
        sleep 0.1
    done
    [ -n "$addr" ] || { cat "$work/log" >&2; exit 1; }
    local path=()
    [ "$kind" = onnx ] && path=(--path "$root/models/mlp.onnx")
    echo "== $label ($kind, ${*:-default allocator})"
    python3 "$root/perf/rss/cycle.py" --admin "$addr" --pid "$pid" --cycles "$cycles" --every $((cycles / 10)) \
        --kind "$kind" "${path[@]}" | tail -1
    stop
}

one "ONNX model, glibc defaults" onnx
one "null model (no ONNX Runtime), glibc defaults" null
one "ONNX model, one arena, trim at 128 KiB" onnx MALLOC_ARENA_MAX=1 MALLOC_TRIM_THRESHOLD_=131072
one "ONNX model, 2 arenas" onnx MALLOC_ARENA_MAX=2
