#!/bin/sh
# Runs inside the Soft-RoCE guest (copied to the 9p share as guest-test.sh
# by scripts/rdma-e2e.sh). Binaries are in /share/bin, the config is
# /share/rdma.toml. Writes /share/results.txt with key=value lines.
# Exit code: 0 when every check passed.
set -u
B=/share/bin
R=/share/results.txt
IP=10.99.0.1
KEY=hex:73756963652d64656d6f2d6b65792d30303030303030303030303030303030
: >"$R"
fail=0
note() { echo "== $*"; }

note "devices"
ibv_devices
rdma link show
echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
if ! ibv_devices | grep -q rxe0; then
    echo "guest: no rxe0 device"
    exit 1
fi
# The IPv4 (RoCE v2) GID of the address: perftest needs its index.
GID=1
for f in /sys/class/infiniband/rxe0/ports/1/gids/*; do
    case "$(cat "$f")" in
    *ffff:0a63:0001) GID=$(basename "$f") ;;
    esac
done
echo "ipv4 gid index: $GID"

note "perftest ib_send_lat (64 B)"
# perftest calibrates the TSC against the wall clock and reports "inf" when
# a noisy host spoils the fit (r^2 < 0.9): try again, a few times.
lat=
for try in 1 2 3 4; do
    ib_send_lat -d rxe0 -x "$GID" -s 64 -n 2000 -F >/tmp/lat_srv.txt 2>&1 &
    sleep 1
    ib_send_lat -d rxe0 -x "$GID" -s 64 -n 2000 -F "$IP" >/tmp/lat.txt 2>&1
    wait
    # Columns: bytes iterations t_min t_max t_typical ...
    lat=$(awk '$1 == 64 && NF >= 5 && $5 != "inf" {print $5}' /tmp/lat.txt | tail -1)
    [ -n "$lat" ] && break
    echo "ib_send_lat: no usable timing (try $try)"
done
cat /tmp/lat.txt
echo "perftest_send_lat_typical_us=${lat:-NA}" >>"$R"

note "perftest ib_write_bw (16 MiB)"
ib_write_bw -d rxe0 -x "$GID" -s 16777216 -n 8 -F >/tmp/bw_srv.txt 2>&1 &
sleep 1
ib_write_bw -d rxe0 -x "$GID" -s 16777216 -n 8 -F "$IP" >/tmp/bw.txt 2>&1
wait
cat /tmp/bw.txt
# Columns: bytes iterations peak avg msgrate
bw=$(awk '$1 == 16777216 && NF >= 4 {print $4}' /tmp/bw.txt | tail -1)
echo "perftest_write_bw_mb_s=${bw:-NA}" >>"$R"

note "rdma_cm check: rping"
rping -s -a "$IP" -C 3 -v >/tmp/rping_srv.txt 2>&1 &
sleep 1
if timeout 60 rping -c -a "$IP" -C 3 -v >/tmp/rping.txt 2>&1; then
    echo "rping: ok"
else
    echo "rping: FAILED"
    cat /tmp/rping.txt /tmp/rping_srv.txt
fi
wait

note "transport unit tests on the real device (in-process appliance and client)"
if SLUICE_RDMA_TEST_IP=$IP "$B/engine-tests" transport::rdma --test-threads=1; then
    echo "sluice_unit=pass" >>"$R"
else
    echo "sluice_unit=FAIL" >>"$R"
    fail=1
fi

start_engine() {
    "$B/sluice-engine" --config /share/rdma.toml --stats-every 1 >/tmp/engine.log 2>&1 &
    EPID=$!
    i=0
    while ! grep -q "serving on" /tmp/engine.log; do
        i=$((i + 1))
        if [ $i -gt 300 ] || ! kill -0 $EPID 2>/dev/null; then
            echo "guest: engine did not start"
            cat /tmp/engine.log
            return 1
        fi
        sleep 0.1
    done
    grep -v '^ok=' /tmp/engine.log
}

note "sluice: appliance + end-to-end checks"
start_engine || exit 1
# The pools (and so the registered MRs) must sit in hugepages here.
if grep -q "hugepages: true" /tmp/engine.log; then
    echo "sluice_hugepages=pass" >>"$R"
else
    echo "sluice_hugepages=FAIL" >>"$R"
    grep -i huge /proc/meminfo
    fail=1
fi
rdma resource show
C="$B/sluice-rdma-client --server $IP:7471 --tenant 1 --key $KEY"
if $C check; then
    echo "sluice_check=pass" >>"$R"
else
    echo "sluice_check=FAIL" >>"$R"
    fail=1
fi

note "sluice: benchmark"
if $C bench --small 1000 --large 4 --large-mib 16 >/tmp/bench.txt 2>&1; then
    cat /tmp/bench.txt
    tr ' ' '\n' </tmp/bench.txt | grep '=' | sed 's/^/sluice_/' >>"$R"
    sleep 1.5
    # Time inside the appliance (burst start to reply queued), for contrast.
    grep '^ok=' /tmp/engine.log | tail -1
    grep '^ok=' /tmp/engine.log | tail -1 | tr ' ' '\n' | sed -n 's/^p50=\(.*\)us$/sluice_engine_p50_us=\1/p' >>"$R"
else
    cat /tmp/bench.txt
    echo "sluice_bench=FAIL" >>"$R"
    fail=1
fi

note "sluice: connection loss (appliance killed with requests in flight)"
$C hold --seconds 60 >/tmp/hold.txt 2>&1 &
HPID=$!
sleep 3
kill -9 $EPID
wait $EPID 2>/dev/null
if wait $HPID; then
    echo "sluice_loss=pass" >>"$R"
else
    echo "sluice_loss=FAIL" >>"$R"
    fail=1
fi
cat /tmp/hold.txt

note "sluice: a client after restart connects again"
start_engine || exit 1
$C hold --seconds 4 >/tmp/hold2.txt 2>&1
rc=$?
cat /tmp/hold2.txt
# hold exits 1 when the connection simply stayed up: what we want here.
if [ $rc -eq 1 ] && grep -q "still up" /tmp/hold2.txt; then
    echo "sluice_reconnect=pass" >>"$R"
else
    echo "sluice_reconnect=FAIL" >>"$R"
    fail=1
fi
kill -TERM $EPID
wait $EPID 2>/dev/null
tail -2 /tmp/engine.log

if [ $fail -ne 0 ]; then
    note "kernel log (on failure)"
    dmesg | tail -40
fi
note "results"
cat "$R"
exit $fail
