"""Starts the real appliance for the front-door suite: ``sluiced`` (Go
control plane with the Rust engine and its front door) on loopback, from
``cfg/sluice.toml`` with the bundled models and the front door turned on
(ephemeral ports). ``sluiced`` comes from ``scripts/build-ffi.sh``; missing
is a failure with a hint, never a skip."""

from __future__ import annotations

import json
import os
import pathlib
import sys
import tempfile
from typing import Dict, Iterator

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "harness"))
from sluiced import ROOT, Sluiced, base_config  # noqa: E402

DEMO_TOKEN = "sluice-demo-token-0000"
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


# The bundled greedy byte decoder (models/decoder.onnx) served twice for
# the streaming suite: "decoder" ends at EOS (token 0) or DECODER_MAX_TOKENS,
# "endless" only at max_tokens (huge), a deadline or a cancel.
DECODER_MAX_TOKENS = 32


def decoder_models() -> str:
    out = ""
    for name, eos, max_tokens in (("decoder", "eos = 0\n", DECODER_MAX_TOKENS), ("endless", "", 1000000)):
        out += f"""
[[routes]]
name = "{name}"
model = "{name}"
shard = "hbm2-inference"

[[models]]
name = "{name}"
version = "1"
kind = "onnx"
path = {json.dumps(str(ROOT / "models" / "decoder.onnx"))}
[models.stream]
state = [{{ input = "h", output = "hN", shape = [1, 16] }}]
[models.stream.generate]
token_input = "token"
token_output = "next"
{eos}max_tokens = {max_tokens}
"""
    return out


def make_config(dirpath: pathlib.Path, extra: str = "") -> pathlib.Path:
    text = base_config(
        dirpath,
        {
            'http_listen = ""': 'http_listen = "127.0.0.1:0"',
            'grpc_listen = ""': 'grpc_listen = "127.0.0.1:0"',
            "body_timeout_ms = 10000": "body_timeout_ms = 1000",
        },
    )
    path = dirpath / "sluice.toml"
    path.write_text(text + extra)
    return path


class Appliance(Sluiced):
    """A running sluiced with its front door."""

    def __init__(self, config: pathlib.Path) -> None:
        super().__init__(config)
        fd = self.status()["engine"]["frontdoor"]
        self.http_url: str = fd["http"]
        self.grpc_url: str = fd["grpc"]


@pytest.fixture(scope="session")
def appliance() -> Iterator[Appliance]:
    with tempfile.TemporaryDirectory(prefix="sluice-frontdoor-") as d:
        a = Appliance(make_config(pathlib.Path(d), published_models() + decoder_models()))
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
