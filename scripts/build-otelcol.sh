#!/usr/bin/env bash
# Builds the test OpenTelemetry Collector (tests/otelcol: the collector's own
# Go modules v0.165.0 / v1.71.0 with contrib's file exporter v0.165.1; OTLP
# receiver, file exporter) into .cache/bin/otelcol-sluice, once: a second run
# only compares the sources' hash (under 1 s). The first build downloads the
# modules and takes about 1 to 2 minutes. The trace tests
# (go-control/internal/tracing, internal/daemon) start it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/.cache/bin/otelcol-sluice"
src="$root/tests/otelcol"
sum=$(cat "$src/main.go" "$src/go.mod" "$src/go.sum" | sha256sum | cut -c1-16)
if [ -x "$bin" ] && [ "$(cat "$bin.sha" 2>/dev/null)" = "$sum" ]; then
    exit 0
fi
mkdir -p "$root/.cache/bin"
echo "build-otelcol: building the test collector into .cache/bin" >&2
(cd "$src" && go build -trimpath -o "$bin" .)
echo "$sum" >"$bin.sha"
