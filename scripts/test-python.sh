#!/usr/bin/env bash
# The Python client (clients/python): builds the package the way
# `pip install clients/python` does (maturin through pip's PEP 517 hook), installs the
# abi3 wheel into the test environments, and runs its pytest suite against a
# real sluiced on loopback (started by the suite; build it first with
# scripts/build-ffi.sh). Then the same wheel on CPython 3.9, the oldest
# supported version, without the tests that need onnxruntime/onnx.
#   scripts/test-python.sh [pytest args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup-python-client.sh
export SLUICE_ORT_LIB="${SLUICE_ORT_LIB:-$root/.cache/onnxruntime/libonnxruntime.so.1.31.1}"
[ -f "$SLUICE_ORT_LIB" ] || scripts/setup-onnxruntime.sh >/dev/null
# Silero VAD for tests/test_streams.py (stateful streams); idempotent.
scripts/setup-models.sh >/dev/null
[ -x .cache/bin/sluiced ] || { echo "test-python: .cache/bin/sluiced missing: run scripts/build-ffi.sh" >&2; exit 1; }
venv=$root/.cache/python-client
py39=$root/.cache/python-client-py39
targets=("$venv")
[ -x "$py39/bin/python" ] && targets+=("$py39")
scripts/install-python-client.sh "${targets[@]}"
(cd clients/python && "$venv/bin/python" -m pytest -q -p no:cacheprovider tests "$@")

py39=$root/.cache/python-client-py39
if [ -x "$py39/bin/python" ]; then
    echo "test-python: the same wheel on $("$py39/bin/python" --version)"
    (cd clients/python && "$py39/bin/python" -m pytest -q -p no:cacheprovider \
        tests/test_dtypes.py tests/test_errors.py tests/test_async.py tests/test_garbage.py \
        tests/test_api.py tests/test_wire.py "$@")
else
    echo "test-python: CPython 3.9 not installed: the 3.9 run is skipped"
fi
