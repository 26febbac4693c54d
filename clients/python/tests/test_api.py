"""The rest of the surface: addresses and keys, metadata of answers (trace,
extensions, token count), ping, stats, typing files."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import sluice

from conftest import DEMO_KEY

X = np.ones((1, 4), np.float32)
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_addresses_and_keys(appliance) -> None:
    host, port = appliance.data.rsplit(":", 1)
    for addr in [appliance.data, (host, int(port))]:
        for key in [DEMO_KEY, "hex:" + DEMO_KEY.hex(), DEMO_KEY.decode()]:
            with sluice.Client(addr, tenant=1, key=key) as c:
                assert "y" in c.infer("mlp", "1", {"x": X})
                assert c.server_addr == (host, int(port))
                assert c.local_addr[1] != 0
                assert repr(c).startswith("Client(127.0.0.1:")
    assert repr(c) == "Client(closed)"


def test_metadata_of_answers(client: sluice.Client) -> None:
    r = client.infer_response("echo", "1", {"x": X}, trace=TRACE, token_count=42,
                              extensions={"x-region": b"eu", "x-who": "pytest"}, intent="chat")
    assert isinstance(r, sluice.Response)
    assert r.trace == TRACE, "the trace context is echoed"
    assert r.token_count == 42
    assert r.model == "echo" and r.model_version == "1" and r.adapter == ""
    assert r.request_id > 0
    assert isinstance(r.extensions, list)
    np.testing.assert_array_equal(r.outputs["x"], X)
    assert "outputs=['x']" in repr(r)


def test_ping_and_stats(client: sluice.Client) -> None:
    assert 0 < client.ping() < 1
    s = client.stats()
    for k in ["sent", "received", "stale", "malformed", "bad_tag", "timeouts", "schema_cache_hits",
              "inputs_copied", "input_bytes_copied", "answers_copied", "answer_bytes_copied",
              "outputs_viewed", "outputs_copied", "output_bytes_copied"]:
        assert isinstance(s[k], int), k
    client.infer("echo", "1", {"x": X})
    s2 = client.stats()
    assert s2["answers_copied"] == s["answers_copied"] + 1
    assert s2["answer_bytes_copied"] > s["answer_bytes_copied"] + X.nbytes


def test_output_names_in_wire_order_first_name_wins(client: sluice.Client) -> None:
    out = client.infer("echo", "1", {"b": X, "a": X * 2})
    assert list(out) == ["b", "a"]


def test_typing_files_ship() -> None:
    pkg = pathlib.Path(sluice.__file__).parent
    assert (pkg / "py.typed").is_file()
    stub = (pkg / "_native.pyi").read_text()
    for name in ["class NativeClient", "def parse", "def build", "class Response"]:
        assert name in stub
    assert sluice.Client.infer.__doc__ and "deadline" in sluice.Client.infer.__doc__
    assert sluice.__version__ == "0.1.0"


def test_wheel_is_abi3() -> None:
    from sluice import _native

    assert ".abi3." in pathlib.Path(_native.__file__).name


def test_raw_rejects_unknown_dtypes() -> None:
    with pytest.raises(ValueError, match="unknown wire dtype"):
        sluice.Raw(X, "f128")
    assert "bf16" in repr(sluice.Raw(X.astype(np.uint16), "bf16"))
