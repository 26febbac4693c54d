#!/usr/bin/env bash
# Round trip of a small routed request over DPDK (AF_XDP on the veth pair)
# against io_uring UDP on loopback, same machine, same run, same engine
# config apart from the transport; then throughput with pipelining.
#
#   sudo scripts/dpdk-bench.sh [--seconds N] [--rounds R] [--vdev af_xdp|af_packet]
#                              [--mix perf/mixes/X.toml] [--outstanding N]
#
# Prints p50/p99 of each and the DPDK/io_uring ratios. Both servers poll
# busily on core 1; the client spins (loadgen's default). The two run in
# alternation R times (default 3) and the medians are compared, so a noisy
# neighbour on a shared host hits both alike. `--mix perf/mixes/echo-60k.toml
# --outstanding 4` compares 60 KB requests: one datagram each way over
# io_uring on loopback, 41 IPv4 fragments each way over DPDK (reassembled by
# librte_ip_frag, answered as fragments). Throughput is measured with
# `--outstanding` requests in flight (default 32; veth's XDP ring holds 256
# packets, so keep 41-fragment requests at 4 or fewer).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "dpdk-bench: run as root" >&2; exit 1; }
seconds=10 vdev=af_xdp rounds=3 mix=$root/perf/mixes/null-small.toml outstanding=32
while [ $# -gt 0 ]; do
    case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --vdev) vdev=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --mix) mix=$(realpath "$2"); shift 2 ;;
    --outstanding) outstanding=$2; shift 2 ;;
    *) echo "usage: dpdk-bench.sh [--seconds N] [--rounds R] [--vdev af_xdp|af_packet] [--mix FILE] [--outstanding N]" >&2; exit 2 ;;
    esac
done
export SLUICE_NETNS=${SLUICE_NETNS:-sluice-dpdk} SLUICE_IF0=${SLUICE_IF0:-sldpdk0} SLUICE_IF1=${SLUICE_IF1:-sldpdk1}
ns=$SLUICE_NETNS
target=${CARGO_TARGET_DIR:-$root/target}
work=$(mktemp -d /tmp/sluice-bench.XXXXXX)
app_pid=

cleanup() {
    rc=$?
    [ -n "$app_pid" ] && kill -INT "$app_pid" 2>/dev/null && wait "$app_pid" 2>/dev/null
    "$root/scripts/netns-teardown.sh"
    "$root/scripts/hugepages.sh" release >/dev/null || true
    echo "dpdk-bench: cleaned up (logs in $work); exit $rc" >&2
    exit $rc
}
trap cleanup EXIT INT TERM

(cd "$root" && CARGO_TARGET_DIR=$target cargo build -q --release -p sluice-engine --no-default-features --features onnx,dpdk --bin sluice-engine \
    && CARGO_TARGET_DIR=$target cargo build -q --release -p sluice-perf --bin loadgen)
"$root/scripts/netns-teardown.sh"
"$root/scripts/hugepages.sh" reserve "${SLUICE_HUGEPAGES:-256}" >/dev/null
"$root/scripts/netns-setup.sh" >/dev/null

# One config per transport, paths made absolute, busy polling for both.
absolutize() {
    sed -e "s|^library = \"\.\./|library = \"$root/|" -e "s|^path = \"\.\./|path = \"$root/|" \
        -e "s|adapters = \[{ id = \"formal\", path = \"\.\./|adapters = [{ id = \"formal\", path = \"$root/|" \
        -e "s|^data_dir = .*|data_dir = \"$work/data\"|" -e 's|^poll = .*|poll = "busy"|' "$@"
}
absolutize -e 's|^listen = .*|listen = "127.0.0.1:7170"|' "$root/cfg/sluice.toml" > "$work/uring.toml"
absolutize -e "s|^vdevs = .*|vdevs = [\"net_${vdev}0,iface=$SLUICE_IF0\"]|" \
    -e 's|^file_prefix = .*|file_prefix = "sl-bench"|' "$root/cfg/dpdk.toml" > "$work/dpdk.toml"

serve() { # config name
    "$target/release/sluice-engine" --config "$1" > "$work/$2.out" 2> "$work/$2.err" &
    app_pid=$!
    for _ in $(seq 100); do grep -q "serving on" "$work/$2.out" 2>/dev/null && break; sleep 0.1; done
    grep -q "serving on" "$work/$2.out" || { cat "$work/$2.err" >&2; exit 1; }
}
unserve() { kill -INT "$app_pid"; wait "$app_pid" || true; app_pid=; }
load() { # name closed netns-prefix... addr
    local name=$1 closed=$2 addr=$3; shift 3
    "$@" "$target/release/loadgen" --addr "$addr" --allow-remote --mix "$mix" \
        --closed "$closed" --warmup 1s --duration "${seconds}s" --json > "$work/$name.json"
}

for r in $(seq "$rounds"); do
    serve "$work/uring.toml" uring
    load "uring-1-$r" 1 127.0.0.1:7170
    load "uring-n-$r" "$outstanding" 127.0.0.1:7170
    unserve
    serve "$work/dpdk.toml" dpdk
    load "dpdk-1-$r" 1 10.99.0.1:7070 ip netns exec "$ns"
    load "dpdk-n-$r" "$outstanding" 10.99.0.1:7070 ip netns exec "$ns"
    unserve
    grep -o "dpdk: totals.*" "$work/dpdk.err" | tail -1 > "$work/dpdk-totals-$r.txt" || true
done
echo "mix: $mix; DPDK totals of the last round: $(cat "$work/dpdk-totals-$rounds.txt" 2>/dev/null | cut -c1-600)"

python3 - "$work" "$vdev" "$rounds" "$outstanding" <<'PY'
import json, statistics, sys
work, vdev, rounds, outstanding = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
med = {}
for n in ["uring-1", "dpdk-1", "uring-n", "dpdk-n"]:
    runs = [json.load(open(f"{work}/{n}-{r}.json")) for r in range(1, rounds + 1)]
    for r, v in enumerate(runs, 1):
        l = v["latency_us"]
        print(f"{n:8} #{r} ok={v['ok']:>8} timeouts={v['timeouts']:>4} {v['throughput_per_sec']:>10,.0f} req/s  p50={l['p50']:9.1f}us p99={l['p99']:9.1f}us")
    med[n] = {k: statistics.median(f(v) for v in runs) for k, f in
              [("p50", lambda v: v["latency_us"]["p50"]), ("p99", lambda v: v["latency_us"]["p99"]), ("tput", lambda v: v["throughput_per_sec"])]}
u, d = med["uring-1"], med["dpdk-1"]
print(f"median of {rounds}: io_uring p50 {u['p50']:.1f}us p99 {u['p99']:.1f}us | DPDK({vdev}) p50 {d['p50']:.1f}us p99 {d['p99']:.1f}us")
print(f"round trip DPDK/io_uring: p50 {d['p50']/u['p50']:.2f}x  p99 {d['p99']/u['p99']:.2f}x  (below 1 = DPDK faster)")
un, dn = med["uring-n"], med["dpdk-n"]
print(f"throughput at {outstanding} outstanding: io_uring {un['tput']:,.0f} req/s, DPDK {dn['tput']:,.0f} req/s: "
      f"{dn['tput']/un['tput']:.2f}x (p50 {un['p50']:.1f}us vs {dn['p50']:.1f}us)")
PY
