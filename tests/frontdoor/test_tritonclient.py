"""The unmodified tritonclient (HTTP and gRPC, from PyPI) against Sluice's
front door, every answer compared with onnxruntime-python on the same
model file."""

from __future__ import annotations

import http.client
import json
import time

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import ROOT, auth, grpc_auth

MLP = ROOT / "models" / "mlp.onnx"
ADAPTER = ROOT / "models" / "mlp_formal.onnx_adapter"


def reference(x: np.ndarray, adapter: bool = False) -> np.ndarray:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(str(MLP), so, providers=["CPUExecutionProvider"])
    ro = ort.RunOptions()
    if adapter:
        a = ort.LoraAdapter()
        a.Load(str(ADAPTER))
        ro.add_active_adapter(a)
    return s.run(["y"], {"x": x}, ro)[0]


@pytest.fixture(scope="module")
def hc(appliance):
    c = httpclient.InferenceServerClient(appliance.http_url, concurrency=4)
    yield c
    c.close()


@pytest.fixture(scope="module")
def gc(appliance):
    c = grpcclient.InferenceServerClient(appliance.grpc_url)
    yield c
    c.close()


X = np.array([[0.5, -0.25, 1.0, 0.0], [1.5, 2.0, -1.0, 0.25], [0, 0, 0, 0]], np.float32)


def http_infer(hc, x, binary_in=True, binary_out=True, headers=None, version="1", **kw):
    i = httpclient.InferInput("x", list(x.shape), "FP32")
    i.set_data_from_numpy(x, binary_data=binary_in)
    o = httpclient.InferRequestedOutput("y", binary_data=binary_out)
    return hc.infer("mlp", [i], model_version=version, outputs=[o], headers=headers if headers is not None else auth(), **kw)


def test_http_health_and_server_metadata(hc):
    assert hc.is_server_live()
    assert hc.is_server_ready()
    m = hc.get_server_metadata()
    assert m["name"] == "sluice"
    assert "binary_tensor_data" in m["extensions"]
    assert hc.is_model_ready("mlp", "1", headers=auth())
    assert not hc.is_model_ready("nope", "1", headers=auth())


@pytest.mark.parametrize("binary_in,binary_out", [(True, True), (False, False), (True, False), (False, True)])
def test_http_infer_matches_onnxruntime(hc, binary_in, binary_out):
    r = http_infer(hc, X, binary_in, binary_out, request_id="abc")
    y = r.as_numpy("y")
    assert y.shape == (3, 3) and y.dtype == np.float32
    assert np.array_equal(y, reference(X)), (y, reference(X))
    assert r.get_response()["id"] == "abc"


def test_http_adapter_header_selects_the_lora_adapter(hc):
    y = http_infer(hc, X, headers=auth(X_Lora_Adapter_ID="formal")).as_numpy("y")
    assert np.array_equal(y, reference(X, adapter=True))
    assert not np.array_equal(y, reference(X))


def test_http_missing_version_is_400(hc, appliance):
    with pytest.raises(InferenceServerException) as e:
        http_infer(hc, X, version="")
    assert e.value.status() == "400"
    assert "X-Model-Version required" in e.value.message()
    # Given as a header instead, it runs.
    y = http_infer(hc, X, version="", headers=auth(X_Model_Version="1.0.0")).as_numpy("y")
    assert np.array_equal(y, reference(X))


def test_http_refusals(hc):
    with pytest.raises(InferenceServerException) as e:
        http_infer(hc, X, headers={})
    assert e.value.status() == "401"
    with pytest.raises(InferenceServerException) as e:
        http_infer(hc, X, version="7")
    assert e.value.status() == "404"
    with pytest.raises(InferenceServerException) as e:
        http_infer(hc, X[:, :3].copy())
    assert e.value.status() == "400"


def test_http_timeout_header_on_a_slow_path(appliance):
    """X-AI-Timeout: 1ms, and the body comes 50 ms after the headers: the
    frame's deadline has passed when the worker sees it."""
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}]}).encode()
    host, port = appliance.http_url.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=10)
    c.putrequest("POST", "/v2/models/mlp/versions/1/infer")
    for k, v in auth(X_AI_Timeout="1ms", Content_Length=str(len(body))).items():
        c.putheader(k, v)
    c.endheaders()
    time.sleep(0.05)
    c.send(body)
    r = c.getresponse()
    assert r.status == 504
    assert "deadline" in json.loads(r.read())["error"]


def test_http_model_metadata_and_config(hc):
    m = hc.get_model_metadata("mlp", headers=auth())
    assert m["name"] == "mlp" and "1.0.0" in m["versions"]
    assert m["platform"] == "onnxruntime_onnx"
    # The required input, then the LoRA parameters a request may override
    # (the config marks those optional).
    assert m["inputs"][0] == {"name": "x", "datatype": "FP32", "shape": [-1, 4]}
    assert [t["name"] for t in m["inputs"][1:]] == ["lora_a", "lora_b"]
    assert m["inputs"][1]["shape"] == [4, 2]
    assert m["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [-1, 3]}]
    assert hc.get_model_metadata("mlp", "1.0.0", headers=auth()) == m
    c = hc.get_model_config("mlp", headers=auth())
    assert c["name"] == "mlp" and c["platform"] == "onnxruntime_onnx"
    assert c["input"][0]["name"] == "x" and c["input"][0]["data_type"] == "TYPE_FP32"
    assert c["max_batch_size"] == 0 and c["input"][0]["dims"] == [-1, 4]
    assert "optional" not in c["input"][0]
    assert [(i["name"], i.get("optional")) for i in c["input"][1:]] == [("lora_a", True), ("lora_b", True)]
    assert c["output"] == [{"name": "y", "data_type": "TYPE_FP32", "dims": [-1, 3]}]


def grpc_infer(gc, x, headers=None, version="1"):
    i = grpcclient.InferInput("x", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    return gc.infer("mlp", [i], model_version=version, outputs=[grpcclient.InferRequestedOutput("y")],
                    headers=headers if headers is not None else grpc_auth())


def test_grpc_health_metadata_config(gc):
    assert gc.is_server_live() and gc.is_server_ready()
    assert "binary_tensor_data" in gc.get_server_metadata().extensions
    assert gc.is_model_ready("mlp", "1", headers=grpc_auth())
    m = gc.get_model_metadata("mlp", headers=grpc_auth())
    assert m.name == "mlp" and m.platform == "onnxruntime_onnx"
    assert [(t.name, t.datatype, list(t.shape)) for t in m.inputs] == [
        ("x", "FP32", [-1, 4]), ("lora_a", "FP32", [4, 2]), ("lora_b", "FP32", [2, 3])]
    assert [(t.name, list(t.shape)) for t in m.outputs] == [("y", [-1, 3])]
    assert "1.0.0" in gc.get_model_metadata("mlp", "1.0.0", headers=grpc_auth()).versions
    c = gc.get_model_config("mlp", headers=grpc_auth()).config
    assert c.name == "mlp" and c.input[0].name == "x" and c.input[0].data_type == 11  # TYPE_FP32
    assert not c.input[0].optional and c.input[1].optional and c.input[2].optional
    assert c.max_batch_size == 0 and list(c.output[0].dims) == [-1, 3]


def test_grpc_infer_matches_onnxruntime(gc):
    y = grpc_infer(gc, X).as_numpy("y")
    assert np.array_equal(y, reference(X))
    y = grpc_infer(gc, X, headers=grpc_auth(X_Lora_Adapter_ID="formal")).as_numpy("y")
    assert np.array_equal(y, reference(X, adapter=True))


def test_grpc_refusals(gc):
    with pytest.raises(InferenceServerException) as e:
        grpc_infer(gc, X, version="")
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "X-Model-Version required" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        grpc_infer(gc, X, headers={"authorization": "Bearer nope-nope-nope-nope"})
    assert e.value.status() == "StatusCode.UNAUTHENTICATED"
    with pytest.raises(InferenceServerException) as e:
        grpc_infer(gc, X, version="9")
    assert e.value.status() == "StatusCode.NOT_FOUND"


def test_front_door_counts_show_in_status_and_metrics(appliance):
    fd = appliance.status()["engine"]["frontdoor"]
    assert fd["stats"]["answered"] > 0
    assert fd["stats"]["payload_bytes_copied"] > 0
    import urllib.request

    with urllib.request.urlopen(f"http://{appliance.admin}/metrics", timeout=10) as r:
        text = r.read().decode()
    line = next(l for l in text.splitlines() if l.startswith('sluice_frontdoor_requests_total{protocol="grpc"}'))
    assert float(line.split()[-1]) > 0
    assert 'sluice_frontdoor_refusals_total{class="4xx"}' in text
