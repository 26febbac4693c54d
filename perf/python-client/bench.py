"""The Python client under load, for perf/python-client.sh.

    bench.py latency ADDR SECONDS       closed loop, one request at a time
    bench.py many ADDR SECONDS WINDOW   Client.infer_many, WINDOW in flight
    bench.py async ADDR SECONDS WINDOW  AsyncClient, WINDOW coroutines

Prints one JSON object. The request is perf/mixes/mlp-b1.toml's: the bundled
MLP, batch 1, x = 0.5, tenant 1 signed with the demo key. The first second
is warm-up. Every answer's shape is checked; timeouts (a datagram lost on a
loaded host) are counted and reported, like loadgen's; other errors fail the
run."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import numpy as np

import sluice

KEY = "hex:73756963652d64656d6f2d6b65792d30303030303030303030303030303030"
X = np.full((1, 4), 0.5, np.float32)
WARMUP_S = 1.0


def quantiles(lat_ns: list) -> dict:
    a = np.sort(np.asarray(lat_ns, dtype=np.int64)) / 1000.0
    q = lambda p: float(a[min(len(a) - 1, int(p * len(a)))])  # noqa: E731
    return {"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": float(a[-1]), "count": len(a)}


def latency(addr: str, seconds: float) -> dict:
    c = sluice.Client(addr, tenant=1, key=KEY, poll="spin", timeout=1.0)
    infer, now = c.infer, time.perf_counter_ns
    end = time.monotonic() + WARMUP_S
    while time.monotonic() < end:
        infer("mlp", "1.0.0", {"x": X})
    lat, lost = [], 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = now()
        try:
            out = infer("mlp", "1.0.0", {"x": X})
        except sluice.RequestTimeoutError:
            lost += 1
            continue
        lat.append(now() - t0)
        assert out["y"].shape == (1, 3)
    return {"mode": "latency", "latency_us": quantiles(lat), "stats": c.stats()}


def many(addr: str, seconds: float, window: int) -> dict:
    c = sluice.Client(addr, tenant=1, key=KEY, poll="spin", timeout=1.0, recv_buffer_bytes=4 << 20)
    # Long calls: each call's pipeline fills and drains once.
    reqs = [("mlp", "1.0.0", {"x": X})] * (window * 64)
    end = time.monotonic() + WARMUP_S
    while time.monotonic() < end:
        c.infer_many(reqs, window=window, return_exceptions=True)
    n, t0 = 0, time.perf_counter()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        outs = c.infer_many(reqs, window=window, return_exceptions=True)
        ok = [o for o in outs if not isinstance(o, sluice.RequestTimeoutError)]
        assert all(o["y"].shape == (1, 3) for o in ok), outs
        n += len(ok)
    el = time.perf_counter() - t0
    return {"mode": "infer_many", "window": window, "requests": n, "elapsed_s": el,
            "throughput_per_sec": n / el, "stats": c.stats()}


def run_async(addr: str, seconds: float, window: int) -> dict:
    async def main() -> dict:
        async with sluice.AsyncClient(addr, tenant=1, key=KEY, timeout=1.0) as c:
            counts = {"n": 0}
            stop = {"at": time.monotonic() + WARMUP_S}

            async def worker(count: bool) -> None:
                while time.monotonic() < stop["at"]:
                    try:
                        out = await c.infer("mlp", "1.0.0", {"x": X})
                    except sluice.RequestTimeoutError:
                        continue
                    assert out["y"].shape == (1, 3)
                    if count:
                        counts["n"] += 1

            await asyncio.gather(*(worker(False) for _ in range(window)))
            stop["at"] = time.monotonic() + seconds
            t0 = time.perf_counter()
            await asyncio.gather(*(worker(True) for _ in range(window)))
            el = time.perf_counter() - t0
            return {"mode": "async", "window": window, "requests": counts["n"], "elapsed_s": el,
                    "throughput_per_sec": counts["n"] / el, "stats": c.stats()}

    return asyncio.run(main())


if __name__ == "__main__":
    mode, addr, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
    if mode == "latency":
        r = latency(addr, secs)
    elif mode == "many":
        r = many(addr, secs, int(sys.argv[4]))
    elif mode == "async":
        r = run_async(addr, secs, int(sys.argv[4]))
    else:
        sys.exit(f"unknown mode {mode}")
    r["timeouts"] = r["stats"]["timeouts"]
    print(json.dumps(r))
