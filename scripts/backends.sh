#!/usr/bin/env bash
# Real model-server backends on loopback, for the "backends + OpenAI API"
# work and its tests (environment: scripts/setup-backends.sh, run first).
#
#   scripts/backends.sh start           start what is not running, wait until ready
#   scripts/backends.sh stop            SIGTERM, SIGKILL after 5 s; routers too
#   scripts/backends.sh kill-one [NAME] SIGKILL one instance (default: the last llama)
#   scripts/backends.sh status          one line each; exit 1 if one is not ready
#   scripts/backends.sh routers-start   vllm-router and sglang-router before the llamas
#   scripts/backends.sh routers-stop
#
# Instances (names carry the port):
#   llama-8101, llama-8102  llama.cpp's OpenAI-compatible server, llama_cpp.server
#                           0.3.36, Gemma 3 270M Q4_K_M served as model
#                           "gemma-3-270m", embeddings on. Run through
#                           tests/backends/llama_compat.py, which adds GET
#                           /health and max_completion_tokens (the routers need
#                           both); BACKENDS_LLAMA_PLAIN=1 runs the bare
#                           `python -m llama_cpp.server` (no /health: 404;
#                           `status` then asks /v1/models, which waits while
#                           a generation runs, so a busy one shows not-ready).
#   kserve-8201             KServe ModelServer, model "tiny"
#                           (tests/backends/kserve_model.py), REST 8201, gRPC 8202
#   vllm-router-8301, sglang-router-8302   routers-start; round robin over
#                           the llamas, Prometheus on 8311 and 8312
# Ports overridable, so tests can run beside a demo:
#   BACKENDS_LLAMA_PORTS="8101 8102" BACKENDS_KSERVE_PORT=8201
#   BACKENDS_KSERVE_GRPC_PORT=8202 BACKENDS_VLLM_ROUTER_PORT=8301
#   BACKENDS_SGLANG_ROUTER_PORT=8302 BACKENDS_VLLM_ROUTER_METRICS_PORT=8311
#   BACKENDS_SGLANG_ROUTER_METRICS_PORT=8312
# Logs: .cache/backends/NAME.log; pids: .cache/backends/NAME.pid.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$root/.cache/backends-venv
py=$venv/bin/python
model=$root/.cache/models/gemma-3-270m-q4_k_m.gguf
run=$root/.cache/backends
read -r -a llama_ports <<<"${BACKENDS_LLAMA_PORTS:-8101 8102}"
kserve_port=${BACKENDS_KSERVE_PORT:-8201}
kserve_grpc_port=${BACKENDS_KSERVE_GRPC_PORT:-8202}
vllm_router_port=${BACKENDS_VLLM_ROUTER_PORT:-8301}
sglang_router_port=${BACKENDS_SGLANG_ROUTER_PORT:-8302}
vllm_router_metrics_port=${BACKENDS_VLLM_ROUTER_METRICS_PORT:-8311}
sglang_router_metrics_port=${BACKENDS_SGLANG_ROUTER_METRICS_PORT:-8312}
ready_timeout=120 # s, for all instances together; each loads in 1-4 s here
term_grace=5      # s between SIGTERM and SIGKILL
log() { echo "backends: $*" >&2; }
die() {
    log "$*"
    exit 1
}

llama_urls=()
for p in "${llama_ports[@]}"; do llama_urls+=("http://127.0.0.1:$p"); done

backend_names() {
    local p
    for p in "${llama_ports[@]}"; do echo "llama-$p"; done
    echo "kserve-$kserve_port"
}
router_names() { echo "vllm-router-$vllm_router_port" "sglang-router-$sglang_router_port" | tr ' ' '\n'; }
port_of() { echo "${1##*-}"; }

# A router belongs to this configuration when it fronts these llama ports
# (recorded at routers-start): a test on other ports leaves a demo's alone.
ours() { [ "$(cat "$run/$1.workers" 2>/dev/null)" = "${llama_ports[*]}" ]; }

# The URL that answers 200 once NAME serves. The bare llama_cpp.server has
# no /health, and its /v1/models waits while a generation runs.
ready_url() {
    local port
    port=$(port_of "$1")
    case $1 in
    llama-*)
        if tr '\0' ' ' <"/proc/$(pid_of "$1")/cmdline" 2>/dev/null | grep -q llama_compat.py; then
            echo "http://127.0.0.1:$port/health"
        else
            echo "http://127.0.0.1:$port/v1/models"
        fi
        ;;
    kserve-*) echo "http://127.0.0.1:$port/v2/health/ready" ;;
    *-router-*) echo "http://127.0.0.1:$port/readiness" ;;
    esac
}

pid_of() { cat "$run/$1.pid" 2>/dev/null || true; }

# Running = the recorded pid is alive and is still NAME's process (a
# recycled pid is not ours): its command line has NAME's port, or, for the
# routers, which retitle themselves (setproctitle), their title.
running() {
    local pid cmd
    pid=$(pid_of "$1")
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline")
    case $1 in
    vllm-router-*) [[ $cmd == *vllm-router* || $cmd == vllm::router* ]] ;;
    sglang-router-*) [[ $cmd == *sglang-router* || $cmd == sglang::router* ]] ;;
    *) [[ " $cmd " == *" $(port_of "$1") "* ]] ;;
    esac
}

# PID has not finished exiting. A process whose command line is gone may
# still hold its sockets, and so may one whose main thread is already a
# zombie while its other threads exit: its port says when it is done.
exiting() {
    [ -e "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null && return 0
    port_taken "$2"
}

# Waits, at most $term_grace s, until NAME's process PID has exited and
# left its port; false if it has not.
wait_exit() {
    local i port
    port=$(port_of "$1")
    for ((i = 0; i < term_grace * 10; i++)); do
        exiting "$2" "$port" || return 0
        sleep 0.1
    done
    ! exiting "$2" "$port"
}

# A router is ready once it routes to every llama (sglang-router answers
# /readiness before it has registered them all).
is_ready() {
    case $1 in
    *-router-*) curl -sf --max-time 2 "$(ready_url "$1")" | grep -q "\"healthy_workers\":${#llama_ports[@]}[,}]" ;;
    *) curl -sf -o /dev/null --max-time 2 "$(ready_url "$1")" ;;
    esac
}

port_taken() { [ -n "$(ss -Htln "sport = :$1")" ]; }

# The command line of NAME, into the array argv.
set_argv() {
    local port
    port=$(port_of "$1")
    case $1 in
    llama-*)
        # llama_cpp.server's settings also read unprefixed environment
        # variables (API_KEY, CONFIG_FILE, VERBOSE, N_CTX, ...): start it
        # with a clean environment so the caller's cannot change it.
        # One thread each so two instances share 2 cores. --chat_format
        # gemma: the GGUF carries no chat template, and the fallback
        # (llama-2's [INST]) is not Gemma's. --interrupt_requests false: by
        # default a new request cuts a running stream short. --logits_all
        # false: true keeps n_ctx x 262144 float32 logits (2 GiB) per
        # instance, needed only for logprobs. The pooling override (mean):
        # the GGUF sets none, and then /v1/embeddings returns one vector per
        # token, not OpenAI's one per input.
        argv=(env -i "PATH=$PATH" "HOME=$HOME" LANG=C.UTF-8 "$py")
        if [ "${BACKENDS_LLAMA_PLAIN:-0}" = 1 ]; then
            argv+=(-m llama_cpp.server)
        else
            argv+=("$root/tests/backends/llama_compat.py")
        fi
        argv+=(--model "$model" --model_alias gemma-3-270m
            --host 127.0.0.1 --port "$port" --n_ctx 2048 --n_threads 1 --n_threads_batch 1
            --chat_format gemma --embedding true --interrupt_requests false --logits_all false
            --kv_overrides gemma3.pooling_type=int:1)
        ;;
    kserve-*)
        argv=("$py" "$root/tests/backends/kserve_model.py"
            --http_port "$port" --grpc_port "$kserve_grpc_port" --workers 1)
        ;;
    vllm-router-*)
        # The startup check polls each worker's /health every
        # --worker-startup-check-interval s (default 30).
        argv=("$venv/bin/vllm-router" --worker-urls "${llama_urls[@]}"
            --host 127.0.0.1 --port "$port" --policy round_robin
            --prometheus-host 127.0.0.1 --prometheus-port "$vllm_router_metrics_port"
            --worker-startup-check-interval 1 --worker-startup-timeout-secs "$ready_timeout")
        ;;
    sglang-router-*)
        # Its default Prometheus address is 0.0.0.0:29000, vllm-router's
        # 127.0.0.1:29000: both set, so the two can run together.
        argv=("$venv/bin/sglang-router" launch --worker-urls "${llama_urls[@]}"
            --host 127.0.0.1 --port "$port" --policy round_robin
            --prometheus-host 127.0.0.1 --prometheus-port "$sglang_router_metrics_port"
            --worker-startup-check-interval 1 --worker-startup-timeout-secs "$ready_timeout")
        ;;
    esac
}

start_one() {
    local name=$1 port
    port=$(port_of "$name")
    if running "$name"; then
        log "$name already running (pid $(pid_of "$name"))"
        return
    fi
    rm -f "$run/$name.pid"
    port_taken "$port" && die "$name: port $port is taken by another process (ss -tlnp 'sport = :$port')"
    set_argv "$name"
    setsid "${argv[@]}" >"$run/$name.log" 2>&1 </dev/null &
    echo $! >"$run/$name.pid"
    log "$name starting (pid $!, log .cache/backends/$name.log)"
}

# Waits until every NAME answers, at most $ready_timeout s in all; a process
# that dies or does not answer in time fails the start with its log's tail.
wait_ready() {
    local deadline=$((SECONDS + ready_timeout)) t0=$SECONDS name pending
    while :; do
        pending=()
        for name in "$@"; do
            running "$name" || fail_start "$name" "exited"
            is_ready "$name" || pending+=("$name")
        done
        [ ${#pending[@]} -eq 0 ] && break
        [ $SECONDS -ge $deadline ] && fail_start "${pending[0]}" "not ready after ${ready_timeout} s"
        sleep 0.5
    done
    log "ready: $* ($((SECONDS - t0)) s)"
}

fail_start() {
    log "$1 $2; last lines of .cache/backends/$1.log:"
    tail -n 30 "$run/$1.log" >&2 || true
    stop_one "$1"
    exit 1
}

stop_one() {
    local name=$1 pid
    pid=$(pid_of "$name")
    if running "$name"; then
        kill -TERM "$pid" 2>/dev/null || true
        if ! wait_exit "$name" "$pid"; then
            log "$name (pid $pid) still up ${term_grace} s after SIGTERM: SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            wait_exit "$name" "$pid" || log "$name (pid $pid) still exiting ${term_grace} s after SIGKILL"
        fi
        log "$name stopped (pid $pid)"
    fi
    rm -f "$run/$name.pid" "$run/$name.workers"
}

status_line() {
    local name=$1 port pid state
    port=$(port_of "$name")
    [ "${name%%-*}" = kserve ] && port="$port (grpc $kserve_grpc_port)"
    # Which llama server runs: the compat wrapper or the bare one.
    if [ "${name%%-*}" = llama ] && running "$name"; then
        if tr '\0' ' ' <"/proc/$(pid_of "$name")/cmdline" | grep -q llama_compat.py; then
            port="$port compat"
        else
            port="$port plain"
        fi
    fi
    pid=$(pid_of "$name")
    if ! running "$name"; then
        state=stopped
        pid=-
    elif is_ready "$name"; then
        state=ready
    else
        state=not-ready
    fi
    printf '%-20s %-18s %-8s %s\n' "$name" "$port" "$pid" "$state"
    [ "$state" = ready ]
}

cmd=${1:-}
mkdir -p "$run"
case $cmd in
start)
    [ -x "$py" ] || die "no $venv: run scripts/setup-backends.sh first"
    [ -s "$model" ] || die "no $model: run scripts/setup-backends.sh first"
    mapfile -t names < <(backend_names)
    for n in "${names[@]}"; do start_one "$n"; done
    wait_ready "${names[@]}"
    ;;
stop)
    for n in $(router_names); do ours "$n" && stop_one "$n"; done
    mapfile -t names < <(backend_names)
    for n in "${names[@]}"; do stop_one "$n"; done
    ;;
routers-start)
    [ -x "$venv/bin/vllm-router" ] || die "no $venv: run scripts/setup-backends.sh first"
    # Both routers route only to workers whose /health answers 200, which
    # the bare llama_cpp.server lacks.
    for p in "${llama_ports[@]}"; do
        curl -sf -o /dev/null --max-time 2 "http://127.0.0.1:$p/health" ||
            die "llama-$p: GET /health does not answer 200: run 'scripts/backends.sh start' first (without BACKENDS_LLAMA_PLAIN=1; stop a plain one first)"
    done
    mapfile -t names < <(router_names)
    for n in "${names[@]}"; do
        if running "$n" && ! ours "$n"; then
            die "$n is running in front of other llama ports ($(cat "$run/$n.workers" 2>/dev/null))"
        fi
        start_one "$n"
        echo "${llama_ports[*]}" >"$run/$n.workers"
    done
    wait_ready "${names[@]}"
    ;;
routers-stop)
    for n in $(router_names); do
        if running "$n" && ! ours "$n"; then
            log "$n left running: it fronts other llama ports ($(cat "$run/$n.workers" 2>/dev/null))"
        else
            stop_one "$n"
        fi
    done
    ;;
kill-one)
    name=${2:-llama-${llama_ports[-1]}}
    running "$name" || die "$name is not running"
    pid=$(pid_of "$name")
    kill -KILL "$pid"
    # Returns once its port is free, so a start right after can bind it.
    wait_exit "$name" "$pid" || die "$name (pid $pid) still exiting ${term_grace} s after SIGKILL"
    rm -f "$run/$name.pid"
    echo "killed $name (pid $pid, SIGKILL)"
    ;;
status)
    rc=0
    while read -r n; do status_line "$n" || rc=1; done < <(backend_names)
    for n in $(router_names); do
        [ -e "$run/$n.pid" ] && ours "$n" && { status_line "$n" || rc=1; }
    done
    exit $rc
    ;;
*)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
