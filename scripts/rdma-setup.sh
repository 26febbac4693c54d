#!/usr/bin/env bash
# Installs what the RDMA stage needs on a Debian 12 host: rdma-core headers
# for the rdma-sys build, and qemu + debootstrap for the Soft-RoCE guest.
# qemu-system-x86 comes from bookworm-backports so it matches the
# preinstalled qemu-utils (also from backports); a private sources list keeps
# /etc/apt untouched.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
MIRROR=${SLUICE_APT_MIRROR:-http://deb.debian.org/debian}
APTDIR=/tmp/sluice-rdma-apt
mkdir -p "$APTDIR"
echo "deb $MIRROR bookworm-backports main" >"$APTDIR/backports.list"
BP=(-o "Dir::Etc::sourcelist=$APTDIR/backports.list" -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0)

need=()
for p in clang libclang-dev libibverbs-dev librdmacm-dev debootstrap cpio xz-utils kmod; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if ((${#need[@]})); then
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
if ! command -v qemu-system-x86_64 >/dev/null; then
    apt-get update -qq "${BP[@]}"
    # Plain apt-get with both suites visible; -t picks the backports build.
    apt-get install -y -qq --no-install-recommends -t bookworm-backports \
        -o "Dir::Etc::sourceparts=/etc/apt/sources.list.d" \
        -o "Dir::Etc::sourcelist=$APTDIR/backports.list" \
        qemu-system-x86 || apt-get install -y -qq --no-install-recommends \
        -t bookworm-backports qemu-system-x86
fi
qemu-system-x86_64 --version | head -1
