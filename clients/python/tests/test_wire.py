"""Conformance: the package parses and rebuilds byte-exactly every example
frame of docs/wire.md and every vector of docs/vectors/frames.json (format:
docs/vectors/README.md), and gives the named error for every invalid one.
SLUICE_VECTORS points the vector test at another file."""

from __future__ import annotations

import json
import os
import pathlib
import re
from typing import Any, Dict, List, Tuple

import pytest

import sluice

from conftest import ROOT

EXAMPLE_KEY = b"sluice-example-key-tenant-7"


def wire_md_examples() -> List[Tuple[str, bytes]]:
    text = (ROOT / "docs" / "wire.md").read_text()
    out = []
    for name, body in re.findall(r"```hex title=(\S+)\n(.*?)```", text, re.S):
        data = bytes.fromhex("".join(line.split(":", 1)[1] for line in body.strip().splitlines()))
        out.append((name, data))
    return out


EXAMPLES = wire_md_examples()


def test_wire_md_has_the_examples() -> None:
    assert [n for n, _ in EXAMPLES] == [
        "ping", "pong", "request", "response", "error", "negotiate_request", "negotiate_request_signed",
        "negotiate_response", "stream_open", "stream_token", "stream_cancel", "stream_sequence_error",
    ]


def test_wire_md_stream_open_fields() -> None:
    f = sluice.wire.parse(dict(EXAMPLES)["stream_open"])
    assert f["stream"] == {"stream_id": 0x0123456789ABCDEF, "seq": 0, "flags": sluice.wire.STREAM_OPEN,
                           "end_reason": 0, "tokens_per_frame": 1, "max_tokens": 16}
    assert f["tensors"][0]["name"] == "prompt" and f["tensors"][0]["data"] == b"hi"
    err = sluice.wire.parse(dict(EXAMPLES)["stream_sequence_error"])
    assert err["body"]["error"]["code_name"] == "stream_sequence" and err["stream"]["seq"] == 5


@pytest.mark.parametrize("name,data", EXAMPLES, ids=[n for n, _ in EXAMPLES])
def test_wire_md_example_round_trips(name: str, data: bytes) -> None:
    f = sluice.wire.parse(data)
    key = EXAMPLE_KEY if f["flags"] & 1 else None
    assert sluice.wire.build(f, key=key) == data
    if key:
        assert sluice.wire.verify(data, key)
        assert not sluice.wire.verify(data, b"another key")


def test_wire_md_request_fields() -> None:
    f = sluice.wire.parse(dict(EXAMPLES)["request"])
    assert (f["kind"], f["version"], f["flags"], f["tenant_id"], f["request_id"]) == ("request", 1, 1, 7, 42)
    assert f["deadline_us"] == 1_767_225_600_000_000
    assert (f["schema_id"], f["schema_version"], f["token_count"]) == (3, 2, 12)
    assert f["trace"] == {
        "trace_id": bytes.fromhex("4bf92f3577b34da6a3ce929d0e0e4736"),
        "span_id": bytes.fromhex("00f067aa0ba902b7"),
        "flags": 1,
    }
    assert (f["model"], f["model_version"], f["adapter"], f["intent"]) == ("resnet50", "v2", "lora-a", "classify")
    assert f["extensions"] == [{"key": "x-region", "value": b"eu"}]
    (t,) = f["tensors"]
    assert (t["name"], t["dtype_name"], t["dims"], t["data_offset"], t["data_len"]) == ("input", "f32", [1, 4], 192, 16)
    import numpy as np

    assert np.frombuffer(t["data"], "<f4").tolist() == [1.0, 2.0, 3.0, 4.0]
    assert f["auth_tag"] == bytes.fromhex("6615dcede0db52597fea3fbc77cb66cb")
    e = sluice.wire.parse(dict(EXAMPLES)["error"])["body"]["error"]
    assert e == {"code": 5, "code_name": "model_version_required", "message": "model version required"}
    # A negotiate request's tag covers its body: another subject breaks it.
    signed = dict(EXAMPLES)["negotiate_request_signed"]
    assert sluice.wire.parse(signed)["auth_tag"] == bytes.fromhex("b0ba7ae227f8d90f68a675534d64bc84")
    assert sluice.wire.verify(signed, EXAMPLE_KEY)
    assert not sluice.wire.verify(signed[:-1] + b"X", EXAMPLE_KEY)
    n = sluice.wire.parse(dict(EXAMPLES)["negotiate_response"])["body"]["negotiate_response"]
    assert n == {"schema_id": 3, "version": 2, "ttl_ms": 60000, "schema_type": 3, "schema": b'{"type":"object"}'}


@pytest.mark.parametrize(
    "mutate,error",
    [
        (lambda b: b[:95], "Truncated"),
        (lambda b: b"SLCX" + b[4:], "BadMagic"),
        (lambda b: b[:4] + b"\x09" + b[5:], "UnsupportedVersion"),
        (lambda b: b[:5] + b"\x63" + b[6:], "UnknownKind"),
        (lambda b: b[:79] + b"\x01" + b[80:], "Reserved"),
        (lambda b: b + b"\x00", "TrailingBytes"),
    ],
)
def test_invalid_frames_name_their_error(mutate, error: str) -> None:
    with pytest.raises(sluice.WireError) as e:
        sluice.wire.parse(mutate(dict(EXAMPLES)["ping"]))
    assert e.value.name == error


def test_build_refuses_what_the_wire_does() -> None:
    with pytest.raises(sluice.WireError) as e:
        sluice.wire.build({"kind": "request", "model": "a b"})
    assert e.value.name == "BadString"
    with pytest.raises(sluice.WireError) as e:
        sluice.wire.build({"kind": "ping", "tensors": [{"name": "x", "dtype": 2, "dims": [1], "data": b"\x00"}]})
    assert e.value.name == "TooManyTensors"
    with pytest.raises(sluice.WireError) as e:
        sluice.wire.build({"kind": "request", "tensors": [{"name": "x", "dtype": 8, "dims": [1], "data": b""}]})
    assert e.value.name == "BadDType"


# --- docs/vectors/frames.json ---------------------------------------------------

VECTORS = pathlib.Path(os.environ.get("SLUICE_VECTORS", ROOT / "docs" / "vectors" / "frames.json"))


def load_vectors() -> Dict[str, Any]:
    if not VECTORS.is_file():
        pytest.skip(f"{VECTORS} is not in this tree (the vector generator writes it)")
    v = json.loads(VECTORS.read_text())
    assert v["format"] == 1 and v["wire_version"] == 1
    return v


def frame_from_vector(f: Dict[str, Any]) -> Dict[str, Any]:
    """The vector's `frame` in sluice.wire's dict shape (bytes for hex,
    ints for the decimal strings)."""
    out: Dict[str, Any] = {
        k: f[k] for k in ("kind", "version", "flags", "tenant_id", "schema_id", "schema_version",
                          "token_count", "model", "model_version", "adapter", "intent")
    }
    out["request_id"] = int(f["request_id"])
    out["deadline_us"] = int(f["deadline_us"])
    t = f["trace"]
    out["trace"] = {"trace_id": bytes.fromhex(t["trace_id"]), "span_id": bytes.fromhex(t["span_id"]),
                    "flags": t["flags"]}
    out["extensions"] = [{"key": e["key"], "value": bytes.fromhex(e["value_hex"])} for e in f["extensions"]]
    out["tensors"] = [
        {"name": x["name"], "dtype": x["dtype"], "dtype_name": x["dtype_name"], "dims": x["dims"],
         "data_offset": x["data_offset"], "data_len": x["data_len"], "data": bytes.fromhex(x["data_hex"])}
        for x in f["tensors"]
    ]
    st = f.get("stream")
    out["stream"] = None if st is None else dict(st, stream_id=int(st["stream_id"]))
    sender = f.get("sender_id")
    out["sender_id"] = None if sender is None else int(sender)
    body = f.get("body")
    if body is None:
        out["body"] = None
    elif "error" in body:
        out["body"] = {"error": dict(body["error"])}
    elif "negotiate_request" in body:
        out["body"] = {"negotiate_request": dict(body["negotiate_request"])}
    elif "negotiate_response" in body:
        n = dict(body["negotiate_response"])
        n["schema"] = bytes.fromhex(n.pop("schema_hex"))
        out["body"] = {"negotiate_response": n}
    else:
        raise AssertionError(f"unknown body {sorted(body)}")
    return out


def valid_vectors() -> List[Any]:
    try:
        v = load_vectors()
    except pytest.skip.Exception as s:
        return [pytest.param(None, marks=pytest.mark.skip(reason=str(s)), id="no-vectors")]
    return [pytest.param(x, id=x["name"]) for x in v["valid"]]


def invalid_vectors() -> List[Any]:
    try:
        v = load_vectors()
    except pytest.skip.Exception as s:
        return [pytest.param(None, marks=pytest.mark.skip(reason=str(s)), id="no-vectors")]
    return [pytest.param(x, id=x["name"]) for x in v["invalid"]]


@pytest.mark.parametrize("vec", valid_vectors())
def test_vector_parses_and_rebuilds(vec: Dict[str, Any]) -> None:
    data = bytes.fromhex(vec["hex"])
    want = frame_from_vector(vec["frame"])
    got = sluice.wire.parse(data)
    for k, v in want.items():
        if k == "body" and v is not None and "error" in v and "code_name" not in v["error"]:
            v["error"]["code_name"] = got["body"]["error"]["code_name"]
        assert got[k] == v, (vec["name"], k)
    auth = vec["frame"].get("auth")
    key = bytes.fromhex(auth["tenant_key_hex"]) if auth else None
    if auth:
        assert got["auth_tag"] == bytes.fromhex(auth["tag_hex"])
        assert sluice.wire.verify(data, key)
    assert sluice.wire.build(want, key=key) == data, vec["name"]
    if want["stream"] is not None:
        ext = sluice.wire.stream_extension(want["stream"], want["kind"])
        assert ext in want["extensions"], vec["name"]


def test_stream_extension_refuses_bad_headers() -> None:
    with pytest.raises(sluice.WireError) as e:
        sluice.wire.stream_extension({"stream_id": 0, "flags": sluice.wire.STREAM_OPEN})
    assert e.value.name == "BadStream"
    with pytest.raises(sluice.WireError):
        sluice.wire.stream_extension({"stream_id": 1, "flags": sluice.wire.STREAM_CANCEL | sluice.wire.STREAM_END})
    ok = sluice.wire.stream_extension({"stream_id": 1, "flags": sluice.wire.STREAM_OPEN, "max_tokens": 4})
    assert len(ok["value"]) == 24


@pytest.mark.parametrize("vec", invalid_vectors())
def test_invalid_vector_gives_its_error(vec: Dict[str, Any]) -> None:
    with pytest.raises(sluice.WireError) as e:
        sluice.wire.parse(bytes.fromhex(vec["hex"]))
    assert e.value.name == vec["error"], vec["name"]
