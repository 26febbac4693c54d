#!/usr/bin/env bash
# Checks the live admin API and schema registry against their OpenAPI
# document with schemathesis: sluiced (the real engine, from
# scripts/build-ffi.sh) on a throwaway config and data dir, every operation
# fed generated requests, positive and negative. Fails on any 5xx and on any
# response the document does not describe (status, content type, body).
# Bounded: EXAMPLES cases per operation (default 50: about 20 s on 2 cores).
#
#   scripts/api-check.sh            (after scripts/build-ffi.sh; setup.sh installs schemathesis)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/.cache/bin/sluiced
[ -x "$bin" ] || { echo "api-check: $bin missing: run scripts/build-ffi.sh" >&2; exit 2; }
command -v schemathesis >/dev/null || { echo "api-check: schemathesis missing: run scripts/setup.sh" >&2; exit 2; }
export SLUICE_ORT_LIB="${SLUICE_ORT_LIB:-$root/.cache/onnxruntime/libonnxruntime.so.1.31.1}"

work=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
# cfg/sluice.toml with ephemeral ports, absolute model paths and its own
# data dir, so generated changes touch nothing else.
sed -e 's|^listen = "127.0.0.1:7070"|listen = "127.0.0.1:0"|' \
    -e 's|^admin_listen = "127.0.0.1:7071"|admin_listen = "127.0.0.1:0"|' \
    -e "s|\"\\.\\./models/|\"$root/models/|g" \
    -e "s|\"\\.\\./\\.cache/onnxruntime/|\"$root/.cache/onnxruntime/|" \
    -e 's|^data_dir = .*|data_dir = "data"|' \
    -e 's|^admin_token = ""|admin_token = "api-check-token"|' \
    "$root/cfg/sluice.toml" >"$work/sluice.toml"
grep -q 'listen = "127.0.0.1:0"' "$work/sluice.toml" && grep -q 'admin_token = "api-check-token"' "$work/sluice.toml" ||
    { echo "api-check: cfg/sluice.toml changed shape" >&2; exit 2; }
"$bin" -config "$work/sluice.toml" >"$work/sluiced.log" 2>&1 &
pid=$!
addr=
for _ in $(seq 200); do
    addr=$(sed -n 's/.*sluiced serving" admin=\([^ ]*\).*/\1/p' "$work/sluiced.log" | head -1)
    [ -n "$addr" ] && break
    kill -0 "$pid" 2>/dev/null || { cat "$work/sluiced.log" >&2; exit 1; }
    sleep 0.1
done
[ -n "$addr" ] || { cat "$work/sluiced.log" >&2; echo "api-check: sluiced did not come up" >&2; exit 1; }
echo "api-check: sluiced at $addr"
# The admin token is on, so every generated request carries it, and
# without it even the document is refused: 401 with the JSON error body.
auth="Authorization: Bearer api-check-token"
python3 - "$addr" "$work/openapi.json" <<'PY' || exit 1
import json, sys, urllib.error, urllib.request
addr, out = sys.argv[1], sys.argv[2]
url = f"http://{addr}/openapi.json"
try:
    urllib.request.urlopen(url, timeout=10)
    sys.exit("api-check: GET /openapi.json without the token was served")
except urllib.error.HTTPError as e:
    body = json.loads(e.read())
    if e.code != 401 or body.get("code") != "unauthorized" or body.get("error_code") != 401:
        sys.exit(f"api-check: GET /openapi.json without the token: {e.code} {body}")
req = urllib.request.Request(url, headers={"Authorization": "Bearer api-check-token"})
with urllib.request.urlopen(req, timeout=10) as r, open(out, "wb") as f:
    f.write(r.read())
PY

rc=0
# Stateful links are not declared, so the phases are examples, coverage and
# fuzzing; a fixed seed makes a failure reproducible. Run from the throwaway
# dir: schemathesis keeps its cache (.schemathesis/) in the working directory.
(cd "$work" && schemathesis --no-color --config-file "$root/scripts/schemathesis.toml" run "$work/openapi.json" --url "http://$addr" -H "$auth" \
    --checks all \
    --phases examples,coverage,fuzzing \
    --max-examples "${EXAMPLES:-50}" \
    --seed "${SEED:-1}" \
    --workers 2 \
    --request-timeout 10 \
    --suppress-health-check all \
    --report junit --report-dir "$work/report") || rc=$?
if ! kill -0 "$pid" 2>/dev/null; then
    echo "api-check: sluiced died during the run" >&2
    rc=1
fi
if grep -q "panic\|fatal error" "$work/sluiced.log"; then
    echo "api-check: sluiced logged a panic" >&2
    grep -m5 "panic\|fatal error" "$work/sluiced.log" >&2
    rc=1
fi
[ $rc -eq 0 ] || tail -n 30 "$work/sluiced.log" >&2
exit $rc
