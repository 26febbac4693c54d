#!/usr/bin/env bash
# Boots the Soft-RoCE guest (scripts/rdma-vm-build.sh) under qemu TCG with
# SHARE as its 9p share; the guest runs SHARE/guest-test.sh and powers off.
# Passes when the console shows the done line with rc=0 and SHARE/guest.rc
# says 0, within TIMEOUT seconds.
#
#   scripts/rdma-vm-run.sh SHARE [TIMEOUT_S]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VM=${SLUICE_RDMA_VM_DIR:-$ROOT/.cache/rdma-vm}
SHARE=$(cd "${1:?usage: rdma-vm-run.sh SHARE [TIMEOUT_S]}" && pwd)
TIMEOUT=${2:-600}
kernel=$VM/vmlinux
[[ -f $kernel ]] || kernel=$VM/vmlinuz
[[ -f $VM/initrd.cpio ]] || { echo "rdma-vm-run: no image; run scripts/rdma-vm-build.sh" >&2; exit 1; }
rm -f "$SHARE/guest.rc" "$SHARE/guest.log" "$SHARE/results.txt"
# KVM here is a nested hypervisor that cannot run this kernel: TCG only.
# No network device: the guest's RDMA traffic stays on its dummy netdev.
# TSC as clocksource: the default (hpet) makes every clock read an emulated
# MMIO access, which real hosts do not pay.
set +e
timeout --kill-after=10 "$TIMEOUT" qemu-system-x86_64 \
    -accel tcg,thread=multi -cpu max -m 3G -smp 2 \
    -nographic -no-reboot -nodefaults -serial stdio \
    -kernel "$kernel" -initrd "$VM/initrd.cpio" \
    -append "console=ttyS0 quiet panic=-1 rdinit=/init clocksource=tsc tsc=reliable" \
    -virtfs "local,path=$SHARE,mount_tag=hostshare,security_model=none,id=hostshare" \
    </dev/null >"$SHARE/console.log" 2>&1
qrc=$?
set -e
if [[ $qrc == 124 || $qrc == 137 ]]; then
    echo "rdma-vm-run: guest timed out after ${TIMEOUT}s" >&2
    tail -30 "$SHARE/console.log" >&2
    exit 1
fi
if grep -q "SLUICE-GUEST-DONE rc=0" "$SHARE/console.log" && [[ "$(cat "$SHARE/guest.rc" 2>/dev/null)" == 0 ]]; then
    echo "rdma-vm-run: guest passed"
    exit 0
fi
echo "rdma-vm-run: guest failed (qemu rc $qrc, guest rc $(cat "$SHARE/guest.rc" 2>/dev/null || echo none))" >&2
tail -40 "$SHARE/console.log" >&2
exit 1
