"""In-band negotiation and structured sections against the appliance's own
registry: JSON (a dict), Avro and Protobuf (bytes); schema id and version on
requests; mismatches answered with schema_mismatch."""

from __future__ import annotations

import json
import time
import urllib.error

import numpy as np
import pytest

import sluice

from conftest import DEMO_KEY, Relay

X = np.ones((1, 4), np.float32)

JSON_SCHEMA = {
    "type": "object",
    "properties": {"prompt": {"type": "string"}, "max_tokens": {"type": "integer", "minimum": 1}},
    "required": ["prompt"],
}
AVRO_SCHEMA = {"type": "record", "name": "Req", "namespace": "pytest",
               "fields": [{"name": "id", "type": "int"}, {"name": "tag", "type": "string"}]}
PROTO_SCHEMA = 'syntax = "proto3";\nmessage Req {\n  int32 id = 1;\n  string tag = 2;\n}\n'


def register(appliance, subject: str, schema: str, schema_type: str) -> int:
    r = appliance.http("POST", f"/registry/subjects/{subject}/versions",
                       {"schema": schema, "schemaType": schema_type})
    return r["id"]


def negotiated(client: sluice.Client, subject: str) -> sluice.NegotiatedSchema:
    """The registry pushes schemas to the data plane asynchronously."""
    t0 = time.monotonic()
    while True:
        try:
            return client.negotiate(subject)
        except sluice.SchemaError:
            if time.monotonic() - t0 > 10:
                raise
            time.sleep(0.05)


def zigzag(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def avro_req(i: int, tag: str) -> bytes:
    t = tag.encode()
    return zigzag(i) + zigzag(len(t)) + t


def proto_req(i: int, tag: str) -> bytes:
    t = tag.encode()
    return b"\x08" + bytes([i]) + b"\x12" + bytes([len(t)]) + t


@pytest.fixture(scope="module")
def schemas(appliance):
    try:
        return {
            "json": register(appliance, "pytest-json", json.dumps(JSON_SCHEMA), "JSON"),
            "avro": register(appliance, "pytest-avro", json.dumps(AVRO_SCHEMA), "AVRO"),
            "proto": register(appliance, "pytest-proto", PROTO_SCHEMA, "PROTOBUF"),
        }
    except urllib.error.HTTPError as e:
        raise AssertionError(f"registry refused: {e.read().decode()}") from e


def test_negotiate_and_cache(client: sluice.Client, schemas) -> None:
    s = negotiated(client, "pytest-json")
    assert s.schema_id == schemas["json"] and s.version == 1 and s.schema_type == "JSON"
    assert json.loads(s.text) == JSON_SCHEMA and s.ttl > 0
    hits = client.stats()["schema_cache_hits"]
    assert client.negotiate("pytest-json") == s
    assert client.stats()["schema_cache_hits"] == hits + 1
    assert client.negotiate("pytest-json", 1) == s
    a = negotiated(client, "pytest-avro")
    assert a.schema_type == "AVRO" and a.schema_id == schemas["avro"]
    p = negotiated(client, "pytest-proto")
    assert p.schema_type == "PROTOBUF" and "message Req" in p.text


def test_json_section(client: sluice.Client, schemas) -> None:
    s = negotiated(client, "pytest-json")
    ok = client.infer("mlp", "1", {"x": X}, schema=s, section={"prompt": "hi", "max_tokens": 5})
    assert ok["y"].shape == (1, 3)
    # The same as a str, and with (id, version) given by hand.
    assert "y" in client.infer("mlp", "1", {"x": X}, schema=(s.schema_id, s.version), section='{"prompt": "hi"}')
    assert "y" in client.infer("mlp", "1", {"x": X}, schema=(s.schema_id, 0), section=b'{"prompt":"x"}')
    for bad in [{"max_tokens": 5}, {"prompt": 3}, {"prompt": "hi", "max_tokens": 0}, "not json"]:
        with pytest.raises(sluice.SchemaError) as e:
            client.infer("mlp", "1", {"x": X}, schema=s, section=bad)
        assert e.value.code_name == "schema_mismatch", bad
    with pytest.raises(sluice.SchemaError) as e:
        client.infer("mlp", "1", {"x": X}, schema=s)  # a JSON schema needs a section
    assert e.value.code_name == "schema_mismatch"


def test_avro_section(client: sluice.Client, schemas) -> None:
    s = negotiated(client, "pytest-avro")
    assert "y" in client.infer("mlp", "1", {"x": X}, schema=s, section=avro_req(-7, "abc"))
    assert "y" in client.infer("mlp", "1", {"x": X}, schema=s, section=bytearray(avro_req(300, "")))
    for bad in [avro_req(1, "abc")[:-1], avro_req(1, "abc") + b"\x00", b""]:
        with pytest.raises(sluice.SchemaError) as e:
            client.infer("mlp", "1", {"x": X}, schema=s, section=bad)
        assert e.value.code_name == "schema_mismatch"


def test_protobuf_section(client: sluice.Client, schemas) -> None:
    s = negotiated(client, "pytest-proto")
    assert "y" in client.infer("mlp", "1", {"x": X}, schema=s, section=proto_req(5, "tag"))
    assert "y" in client.infer("mlp", "1", {"x": X}, schema=s, section=memoryview(proto_req(1, "")))
    for bad in [b"\x0a\x01A", proto_req(5, "tag")[:-1], b"\x08"]:
        with pytest.raises(sluice.SchemaError) as e:
            client.infer("mlp", "1", {"x": X}, schema=s, section=bad)
        assert e.value.code_name == "schema_mismatch", bad


def test_section_rides_as_the_section_tensor(appliance, schemas) -> None:
    """docs/wire.md: the section travels as the rank-1 uint8 tensor
    `$section` (a dict encoded as compact JSON), and the model does not
    receive it (echo answers with its tensors only)."""
    seen = []

    def keep(answer: bytes, request: bytes) -> list:
        seen.append(sluice.wire.parse(request))
        return [answer]

    with Relay(appliance.data, keep) as relay, sluice.Client(relay.addr, tenant=1, key=DEMO_KEY) as c:
        s = negotiated(c, "pytest-json")
        out = c.infer("echo", "1", {"x": X}, schema=s, section={"prompt": "hi", "max_tokens": 2})
    assert list(out) == ["x"]
    req = seen[-1]
    assert (req["schema_id"], req["schema_version"]) == (s.schema_id, s.version)
    sec = [t for t in req["tensors"] if t["name"] == "$section"]
    assert len(sec) == 1 and sec[0]["dtype_name"] == "u8" and len(sec[0]["dims"]) == 1
    assert sec[0]["data"] == b'{"prompt":"hi","max_tokens":2}'
