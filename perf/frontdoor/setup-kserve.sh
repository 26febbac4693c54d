#!/usr/bin/env bash
# KServe's own Python ModelServer for perf/frontdoor.sh, idempotent:
# .cache/kserve-venv with kserve 0.21.0 and onnxruntime, every package
# pinned in perf/frontdoor/requirements-kserve.txt.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$root/.cache/kserve-venv
req=$root/perf/frontdoor/requirements-kserve.txt
want=$(sha256sum "$req" | cut -c1-64)
if [ "$(cat "$dir/.requirements.sha256" 2>/dev/null)" = "$want" ] && [ -x "$dir/bin/python" ]; then
    exit 0
fi
echo "setup-kserve: creating $dir from perf/frontdoor/requirements-kserve.txt" >&2
rm -rf "$dir"
python3 -m venv "$dir"
"$dir/bin/python" -m pip install -q -r "$req"
echo "$want" >"$dir/.requirements.sha256"
