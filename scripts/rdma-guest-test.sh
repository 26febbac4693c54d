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

note "C ABI: connections listed and closed through sluice_engine_query / _close_connection"
if SLUICE_RDMA_TEST_IP=$IP "$B/ffi-connection-tests" rdma:: --test-threads=1; then
    echo "sluice_ffi_connections=pass" >>"$R"
else
    echo "sluice_ffi_connections=FAIL" >>"$R"
    fail=1
fi

note "sluiced: connections managed from the control plane"
# The Go daemon linked with the rdma-enabled engine, serving the same config
# (echo and null models: no ONNX Runtime needed) with its admin API here.
mkdir -p /tmp/sluiced
# Adaptive polling: sluicectl and the client need the guest's two vCPUs.
sed 's/^poll = "busy"/poll = "adaptive"/' /share/rdma.toml >/tmp/sluiced/sluice.toml
printf '\n[control]\nadmin_listen = "127.0.0.1:7071"\ndata_dir = "/tmp/sluiced/data"\n' >>/tmp/sluiced/sluice.toml
API=http://127.0.0.1:7071
CTL="$B/sluicectl -addr 127.0.0.1:7071"
"$B/sluiced" -config /tmp/sluiced/sluice.toml >/tmp/sluiced.log 2>&1 &
DPID=$!
# Loops below are bounded in time: everything is slow under emulation.
now() { date +%s; }
t_end=$(($(now) + 120))
until $CTL status >/tmp/ctl-status.txt 2>&1; do
    if [ "$(now)" -gt $t_end ] || ! kill -0 $DPID 2>/dev/null; then
        echo "guest: sluiced did not start"
        cat /tmp/sluiced.log
        break
    fi
    sleep 0.1
done
cat /tmp/ctl-status.txt
if grep -q "transport  rdma" /tmp/ctl-status.txt; then
    echo "sluiced_start=pass" >>"$R"

    # A client that keeps requests in flight, and reconnects when it loses
    # its connection (what a client does with a retryable error).
    echo "sluiced up at $(now)"
    $C hold --seconds 120 --reconnect 40 >/tmp/hold3.txt 2>&1 &
    HPID=$!
    # Listed, up, with traffic counted both ways.
    conn=
    t_end=$(($(now) + 90))
    while [ -z "$conn" ] && [ "$(now)" -le $t_end ]; do
        $CTL connections >/tmp/conns.txt 2>&1
        # ID TRANSPORT WORKER PEER DEVICE STATE RX_FRAMES RX_BYTES TX_FRAMES ...
        conn=$(awk 'NR > 1 && $2 == "rdma" && $5 == "rxe0" && $6 == "up" && $7 > 0 && $9 > 0 {print $1; exit}' /tmp/conns.txt)
        [ -n "$conn" ] || sleep 0.2
    done
    echo "listed at $(now)"
    cat /tmp/conns.txt
    curl -sS "$API/v1/connections"
    if [ -n "$conn" ]; then
        echo "sluiced_list=pass" >>"$R"
    else
        echo "sluiced_list=FAIL" >>"$R"
        fail=1
    fi

    # Unknown and malformed ids: 404 and 400, each with a JSON error.
    c404=$(curl -sS -o /tmp/del404.txt -w '%{http_code}' -X DELETE "$API/v1/connections/999999999")
    c400=$(curl -sS -o /tmp/del400.txt -w '%{http_code}' -X DELETE "$API/v1/connections/abc")
    cat /tmp/del404.txt /tmp/del400.txt
    if [ "$c404" = 404 ] && grep -q '"code":"not_found"' /tmp/del404.txt &&
        [ "$c400" = 400 ] && grep -q '"code":"invalid_argument"' /tmp/del400.txt; then
        echo "sluiced_close_errors=pass" >>"$R"
    else
        echo "sluiced_close_errors=FAIL ($c404 $c400)" >>"$R"
        fail=1
    fi

    # Closed from the control plane: the client's requests in flight fail
    # with the retryable connection loss; it reconnects and is served.
    if [ -n "$conn" ] && $CTL connections close "$conn"; then
        echo "sluiced_close=pass" >>"$R"
    else
        echo "sluiced_close=FAIL" >>"$R"
        fail=1
    fi
    echo "closed at $(now)"
    # The client reconnects (and holds the new connection for 40 s).
    new=
    t_end=$(($(now) + 90))
    while [ -z "$new" ] && [ -n "$conn" ] && [ "$(now)" -le $t_end ]; do
        $CTL connections >/tmp/conns2.txt 2>&1
        new=$(awk -v old="$conn" 'NR > 1 && $1 != old && $6 == "up" && $7 > 0 {print $1; exit}' /tmp/conns2.txt)
        [ -n "$new" ] || sleep 0.2
    done
    echo "reconnection listed at $(now)"
    cat /tmp/conns2.txt
    wait $HPID
    hrc=$?
    cat /tmp/hold3.txt
    if [ $hrc -eq 0 ] && grep -q "connection loss surfaced as a retryable error" /tmp/hold3.txt &&
        grep -q "served again" /tmp/hold3.txt && [ -n "$new" ]; then
        echo "sluiced_reconnect=pass" >>"$R"
    else
        echo "sluiced_reconnect=FAIL" >>"$R"
        fail=1
    fi

    # Per-worker counters outlive the connections: both were accepted, and
    # the closed ones' traffic is still counted.
    sleep 1
    curl -sS "$API/metrics" | grep -E '^sluice_connection' >/tmp/metrics.txt
    cat /tmp/metrics.txt
    msum() { awk -v m="$1" 'index($1, m "{") == 1 {s += $2} END {printf "%d", s}' /tmp/metrics.txt; }
    acc=$(msum sluice_connections_accepted_total)
    clo=$(msum sluice_connections_closed_total)
    rxf=$(msum sluice_connection_rx_frames_total)
    if [ "$acc" -ge 2 ] && [ "$clo" -ge 1 ] && [ "$rxf" -gt 0 ] &&
        grep -q '^sluice_connections_open{transport="rdma"}' /tmp/metrics.txt; then
        echo "sluiced_metrics=pass" >>"$R"
    else
        echo "sluiced_metrics=FAIL (accepted $acc closed $clo rx_frames $rxf)" >>"$R"
        fail=1
    fi
    if [ -n "$conn" ] && ! $CTL connections | grep -q "^$conn "; then
        echo "sluiced_closed_gone=pass" >>"$R"
    else
        echo "sluiced_closed_gone=FAIL" >>"$R"
        fail=1
    fi
else
    echo "sluiced_start=FAIL" >>"$R"
    fail=1
fi
kill -TERM $DPID 2>/dev/null
wait $DPID 2>/dev/null
tail -5 /tmp/sluiced.log

note "peers over RDMA: A (sluiced, without the shard's labels) forwards to B (sluice-engine) on the same device"
# B carries the hbm2 labels; A does not, and reaches B through an RC
# connection it opens itself. A's forward timeout is 60 s: a peer_down seen
# below can only come from the lost connection, not from a timeout.
sed -e 's/^listen = .*/listen = "10.99.0.1:7481"/' -e 's/^poll = "busy"/poll = "adaptive"/' \
    /share/rdma.toml >/tmp/peerB.toml
awk '/^\[host\]/ { h = 1 }
     h && /^labels/ { print "labels = { \"hardware.gpu.memory\" = \"gddr6\" }"; h = 0; next }
     { print }' /share/rdma.toml |
    sed -e 's/^listen = .*/listen = "10.99.0.1:7482"/' -e 's/^poll = "busy"/poll = "adaptive"/' \
        -e 's/^workers = .*/workers = [0]/' -e 's/^transport = "rdma"/transport = "rdma"\nforward_timeout_ms = 60000/' \
        >/tmp/peerA.toml
mkdir -p /tmp/peerA-data
cat >>/tmp/peerA.toml <<EOF

[[peers]]
name = "b"
address = "$IP:7481"
transport = "rdma"
labels = { "hardware.gpu.memory" = "hbm2" }

[control]
admin_listen = "127.0.0.1:7072"
data_dir = "/tmp/peerA-data"
EOF
start_b() {
    "$B/sluice-engine" --config /tmp/peerB.toml >/tmp/peerB.log 2>&1 &
    BPID=$!
    t_end=$(($(now) + 60))
    while ! grep -q "serving on" /tmp/peerB.log; do
        if [ "$(now)" -gt $t_end ] || ! kill -0 $BPID 2>/dev/null; then
            echo "guest: appliance B did not start"
            cat /tmp/peerB.log
            return 1
        fi
        sleep 0.1
    done
}
CTLA="$B/sluicectl -addr 127.0.0.1:7072"
CA="$B/sluice-rdma-client --server $IP:7482 --tenant 1 --key $KEY"
CB="$B/sluice-rdma-client --server $IP:7481 --tenant 1 --key $KEY"
# The id of A's peer connection when it is up (other than $1), else empty.
# Columns: ID TRANSPORT WORKER PEER DEVICE STATE RX_FRAMES RX_BYTES
# TX_FRAMES TX_BYTES WRITES_RX/TX ERRORS ROLE
peer_up() {
    $CTLA connections >/tmp/pconns.txt 2>&1
    awk -v not="${1:-}" 'NR > 1 && $13 == "peer" && $4 == "10.99.0.1:7481" && $6 == "up" && $1 != not {print $1; exit}' /tmp/pconns.txt
}
wait_peer_up() {
    pid=
    t_end=$(($(now) + 90))
    while [ -z "$pid" ] && [ "$(now)" -le $t_end ]; do
        pid=$(peer_up "${1:-}")
        [ -n "$pid" ] || sleep 0.2
    done
    echo "$pid"
}
if start_b; then
    "$B/sluiced" -config /tmp/peerA.toml >/tmp/peerA.log 2>&1 &
    APID=$!
    t_end=$(($(now) + 120))
    until $CTLA status >/dev/null 2>&1; do
        if [ "$(now)" -gt $t_end ] || ! kill -0 $APID 2>/dev/null; then
            echo "guest: sluiced (A) did not start"
            cat /tmp/peerA.log
            break
        fi
        sleep 0.1
    done
    p1=$(wait_peer_up)
    echo "A's peer connection to B: ${p1:-none}"
    cat /tmp/pconns.txt

    # A request for B's shard, sent to A, answered by B through A.
    $CA echo --small 200 >/tmp/pecho.txt 2>&1
    rc=$?
    cat /tmp/pecho.txt
    if [ $rc -eq 0 ] && grep -q "ok=200 errors=0" /tmp/pecho.txt; then
        echo "peer_forward=pass" >>"$R"
    else
        echo "peer_forward=FAIL" >>"$R"
        fail=1
    fi
    sed -n 's/.*p50_us=\([0-9.]*\).*/sluice_forward_p50_us=\1/p' /tmp/pecho.txt >>"$R"
    # The same requests straight to B, in the same run: the forward's cost.
    $CB echo --small 200 >/tmp/pecho-direct.txt 2>&1
    cat /tmp/pecho-direct.txt
    sed -n 's/.*p50_us=\([0-9.]*\).*/sluice_direct_p50_us=\1/p' /tmp/pecho-direct.txt >>"$R"

    # Listed on A as a peer connection, with the 200 frames counted both ways.
    $CTLA connections >/tmp/pconns.txt 2>&1
    cat /tmp/pconns.txt
    curl -sS http://127.0.0.1:7072/v1/connections
    echo
    if [ -n "$p1" ] && awk -v id="$p1" 'NR > 1 && $1 == id && $13 == "peer" && $7 >= 200 && $9 >= 200 {f = 1} END {exit !f}' /tmp/pconns.txt &&
        curl -sS http://127.0.0.1:7072/v1/connections | grep -q '"role":"peer"'; then
        echo "peer_listed=pass" >>"$R"
    else
        echo "peer_listed=FAIL" >>"$R"
        fail=1
    fi

    # Closed from the control plane: A reconnects by itself and serves again.
    p2=
    if [ -n "$p1" ] && $CTLA connections close "$p1"; then
        p2=$(wait_peer_up "$p1")
    fi
    echo "after close: ${p2:-none}"
    if [ -n "$p2" ] && $CA echo --small 5 >/tmp/pecho2.txt 2>&1; then
        cat /tmp/pecho2.txt
        echo "peer_close_reconnect=pass" >>"$R"
    else
        cat /tmp/pecho2.txt 2>/dev/null
        echo "peer_close_reconnect=FAIL" >>"$R"
        fail=1
    fi

    # B stops: A's next requests get a retryable peer_down, never a hang.
    kill -TERM $BPID
    wait $BPID 2>/dev/null
    t_end=$(($(now) + 30))
    while [ -n "$(peer_up)" ] && [ "$(now)" -le $t_end ]; do sleep 0.2; done
    cat /tmp/pconns.txt
    $CA echo --small 3 >/tmp/pecho3.txt 2>&1
    rc=$?
    cat /tmp/pecho3.txt
    if [ $rc -eq 3 ] && grep -q "errors=3 error=peer_down retryable=true" /tmp/pecho3.txt; then
        echo "peer_down=pass" >>"$R"
    else
        echo "peer_down=FAIL ($rc)" >>"$R"
        fail=1
    fi

    # B restarted: A reconnects (bounded backoff) and the shard is served again.
    if start_b && [ -n "$(wait_peer_up)" ] && $CA echo --small 20 >/tmp/pecho4.txt 2>&1; then
        cat /tmp/pecho4.txt
        echo "peer_restart=pass" >>"$R"
    else
        cat /tmp/pecho4.txt 2>/dev/null
        tail -20 /tmp/peerA.log
        echo "peer_restart=FAIL" >>"$R"
        fail=1
    fi
    kill -TERM $APID 2>/dev/null
    wait $APID 2>/dev/null
    kill -TERM $BPID 2>/dev/null
    wait $BPID 2>/dev/null
    grep -i "peer" /tmp/peerA.log | tail -12
else
    echo "peer_forward=FAIL (B did not start)" >>"$R"
    fail=1
fi

if [ $fail -ne 0 ]; then
    note "kernel log (on failure)"
    dmesg | tail -40
fi
note "results"
cat "$R"
exit $fail
