#!/usr/bin/env bash
# The front door's real-client test environment, idempotent:
# .cache/frontdoor-venv with tritonclient[http,grpc] and onnxruntime (the
# reference), every package pinned in tests/frontdoor/requirements.txt.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/.cache/frontdoor-venv
req=$root/tests/frontdoor/requirements.txt
want=$(sha256sum "$req" | cut -c1-64)
if [ "$(cat "$dir/.requirements.sha256" 2>/dev/null)" = "$want" ] && [ -x "$dir/bin/python" ]; then
    exit 0
fi
echo "setup-frontdoor: creating $dir from tests/frontdoor/requirements.txt" >&2
rm -rf "$dir"
python3 -m venv "$dir"
"$dir/bin/python" -m pip install -q -r "$req"
echo "$want" >"$dir/.requirements.sha256"
