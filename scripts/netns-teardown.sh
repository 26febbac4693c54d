#!/usr/bin/env bash
# Removes what netns-setup.sh made. Safe to run when nothing is there.
set -uo pipefail
ns=${SLUICE_NETNS:-sluice-dpdk}
if0=${SLUICE_IF0:-sldpdk0}
# Deleting one end of a veth deletes both.
ip link del "$if0" 2>/dev/null
ip netns del "$ns" 2>/dev/null
exit 0
