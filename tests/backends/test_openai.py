"""The official ``openai`` Python client, unmodified, against Sluice's
OpenAI API in front of real llama.cpp servers (Gemma 3 270M): chat,
streaming with usage, completions, embeddings, errors, deadlines,
cancels and a backend killed mid-stream. Answers are compared with the
same request sent to a backend directly."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import openai
import pytest

from conftest import LLAMA_PORTS, TOKEN, backends

GREEDY = dict(temperature=0.0, seed=7)
PROMPT = [{"role": "user", "content": "Explain quantum entanglement in one sentence."}]


def direct(port: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def test_models_lists_what_the_tenant_may_use(client):
    ids = [m.id for m in client.models.list().data]
    assert "qwen3-72b" in ids and "tiny" in ids
    assert "mlp" not in ids  # runs on the appliance's own cores, not a backend model


def test_chat_matches_the_backend_called_directly(client, appliance):
    r = client.chat.completions.create(model="qwen3-72b", messages=PROMPT, max_tokens=24, **GREEDY)
    text = r.choices[0].message.content
    assert text and r.usage.completion_tokens > 0
    # The model's upstream name, as the backend answered.
    assert r.model == "gemma-3-270m"
    want = direct(LLAMA_PORTS[0], "/v1/chat/completions",
                  {"model": "gemma-3-270m", "messages": PROMPT, "max_tokens": 24, **GREEDY})
    assert text == want["choices"][0]["message"]["content"]
    raw = client.chat.completions.with_raw_response.create(model="qwen3-72b", messages=PROMPT, max_tokens=4)
    assert raw.headers["x-sluice-backend"] == "llama"
    assert raw.headers["x-sluice-route"] == "llm"
    assert raw.headers["x-sluice-model-version"] == "1"


def test_chat_stream_relays_what_the_backend_sends(client, appliance):
    """Streamed through Sluice, the same chunks as from the backend directly
    (greedy), `stream_options` passed on. llama.cpp's Python server ignores
    include_usage (it sends no usage chunk, directly or through Sluice);
    servers that honour it (vLLM, SGLang, llama.cpp's C++ server) have
    theirs relayed as it comes."""
    before = appliance.pool("llama")["ttft"]["count"]
    opts = dict(model="qwen3-72b", messages=PROMPT, max_tokens=24, stream=True,
                stream_options={"include_usage": True}, **GREEDY)
    chunks = list(client.chat.completions.create(**opts))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    direct_client = openai.OpenAI(base_url=f"http://127.0.0.1:{LLAMA_PORTS[0]}/v1", api_key="x", max_retries=0)
    want = list(direct_client.chat.completions.create(**{**opts, "model": "gemma-3-270m"}))
    assert text == "".join(c.choices[0].delta.content or "" for c in want if c.choices)
    assert [c.usage for c in chunks] == [c.usage for c in want]
    assert len(chunks) == len(want)
    # The same text as the non-streamed answer.
    whole = client.chat.completions.create(model="qwen3-72b", messages=PROMPT, max_tokens=24, **GREEDY)
    assert text == whole.choices[0].message.content
    st = appliance.pool("llama")
    assert st["ttft"]["count"] > before and st["itl"]["count"] > 0
    assert appliance.backends()["models"]["gemma-3-270m"]["ttft"]["count"] > 0


def test_completions_plain_and_streamed(client):
    r = client.completions.create(model="qwen3-72b", prompt="Explain quantum entanglement", max_tokens=16, **GREEDY)
    assert r.choices[0].text and r.object == "text_completion"
    parts = [c.choices[0].text for c in client.completions.create(
        model="qwen3-72b", prompt="Explain quantum entanglement", max_tokens=16, stream=True, **GREEDY) if c.choices]
    assert "".join(parts) == r.choices[0].text


def test_embeddings(client):
    """The backend's embedding as it computes it (llama.cpp's Python server
    pools nothing for this model: one vector per token), the same as asked
    directly."""
    r = client.embeddings.create(model="qwen3-72b", input="quantum entanglement")
    v = r.data[0].embedding
    assert v and any(x != 0 for x in (v[0] if isinstance(v[0], list) else v))
    want = direct(LLAMA_PORTS[0], "/v1/embeddings", {"model": "gemma-3-270m", "input": "quantum entanglement"})
    assert v == want["data"][0]["embedding"]


def test_errors_are_openai_errors(client, appliance):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="no-such-model", messages=PROMPT, extra_headers={"X-Model-Version": "1"})
    assert e.value.body["code"] == "model_not_found"
    # A backend model with no default version needs the header (as the seed's middleware).
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=PROMPT)
    assert e.value.body["code"] == "model_version_required"
    bad = openai.OpenAI(base_url=appliance.base + "/v1", api_key="not-a-token-0000000000", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="qwen3-72b", messages=PROMPT)
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    status, _, body = appliance.post("/v1/chat/completions", b'{"model": "qwen3-72b",\n "messages": [}', auth)
    assert status == 400
    err = json.loads(body)["error"]
    assert "line 2 column" in err["message"] and err["type"] == "invalid_request_error"
    # Oversized: refused on its Content-Length, before a byte is read.
    import http.client
    c = http.client.HTTPConnection(appliance.base.removeprefix("http://"), timeout=10)
    c.putrequest("POST", "/v1/chat/completions")
    c.putheader("Authorization", f"Bearer {TOKEN}")
    c.putheader("Content-Length", str(64 << 20))
    c.endheaders()
    assert c.getresponse().status == 413


def test_deadline_becomes_the_upstream_timeout(client, appliance):
    before = appliance.pool("llama")["errors"]["timeout"]
    with pytest.raises(openai.APIStatusError) as e:
        client.chat.completions.create(model="qwen3-72b", messages=PROMPT, max_tokens=400,
                                       extra_headers={"X-AI-Timeout": "30ms"})
    assert e.value.status_code == 504 and e.value.body["code"] == "deadline_exceeded"
    assert appliance.pool("llama")["errors"]["timeout"] > before


def test_client_going_away_cancels_upstream(client, appliance):
    before = appliance.pool("llama")["errors"]["cancelled"]
    s = client.chat.completions.create(model="qwen3-72b", messages=PROMPT, max_tokens=300, stream=True)
    next(iter(s))
    s.close()
    until = time.time() + 30
    while appliance.pool("llama")["errors"]["cancelled"] == before:
        assert time.time() < until, appliance.pool("llama")
        time.sleep(0.1)
    # The place it held is free again.
    until = time.time() + 30
    while any(e["in_flight"] for e in appliance.pool("llama")["endpoints"]):
        assert time.time() < until, appliance.pool("llama")
        time.sleep(0.1)


def test_kserve_v2_backend(appliance):
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [0.5, -1, 2, 0]}]})
    status, headers, out = appliance.post("/v2/models/tiny/infer", body.encode(), {
        "Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json", "X-Model-Version": "1"})
    assert status == 200, out
    y = json.loads(out)["outputs"][0]
    assert y["data"] == [2.0, -1.0, 5.0, 1.0]
    assert headers.get("x-sluice-backend") == "kserve"


def test_backend_killed_mid_stream_ends_only_that_stream(client, appliance):
    """Kill the endpoint serving a stream: that stream ends with an error
    event (the client raises), other requests keep being served by the
    other endpoint, and the killed one is re-admitted once it is back."""
    s = client.chat.completions.create(model="qwen3-72b", messages=PROMPT, max_tokens=400, stream=True)
    it = iter(s)
    next(it)
    busy = [e["url"] for e in appliance.pool("llama")["endpoints"] if e["in_flight"] > 0]
    assert len(busy) == 1, appliance.pool("llama")
    port = busy[0].rsplit(":", 1)[1]
    cut_before = appliance.pool("llama")["errors"]["stream_cut"]
    backends("kill-one", f"llama-{port}")
    with pytest.raises(openai.APIError) as e:
        for _ in it:
            pass
    assert "backend" in str(e.value)
    assert appliance.pool("llama")["errors"]["stream_cut"] == cut_before + 1
    # Others are served meanwhile (retried elsewhere if they hit the dead one).
    for _ in range(4):
        r = client.chat.completions.create(model="qwen3-72b", messages=PROMPT, max_tokens=4)
        assert r.choices[0].message.content is not None
    dead = next(e for e in appliance.pool("llama")["endpoints"] if e["url"].endswith(":" + port))
    assert not dead["healthy"] or dead["ejected"], dead
    backends("start")
    appliance.wait_ready("llama", len(LLAMA_PORTS))
