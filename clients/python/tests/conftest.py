"""Starts the real appliance for the suite: ``sluiced`` (Go control plane
with the Rust engine) on loopback, from ``cfg/sluice.toml`` with the bundled
models, plus a model of the suite's own (built with ``onnx``), a restricted
tenant, a shard nobody serves and a peer that is down.

``sluiced`` comes from ``scripts/build-ffi.sh`` (``.cache/bin/sluiced``);
missing is a failure with a hint, never a skip."""

from __future__ import annotations

import pathlib
import socket
import sys
import tempfile
import threading
import time
from typing import Any, Iterator, Optional

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "tests" / "harness"))
from sluiced import DEMO_KEY, ROOT, Sluiced, base_config  # noqa: E402
RESTRICTED_KEY = b"sluice-python-tests-restricted-tenant"
OWN_MODEL = "classifier"


def own_model_bytes() -> bytes:
    """The README's "a model of your own": logits = x.W + b, probs =
    softmax(logits), built with the onnx package."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.array([[0.5, -1.0], [0.25, 0.75], [-0.5, 0.5], [1.0, 0.125]], np.float32)
    b = np.array([0.1, -0.2], np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["xw"]),
            helper.make_node("Add", ["xw", "b"], ["logits"]),
            helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
        ],
        "classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 2]),
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 2]),
        ],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def free_udp_port() -> int:
    """A loopback UDP port nobody listens on (bound, read, released)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def make_config(dirpath: pathlib.Path) -> pathlib.Path:
    text = base_config(dirpath, {'tcp_listen = ""': 'tcp_listen = "127.0.0.1:0"'})
    own = dirpath / f"{OWN_MODEL}.onnx"
    try:
        own.write_bytes(own_model_bytes())
        own_model = f"""
[[routes]]
name = "{OWN_MODEL}"
model = "{OWN_MODEL}"
shard = "hbm2-inference"

[[models]]
name = "{OWN_MODEL}"
version = "1"
kind = "onnx"
path = "{own}"
"""
    except ImportError:  # no onnx package (the CPython 3.9 run)
        own_model = ""
    text += f"""
# --- added by clients/python/tests/conftest.py ---
[[shards]]
name = "tpu-only"
labels = {{ "hardware.accel" = "tpu" }}
max_concurrency = 1
queue_depth = 4

# Carries the gddr6 labels of the "training" route's shard, and is down.
[[peers]]
name = "down"
address = "127.0.0.1:{free_udp_port()}"
labels = {{ "hardware.gpu.memory" = "gddr6" }}

[[routes]]
name = "tpu"
intent = "tpu"
shard = "tpu-only"

[[routes]]
name = "two_io"
model = "two_io"
shard = "hbm2-inference"

[[models]]
name = "two_io"
version = "1"
kind = "onnx"
path = "{ROOT}/models/two_io.onnx"

# Inputs larger than a datagram: over TCP (tests/test_tcp.py).
[[routes]]
name = "big"
model = "big"
shard = "hbm2-inference"

[[routes]]
name = "large"
model = "large"
shard = "hbm2-inference"

[[models]]
name = "big"
version = "1"
kind = "onnx"
path = "{ROOT}/models/big.onnx"

[[models]]
name = "large"
version = "1"
kind = "onnx"
path = "{ROOT}/models/large.onnx"
{own_model}{silero_stream()}{decoder_streams()}
[[tenants]]
name = "restricted"
id = 2
key = "hex:{RESTRICTED_KEY.hex()}"
models = ["mlp"]
adapters = []
"""
    path = dirpath / "sluice.toml"
    path.write_text(text)
    return path


#: Silero VAD 6.2.3 from scripts/setup-models.sh: the stream tests' model.
SILERO = ROOT / ".cache" / "models" / "silero_vad_16k_op15.onnx"


def silero_stream() -> str:
    """Silero VAD as a stateful stream model (its state kept in the
    appliance: tests/test_streams.py), when scripts/setup-models.sh has
    fetched it."""
    if not SILERO.is_file():
        return ""
    return f"""
[[routes]]
name = "silero"
model = "silero"
shard = "hbm2-inference"

[[models]]
name = "silero"
version = "6.2.3"
kind = "onnx"
path = "{SILERO}"
aliases = ["6"]
[models.stream]
state = [{{ input = "state", output = "stateN", shape = [2, 1, 128] }}]
"""


def decoder_streams() -> str:
    """The bundled greedy byte decoder as two token-stream models
    (tests/test_tokens.py): "decoder" ends at EOS (0) or 32 tokens,
    "endless" has no EOS."""
    out = ""
    for name, eos in (("decoder", "eos = 0\nmax_tokens = 32"), ("endless", "max_tokens = 1000000")):
        out += f"""
[[routes]]
name = "{name}"
model = "{name}"
shard = "hbm2-inference"

[[models]]
name = "{name}"
version = "1"
kind = "onnx"
path = "{ROOT}/models/decoder.onnx"
[models.stream]
state = [{{ input = "h", output = "hN", shape = [1, 16] }}]
[models.stream.generate]
token_input = "token"
token_output = "next"
{eos}
"""
    return out


class Appliance(Sluiced):
    """A running sluiced, with its UDP and TCP data addresses."""

    def __init__(self, config: pathlib.Path) -> None:
        super().__init__(config)
        status = self.status()
        self.data = status["engine"]["listen"]
        # The TCP listener beside it (io_uring tcp_listen, port 0 resolved).
        self.tcp = status["engine"]["tcp_listen"]

    def http(self, method: str, path: str, body: Optional[Any] = None) -> Any:
        return self.admin_call(method, path, body)


@pytest.fixture(scope="session")
def appliance() -> Iterator[Appliance]:
    with tempfile.TemporaryDirectory(prefix="sluice-pytest-") as d:
        a = Appliance(make_config(pathlib.Path(d)))
        try:
            yield a
        finally:
            a.stop()


@pytest.fixture
def client(appliance: Appliance) -> Iterator[Any]:
    import sluice

    with sluice.Client(appliance.data, tenant=1, key=DEMO_KEY, timeout=2.0) as c:
        yield c


def wait_until(cond: Any, timeout: float = 10.0, what: str = "condition") -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class UdpPeer:
    """A loopback UDP endpoint on a thread that answers each datagram with
    whatever ``handler(data, addr)`` returns (a list of datagrams to send
    back, in order). For the client's behaviour on answers the appliance
    never sends (garbage, wrong kinds, codes it cannot be made to produce):
    the fake stands in only for the far end of those tests."""

    def __init__(self, handler: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.addr = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.handler = handler
        self.received = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data, addr = self.sock.recvfrom(1 << 16)
            except socket.timeout:
                continue
            except OSError:
                return
            self.received += 1
            for out in self.handler(data, addr) or []:
                self.sock.sendto(out, addr)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()

    def __enter__(self) -> "UdpPeer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Relay(UdpPeer):
    """A UDP relay between a client and the appliance; ``mangle(answer,
    request)`` returns the datagrams the client gets instead of the answer."""

    def __init__(self, upstream: str, mangle: Any) -> None:
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.mangle = mangle
        self.up = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.up.settimeout(5)
        super().__init__(self._relay)

    def _relay(self, data: bytes, addr: Any) -> Any:
        self.up.sendto(data, self.upstream)
        answer, _ = self.up.recvfrom(1 << 16)
        return self.mangle(answer, data)

    def close(self) -> None:
        super().close()
        self.up.close()
