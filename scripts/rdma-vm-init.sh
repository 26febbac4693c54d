#!/bin/sh
# /init of the Soft-RoCE test guest (packed by scripts/rdma-vm-build.sh).
# Loads the RDMA modules, creates rxe0 on a dummy netdev (no traffic ever
# leaves the guest), runs /share/guest-test.sh from the host's 9p share,
# writes its exit code there and powers off.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm /tmp /share
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /dev/shm
for m in $(cat /etc/sluice-modules); do
    modprobe "$m" 2>/dev/null || echo "guest: modprobe $m failed"
done
mount -t 9p -o trans=virtio,version=9p2000.L,msize=1048576 hostshare /share || echo "guest: 9p mount failed"
ip link set lo up
ip link add sl0 type dummy
ip addr add 10.99.0.1/24 dev sl0
ip link set sl0 up
rdma link add rxe0 type rxe netdev sl0 || echo "guest: rdma link add failed"
ulimit -l unlimited
# 2 MiB hugepages for the buffer pools (the appliance registers its MRs
# over them; 512 MiB leaves the rest of the 3 GiB guest to the tests).
echo 256 >/proc/sys/vm/nr_hugepages
rc=1
if [ -f /share/guest-test.sh ]; then
    cd /share
    sh /share/guest-test.sh >/share/guest.log 2>&1
    rc=$?
    cat /share/guest.log
fi
echo "$rc" >/share/guest.rc
sync
echo "SLUICE-GUEST-DONE rc=$rc"
echo o >/proc/sysrq-trigger
sleep 10
