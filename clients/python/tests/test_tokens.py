"""Token streams through a real sluiced serving the bundled greedy byte
decoder (models/decoder.onnx, conftest.decoder_streams): the tokens equal
onnxruntime-python's reference loop of the same model
(tests/streams/decoder_reference.py), frames carry at most
tokens_per_frame tokens and the last says why the stream ended; cancel,
deadline, context managers, seq gaps, the async iterator."""

from __future__ import annotations

import asyncio
import importlib.util
import struct
from typing import Any, Dict, List

import numpy as np
import pytest

import sluice
from sluice import _tokens

from conftest import DEMO_KEY, ROOT, Appliance

DECODER = ROOT / "models" / "decoder.onnx"
PROMPTS = ["hello", "zz", "token streams"]


def reference(prompts: List[str], max_tokens: int) -> Dict[str, List[int]]:
    pytest.importorskip("onnxruntime")
    spec = importlib.util.spec_from_file_location("decoder_reference", ROOT / "tests" / "streams" / "decoder_reference.py")
    assert spec and spec.loader
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    import onnxruntime as ort

    sess = ort.InferenceSession(str(DECODER), providers=["CPUExecutionProvider"])
    return {p: m.generate(sess, p.encode(), max_tokens) for p in prompts}


def test_tokens_equal_onnxruntime(client: sluice.Client) -> None:
    want = reference(PROMPTS, 32)
    for p in PROMPTS:
        with sluice.TokenStream(client, "decoder", "1", p, tokens_per_frame=3) as s:
            frames = list(s)
        got = [int(t) for f in frames for t in f.tokens]
        assert got == want[p], p
        assert [f.seq for f in frames] == list(range(len(frames)))
        assert all(len(f.tokens) <= 3 for f in frames)
        assert all(f.end is None for f in frames[:-1])
        assert frames[-1].end == ("max_tokens" if len(want[p]) == 32 else "eos")
        assert s.ended and s.end_reason == frames[-1].end


def test_tokens_and_collect_with_max_tokens(client: sluice.Client) -> None:
    want = reference(["hello"], 5)["hello"]
    s = sluice.TokenStream(client, "decoder", "1", b"hello", max_tokens=5)
    assert s.collect() == (want, "max_tokens")
    assert list(s) == [] and s.cancel() is None


def test_plain_calls_share_the_client_with_a_stream(client: sluice.Client) -> None:
    want = reference(["zz"], 32)["zz"]
    s = sluice.TokenStream(client, "decoder", "1", "zz")
    got: List[int] = []
    for f in s:
        got.extend(int(t) for t in f.tokens)
        if f.seq == 1:
            # A plain request in the middle of the stream, same socket.
            out = client.infer("mlp", "1", {"x": np.ones((1, 4), np.float32)})
            assert out
    assert got == want


def test_cancel_stops_an_endless_stream(client: sluice.Client, appliance: Appliance) -> None:
    s = sluice.TokenStream(client, "endless", "1", "forever")
    first = [next(s) for _ in range(4)]
    assert all(f.end is None and len(f.tokens) == 1 for f in first)
    sent = s.cancel()
    assert sent is not None and sent >= 4
    assert s.ended and s.end_reason == "cancelled"
    with pytest.raises(StopIteration):
        next(s)
    # The context manager cancels a stream left running.
    with sluice.TokenStream(client, "endless", "1", "again") as s2:
        next(s2)
    assert s2.end_reason == "cancelled"


def test_deadline_ends_the_stream(client: sluice.Client) -> None:
    # 64 tokens a frame: at one a frame the endless model outruns a Python
    # reader and the socket drops frames (a FrameLostError).
    s = sluice.TokenStream(client, "endless", "1", "slow", deadline=0.05, timeout=5.0, tokens_per_frame=64)
    toks, reason = s.collect()
    assert reason == "deadline"
    assert len(toks) > 0


def test_refusals_raise_server_errors(client: sluice.Client) -> None:
    with pytest.raises(sluice.ServerError):
        list(sluice.TokenStream(client, "nosuch", "1", "x"))
    with pytest.raises(ValueError):
        sluice.TokenStream(client, "decoder", "1", "")
    with pytest.raises(ValueError):
        sluice.TokenStream(client, "decoder", "1", "x", tokens_per_frame=0)


class _Answer:
    def __init__(self, seq: int, flags: int, reason: int = 0, stream_id: int = 5) -> None:
        self.extensions = [("sluice-stream", struct.pack("<QIBBHII", stream_id, seq, flags, reason, 1, 0, 0))]
        self.outputs = {"next": np.array([65], np.int64)}


def test_a_seq_gap_is_reported() -> None:
    f = _tokens._Frames("decoder", "1", "x", "token", 1, 0, 5)
    assert f._frame(_Answer(0, 1)).seq == 0
    with pytest.raises(sluice.FrameLostError) as e:
        f._frame(_Answer(2, 2))
    assert (e.value.expected, e.value.got) == (1, 2)
    assert isinstance(e.value, sluice.MalformedAnswerError)
    end = f._frame(_Answer(1, 2 | 4, 1))
    assert end.end == "eos"
    with pytest.raises(sluice.MalformedAnswerError):
        f._frame(_Answer(2, 2, stream_id=6))


def test_async_token_stream(appliance: Appliance) -> None:
    want = reference(PROMPTS, 32)

    async def main() -> None:
        c = sluice.AsyncClient(appliance.data, tenant=1, key=DEMO_KEY, timeout=5.0)
        try:
            # Three streams and plain requests at once on one client.
            async def one(p: str) -> List[int]:
                s = await sluice.AsyncTokenStream.open(c, "decoder", "1", p, tokens_per_frame=2)
                toks, reason = await s.collect()
                assert reason in ("eos", "max_tokens")
                return toks

            plain = [c.infer("mlp", "1", {"x": np.ones((1, 4), np.float32)}) for _ in range(5)]
            got = await asyncio.gather(*(one(p) for p in PROMPTS), *plain)
            assert list(got[:3]) == [want[p] for p in PROMPTS]
            async with await sluice.AsyncTokenStream.open(c, "endless", "1", "x") as s:
                n = 0
                async for f in s:
                    n += 1
                    if n == 3:
                        break
            assert s.end_reason == "cancelled"
        finally:
            c.close()

    asyncio.run(main())
