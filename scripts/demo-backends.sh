#!/usr/bin/env bash
# Sluice in front of real model servers (docs/backends.md), from nothing:
# the servers' environment (scripts/setup-backends.sh: about 5 min the first
# time, llama.cpp compiled once; seconds after), two llama.cpp servers with
# Gemma 3 270M and KServe's ModelServer (scripts/backends.sh start), a
# nats-server, and sluiced with cfg/backends.toml serving the OpenAI API on
# 127.0.0.1:8000. Then a real streamed chat completion through Sluice with
# the official openai client, and the seed's job (its Go program,
# unmodified) answered by a real completion. Everything it started is
# stopped at the end. About 20 s once set up.
#   scripts/demo-backends.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
t0=$SECONDS
scripts/setup.sh --runtime
bash scripts/setup-backends.sh
[ -x .cache/bin/nats-server ] || GOBIN="$root/.cache/bin" go install github.com/nats-io/nats-server/v2@v2.15.3
export SLUICE_ORT_LIB="$root/.cache/onnxruntime/libonnxruntime.so.1.31.1"
eval "$(scripts/build-ffi.sh)"
pids=()
stop() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    scripts/backends.sh stop >/dev/null 2>&1 || true
}
trap stop EXIT
scripts/backends.sh start
work=$(mktemp -d)
.cache/bin/nats-server -js -a 127.0.0.1 -p 4222 -sd "$work/js" >"$work/nats.log" 2>&1 &
pids+=($!)
.cache/bin/sluiced -config cfg/backends.toml >"$work/sluiced.log" 2>&1 &
pids+=($!)
for _ in $(seq 150); do
    curl -sf -m 2 -H 'Authorization: Bearer sluice-demo-token-0000' 127.0.0.1:8000/v1/models >/dev/null && break
    sleep 0.2
done
echo
echo "== a streamed chat completion through Sluice (openai client, model qwen3-72b -> gemma-3-270m)"
.cache/backends-venv/bin/python - <<'EOF'
import openai
c = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="sluice-demo-token-0000")
stream = c.chat.completions.create(
    model="qwen3-72b", stream=True, max_tokens=64,
    messages=[{"role": "user", "content": "Explain quantum entanglement in two sentences."}])
for chunk in stream:
    if chunk.choices:
        print(chunk.choices[0].delta.content or "", end="", flush=True)
print()
EOF
echo
echo "== the seed's job: {\"prompt\":\"Explain quantum entanglement\",\"model\":\"qwen3-72b\"} on inference.llm, X-AI-Intent and X-AI-Timeout only"
(cd go-control && go run ./internal/jobs/e2e/seedllm -server nats://127.0.0.1:4222 -wait 60s)
echo
.cache/bin/sluicectl status | sed -n '/backends/,$p'
echo
echo "demo-backends: $((SECONDS - t0)) s"
