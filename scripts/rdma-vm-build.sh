#!/usr/bin/env bash
# Builds the Soft-RoCE test guest: a Debian 12 kernel (which has rdma_rxe)
# and a minimal Debian userland with rdma-core, perftest and curl (for
# sluiced's admin API and metrics), packed as one
# initramfs whose /init is scripts/rdma-vm-init.sh. Host-built binaries
# reach the guest through a 9p share at run time, so the image does not
# change when Sluice does.
#
# Output (cached; rebuilt when this script or the init changes, or with
# --fresh): .cache/rdma-vm/{vmlinux|vmlinuz, initrd.cpio, KVER}
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${SLUICE_RDMA_VM_DIR:-$ROOT/.cache/rdma-vm}
MIRROR=${SLUICE_APT_MIRROR:-http://deb.debian.org/debian}
FRESH=0
[[ ${1:-} == --fresh ]] && FRESH=1

stamp=$(cat "$0" "$ROOT/scripts/rdma-vm-init.sh" | sha256sum | cut -c1-16)
if [[ $FRESH == 0 && -f $OUT/initrd.cpio && -f $OUT/KVER && "$(cat "$OUT/stamp" 2>/dev/null)" == "$stamp" ]]; then
    echo "rdma-vm-build: cached image in $OUT"
    exit 0
fi
for t in debootstrap cpio depmod modprobe; do
    command -v $t >/dev/null || { echo "rdma-vm-build: $t missing; run scripts/rdma-setup.sh" >&2; exit 1; }
done
rm -rf "$OUT"
mkdir -p "$OUT"
cd "$OUT"

# 1. The kernel: whatever linux-image-amd64 points at, unpacked here only.
t0=$(date +%s)
pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/{print $2; exit}')
[[ -n $pkg ]] || { echo "rdma-vm-build: no linux-image-amd64 candidate (apt-get update?)" >&2; exit 1; }
apt-get download -qq -o APT::Sandbox::User=root "$pkg"
dpkg -x ./"$pkg"_*.deb kernel
rm -f ./"$pkg"_*.deb
KVER=$(ls kernel/lib/modules | head -1)
echo "$KVER" >KVER
cp kernel/boot/vmlinuz-"$KVER" vmlinuz
# An uncompressed vmlinux boots about 5 s faster under TCG: find the xz
# stream inside the bzImage and unpack it (trailing bytes are ignored).
off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' vmlinuz | head -1 | cut -d: -f1 || true)
if [[ -n $off ]] && tail -c +$((off + 1)) vmlinuz | xz -dc 2>/dev/null >vmlinux.tmp; [[ -s vmlinux.tmp ]] && head -c4 vmlinux.tmp | grep -q ELF; then
    mv vmlinux.tmp vmlinux
else
    rm -f vmlinux.tmp
fi
echo "rdma-vm-build: kernel $KVER ($(( $(date +%s) - t0 )) s)"

# 2. The userland.
t0=$(date +%s)
debootstrap --variant=minbase \
    --include=rdma-core,ibverbs-providers,ibverbs-utils,rdmacm-utils,perftest,iproute2,kmod,libibverbs1,librdmacm1,procps,curl \
    bookworm rootfs "$MIRROR" >debootstrap.log 2>&1 || { tail -20 debootstrap.log >&2; exit 1; }
rm -rf rootfs/usr/share/{doc,man,locale,info} rootfs/var/cache/apt/* rootfs/var/lib/apt/lists/*
echo "rdma-vm-build: userland ($(( $(date +%s) - t0 )) s)"

# 3. Only the modules the guest loads, with their dependencies.
MODS="crc32_generic crc32_pclmul virtio_pci virtio_net 9pnet_virtio 9p dummy veth rdma_rxe ib_uverbs rdma_ucm"
depmod -b kernel "$KVER"
for m in $MODS; do
    modprobe -d kernel -S "$KVER" --show-depends "$m" | awk '$1=="insmod"{print $2}'
done | sort -u | while read -r ko; do
    rel=${ko#kernel/}
    rel=${rel#"$OUT"/kernel/}
    mkdir -p "rootfs/$(dirname "$rel")"
    cp "kernel/$rel" "rootfs/$rel"
done
cp kernel/lib/modules/"$KVER"/modules.{order,builtin,builtin.modinfo} rootfs/lib/modules/"$KVER"/ 2>/dev/null || true
depmod -b rootfs "$KVER"
rm -rf kernel

# 4. /init and the archive.
install -m 0755 "$ROOT/scripts/rdma-vm-init.sh" rootfs/init
echo "$MODS" >rootfs/etc/sluice-modules
(cd rootfs && find . -print0 | cpio --null -o -H newc --quiet) >initrd.cpio
rm -rf rootfs
echo "$stamp" >stamp
echo "rdma-vm-build: image $(du -h initrd.cpio | cut -f1) in $OUT"
