#!/usr/bin/env bash
# Builds the sluice Python package the way `pip install clients/python` does
# (maturin through pip's PEP 517 hook; --no-build-isolation takes the venv's
# pinned maturin) and installs the abi3 wheel into each venv given (default:
# .cache/python-client). Prints the wheel's name.
#   scripts/install-python-client.sh [venv...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/python}"
venvs=("$@")
[ ${#venvs[@]} -gt 0 ] || venvs=("$root/.cache/python-client")
build=${venvs[0]}
dist=$(mktemp -d)
trap 'rm -rf "$dist"' EXIT
PATH="$build/bin:$PATH" "$build/bin/pip" wheel -q --no-build-isolation --no-deps -w "$dist" clients/python
wheel=$(ls "$dist"/sluice-*-cp39-abi3-*.whl)
for v in "${venvs[@]}"; do
    "$v/bin/pip" install -q --force-reinstall --no-deps "$wheel"
done
echo "install-python-client: $(basename "$wheel") into ${venvs[*]#"$root"/}" >&2
