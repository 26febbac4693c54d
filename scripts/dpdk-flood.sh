#!/usr/bin/env bash
# Floods the DPDK appliance with garbage from the peer namespace while the
# load generator sends real requests, then reports what each side counted.
#
#   sudo scripts/dpdk-flood.sh [--seconds N] [--vdev af_xdp|af_packet]
#                              [--generator testpmd|pktgen] [--closed N]
#
# testpmd (dpdk-dev) runs in txonly mode: 64-byte UDP 10.99.0.2:9000 ->
# 10.99.0.1:9000, garbage to Sluice, which must count and drop it without
# crashing or leaking mbufs. pktgen-dpdk is used instead when asked for and
# installed (bare-metal hosts; not in Debian 12). The generator sits on an
# AF_PACKET vdev of the peer veth end so the peer kernel still receives the
# appliance's replies for the load generator.
#
# Output: generator packets/s, appliance packets/s counted and dropped,
# requests/s and latency of real requests under the flood.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "dpdk-flood: run as root" >&2; exit 1; }
seconds=10 vdev=af_xdp generator=testpmd closed=8
while [ $# -gt 0 ]; do
    case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --vdev) vdev=$2; shift 2 ;;
    --generator) generator=$2; shift 2 ;;
    --closed) closed=$2; shift 2 ;;
    *) echo "usage: dpdk-flood.sh [--seconds N] [--vdev af_xdp|af_packet] [--generator testpmd|pktgen] [--closed N]" >&2; exit 2 ;;
    esac
done
export SLUICE_NETNS=${SLUICE_NETNS:-sluice-dpdk} SLUICE_IF0=${SLUICE_IF0:-sldpdk0} SLUICE_IF1=${SLUICE_IF1:-sldpdk1}
ns=$SLUICE_NETNS
target=${CARGO_TARGET_DIR:-$root/target}
work=$(mktemp -d /tmp/sluice-flood.XXXXXX)
app_pid= gen_pid=

cleanup() {
    rc=$?
    [ -n "$gen_pid" ] && kill -INT "$gen_pid" 2>/dev/null && sleep 1 && kill -KILL "$gen_pid" 2>/dev/null
    [ -n "$app_pid" ] && kill -INT "$app_pid" 2>/dev/null && wait "$app_pid" 2>/dev/null
    "$root/scripts/netns-teardown.sh"
    "$root/scripts/hugepages.sh" release >/dev/null || true
    rm -rf /var/run/dpdk/sl-flood-gen
    echo "dpdk-flood: cleaned up (logs in $work); exit $rc" >&2
    exit $rc
}
trap cleanup EXIT INT TERM

echo "dpdk-flood: building (release)" >&2
(cd "$root" && CARGO_TARGET_DIR=$target cargo build -q --release -p sluice-engine --no-default-features --features onnx,dpdk --bin sluice-engine \
    && CARGO_TARGET_DIR=$target cargo build -q --release -p sluice-perf --bin loadgen)

"$root/scripts/netns-teardown.sh"
"$root/scripts/hugepages.sh" reserve 512 >/dev/null
"$root/scripts/netns-setup.sh" >/dev/null
mac0=$(cat /sys/class/net/$SLUICE_IF0/address)

# The shipped DPDK config, pointed at this topology's interface and vdev.
sed -e "s|^vdevs = .*|vdevs = [\"net_${vdev}0,iface=$SLUICE_IF0\"]|" \
    -e "s|^file_prefix = .*|file_prefix = \"sl-flood-app\"|" \
    -e "s|^library = \"\.\./|library = \"$root/|" -e "s|^path = \"\.\./|path = \"$root/|" \
    -e "s|^data_dir = .*|data_dir = \"$work/data\"|" \
    -e "s|adapters = \[{ id = \"formal\", path = \"\.\./|adapters = [{ id = \"formal\", path = \"$root/|" \
    "$root/cfg/dpdk.toml" > "$work/dpdk.toml"
"$target/release/sluice-engine" --config "$work/dpdk.toml" > "$work/app.out" 2> "$work/app.err" &
app_pid=$!
for _ in $(seq 100); do grep -q "serving on" "$work/app.out" 2>/dev/null && break; sleep 0.1; done
grep -q "serving on" "$work/app.out" || { cat "$work/app.err" >&2; echo "dpdk-flood: appliance did not start" >&2; exit 1; }

case "$generator" in
testpmd)
    ip netns exec "$ns" dpdk-testpmd --lcores=0@0,1@0 --no-pci --file-prefix=sl-flood-gen --huge-unlink \
        --vdev="net_af_packet1,iface=$SLUICE_IF1" -- --total-num-mbufs=8192 --forward-mode=txonly \
        --tx-ip=10.99.0.2,10.99.0.1 --tx-udp=9000,9000 --eth-peer="0,$mac0" --stats-period=1 \
        > "$work/gen.out" 2>&1 &
    gen_pid=$!
    ;;
pktgen)
    command -v pktgen >/dev/null || { echo "dpdk-flood: pktgen-dpdk is not installed (use --generator testpmd)" >&2; exit 1; }
    cat > "$work/pktgen.pkt" <<PKT
set 0 dst mac $mac0
set 0 src ip 10.99.0.2/24
set 0 dst ip 10.99.0.1
set 0 sport 9000
set 0 dport 9000
set 0 proto udp
set 0 size 64
start 0
PKT
    ip netns exec "$ns" pktgen -l 0-1 --no-pci --file-prefix=sl-flood-gen --huge-unlink \
        --vdev="net_af_packet1,iface=$SLUICE_IF1" -- -T -P -m "1.0" -f "$work/pktgen.pkt" > "$work/gen.out" 2>&1 &
    gen_pid=$!
    ;;
*) echo "dpdk-flood: unknown generator $generator" >&2; exit 2 ;;
esac
t0=$(date +%s.%N)
sleep 1

echo "dpdk-flood: $generator flooding, loadgen closed=$closed for ${seconds}s" >&2
ip netns exec "$ns" "$target/release/loadgen" --addr 10.99.0.1:7070 --allow-remote --mix "$root/perf/mixes/null-small.toml" \
    --closed "$closed" --warmup 1s --duration "${seconds}s" --timeout 200ms --json > "$work/loadgen.json" || true

kill -INT "$gen_pid" 2>/dev/null || true
t1=$(date +%s.%N)
wait "$gen_pid" 2>/dev/null || true
gen_pid=
kill -INT "$app_pid"
wait "$app_pid" || true
app_pid=

python3 - "$work" "$(python3 -c "print($t1 - $t0)")" "$generator" <<'PY'
import json, re, sys
# seconds: how long the generator ran (its EAL start-up included, so the
# rates below are a lower bound).
work, seconds, gen = sys.argv[1], float(sys.argv[2]), sys.argv[3]
err = open(f"{work}/app.err").read()
m = re.search(r"dpdk: totals (.*)", err)
tot = dict(kv.split("=") for kv in re.findall(r"\b\w+=\d+", m.group(1))) if m else {}
gen_out = open(f"{work}/gen.out", errors="replace").read()
tx = [int(x) for x in re.findall(r"TX-packets:\s+(\d+)", gen_out)]
lg = json.load(open(f"{work}/loadgen.json")) if open(f"{work}/loadgen.json").read().strip() else {}
print(f"generator ({gen}) TX-packets: {max(tx) if tx else 'n/a'}")
if tot:
    # The flood runs for about warm-up + duration; rates use that window.
    print(f"appliance rx_packets={tot['rx_packets']} dropped={tot['dropped']} wrong_port={tot.get('wrong_port')} "
          f"sluice={tot['rx_sluice']} tx={tot['tx_packets']} port_imissed={tot['port_imissed']} rx_nombuf={tot['port_rx_nombuf']}")
    print(f"appliance counted {int(tot['rx_packets'])/seconds:,.0f} pkt/s, dropped {int(tot['dropped'])/seconds:,.0f} pkt/s")
else:
    print("appliance: no totals line (see app.err)")
if lg:
    l = lg["latency_us"]
    print(f"loadgen under flood: ok={lg['ok']} timeouts={lg['timeouts']} errors={lg['errors']} "
          f"{lg['throughput_per_sec']:,.0f} req/s p50={l['p50']:.1f}us p99={l['p99']:.1f}us")
mm = re.search(r"stopped: StopReport \{ mbufs_total: (\d+), mbufs_missing: (\d+)", err)
if mm:
    print(f"mbufs at stop: {mm.group(2)} of {mm.group(1)} not returned (AF_XDP keeps its fill ring: see docs/dpdk.md)")
PY
