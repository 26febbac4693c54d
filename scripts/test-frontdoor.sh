#!/usr/bin/env bash
# The front door against real, unmodified clients: tritonclient[http,grpc]
# from PyPI (pinned, .cache/frontdoor-venv) and curl, against a real
# sluiced on loopback (started by the suite; build it first with
# scripts/build-ffi.sh), every answer compared with onnxruntime-python:
# the bundled MLP and a published model (NudeNet, scripts/setup-models.sh).
#   scripts/test-frontdoor.sh [pytest args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup-frontdoor.sh
# The published model the suite serves (kept when already in place).
scripts/setup-models.sh >/dev/null
export SLUICE_ORT_LIB="${SLUICE_ORT_LIB:-$root/.cache/onnxruntime/libonnxruntime.so.1.31.1}"
[ -f "$SLUICE_ORT_LIB" ] || scripts/setup-onnxruntime.sh >/dev/null
[ -x .cache/bin/sluiced ] || { echo "test-frontdoor: .cache/bin/sluiced missing: run scripts/build-ffi.sh" >&2; exit 1; }
command -v curl >/dev/null || { echo "test-frontdoor: curl missing (apt-get install curl)" >&2; exit 1; }
cd tests/frontdoor
exec "$root/.cache/frontdoor-venv/bin/python" -m pytest -q -p no:cacheprovider . "$@"
