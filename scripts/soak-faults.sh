#!/usr/bin/env bash
# Runs the fault-injection suites many times in a row, each with a new
# seed, and prints one line per run (suite, seed, seconds, result) and a
# summary: the evidence that their checks hold for every schedule of
# faults, not just the last one (issue 28). Stops at the first failure
# unless KEEP_GOING=1; the failing run's log is kept and named.
#
#   scripts/soak-faults.sh [RUNS] [SUITE...]   SUITE: jobs, fleet, attacks (default: all three), RUNS default 20
#   BUSY=2 scripts/soak-faults.sh 20 jobs      the same with 2 busy loops (`yes`) keeping both cores loaded
#
# Needs what scripts/test.sh builds first: .cache/bin/sluiced
# (scripts/build-ffi.sh), .cache/bin/nats-server (scripts/setup.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
runs=${1:-20}
shift || true
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(jobs fleet attacks)
export SLUICE_ORT_LIB="${SLUICE_ORT_LIB:-$root/.cache/onnxruntime/libonnxruntime.so.1.31.1}"
logs=$root/target/soak-logs
mkdir -p "$logs"

busy_pids=()
stop_busy() { for p in "${busy_pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop_busy EXIT
for _ in $(seq 1 "${BUSY:-0}"); do
    yes >/dev/null &
    busy_pids+=($!)
done

one() {
    local suite=$1 seed=$2 log=$3
    case $suite in
        jobs)
            (cd go-control && SLUICE_CHAOS_SEED=$seed go test -tags jobs_e2e -count=1 -run '^TestCrashes$' -v ./internal/jobs/e2e/) ;;
        fleet)
            scripts/fleet-faults.sh 60s -seed "$seed" ;;
        attacks)
            (cd tests/attacks && go test -count=1 -v ./...) ;;
        *)
            echo "unknown suite $suite" >&2
            return 2 ;;
    esac >"$log" 2>&1
}

failed=0
printf '%-8s %4s %10s %6s  %s\n' suite run seed secs result
for suite in "${suites[@]}"; do
    pass=0
    for i in $(seq 1 "$runs"); do
        seed=$(( (RANDOM << 15 | RANDOM) % 1000000 + 1 ))
        log=$logs/$suite-$i-$seed.log
        t0=$SECONDS
        if one "$suite" "$seed" "$log"; then
            result=pass
            pass=$((pass + 1))
            rm -f "$log"
        else
            result="FAIL (log: $log)"
            failed=$((failed + 1))
        fi
        printf '%-8s %4d %10d %6d  %s\n' "$suite" "$i" "$seed" $((SECONDS - t0)) "$result"
        if [ "$result" != pass ] && [ -z "${KEEP_GOING:-}" ]; then
            echo "soak-faults: $suite failed at run $i (seed $seed); replay it with the seed above"
            exit 1
        fi
    done
    echo "soak-faults: $suite: $pass of $runs passed (busy loops: ${BUSY:-0})"
done
[ "$failed" -eq 0 ]
