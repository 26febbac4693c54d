#!/usr/bin/env bash
# The fresh-machine check: what CI does, from nothing the tree builds.
# Clones the current commit into an empty directory and runs `.ci/run`
# there (setup, then scripts/test.sh) with an empty cargo target
# directory, empty Go build and module caches and an empty pip cache, as
# CI's clean checkout does (and an empty XDG cache, where
# setup-backends.sh keeps the llama.cpp wheel it compiles). Prints the total time and every stage's time.
# Run it before every stop that changes tests, setup or dependencies; the
# budget is 50 minutes on an idle 2-core host (CI's limit is 90).
#
#   scripts/fresh-check.sh            the commit at HEAD (uncommitted changes are not in it)
#   KEEP=1 scripts/fresh-check.sh     keep the clone afterwards (default: kept only on failure)
#   FRESH_DIR=/path scripts/fresh-check.sh   where to clone (default: a new dir under /var/tmp)
#
# What it cannot make fresh: system packages (apt), the Python packages
# installed system-wide and the Rust toolchain stay as this host has them;
# a first run on a new machine also downloads those (setup.sh installs
# them; on this kind of host that adds a few minutes).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
commit=$(git -C "$root" rev-parse HEAD)
if ! git -C "$root" diff --quiet HEAD; then
    echo "fresh-check: uncommitted changes are not checked (the clone is of $commit)" >&2
fi
work=${FRESH_DIR:-$(mktemp -d /var/tmp/sluice-fresh.XXXXXX)}
mkdir -p "$work"
[ -z "$(ls -A "$work")" ] || { echo "fresh-check: $work is not empty" >&2; exit 2; }
echo "fresh-check: $commit in $work"
git clone -q --no-local "$root" "$work/main"
git -C "$work/main" checkout -q "$commit"
mkdir -p "$work/gocache" "$work/gomodcache" "$work/pipcache" "$work/xdgcache"

log=$work/ci.log
t0=$SECONDS
rc=0
(
    cd "$work/main"
    env -u CARGO_TARGET_DIR -u CARGO_BUILD_TARGET_DIR \
        CI=true GOCACHE="$work/gocache" GOMODCACHE="$work/gomodcache" PIP_CACHE_DIR="$work/pipcache" \
        XDG_CACHE_HOME="$work/xdgcache" \
        bash .ci/run </dev/null
) >"$log" 2>&1 || rc=$?
total=$((SECONDS - t0))

echo
echo "==== fresh-check: stage times"
# scripts/test.sh's closing table; setup and the builds before the first
# stage are the rest of the total.
sed -n '/^==== stage times/,/^$/p' "$log" | sed 1d
echo "total: $((total / 60)) min $((total % 60)) s (budget 50 min; CI limit 90 min); exit $rc"
tail -n 3 "$log"
if [ $rc -ne 0 ] || [ -n "${KEEP:-}" ]; then
    echo "fresh-check: clone and log kept in $work ($log)"
else
    # The Go module cache is read-only by design; make it removable.
    chmod -R u+w "$work/gomodcache" 2>/dev/null || true
    rm -rf "$work"
fi
exit $rc
