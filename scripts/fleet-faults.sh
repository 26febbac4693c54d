#!/usr/bin/env bash
# The fleet fault-injection suite (go-control/internal/faults): a 3-node
# nats-server cluster and three sluiced appliances (the Rust engine), random
# writes with recorded outcomes, SIGKILL/SIGSTOP of NATS nodes (stream and
# meta leaders among them) and appliances, data-plane traffic from loadgen,
# and a checker over the history (docs/fleet.md, "Fault injection").
#
#   scripts/fleet-faults.sh [DURATION] [sluice-faults flags...]
#   scripts/fleet-faults.sh 60s                 # CI: about 2 minutes in all
#   scripts/fleet-faults.sh 30m -seed 1234      # an operator's run, replaying a seed
#
# Needs .cache/bin/nats-server (scripts/setup.sh) and .cache/bin/sluiced
# (scripts/build-ffi.sh); builds loadgen and the suite. Every process uses
# ephemeral loopback ports and a temp dir: no shared lock needed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
duration=${1:-60s}
shift || true
for bin in .cache/bin/nats-server .cache/bin/sluiced; do
    [ -x "$bin" ] || { echo "fleet-faults: $bin missing (scripts/setup.sh, scripts/build-ffi.sh)" >&2; exit 2; }
done
env -u CARGO_TARGET_DIR cargo build --release -q -p sluice-perf --bin loadgen
(cd go-control && go build -o ../.cache/bin/sluice-faults ./cmd/sluice-faults)
exec .cache/bin/sluice-faults -repo "$root" -duration "$duration" "$@"
