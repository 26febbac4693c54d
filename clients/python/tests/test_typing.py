"""The type hints hold: mypy --strict over the package's sources (with the
native module's stubs) and over a program using the public API."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

USE = textwrap.dedent(
    """
    import asyncio
    import datetime as dt
    from typing import Dict, List

    import numpy as np
    import sluice

    def main() -> None:
        c = sluice.Client("127.0.0.1:1", tenant=1, key="hex:00", timeout=0.5)
        x = np.ones((1, 4), np.float32)
        out: Dict[str, np.ndarray] = c.infer("mlp", "1", {"x": x}, deadline=dt.timedelta(seconds=1))
        r: sluice.Response = c.infer_response("mlp", "1", {"x": out["y"]}, adapter="formal")
        version: str = r.model_version
        s: sluice.NegotiatedSchema = c.negotiate("subject")
        c.infer("mlp", "1", {"x": x}, schema=s, section={"prompt": "hi"})
        many: List[object] = c.infer_many([sluice.InferRequest("mlp", "1", {"x": x})], window=4)
        y = sluice.retry(c.infer, "mlp", "1", {"x": x}, attempts=3)
        frame: bytes = sluice.wire.build(sluice.wire.parse(b""))

        async def a() -> float:
            async with sluice.AsyncClient(("127.0.0.1", 1)) as ac:
                await ac.infer("mlp", "1", {"x": x})
                return await ac.ping()

        asyncio.run(a())
        with sluice.TokenStream(c, "decoder", "1", "hi", tokens_per_frame=2, max_tokens=8) as ts:
            first: sluice.TokenFrame = next(ts)
            rest: List[int] = list(ts.tokens())
            reason: str | None = ts.end_reason

        async def t(ac: sluice.AsyncClient) -> List[int]:
            s = await sluice.AsyncTokenStream.open(ac, "decoder", "1", [104, 105])
            toks, why = await s.collect()
            return toks
        try:
            c.infer("mlp", "", {"x": x})
        except sluice.RoutingError as e:
            code: int | None = e.code
            retry: bool = e.retryable
    """
)


def test_mypy_strict(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("mypy")
    use = tmp_path / "use.py"
    use.write_text("from __future__ import annotations\n" + USE)
    src = ROOT / "clients" / "python" / "python" / "sluice"
    for target in ([str(src)], [str(use)]):
        r = subprocess.run(
            [sys.executable, "-m", "mypy", "--strict",
             "--cache-dir", str(tmp_path / "cache"), *target],
            capture_output=True, text=True, cwd=tmp_path, timeout=120,
        )
        assert r.returncode == 0, r.stdout + r.stderr
