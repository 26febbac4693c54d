#!/usr/bin/env bash
# Builds the project's own schema transforms (dataplane/transform/guests)
# for wasm32-unknown-unknown and wraps each into a component of the
# sluice:transform world. Output: target/transforms/<name>.wasm. Needs the
# rustup target (scripts/setup.sh adds it). Prints the output directory.
#
#   scripts/build-transforms.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/target/transforms"
mkdir -p "$out"
log() { echo "build-transforms: $*" >&2; }

rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown || {
    log "adding the rustup target wasm32-unknown-unknown"
    rustup target add wasm32-unknown-unknown >&2
}
# The guests share the worktree's target directory (no extra one).
cargo build -q --release --locked --target wasm32-unknown-unknown \
    --manifest-path "$root/dataplane/transform/guests/Cargo.toml" \
    --target-dir "$root/target" >&2
cargo build -q -p sluice-componentize --locked --manifest-path "$root/Cargo.toml" >&2
for name in json-migrate tensor-migrate; do
    core="$root/target/wasm32-unknown-unknown/release/${name//-/_}.wasm"
    "$root/target/debug/sluice-componentize" "$core" "$out/$name.wasm"
done
echo "$out"
