#!/usr/bin/env bash
# The Python client's test environments, idempotent: .cache/python-client
# (the host's python3, >= 3.11, with onnxruntime as the reference) and, when
# a CPython 3.9 is installed (pyenv's, or PYTHON39=...), .cache/python-client-py39
# for the oldest supported version. Packages pinned in clients/python/requirements-*.txt.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
log() { echo "setup-python-client: $*" >&2; }

make_venv() { # python dir requirements
    local py=$1 dir=$2 req=$3 want
    want=$(sha256sum "$req" | cut -c1-64)
    if [ "$(cat "$dir/.requirements.sha256" 2>/dev/null)" = "$want" ] && [ -x "$dir/bin/python" ]; then
        return 0
    fi
    log "creating $dir ($("$py" --version 2>&1)) from ${req#"$root"/}"
    rm -rf "$dir"
    "$py" -m venv "$dir"
    "$dir/bin/python" -m pip install -q -r "$req"
    echo "$want" >"$dir/.requirements.sha256"
}

py=${PYTHON:-python3}
"$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    log "$py is $("$py" --version 2>&1); the test environment needs >= 3.11 (set PYTHON=...)"
    exit 1
}
make_venv "$py" "$root/.cache/python-client" "$root/clients/python/requirements-test.txt"

py39=${PYTHON39:-}
if [ -z "$py39" ]; then
    for c in python3.9 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.9*/bin/python3.9; do
        if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 9))' 2>/dev/null; then
            py39=$(command -v "$c")
            break
        fi
    done
fi
if [ -n "$py39" ]; then
    make_venv "$py39" "$root/.cache/python-client-py39" "$root/clients/python/requirements-py39.txt"
else
    log "no CPython 3.9 found: the 3.9 run of the Python client's tests will be skipped"
fi
