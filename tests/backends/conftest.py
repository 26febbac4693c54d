"""The backends suite's rig: the real model servers (scripts/backends.sh
start: two llama.cpp OpenAI servers with Gemma 3 270M, KServe's
ModelServer), a nats-server with JetStream, and a real ``sluiced`` from
cfg/backends.toml in front of them, on ephemeral ports where it can.
Nothing here is faked: a missing part fails with a hint."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any, Dict, Iterator

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "harness"))
from sluiced import ROOT, Sluiced  # noqa: E402

TOKEN = "sluice-demo-token-0000"
LLAMA_PORTS = os.environ.get("BACKENDS_LLAMA_PORTS", "8101 8102").split()
KSERVE_PORT = os.environ.get("BACKENDS_KSERVE_PORT", "8201")
BACKENDS_SH = ROOT / "scripts" / "backends.sh"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def backends_config(dirpath: pathlib.Path, http_port: int, nats_url: str) -> str:
    """cfg/backends.toml made runnable from a temp dir; every swapped line
    must be found, so a change to the file fails here, not silently."""
    src = (ROOT / "cfg" / "backends.toml").read_text()
    ort = os.environ.get("SLUICE_ORT_LIB", str(ROOT / ".cache/onnxruntime/libonnxruntime.so.1.31.1"))
    llama = ", ".join(f'"http://127.0.0.1:{p}"' for p in LLAMA_PORTS)
    swaps = {
        '"../.cache/onnxruntime/libonnxruntime.so.1.31.1"': json.dumps(ort),
        "../models/": f"{ROOT}/models/",
        'listen = "127.0.0.1:7070"': 'listen = "127.0.0.1:0"',
        'admin_listen = "127.0.0.1:7071"': 'admin_listen = "127.0.0.1:0"',
        'data_dir = "../.cache/sluice-backends-data"': f'data_dir = "{dirpath}/data"',
        'http_listen = "127.0.0.1:8000"': f'http_listen = "127.0.0.1:{http_port}"',
        'endpoints = ["http://127.0.0.1:8101", "http://127.0.0.1:8102"]': f"endpoints = [{llama}]",
        'endpoints = ["http://127.0.0.1:8201"]': f'endpoints = ["http://127.0.0.1:{KSERVE_PORT}"]',
        'servers = ["nats://127.0.0.1:4222"]': f'servers = ["{nats_url}"]',
    }
    for old, new in swaps.items():
        assert old in src, f"cfg/backends.toml no longer has {old!r}"
        src = src.replace(old, new)
    return src


def backends(*args: str) -> str:
    r = subprocess.run([str(BACKENDS_SH), *args], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.fail(f"scripts/backends.sh {' '.join(args)} failed:\n{r.stdout}\n{r.stderr}", pytrace=False)
    return r.stdout + r.stderr


class Appliance:
    def __init__(self, proc: Sluiced, http_port: int, nats_url: str) -> None:
        self.proc = proc
        self.base = f"http://127.0.0.1:{http_port}"
        self.nats_url = nats_url

    def backends(self) -> Dict[str, Any]:
        st = self.proc.status()
        eng = st.get("engine", st)
        return eng["frontdoor"]["backends"]

    def pool(self, name: str) -> Dict[str, Any]:
        return next(p for p in self.backends()["pools"] if p["name"] == name)

    def wait_ready(self, pool: str, n: int, timeout_s: float = 120) -> None:
        """Until `n` endpoints of `pool` are healthy and serve a model."""
        until = time.time() + timeout_s
        while True:
            eps = self.pool(pool)["endpoints"]
            ready = [e for e in eps if e["healthy"] and not e["ejected"] and e["models"]]
            if len(ready) >= n:
                return
            if time.time() > until:
                pytest.fail(f"pool {pool}: {len(ready)} of {n} endpoints ready: {eps}", pytrace=False)
            time.sleep(0.2)

    def post(self, path: str, body: bytes, headers: Dict[str, str]) -> "tuple[int, Dict[str, str], bytes]":
        req = urllib.request.Request(self.base + path, data=body, method="POST", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()


@pytest.fixture(scope="session")
def nats_url() -> Iterator[str]:
    binary = ROOT / ".cache/bin/nats-server"
    if not binary.is_file():
        pytest.fail(f"{binary} missing: run scripts/setup.sh", pytrace=False)
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        p = subprocess.Popen([str(binary), "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", d],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        until = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.time() > until:
                    p.kill()
                    pytest.fail("nats-server did not start", pytrace=False)
                time.sleep(0.1)
        yield f"nats://127.0.0.1:{port}"
        p.terminate()
        p.wait(10)


@pytest.fixture(scope="session")
def appliance(nats_url: str) -> Iterator[Appliance]:
    backends("start")
    http_port = free_port()
    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / "backends.toml"
        path.write_text(backends_config(pathlib.Path(d), http_port, nats_url))
        s = Sluiced(path)
        try:
            a = Appliance(s, http_port, nats_url)
            a.wait_ready("llama", len(LLAMA_PORTS))
            a.wait_ready("kserve", 1)
            yield a
        finally:
            s.stop()


@pytest.fixture()
def client(appliance: Appliance):
    import openai

    return openai.OpenAI(base_url=appliance.base + "/v1", api_key=TOKEN, max_retries=0, timeout=120)
