"""Starts the real appliance for the front-door suite: ``sluiced`` (Go
control plane with the Rust engine and its front door) on loopback, from
``cfg/sluice.toml`` with the bundled models and the front door turned on
(ephemeral ports). ``sluiced`` comes from ``scripts/build-ffi.sh``; missing
is a failure with a hint, never a skip."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import tempfile
import threading
import urllib.request
from typing import Any, Dict, Iterator, Optional

import pytest

ROOT = pathlib.Path(os.environ.get("SLUICE_REPO", pathlib.Path(__file__).resolve().parents[2]))
DEMO_TOKEN = "sluice-demo-token-0000"
DEMO_KEY = bytes.fromhex("73756963652d64656d6f2d6b65792d30303030303030303030303030303030")
MODELS = pathlib.Path(os.environ.get("SLUICE_MODELS", ROOT / ".cache/models"))
# A published model (scripts/setup-models.sh: NudeNet's YOLOv8n detector,
# images [batch,3,height,width], an output whose shape ONNX Runtime decides),
# served with dynamic batching so Triton's config has something to say.
NUDENET = MODELS / "nudenet_320n.onnx"
NUDENET_BATCH_MAX = 8
NUDENET_DELAY_US = 20000


def published_models() -> str:
    if not NUDENET.is_file():
        pytest.fail(f"{NUDENET} missing: run scripts/setup-models.sh", pytrace=False)
    return f"""
[[routes]]
name = "nudenet"
model = "nudenet"
shard = "hbm2-inference"

[[models]]
name = "nudenet"
version = "3.4.2"
kind = "onnx"
path = {json.dumps(str(NUDENET))}
batch_max = {NUDENET_BATCH_MAX}
batch_delay_us = {NUDENET_DELAY_US}
"""


def make_config(dirpath: pathlib.Path, extra: str = "") -> pathlib.Path:
    src = (ROOT / "cfg" / "sluice.toml").read_text()
    ort = os.environ.get("SLUICE_ORT_LIB", str(ROOT / ".cache/onnxruntime/libonnxruntime.so.1.31.1"))
    text = (
        src.replace('"../.cache/onnxruntime/libonnxruntime.so.1.31.1"', json.dumps(ort))
        .replace("../models/", f"{ROOT}/models/")
        .replace('listen = "127.0.0.1:7070"', 'listen = "127.0.0.1:0"')
        .replace('admin_listen = "127.0.0.1:7071"', 'admin_listen = "127.0.0.1:0"')
        .replace('data_dir = "../.cache/sluice-data"', f'data_dir = "{dirpath}/data"')
        .replace('http_listen = ""', 'http_listen = "127.0.0.1:0"')
        .replace('grpc_listen = ""', 'grpc_listen = "127.0.0.1:0"')
        .replace("body_timeout_ms = 10000", "body_timeout_ms = 1000")
    )
    path = dirpath / "sluice.toml"
    path.write_text(text + extra)
    return path


class Appliance:
    """A running sluiced with its front door."""

    def __init__(self, config: pathlib.Path) -> None:
        binary = pathlib.Path(os.environ.get("SLUICED", ROOT / ".cache/bin/sluiced"))
        if not binary.is_file():
            pytest.fail(f"{binary} missing: run scripts/build-ffi.sh", pytrace=False)
        self.proc = subprocess.Popen(
            [str(binary), "-config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.log: list = []
        found: Dict[str, str] = {}
        ready = threading.Event()

        def pump() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.log.append(line.rstrip())
                m = re.search(r"admin=(\S+)", line)
                if m and "admin" not in found:
                    found["admin"] = m.group(1)
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(60) or "admin" not in found:
            self.stop()
            pytest.fail("sluiced did not start:\n" + "\n".join(self.log[-30:]), pytrace=False)
        self.admin = found["admin"]
        fd = self.status()["engine"]["frontdoor"]
        self.http_url: str = fd["http"]
        self.grpc_url: str = fd["grpc"]

    def status(self) -> Any:
        return self.admin_call("GET", "/v1/status")

    def admin_call(self, method: str, path: str, body: Optional[Any] = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"http://{self.admin}{path}", data=data, method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read().decode()
        return json.loads(text) if text else None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="session")
def appliance() -> Iterator[Appliance]:
    with tempfile.TemporaryDirectory(prefix="sluice-frontdoor-") as d:
        a = Appliance(make_config(pathlib.Path(d), published_models()))
        try:
            yield a
        finally:
            a.stop()


def auth(**more: str) -> Dict[str, str]:
    """The demo tenant's credentials, as a fresh dict each time:
    tritonclient adds Inference-Header-Content-Length to the headers dict
    it is given, so a shared one would carry it into the next request."""
    h = {"Authorization": f"Bearer {DEMO_TOKEN}"}
    h.update({k.replace("_", "-"): v for k, v in more.items()})
    return h


def grpc_auth(**more: str) -> Dict[str, str]:
    """The same as gRPC metadata (whose keys grpcio wants in lower case)."""
    return {k.lower(): v for k, v in auth(**more).items()}
