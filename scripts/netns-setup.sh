#!/usr/bin/env bash
# Test topology for the DPDK transport: a veth pair whose first end stays in
# the root namespace WITHOUT an IP (the appliance's DPDK port answers ARP and
# IPv4 itself) and whose second end sits in a namespace as the client host.
#
#   scripts/netns-setup.sh      (names and addresses from the environment)
#
# SLUICE_NETNS (sluice-dpdk), SLUICE_IF0 (sldpdk0), SLUICE_IF1 (sldpdk1),
# SLUICE_PEER_CIDR (10.99.0.2/24). Only 10.99.0.0/24 is used. Needs root.
# Undo with scripts/netns-teardown.sh.
set -euo pipefail
ns=${SLUICE_NETNS:-sluice-dpdk}
if0=${SLUICE_IF0:-sldpdk0}
if1=${SLUICE_IF1:-sldpdk1}
cidr=${SLUICE_PEER_CIDR:-10.99.0.2/24}

ip netns add "$ns"
ip link add "$if0" type veth peer name "$if1"
ip link set "$if1" netns "$ns"
# No IPv6 on the appliance end: the kernel must not answer or chatter there.
sysctl -qw "net.ipv6.conf.$if0.disable_ipv6=1" || true
ip link set "$if0" up
ip -n "$ns" link set lo up
ip -n "$ns" addr add "$cidr" dev "$if1"
ip -n "$ns" link set "$if1" up
echo "netns $ns: $if1 $cidr <-> $if0 (root ns, no IP, mac $(cat /sys/class/net/$if0/address))"
