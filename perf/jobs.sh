#!/usr/bin/env bash
# The JetStream ingress (sluiced [jobs], cfg/jobs.toml) against a plain Go
# JetStream worker that runs the same MLP in-process with onnxruntime_go
# (v1.27.0, asking for ORT API 24 of the same libonnxruntime 1.31.1), on one
# nats-server with the seed's stream (file storage), in one run:
# 1 and 32 messages per fetch, closed loops of 1 and 128 requests
# outstanding. Latency is publish -> result stored (the result's JetStream
# timestamp). ratio = Sluice / Go worker.
#   perf/jobs.sh                 (N=4000 per loaded run, N1=600 per W=1 run)
# Needs .cache/bin/sluiced (eval "$(scripts/build-ffi.sh)") and
# .cache/bin/nats-server (scripts/setup.sh). Results: target/perf-results/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
[ -x .cache/bin/sluiced ] || { echo "perf/jobs.sh: build sluiced first: eval \"\$(scripts/build-ffi.sh)\"" >&2; exit 1; }
[ -x .cache/bin/nats-server ] || scripts/setup.sh --runtime
export SLUICE_ORT_LIB=${SLUICE_ORT_LIB:-$root/.cache/onnxruntime/libonnxruntime.so.1.31.1}
[ -f "$SLUICE_ORT_LIB" ] || scripts/setup-onnxruntime.sh >/dev/null
out=target/perf-results
mkdir -p "$out"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
(cd perf/jobs && go build -o "$bin/jobsbench" .)
"$bin/jobsbench" -root "$root" -ort "$SLUICE_ORT_LIB" -n "${N:-4000}" -n1 "${N1:-600}" \
    -out "$out/jobs-$(date -u +%Y%m%dT%H%M%SZ).json"
