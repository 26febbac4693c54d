#!/usr/bin/env bash
# Builds the engine's C ABI as a static library (target/release/libsluice_ffi.a)
# and the Go binaries that link it (.cache/bin/sluiced, .cache/bin/sluicectl).
# Prints the CGO_CFLAGS to export so Go's build cache notices a new library.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# The Go side links target/release/libsluice_ffi.a by path: build it there.
# With DPDK installed, sluiced can select it (transport = "dpdk").
features=()
ldflags=""
if pkg-config --exists libdpdk 2>/dev/null; then
    features=(--features dpdk)
    ldflags=$(pkg-config --libs libdpdk)
fi
env -u CARGO_TARGET_DIR cargo build --release -q -p sluice-ffi "${features[@]}"
lib=target/release/libsluice_ffi.a
export CGO_LDFLAGS="$ldflags"
# Go does not hash libraries named in #cgo LDFLAGS; a define carrying the
# library's hash makes a rebuilt library rebuild the Go packages that link it.
export CGO_CFLAGS="-g -O2 -DSLUICE_FFI_SHA=$(sha256sum "$lib" | cut -c1-16)"
mkdir -p .cache/bin
(cd go-control && go build -o ../.cache/bin/sluiced ./cmd/sluiced && go build -o ../.cache/bin/sluicectl ./cmd/sluicectl)
echo "export CGO_CFLAGS=\"$CGO_CFLAGS\""
echo "export CGO_LDFLAGS=\"$CGO_LDFLAGS\""
