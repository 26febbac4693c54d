"""The one way the Python suites start a real ``sluiced``: the Python client
suite (clients/python/tests) and the front-door suite (tests/frontdoor) both
import it from their conftest.py.

``sluiced`` comes from ``scripts/build-ffi.sh`` (``.cache/bin/sluiced``, or
``$SLUICED``); missing is a failure with a hint, never a skip."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import threading
import urllib.request
from typing import Any, Dict, Optional

import pytest

ROOT = pathlib.Path(os.environ.get("SLUICE_REPO", pathlib.Path(__file__).resolve().parents[2]))
DEMO_KEY = bytes.fromhex("73756963652d64656d6f2d6b65792d30303030303030303030303030303030")


def base_config(dirpath: pathlib.Path, more: Dict[str, str]) -> str:
    """cfg/sluice.toml made runnable from a temp dir: the ORT library and
    models by absolute path, ephemeral ports, its own data dir. ``more`` maps
    further lines of the file to their replacements; each must be found, so
    a change to cfg/sluice.toml fails here rather than silently."""
    src = (ROOT / "cfg" / "sluice.toml").read_text()
    ort = os.environ.get("SLUICE_ORT_LIB", str(ROOT / ".cache/onnxruntime/libonnxruntime.so.1.31.1"))
    swaps = {
        '"../.cache/onnxruntime/libonnxruntime.so.1.31.1"': json.dumps(ort),
        "../models/": f"{ROOT}/models/",
        'listen = "127.0.0.1:7070"': 'listen = "127.0.0.1:0"',
        'admin_listen = "127.0.0.1:7071"': 'admin_listen = "127.0.0.1:0"',
        'data_dir = "../.cache/sluice-data"': f'data_dir = "{dirpath}/data"',
    }
    swaps.update(more)
    for old, new in swaps.items():
        assert old in src, f"cfg/sluice.toml no longer has {old!r}"
        src = src.replace(old, new)
    return src


class Sluiced:
    """A running sluiced: started from a config file, ready once it logs its
    admin address, stopped (terminate, then kill) by ``stop``."""

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

    def admin_call(self, method: str, path: str, body: Optional[Any] = None) -> Any:
        """One admin API call with a JSON body; the decoded JSON reply."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"http://{self.admin}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read().decode()
        return json.loads(text) if text else None

    def status(self) -> Any:
        return self.admin_call("GET", "/v1/status")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
