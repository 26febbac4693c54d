"""AsyncClient: a thousand requests in flight on one socket, every answer
matched to its request; failures, timeouts, cancellation and closing per
request; and the synchronous pipelined infer_many."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import sluice

from conftest import DEMO_KEY, UdpPeer, wait_until

X = np.ones((1, 4), np.float32)


def run(coro):
    return asyncio.run(coro)


def test_a_thousand_in_flight_on_one_socket(appliance) -> None:
    n = 1000

    async def main():
        async with sluice.AsyncClient(appliance.data, tenant=1, key=DEMO_KEY, timeout=10.0) as c:
            fd = c._native.fileno()
            state = {"started": 0, "peak": 0}

            async def one(i: int):
                x = np.array([[i, i + 1, i + 2, i + 3]], np.int64)
                state["started"] += 1
                fut = c.infer("echo", "1", {"i": x})
                # Every coroutine sends before the loop polls the socket, so
                # in_flight counts requests actually on the wire.
                task = asyncio.ensure_future(fut)
                await asyncio.sleep(0)
                state["peak"] = max(state["peak"], c.in_flight)
                out = await task
                return i, out["i"]

            results = await asyncio.gather(*(one(i) for i in range(n)))
            assert c._native.fileno() == fd
            return results, state, c.stats()

    results, state, stats = run(main())
    assert len(results) == n
    for i, y in results:
        np.testing.assert_array_equal(y, [[i, i + 1, i + 2, i + 3]])
    assert state["peak"] >= n, f"only {state['peak']} requests were in flight at once"
    assert stats["sent"] == n and stats["received"] == n and stats["timeouts"] == 0


def test_async_models_errors_and_negotiation(appliance) -> None:
    async def main():
        async with sluice.AsyncClient(appliance.data, tenant=1, key=DEMO_KEY) as c:
            ok, bad = await asyncio.gather(
                c.infer("mlp", "1", {"x": X}),
                c.infer("nosuch", "1", {"x": X}),
                return_exceptions=True,
            )
            assert ok["y"].shape == (1, 3)
            assert isinstance(bad, sluice.RoutingError) and bad.code_name == "unknown_model"
            with pytest.raises(sluice.SchemaError):
                await c.negotiate("no-such-subject")
            assert await c.ping() > 0
            out = await sluice.retry_async(c.infer, "mlp", "1", {"x": X}, attempts=2)
            assert out["y"].shape == (1, 3)
            got = await c.infer_many(
                [("echo", "1", {"v": np.float32(i)}) for i in range(50)]
                + [sluice.InferRequest("mlp", "1", {"x": X}, adapter="formal")],
                window=8,
            )
            assert [float(g["v"]) for g in got[:50]] == [float(i) for i in range(50)]
            assert got[50]["y"].shape == (1, 3)
            mixed = await c.infer_many([("echo", "1", {"v": X}), ("nosuch", "1", {"v": X})], return_exceptions=True)
            assert isinstance(mixed[1], sluice.RoutingError)
            with pytest.raises(sluice.RoutingError):
                await c.infer_many([("echo", "1", {"v": X}), ("nosuch", "1", {"v": X})])

    run(main())


def test_async_timeout_cancel_and_close() -> None:
    async def main():
        with UdpPeer(lambda d, a: []) as silent:
            c = sluice.AsyncClient(silent.addr, timeout=0.05)
            with pytest.raises(sluice.RequestTimeoutError):
                await c.infer("m", "1", {"x": X})
            with pytest.raises(sluice.RequestTimeoutError):
                await sluice.retry_async(c.infer, "m", "1", {"x": X}, attempts=2, retry_timeouts=True)
            wait_until(lambda: silent.received == 3, what="three tries")
            # Cancelling abandons one request; the others go on.
            t = asyncio.ensure_future(c.infer("m", "1", {"x": X}, timeout=5))
            await asyncio.sleep(0.01)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            # Closing fails what is still in flight.
            pending = asyncio.ensure_future(c.infer("m", "1", {"x": X}, timeout=5))
            await asyncio.sleep(0.01)
            await c.aclose()
            with pytest.raises(sluice.ClientClosedError):
                await pending

    run(main())


def test_async_waits_for_a_slot_beyond_outstanding_max(appliance) -> None:
    async def main():
        async with sluice.AsyncClient(appliance.data, tenant=1, key=DEMO_KEY, outstanding_max=4) as c:
            peak = 0

            async def one(i):
                nonlocal peak
                task = asyncio.ensure_future(c.infer("echo", "1", {"v": np.int32(i)}))
                await asyncio.sleep(0)
                peak = max(peak, c.in_flight)
                return int((await task)["v"])

            got = await asyncio.gather(*(one(i) for i in range(40)))
            assert got == list(range(40))
            assert peak <= 4

    run(main())


def test_async_client_is_bound_to_one_loop(appliance) -> None:
    c = sluice.AsyncClient(appliance.data, tenant=1, key=DEMO_KEY)
    run(c.infer("mlp", "1", {"x": X}))
    with pytest.raises(RuntimeError, match="another event loop"):
        run(c.infer("mlp", "1", {"x": X}))
    c.close()


def test_transport_tcp_where_nothing_listens_for_it_is_refused(appliance) -> None:
    with pytest.raises(sluice.TransportError):
        sluice.AsyncClient(appliance.data, transport="tcp")


# --- the synchronous pipelined infer_many -------------------------------------


def test_infer_many_in_order(client: sluice.Client) -> None:
    reqs = [("echo", "1", {"v": np.full((2, 2), i, np.int16)}) for i in range(300)]
    got = client.infer_many(reqs, window=32)
    assert len(got) == 300
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g["v"], np.full((2, 2), i, np.int16))
    s = client.stats()
    assert s["received"] >= 300 and s["timeouts"] == 0


def test_infer_many_options_and_failures(client: sluice.Client) -> None:
    reqs = [
        sluice.InferRequest("mlp", "1", {"x": X}, adapter="formal"),
        sluice.InferRequest("nosuch", "1", {"x": X}),
        sluice.InferRequest("echo", "1", {"x": np.zeros(2, np.complex64)}),  # cannot be built
        sluice.InferRequest("echo", "1", {"t": X}, trace="00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"),
    ]
    got = client.infer_many(reqs, window=2, return_exceptions=True)
    assert got[0]["y"].shape == (1, 3)
    assert isinstance(got[1], sluice.RoutingError)
    assert isinstance(got[2], sluice.InvalidRequestError)
    np.testing.assert_array_equal(got[3]["t"], X)
    with pytest.raises(sluice.RoutingError):
        client.infer_many(reqs[:2])
    # Nothing was left behind: the next call is answered normally.
    assert "y" in client.infer("mlp", "1", {"x": X})
    with pytest.raises(sluice.InvalidRequestError):
        client.infer_many(reqs, window=0)
    assert client.infer_many([]) == []
