"""Streaming through the front door against a real sluiced: gRPC
ModelStreamInfer with the unmodified tritonclient (``start_stream`` /
``async_stream_infer``), and Triton's generate extension over HTTP
(``generate``, ``generate_stream`` as server-sent events) with Python
requests and curl. Answers are compared with onnxruntime-python: the MLP's
outputs, and the bundled decoder's tokens with the reference loop of
tests/streams/decoder_reference.py."""

from __future__ import annotations

import json
import queue
import socket
import subprocess
import sys
import time
from typing import Dict, List

import numpy as np
import onnxruntime as ort
import pytest
import requests
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from conftest import DECODER_MAX_TOKENS, ROOT, auth, grpc_auth

sys.path.insert(0, str(ROOT / "tests" / "streams"))
from decoder_reference import generate as reference_generate  # noqa: E402

from test_tritonclient import reference as mlp_reference  # noqa: E402

DECODER = ROOT / "models" / "decoder.onnx"
PROMPTS = ["hello", "Sluice", "a", "KServe v2 streams"]


@pytest.fixture(scope="module")
def decoder_session():
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(str(DECODER), so, providers=["CPUExecutionProvider"])


def want_tokens(sess, prompt: str, max_tokens: int = DECODER_MAX_TOKENS) -> List[int]:
    return reference_generate(sess, prompt.encode(), max_tokens)


class Collector:
    """The callback of a tritonclient stream: every result or error, in order."""

    def __init__(self) -> None:
        self.q: "queue.Queue" = queue.Queue()

    def __call__(self, result, error) -> None:
        self.q.put((result, error))

    def get(self, timeout: float = 10.0):
        return self.q.get(timeout=timeout)


def final(result) -> bool:
    p = result.get_response().parameters.get("triton_final_response")
    return p is not None and p.bool_param


def token_input(prompt: str) -> grpcclient.InferInput:
    data = np.frombuffer(prompt.encode(), dtype=np.uint8).astype(np.int64)
    i = grpcclient.InferInput("token", [len(data)], "INT64")
    i.set_data_from_numpy(data)
    return i


@pytest.fixture()
def gc(appliance):
    c = grpcclient.InferenceServerClient(appliance.grpc_url)
    yield c
    c.close()


def stats(appliance) -> Dict[str, int]:
    return appliance.status()["engine"]["frontdoor"]["stats"]


def model_tokens(appliance, name: str) -> int:
    for m in appliance.admin_call("GET", "/v1/stats")["models"]:
        if m["name"] == name:
            return m["tokens"]["tokens"]
    return 0


def wait_streams_closed(appliance, timeout: float = 5.0) -> Dict[str, int]:
    deadline = time.time() + timeout
    while True:
        s = stats(appliance)
        if s.get("streams_open", 0) == 0 or time.time() > deadline:
            return s
        time.sleep(0.05)


def assert_generation_stopped(appliance, name: str) -> None:
    """The engine freed the stream: its model's token count stops growing
    (workers publish their counters at least every second)."""
    time.sleep(1.5)
    before = model_tokens(appliance, name)
    time.sleep(1.5)
    assert model_tokens(appliance, name) == before, "the engine still generates"


# --- gRPC ModelStreamInfer -------------------------------------------------


def test_grpc_stream_mlp_answers_each_request_and_survives_an_error(gc):
    xs = [np.array([[0.5, -0.25, 1.0, 0.0]], np.float32), np.array([[1.5, 2.0, -1.0, 0.25]], np.float32)]
    cb = Collector()
    gc.start_stream(callback=cb, headers=grpc_auth())
    try:
        for k, x in enumerate(xs):
            i = grpcclient.InferInput("x", list(x.shape), "FP32")
            i.set_data_from_numpy(x)
            gc.async_stream_infer("mlp", [i], model_version="1", request_id=f"ok-{k}")
        # A wrong shape: an error on the stream, which stays open.
        bad = grpcclient.InferInput("x", [1, 3], "FP32")
        bad.set_data_from_numpy(np.zeros((1, 3), np.float32))
        gc.async_stream_infer("mlp", [bad], model_version="1", request_id="bad")
        got: Dict[str, np.ndarray] = {}
        errors = []
        for _ in range(3):
            r, e = cb.get()
            if e is not None:
                errors.append(str(e))
            else:
                got[r.get_response().id] = r.as_numpy("y")
        assert len(errors) == 1 and "dimension" in errors[0], errors
        # And a request after the error is answered on the same stream.
        i = grpcclient.InferInput("x", [1, 4], "FP32")
        i.set_data_from_numpy(xs[0])
        gc.async_stream_infer("mlp", [i], model_version="1", request_id="after")
        r, e = cb.get()
        assert e is None, e
        got[r.get_response().id] = r.as_numpy("y")
    finally:
        gc.stop_stream()
    for k, x in enumerate(xs):
        np.testing.assert_allclose(got[f"ok-{k}"], mlp_reference(x), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["after"], mlp_reference(xs[0]), rtol=1e-6, atol=1e-6)


def test_grpc_stream_decoder_tokens_equal_the_reference_loop(gc, decoder_session):
    cb = Collector()
    gc.start_stream(callback=cb, headers=grpc_auth())
    try:
        for p in PROMPTS:
            gc.async_stream_infer(
                "decoder", [token_input(p)], model_version="1", request_id=p, enable_empty_final_response=True
            )
        tokens: Dict[str, List[int]] = {p: [] for p in PROMPTS}
        responses: Dict[str, int] = {p: 0 for p in PROMPTS}
        open_ = set(PROMPTS)
        while open_:
            r, e = cb.get()
            assert e is None, e
            resp = r.get_response()
            responses[resp.id] += 1
            if resp.outputs:
                tokens[resp.id] += r.as_numpy("token").tolist()
            if final(r):
                open_.discard(resp.id)
    finally:
        gc.stop_stream()
    for p in PROMPTS:
        want = want_tokens(decoder_session, p)
        assert want, p
        assert tokens[p] == want, p
        # One response per token frame (one token each), and the end.
        assert responses[p] in (len(want), len(want) + 1), (p, responses[p])


def test_grpc_stream_max_tokens_and_tokens_per_frame(gc, decoder_session):
    cb = Collector()
    gc.start_stream(callback=cb, headers=grpc_auth())
    try:
        gc.async_stream_infer(
            "endless",
            [token_input("hello")],
            model_version="1",
            request_id="capped",
            enable_empty_final_response=True,
            parameters={"max_tokens": 10, "tokens_per_frame": 4},
        )
        frames = []
        while True:
            r, e = cb.get()
            assert e is None, e
            frames.append(r.as_numpy("token").tolist() if r.get_response().outputs else [])
            if final(r):
                break
    finally:
        gc.stop_stream()
    assert [len(f) for f in frames] == [4, 4, 2]
    assert sum(frames, []) == want_tokens(decoder_session, "hello", 10)


def test_grpc_stream_closed_by_the_client_cancels_its_generation(appliance, gc):
    before = stats(appliance)
    cb = Collector()
    gc.start_stream(callback=cb, headers=grpc_auth())
    gc.async_stream_infer("endless", [token_input("forever")], model_version="1", request_id="e")
    for _ in range(5):
        r, e = cb.get()
        assert e is None, e
    gc.stop_stream(cancel_requests=True)
    after = wait_streams_closed(appliance)
    assert after["streams_open"] == 0, after
    assert after["streams_cancelled"] > before.get("streams_cancelled", 0), after
    assert_generation_stopped(appliance, "endless")


def test_grpc_stream_refusals_are_stream_errors(gc):
    cb = Collector()
    gc.start_stream(callback=cb, headers=grpc_auth())
    try:
        # No such model; a prompt of the wrong type; a prompt too long.
        gc.async_stream_infer("nope", [token_input("x")], model_version="1", request_id="a")
        i = grpcclient.InferInput("token", [2], "FP32")
        i.set_data_from_numpy(np.zeros(2, np.float32))
        gc.async_stream_infer("decoder", [i], model_version="1", request_id="b")
        gc.async_stream_infer("decoder", [token_input("x" * 300)], model_version="1", request_id="c")
        errors = sorted(str(cb.get()[1]) for _ in range(3))
    finally:
        gc.stop_stream()
    assert any("unknown model" in e for e in errors), errors
    assert any("INT64 [n]" in e for e in errors), errors
    assert any("prompt_max" in e for e in errors), errors


def test_grpc_stream_needs_credentials(appliance):
    c = grpcclient.InferenceServerClient(appliance.grpc_url)
    cb = Collector()
    c.start_stream(callback=cb)
    try:
        # The front door refuses the call on its metadata, before reading a
        # message: the refusal may end the stream before tritonclient
        # enqueues the request (it then raises here) or after (the request
        # is dropped unread). Either way the callback gets the refusal.
        try:
            c.async_stream_infer("decoder", [token_input("hi")], model_version="1", request_id="x")
        except InferenceServerException as raised:
            assert "no longer in valid state" in str(raised), raised
        r, e = cb.get()
    finally:
        c.stop_stream()
        c.close()
    assert r is None and e is not None, (r, e)
    assert "authorization" in str(e).lower(), e


def test_grpc_stream_deadline_ends_the_stream_with_an_error(gc):
    cb = Collector()
    gc.start_stream(callback=cb, headers=grpc_auth(X_AI_Timeout="300ms"))
    try:
        gc.async_stream_infer("endless", [token_input("slow")], model_version="1", request_id="d")
        t0 = time.time()
        while True:
            r, e = cb.get()
            if e is not None:
                break
            assert not final(r)
    finally:
        gc.stop_stream()
    assert "deadline" in str(e).lower(), e
    assert time.time() - t0 < 5


# --- HTTP generate / generate_stream ---------------------------------------


def sse_events(resp) -> List[dict]:
    out = []
    for line in resp.iter_lines():
        if line.startswith(b"data: "):
            out.append(json.loads(line[6:]))
    return out


def test_http_generate_returns_every_token(appliance, decoder_session):
    assert "generate" in requests.get(f"http://{appliance.http_url}/v2", timeout=10).json()["extensions"]
    for p in PROMPTS:
        r = requests.post(
            f"http://{appliance.http_url}/v2/models/decoder/versions/1/generate",
            json={"text_input": p, "parameters": {"stream": False}},
            headers=auth(),
            timeout=10,
        )
        assert r.status_code == 200, r.text
        body = r.json()
        want = want_tokens(decoder_session, p)
        assert body["tokens"] == want
        assert body["text_output"] == bytes(want).decode("utf-8", "replace")
        assert body["model_name"] == "decoder" and body["model_version"] == "1"


def test_http_generate_stream_sends_one_event_per_token_frame(appliance, decoder_session):
    for p in PROMPTS:
        with requests.post(
            f"http://{appliance.http_url}/v2/models/decoder/generate_stream",
            json={"text_input": p},
            headers=auth(X_Model_Version="1"),
            stream=True,
            timeout=10,
        ) as r:
            assert r.status_code == 200, r.text
            assert r.headers["Content-Type"].startswith("text/event-stream")
            events = sse_events(r)
        want = want_tokens(decoder_session, p)
        tokens = sum((e["tokens"] for e in events), [])
        assert tokens == want
        assert all(len(e["tokens"]) == 1 for e in events[: len(want)])
        assert events[-1]["finish_reason"] in ("eos", "max_tokens")


def test_http_generate_stream_with_curl(appliance, decoder_session):
    out = subprocess.run(
        [
            "curl", "-sN", "-H", "Authorization: Bearer sluice-demo-token-0000",
            "-d", json.dumps({"text_input": "hello", "parameters": {"max_tokens": 5}}),
            f"http://{appliance.http_url}/v2/models/decoder/versions/1/generate_stream",
        ],
        capture_output=True, text=True, timeout=30,
    )
    assert out.returncode == 0, out.stderr
    events = [json.loads(l[6:]) for l in out.stdout.splitlines() if l.startswith("data: ")]
    assert sum((e["tokens"] for e in events), []) == want_tokens(decoder_session, "hello", 5)
    assert events[-1]["finish_reason"] == "max_tokens"


def test_http_generate_refusals(appliance):
    url = f"http://{appliance.http_url}/v2/models"
    # Not a generative model; bad JSON; an unknown parameter; no credentials.
    r = requests.post(f"{url}/mlp/versions/1/generate", json={"text_input": "x"}, headers=auth(), timeout=10)
    assert r.status_code == 501 and "generate" in r.json()["error"], r.text
    r = requests.post(f"{url}/decoder/versions/1/generate", data=b"{", headers=auth(), timeout=10)
    assert r.status_code == 400, r.text
    r = requests.post(
        f"{url}/decoder/versions/1/generate_stream",
        json={"text_input": "x", "parameters": {"temperature": 0.5}},
        headers=auth(),
        timeout=10,
    )
    assert r.status_code == 400 and "temperature" in r.json()["error"], r.text
    r = requests.post(f"{url}/decoder/versions/1/generate", json={"text_input": "x"}, timeout=10)
    assert r.status_code == 401, r.text
    r = requests.post(f"{url}/decoder/versions/1/generate", json={"text_input": ""}, headers=auth(), timeout=10)
    assert r.status_code == 400 and "prompt" in r.json()["error"], r.text


def test_http_generate_stream_deadline_is_an_error_event(appliance):
    with requests.post(
        f"http://{appliance.http_url}/v2/models/endless/versions/1/generate_stream",
        json={"text_input": "slow"},
        headers=auth(X_AI_Timeout="300ms"),
        stream=True,
        timeout=10,
    ) as r:
        assert r.status_code == 200
        events = sse_events(r)
    assert events and "deadline" in events[-1].get("error", ""), events[-1:]
    assert all("tokens" in e for e in events[:-1])


def test_http_client_vanishing_mid_stream_frees_the_engine_stream(appliance):
    before = stats(appliance)
    host, port = appliance.http_url.split(":")
    body = json.dumps({"text_input": "forever"}).encode()
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(
        b"POST /v2/models/endless/versions/1/generate_stream HTTP/1.1\r\n"
        b"Host: x\r\nAuthorization: Bearer sluice-demo-token-0000\r\n"
        b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    got = b""
    while got.count(b"data: ") < 5:
        chunk = s.recv(4096)
        assert chunk, got
        got += chunk
    assert b"200 OK" in got.split(b"\r\n")[0]
    s.close()
    after = wait_streams_closed(appliance)
    assert after["streams_open"] == 0, after
    assert after["streams_cancelled"] > before.get("streams_cancelled", 0), after
    assert_generation_stopped(appliance, "endless")


def test_streams_per_connection_are_bounded(appliance):
    # One gRPC connection, one call: more token streams at once than a
    # connection may hold (16); the 17th is refused on the stream.
    c = grpcclient.InferenceServerClient(appliance.grpc_url)
    cb = Collector()
    c.start_stream(callback=cb, headers=grpc_auth(X_AI_Timeout="3s"))
    try:
        for k in range(17):
            c.async_stream_infer("endless", [token_input("x")], model_version="1", request_id=str(k))
        deadline = time.time() + 10
        refused = None
        while refused is None and time.time() < deadline:
            r, e = cb.get()
            if e is not None:
                refused = str(e)
        assert refused is not None and "per connection" in refused, refused
    finally:
        c.stop_stream(cancel_requests=True)
        c.close()
    assert wait_streams_closed(appliance)["streams_open"] == 0
