#!/usr/bin/env bash
# DPDK with IPv4 fragments against io_uring UDP, 60 KB requests (issue 14,
# item 5), one run: perf/mixes/echo-60k.toml (a 60,192-byte frame to the
# echo model, the answer as large) through the same engine config on both
# transports, busy-polling worker on core 1:
#   - io_uring UDP on loopback: one datagram each way;
#   - DPDK on AF_XDP over a veth pair (the client in namespace
#     $SLUICE_NETNS, as the DPDK e2e runs): the client kernel sends each
#     request as 41 IPv4 fragments, librte_ip_frag reassembles them into a
#     slot (one counted copy), the answer leaves as 41 fragments
#     (rte_ipv4_fragment_packet) that the client kernel reassembles.
# p50 at 1 in flight, req/s at OUTSTANDING (4: veth's XDP ring holds 256
# packets, 41 fragments a request) in flight.
#
# veth is not a NIC: both ends are this VM's kernel and CPUs, AF_XDP on veth
# runs in generic (copy) mode, and the fragments never touch a wire. The
# ratio says what the fragment path costs in the engine against a datagram
# path on the same host, not what a NIC would do.
#
#   perf/dpdk-frag.sh     (as root; takes the machine's lock itself)
# Environment: ROUNDS (1), SECONDS_PER_RUN (5), OUTSTANDING (4), VDEV (af_xdp).
set -euo pipefail
cd "$(dirname "$0")/.."
# librte_ip_frag as Debian builds it drops datagrams of more than 8
# fragments (60 KB is 41): dpdk-sys builds its own copy with the limit
# raised from these sources (docs/dpdk.md, "librte_ip_frag").
# Named explicitly: a cache fetched after dpdk-sys was first built is
# otherwise not noticed by its build script.
SLUICE_DPDK_IP_FRAG_SRC=$(scripts/setup-dpdk-src.sh | tail -1)
export SLUICE_DPDK_IP_FRAG_SRC
echo "dpdk-frag: load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
flock /tmp/sluice-sys.lock scripts/dpdk-bench.sh --mix perf/mixes/echo-60k.toml \
    --outstanding "${OUTSTANDING:-4}" --rounds "${ROUNDS:-1}" --seconds "${SECONDS_PER_RUN:-5}" \
    --vdev "${VDEV:-af_xdp}" | tee "$out"
echo "dpdk-frag: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
# A run where nothing was reassembled measured timeouts, not the path.
if grep -q "rx_reassembled=0 " "$out"; then
    echo "dpdk-frag: FAILED: no datagram was reassembled (frag_invalid counts drops; is the engine built" \
        "with the raised fragment limit? see docs/dpdk.md, librte_ip_frag)" >&2
    exit 1
fi
echo "dpdk-frag: veth is not a NIC (both ends are this host's kernel; AF_XDP in generic mode on veth)"
