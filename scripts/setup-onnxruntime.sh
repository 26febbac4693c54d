#!/usr/bin/env bash
# Fetches libonnxruntime.so 1.31.1 from the PyPI wheel (Debian 12 ships no
# ONNX Runtime) into .cache/onnxruntime/ at the repo root and prints its path.
# Idempotent: a library already in place with the pinned checksum is kept;
# anything else there is replaced.
#
# Env: PIP (default: pip3, else pip), SLUICE_ORT_CACHE (default: <repo>/.cache/onnxruntime).
set -euo pipefail

ORT_VERSION="1.31.1"
WHEEL="onnxruntime-${ORT_VERSION}-cp311-cp311-manylinux_2_28_x86_64.whl"
# sha256 of the wheel above, as published on PyPI.
WHEEL_SHA256="5752bd508126ae7c49894d3b9d2e83f0c3d487319246d04c444b393308d7ad7f"
# sha256 of the library inside it.
LIB_SHA256="fc44112fbe06d7d689c57e11d3862031f64711007e4ee020f8eed5185fd2c1d3"
MEMBER="onnxruntime/capi/libonnxruntime.so.${ORT_VERSION}"
LIB_NAME="libonnxruntime.so.${ORT_VERSION}"

die() { echo "setup-onnxruntime: $*" >&2; exit 1; }

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${SLUICE_ORT_CACHE:-$repo_root/.cache/onnxruntime}"
lib="$dest/$LIB_NAME"

command -v sha256sum >/dev/null || die "sha256sum not found (coreutils)"
sha_of() { sha256sum "$1" | cut -d' ' -f1; }

# Already in place and intact: nothing to do.
if [[ -f "$lib" && "$(sha_of "$lib")" == "$LIB_SHA256" ]]; then
    echo "$lib"
    exit 0
fi

[[ "$(uname -m)" == "x86_64" ]] || die "only x86_64 Linux is supported (this is $(uname -m))"
pip="${PIP:-}"
if [[ -z "$pip" ]]; then
    if command -v pip3 >/dev/null; then pip=pip3
    elif command -v pip >/dev/null; then pip=pip
    else die "pip not found; install python3-pip or set PIP=/path/to/pip"
    fi
fi
python="${PYTHON:-python3}"
command -v "$python" >/dev/null || die "python3 not found (needed to unpack the wheel)"

mkdir -p "$dest"
work="$(mktemp -d "$dest/.dl.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# Ask for exactly the pinned wheel's tags so the result does not depend on
# which Python this pip belongs to.
"$pip" download "onnxruntime==${ORT_VERSION}" --no-deps --only-binary=:all: \
    --python-version 3.11 --implementation cp --abi cp311 \
    --platform manylinux_2_28_x86_64 -d "$work" >"$work/pip.log" 2>&1 \
    || { cat "$work/pip.log" >&2; die "pip download of onnxruntime==${ORT_VERSION} failed"; }

[[ -f "$work/$WHEEL" ]] || { ls -l "$work" >&2; die "pip did not produce $WHEEL"; }
got="$(sha_of "$work/$WHEEL")"
[[ "$got" == "$WHEEL_SHA256" ]] || die "checksum mismatch for $WHEEL: got $got, want $WHEEL_SHA256"

"$python" - "$work/$WHEEL" "$MEMBER" "$work/$LIB_NAME" <<'EOF' || die "could not extract $MEMBER from the wheel"
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF

got="$(sha_of "$work/$LIB_NAME")"
[[ "$got" == "$LIB_SHA256" ]] || die "checksum mismatch for $MEMBER: got $got, want $LIB_SHA256"

# Move into place atomically so a concurrent reader never sees half a file.
mv -f "$work/$LIB_NAME" "$lib"
echo "$lib"
