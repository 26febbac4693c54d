"""The seed's job, unmodified: its Go program publishes
{"prompt":"Explain quantum entanglement","model":"qwen3-72b"} on
inference.llm with X-AI-Intent and X-AI-Timeout only; sluiced (with
cfg/backends.toml) consumes it, sends it to its own OpenAI front door,
which dispatches it to a llama.cpp server; the stored result is a real
completion."""

from __future__ import annotations

import json
import subprocess

from conftest import ROOT


def test_seed_job_gets_a_real_completion(appliance):
    r = subprocess.run(
        ["go", "run", "./internal/jobs/e2e/seedllm", "-server", appliance.nats_url, "-wait", "90s"],
        cwd=ROOT / "go-control", capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    line = json.loads(r.stdout.strip().splitlines()[-1])
    assert line["kind"] == "result" and line["status"] == "ok", line
    body = line["result"]
    assert body["object"] == "text_completion", body
    assert body["choices"][0]["text"].strip(), body
    assert body["model"] == "gemma-3-270m"
