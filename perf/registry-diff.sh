#!/usr/bin/env bash
# The registry's diff engine on 1,000-field schemas (perf/README.md,
# "registry-diff.sh"): compat.Diff of two versions of one record/object/
# message with 1,000 fields (every 20th changed, the last ten replaced),
# both directions, paired, deprecation applied; against parsing the two
# versions, which every registration pays anyway, in the same run.
#   ratio = diff / parse of both versions   (lower is better)
# Pinned to core 0, GOMAXPROCS=1.
#   perf/registry-diff.sh          (BENCHTIME=2s per case)
set -euo pipefail
cd "$(dirname "$0")/../go-control"
BENCHTIME=${BENCHTIME:-2s}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
GOMAXPROCS=1 taskset -c 0 go test -run '^$' -bench '^Benchmark(Diff|Parse)1000Fields$' -benchmem \
    -benchtime "$BENCHTIME" ./registry/compat/ | tee "$out"
python3 - "$out" <<'PY'
import re, sys
ns = {}
for line in open(sys.argv[1]):
    m = re.match(r"Benchmark(Diff|Parse)1000Fields/(\w+)\S*\s+\d+\s+([\d.]+) ns/op", line)
    if m:
        ns[(m.group(1), m.group(2))] = float(m.group(3))
print(f"\n{'format':<10}{'diff µs':>10}{'parse both µs':>15}{'ratio':>8}")
for fmt in ("AVRO", "JSON", "PROTOBUF"):
    d, p = ns.get(("Diff", fmt)), ns.get(("Parse", fmt))
    if d is None or p is None:
        sys.exit(f"missing result for {fmt}")
    print(f"{fmt:<10}{d/1000:>10.0f}{p/1000:>15.0f}{d/p:>8.2f}")
PY
