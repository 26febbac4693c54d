#!/usr/bin/env bash
# Builds the engine's C ABI as a static library (target/release/libsluice_ffi.a)
# and the Go binaries that link it (.cache/bin/sluiced, .cache/bin/sluicectl).
# Prints the CGO_CFLAGS and CGO_LDFLAGS to export so Go's build cache notices
# a new library and links what its features need.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# The Go side links target/release/libsluice_ffi.a (found by -L): build it there.
# With DPDK installed, sluiced can select it (transport = "dpdk"); with the
# rdma-core dev files (libibverbs-dev, librdmacm-dev: scripts/rdma-setup.sh),
# it can select RDMA (transport = "rdma") and manage its connections.
features=()
ldflags=""
if pkg-config --exists libdpdk 2>/dev/null; then
    features+=(dpdk)
    ldflags="$ldflags $(pkg-config --libs libdpdk)"
fi
if pkg-config --exists libibverbs librdmacm 2>/dev/null; then
    features+=(rdma)
    ldflags="$ldflags $(pkg-config --libs libibverbs librdmacm)"
fi
feature_args=()
if ((${#features[@]})); then
    feature_args=(--features "$(
        IFS=,
        echo "${features[*]}"
    )")
fi
env -u CARGO_TARGET_DIR cargo build --release -q -p sluice-ffi "${feature_args[@]}"
lib=target/release/libsluice_ffi.a
ldflags=$(echo $ldflags) # trim
export CGO_LDFLAGS="$ldflags"
# Go does not hash libraries named in #cgo LDFLAGS; a define carrying the
# library's hash makes a rebuilt library rebuild the Go packages that link it.
export CGO_CFLAGS="-g -O2 -DSLUICE_FFI_SHA=$(sha256sum "$lib" | cut -c1-16)"
mkdir -p .cache/bin
(cd go-control && go build -o ../.cache/bin/sluiced ./cmd/sluiced && go build -o ../.cache/bin/sluicectl ./cmd/sluicectl)
echo "build-ffi: features: ${features[*]:-none}" >&2
echo "export CGO_CFLAGS=\"$CGO_CFLAGS\""
echo "export CGO_LDFLAGS=\"$CGO_LDFLAGS\""
