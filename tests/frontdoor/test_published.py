"""A published model (NudeNet's YOLOv8n detector, from its PyPI wheel via
scripts/setup-models.sh) through the front door with the unmodified
tritonclient: metadata and Triton's model configuration from the engine's
loaded session (its dynamic batching as configured), and HTTP binary, HTTP
JSON and gRPC inference, alone and eight at once (stacked by the dynamic
batcher), every answer compared with onnxruntime-python."""

from __future__ import annotations

import json
import urllib.request

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import NUDENET, NUDENET_BATCH_MAX, NUDENET_DELAY_US, auth, grpc_auth


def picture(shape, seed):
    """An image-like tensor in [0, 1]: a gradient, a bright blob, noise."""
    rng = np.random.default_rng(seed)
    c, h, w = shape[-3], shape[-2], shape[-1]
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([(x / w) * (0.5 + 0.5 * k / c) + 0.3 * np.exp(-((x - w / 2) ** 2 + (y - h / 3) ** 2) / (w * 2))
                    for k in range(c)])
    img = img + 0.05 * rng.standard_normal(img.shape)
    return np.clip(img, 0, 1).astype(np.float32).reshape(shape)


@pytest.fixture(scope="module")
def session():
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return ort.InferenceSession(str(NUDENET), so, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def hc(appliance):
    c = httpclient.InferenceServerClient(appliance.http_url, concurrency=NUDENET_BATCH_MAX)
    yield c
    c.close()


@pytest.fixture(scope="module")
def gc(appliance):
    c = grpcclient.InferenceServerClient(appliance.grpc_url)
    yield c
    c.close()


def same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    # Bit-identical as a rule; ONNX Runtime may pick other kernels for a
    # stacked batch, so a batched answer is held to float tolerance.
    assert np.allclose(got, want, rtol=1e-5, atol=1e-5), float(np.max(np.abs(got - want)))


def test_metadata_from_the_loaded_session(hc, gc):
    m = hc.get_model_metadata("nudenet", headers=auth())
    assert m["name"] == "nudenet" and m["versions"] == ["3.4.2"]
    assert m["platform"] == "onnxruntime_onnx"
    assert m["inputs"] == [{"name": "images", "datatype": "FP32", "shape": [-1, 3, -1, -1]}]
    assert m["outputs"] == [{"name": "output0", "datatype": "FP32", "shape": [-1, 22, -1]}]
    assert hc.get_model_metadata("nudenet", "3.4.2", headers=auth()) == m
    g = gc.get_model_metadata("nudenet", "3.4.2", headers=grpc_auth())
    assert g.name == "nudenet" and list(g.versions) == ["3.4.2"] and g.platform == "onnxruntime_onnx"
    assert [(t.name, t.datatype, list(t.shape)) for t in g.inputs] == [("images", "FP32", [-1, 3, -1, -1])]
    assert [(t.name, t.datatype, list(t.shape)) for t in g.outputs] == [("output0", "FP32", [-1, 22, -1])]


def test_config_states_the_dynamic_batching(hc, gc):
    c = hc.get_model_config("nudenet", headers=auth())
    assert c["max_batch_size"] == NUDENET_BATCH_MAX
    # With max_batch_size > 0 Triton's dims leave the batch dimension out.
    assert c["input"] == [{"name": "images", "data_type": "TYPE_FP32", "dims": [3, -1, -1]}]
    assert c["output"] == [{"name": "output0", "data_type": "TYPE_FP32", "dims": [22, -1]}]
    assert c["dynamic_batching"]["max_queue_delay_microseconds"] == NUDENET_DELAY_US
    g = gc.get_model_config("nudenet", headers=grpc_auth()).config
    assert g.max_batch_size == NUDENET_BATCH_MAX
    assert list(g.input[0].dims) == [3, -1, -1] and list(g.output[0].dims) == [22, -1]
    assert g.dynamic_batching.max_queue_delay_microseconds == NUDENET_DELAY_US
    # The bundled MLP is not configured to batch: no dynamic_batching.
    assert "dynamic_batching" not in hc.get_model_config("mlp", headers=auth())
    assert not gc.get_model_config("mlp", headers=grpc_auth()).config.HasField("dynamic_batching")


def http_input(img, binary=True):
    i = httpclient.InferInput("images", list(img.shape), "FP32")
    i.set_data_from_numpy(img, binary_data=binary)
    return i


def test_http_and_grpc_infer_match_onnxruntime(hc, gc, session):
    img = picture((1, 3, 64, 64), 1)
    want = session.run(["output0"], {"images": img})[0]
    for binary in (True, False):
        r = hc.infer("nudenet", [http_input(img, binary)], model_version="3.4.2",
                     outputs=[httpclient.InferRequestedOutput("output0", binary_data=binary)], headers=auth())
        assert np.array_equal(r.as_numpy("output0"), want), f"binary={binary}"
    i = grpcclient.InferInput("images", list(img.shape), "FP32")
    i.set_data_from_numpy(img)
    r = gc.infer("nudenet", [i], model_version="3.4.2", headers=grpc_auth())
    assert np.array_equal(r.as_numpy("output0"), want)


def exec_counts(appliance):
    with urllib.request.urlopen(f"http://{appliance.admin}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for name in ("model_request_success_total", "model_inference_exec_count_total"):
        for line in text.splitlines():
            if line.startswith(f"sluice_{name}{{") and 'model="nudenet"' in line:
                out[name] = float(line.rsplit(" ", 1)[1])
    return out


def test_eight_at_once_are_batched_and_each_answer_is_its_own(hc, appliance, session):
    before = exec_counts(appliance)
    imgs = [picture((1, 3, 64, 64), 10 + k) for k in range(NUDENET_BATCH_MAX)]
    pending = [hc.async_infer("nudenet", [http_input(img)], model_version="3.4.2",
                              outputs=[httpclient.InferRequestedOutput("output0", binary_data=True)],
                              headers=auth())
               for img in imgs]
    for img, p in zip(imgs, pending):
        same(p.get_result().as_numpy("output0"), session.run(["output0"], {"images": img})[0])
    after = exec_counts(appliance)
    requests = after["model_request_success_total"] - before.get("model_request_success_total", 0)
    execs = after["model_inference_exec_count_total"] - before.get("model_inference_exec_count_total", 0)
    assert requests == NUDENET_BATCH_MAX, (before, after)
    # Stacked through the ingress rings: fewer runs than requests.
    assert execs < requests, (before, after)
