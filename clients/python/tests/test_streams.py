"""Stateful streams through a real sluiced: Silero VAD's recurrent state
kept in the appliance (docs/wire.md "Streams"). StateStream's speech
probabilities equal onnxruntime-python running the same loop with the
state carried by hand; the iterator and async iterator; refusals as
StreamError. Needs the published model (scripts/setup-models.sh, which
scripts/test-python.sh runs)."""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any, List

import numpy as np
import pytest

import sluice

from conftest import DEMO_KEY, ROOT, SILERO

pytestmark = pytest.mark.skipif(not SILERO.is_file(), reason=f"{SILERO} missing: run scripts/setup-models.sh")

CHUNK, CONTEXT, STEPS = 512, 64, 60


def reference_module() -> Any:
    spec = importlib.util.spec_from_file_location("silero_reference", ROOT / "tests" / "streams" / "silero_reference.py")
    assert spec and spec.loader
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def steps() -> List[np.ndarray]:
    """STEPS steps of context + chunk over the reference's audio."""
    x = reference_module().audio()
    out, ctx = [], np.zeros(CONTEXT, np.float32)
    for i in range(STEPS):
        c = x[i * CHUNK:(i + 1) * CHUNK]
        out.append(np.concatenate([ctx, c])[None, :])
        ctx = c[-CONTEXT:]
    return out


def reference(chunks: List[np.ndarray]) -> List[float]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(SILERO), opts, providers=["CPUExecutionProvider"])
    state = np.zeros((2, 1, 128), np.float32)
    probs = []
    for x in chunks:
        p, state = sess.run(["output", "stateN"], {"input": x, "state": state, "sr": np.array(16000, np.int64)})
        probs.append(float(p[0, 0]))
    return probs


SR = np.array(16000, dtype=np.int64)


def test_state_stream_equals_onnxruntime(client: sluice.Client) -> None:
    chunks = steps()
    s = sluice.StateStream(client, "silero", "6")
    got = [float(s.step({"input": x, "sr": SR})["output"][0, 0]) for x in chunks[:-1]]
    last = s.finish({"input": chunks[-1], "sr": SR})
    got.append(float(last["output"][0, 0]))
    assert "stateN" not in last, "the state stays in the appliance"
    assert s.ended and s.next_seq == STEPS
    np.testing.assert_allclose(got, reference(chunks), rtol=0, atol=1e-6)
    with pytest.raises(ValueError):
        s.step({"input": chunks[0], "sr": SR})


def test_iterator_cancels_at_the_end(client: sluice.Client) -> None:
    chunks = steps()[:10]
    s = sluice.StateStream(client, "silero", "6")
    probs = [float(o["output"][0, 0]) for o in s.run({"input": x, "sr": SR} for x in chunks)]
    np.testing.assert_allclose(probs, reference(chunks), rtol=0, atol=1e-6)
    assert s.ended
    # The cancel freed the stream: a step under its id is unknown now.
    again = sluice.StateStream(client, "silero", "6", stream_id=s.stream_id)
    again.next_seq = 10
    with pytest.raises(sluice.StreamError) as e:
        again.step({"input": chunks[0], "sr": SR})
    assert e.value.code_name == "unknown_stream" and again.ended


def test_refusals_are_stream_errors(client: sluice.Client) -> None:
    x = steps()[0]
    s = sluice.StateStream(client, "silero", "6")
    s.step({"input": x, "sr": SR})
    s.next_seq = 5  # a gap: the appliance expects 1
    with pytest.raises(sluice.StreamError) as e:
        s.step({"input": x, "sr": SR})
    assert e.value.code_name == "stream_sequence" and not s.ended
    s.next_seq = 1
    s.step({"input": x, "sr": SR})
    with pytest.raises(sluice.TensorError):
        s.step({"input": x, "sr": SR, "state": np.zeros((2, 1, 128), np.float32)})
    s.cancel()
    with pytest.raises(sluice.StreamError):
        sluice.StateStream(client, "mlp", "1").step({"x": np.zeros((1, 4), np.float32)})


def test_async_state_stream(appliance: Any) -> None:
    chunks = steps()[:12]

    async def main() -> List[float]:
        async with sluice.AsyncClient(appliance.data, tenant=1, key=DEMO_KEY, timeout=2.0) as c:
            s = sluice.AsyncStateStream(c, "silero", "6")
            out = [float(o["output"][0, 0]) async for o in s.run({"input": x, "sr": SR} for x in chunks)]
            assert s.ended
            return out

    np.testing.assert_allclose(asyncio.run(main()), reference(chunks), rtol=0, atol=1e-6)
