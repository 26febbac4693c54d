#!/usr/bin/env bash
# The RDMA stage: real verbs on Soft-RoCE in a qemu guest.
#  1. installs rdma-core headers, qemu and debootstrap (scripts/rdma-setup.sh);
#  2. builds sluice-engine and sluice-rdma-client with the `rdma` feature,
#     and sluiced/sluicectl linked with an rdma-enabled sluice-ffi built in
#     this script's own target dir (target/release stays as it is);
#  3. builds (or reuses, see --fresh) the guest image;
#  4. boots it: perftest ib_send_lat / ib_write_bw, then the appliance and
#     the client (small frames, a 16 MiB tensor by RDMA WRITE, connection
#     loss, reconnect), then sluiced: connections listed, counted and closed
#     through the admin API; then two appliances on the same device, A
#     (sluiced) forwarding to its RDMA peer B: answers relayed, the peer
#     connection listed, closed and re-established, peer_down when B is
#     down, served again when B is back; all in the same guest run;
#  5. prints the results and Sluice/perftest ratios (.cache/rdma-vm/rdma-results.txt).
#
#   scripts/rdma-e2e.sh [--fresh]     (SLUICE_RDMA_PROFILE=debug for a debug build)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PROFILE=${SLUICE_RDMA_PROFILE:-release}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target/rdma}
t_all=$(date +%s)

bash scripts/rdma-setup.sh

t0=$(date +%s)
flag=--release
[[ $PROFILE == debug ]] && flag=
# Without the `wasm` schema transforms (a big compile this stage never uses):
# the engine's features are named, not taken by default.
engine_features=(--no-default-features --features onnx,rdma)
cargo build $flag -q -p sluice-engine "${engine_features[@]}" --bin sluice-engine --bin sluice-rdma-client
# The transport's unit tests (debug build: speed does not matter there)
# run in the guest too, against the real device.
tests_bin=$(cargo test -p sluice-engine "${engine_features[@]}" --lib --no-run 2>&1 |
    sed -n 's/.*Executable unittests src\/lib.rs (\(.*\))/\1/p' | tail -1)
[[ -x $tests_bin ]] || { echo "rdma-e2e: no unit test binary" >&2; exit 1; }
# The C ABI's connection tests, run in the guest against the device.
ffi_tests_bin=$(cargo test -p sluice-ffi --no-default-features --features rdma --test connections --no-run 2>&1 |
    sed -n 's/.*Executable tests\/connections.rs (\(.*\))/\1/p' | tail -1)
[[ -x $ffi_tests_bin ]] || { echo "rdma-e2e: no ffi test binary" >&2; exit 1; }
# sluiced with the rdma-enabled engine: cgo finds libsluice_ffi.a by -L, and
# a directory given in CGO_LDFLAGS wins over the default target/release.
cargo build $flag -q -p sluice-ffi --no-default-features --features rdma
ffi_lib=$CARGO_TARGET_DIR/$PROFILE/libsluice_ffi.a
gobin=$CARGO_TARGET_DIR/go-bin
mkdir -p "$gobin"
(
    cd go-control
    export CGO_LDFLAGS="-L$CARGO_TARGET_DIR/$PROFILE $(pkg-config --libs libibverbs librdmacm)"
    export CGO_CFLAGS="-g -O2 -DSLUICE_FFI_SHA=$(sha256sum "$ffi_lib" | cut -c1-16)"
    go build -o "$gobin/sluiced" ./cmd/sluiced
    go build -o "$gobin/sluicectl" ./cmd/sluicectl
)
echo "rdma-e2e: built ($PROFILE) in $(( $(date +%s) - t0 )) s"

t0=$(date +%s)
bash scripts/rdma-vm-build.sh "$@"
echo "rdma-e2e: image ready in $(( $(date +%s) - t0 )) s"

SHARE=$ROOT/.cache/rdma-vm/share
rm -rf "$SHARE"
mkdir -p "$SHARE/bin"
cp "$CARGO_TARGET_DIR/$PROFILE/sluice-engine" "$CARGO_TARGET_DIR/$PROFILE/sluice-rdma-client" "$SHARE/bin/"
cp "$tests_bin" "$SHARE/bin/engine-tests"
cp "$ffi_tests_bin" "$SHARE/bin/ffi-connection-tests"
cp "$gobin/sluiced" "$gobin/sluicectl" "$SHARE/bin/"
cp cfg/rdma.toml "$SHARE/rdma.toml"
cp scripts/rdma-guest-test.sh "$SHARE/guest-test.sh"

t0=$(date +%s)
set +e
bash scripts/rdma-vm-run.sh "$SHARE" "${SLUICE_RDMA_VM_TIMEOUT:-1200}"
rc=$?
set -e
echo "rdma-e2e: guest run in $(( $(date +%s) - t0 )) s"
cat "$SHARE/guest.log" 2>/dev/null || true

# Ratios: only these mean anything under emulation.
res=$SHARE/results.txt
get() { sed -n "s/^$1=//p" "$res" 2>/dev/null | tail -1; }
lat=$(get perftest_send_lat_typical_us)
bw=$(get perftest_write_bw_mb_s)
rtt=$(get sluice_small_rtt_p50_us)
sbw=$(get sluice_large_mb_s)
eng=$(get sluice_engine_p50_us)
fwd=$(get sluice_forward_p50_us)
dir=$(get sluice_direct_p50_us)
{
    echo "# RDMA on Soft-RoCE (qemu TCG guest), $(date -u +%Y-%m-%dT%H:%MZ), $PROFILE build"
    echo "perftest ib_send_lat 64 B, typical one-way: ${lat:-NA} us (round trip = 2x)"
    echo "perftest ib_write_bw 16 MiB: ${bw:-NA} MB/s"
    echo "sluice small request round trip p50: ${rtt:-NA} us (null model, 64 B tensor)"
    echo "sluice time inside the appliance p50: ${eng:-NA} us (burst start to reply queued)"
    echo "sluice 16 MiB tensor by RDMA WRITE + 16 MiB reply by RDMA WRITE: ${sbw:-NA} MB/s (both directions counted)"
    num='^[0-9]+([.][0-9]+)?$'
    if [[ $lat =~ $num && $rtt =~ $num ]]; then
        awk -v r="$rtt" -v l="$lat" 'BEGIN{printf "ratio sluice_rtt / perftest_rtt(2 x send_lat) = %.2f\n", r/(2*l)}'
    fi
    echo "sluice 1000 B echo forwarded A->B->A over RDMA, round trip p50: ${fwd:-NA} us; straight to B: ${dir:-NA} us"
    if [[ $fwd =~ $num && $dir =~ $num ]]; then
        awk -v f="$fwd" -v d="$dir" 'BEGIN{printf "ratio forwarded_rtt / direct_rtt = %.2f\n", f/d}'
    fi
    if [[ $bw =~ $num && $sbw =~ $num ]]; then
        awk -v s="$sbw" -v b="$bw" 'BEGIN{printf "ratio sluice_bw / perftest_write_bw = %.2f\n", s/b}'
    fi
} | tee "$ROOT/.cache/rdma-vm/rdma-results.txt"
echo "rdma-e2e: total $(( $(date +%s) - t_all )) s"
[[ $rc == 0 ]] && grep -q '^sluice_check=pass' "$res" && ! grep -q FAIL "$res"
