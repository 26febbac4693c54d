"""The bundled models' outputs through the appliance match onnxruntime-python
(the reference, from PyPI) run on the same input: the MLP with and without
its LoRA adapter, the two-input model, and the suite's own ONNX model."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import sluice

from conftest import OWN_MODEL, ROOT, own_model_bytes

MODELS = ROOT / "models"


def session(path_or_bytes) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3  # the LoRA initializers-as-inputs warning is expected
    return ort.InferenceSession(path_or_bytes, so, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def mlp() -> ort.InferenceSession:
    return session(str(MODELS / "mlp.onnx"))


def close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("batch", [1, 7, 32])
def test_mlp_matches_onnxruntime(client: sluice.Client, mlp: ort.InferenceSession, batch: int) -> None:
    x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
    got = client.infer("mlp", "1", {"x": x})
    (want,) = mlp.run(["y"], {"x": x})
    assert list(got) == ["y"]
    close(got["y"], want)


def test_mlp_version_and_alias(client: sluice.Client, mlp: ort.InferenceSession) -> None:
    x = np.full((2, 4), 0.5, np.float32)
    (want,) = mlp.run(["y"], {"x": x})
    r = client.infer_response("mlp", "1.0.0", {"x": x})
    assert r.model == "mlp" and r.model_version == "1.0.0"
    close(r.outputs["y"], want)
    close(client.infer("mlp", "1", {"x": x})["y"], want)


def test_mlp_lora_adapter_matches_onnxruntime(client: sluice.Client, mlp: ort.InferenceSession) -> None:
    x = np.random.default_rng(3).standard_normal((4, 4)).astype(np.float32)
    adapter = ort.LoraAdapter()
    adapter.Load(str(MODELS / "mlp_formal.onnx_adapter"))
    ro = ort.RunOptions()
    ro.add_active_adapter(adapter)
    (want,) = mlp.run(["y"], {"x": x}, ro)
    (plain,) = mlp.run(["y"], {"x": x})
    assert not np.allclose(want, plain), "the adapter changes the answer"
    r = client.infer_response("mlp", "1", {"x": x}, adapter="formal")
    assert r.adapter == "formal"
    close(r.outputs["y"], want)
    close(client.infer("mlp", "1", {"x": x})["y"], plain)


def test_two_io_matches_onnxruntime(client: sluice.Client) -> None:
    s = session(str(MODELS / "two_io.onnx"))
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 8)).astype(np.float32)
    b = rng.standard_normal((3, 8)).astype(np.float32)
    got = client.infer("two_io", "1", {"a": a, "b": b})
    want = dict(zip(["sum", "prod"], s.run(["sum", "prod"], {"a": a, "b": b})))
    assert sorted(got) == ["prod", "sum"]
    for k in want:
        close(got[k], want[k])


def test_own_onnx_model_matches_onnxruntime(client: sluice.Client) -> None:
    s = session(own_model_bytes())
    x = np.random.default_rng(9).standard_normal((5, 4)).astype(np.float32)
    got = client.infer(OWN_MODEL, "1", {"x": x})
    logits, probs = s.run(["logits", "probs"], {"x": x})
    close(got["logits"], logits)
    close(got["probs"], probs)
    np.testing.assert_allclose(got["probs"].sum(axis=1), 1.0, rtol=1e-6)


def test_big_model_input_does_not_fit_a_datagram(client: sluice.Client) -> None:
    """models/big.onnx takes a 512 KiB input: more than one UDP datagram
    carries, so the UDP client refuses to build it (over TCP it runs:
    tests/test_tcp.py)."""
    x = np.ones((1, 131072), np.float32)
    with pytest.raises(sluice.InvalidRequestError) as e:
        client.infer("big", "1", {"x": x})
    assert e.value.wire_error == "TooLarge"
