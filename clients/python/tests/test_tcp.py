"""The client over TCP against the real appliance (sluiced, io_uring with
``tcp_listen``): tensors larger than a datagram through ONNX models checked
against onnxruntime, the automatic choice of transport, pipelining, asyncio,
and a connection closed by the appliance (``DELETE /v1/connections/{id}``)
failing what waited on it with a retryable error and reconnecting."""

from __future__ import annotations

import asyncio
import pathlib

import numpy as np
import onnxruntime as ort
import pytest

import sluice
from conftest import DEMO_KEY, ROOT, wait_until

MODELS = pathlib.Path(ROOT) / "models"
X = np.array([[1.0, 2.0, 3.0, 4.0]], np.float32)


def session(name: str) -> ort.InferenceSession:
    return ort.InferenceSession(str(MODELS / name), providers=["CPUExecutionProvider"])


def tcp_client(appliance, **kw) -> sluice.Client:
    return sluice.Client(
        appliance.data, tenant=1, key=DEMO_KEY, transport="tcp", tcp_addr=appliance.tcp, timeout=20.0, **kw
    )


def tcp_connections(appliance) -> list:
    return [c for c in appliance.http("GET", "/v1/connections") if c["transport"] == "tcp"]


def test_the_appliance_serves_tcp(appliance) -> None:
    assert appliance.tcp and appliance.tcp.startswith("127.0.0.1:")


@pytest.mark.parametrize("mib", [1, 16])
def test_large_tensors_through_onnx_match_onnxruntime(appliance, mib: int) -> None:
    """1 MiB and 16 MiB f32 inputs through models/large.onnx: y is as large
    as x, so the answer is large too. The input is written from the array's
    memory and the outputs view the answer: no copy by the binding."""
    n = mib << 18  # f32 elements
    x = np.random.default_rng(mib).standard_normal((1, n)).astype(np.float32)
    want_y, want_total = session("large.onnx").run(["y", "total"], {"x": x})
    with tcp_client(appliance) as c:
        got = c.infer("large", "1", {"x": x})
        np.testing.assert_array_equal(got["y"], want_y)
        np.testing.assert_allclose(got["total"], want_total, rtol=1e-5)
        st = c.stats()
    assert st["tcp_sent"] == 1
    assert st["inputs_copied"] == 0
    # The answer was read by the kernel into the memory the outputs view.
    assert st["answers_copied"] == 0 and st["answer_bytes_copied"] <= 64 << 10
    assert st["outputs_copied"] == 0 and st["outputs_viewed"] == 2


def test_big_model_over_tcp(appliance) -> None:
    """models/big.onnx takes 512 KiB: over UDP the client refuses it
    (tests/test_models.py), over TCP it runs."""
    x = np.random.default_rng(3).standard_normal((1, 131072)).astype(np.float32)
    (want,) = session("big.onnx").run(["total"], {"x": x})
    with tcp_client(appliance) as c:
        got = c.infer("big", "1", {"x": x})
    np.testing.assert_allclose(got["total"], want, rtol=1e-4)


def test_auto_sends_small_frames_by_udp_and_large_ones_over_tcp(appliance) -> None:
    big = np.ones((1, 131072), np.float32)
    with sluice.Client(appliance.data, tenant=1, key=DEMO_KEY, transport="auto", tcp_addr=appliance.tcp, timeout=20.0) as c:
        assert c.transport == "auto"
        assert "y" in c.infer("mlp", "1", {"x": X})
        assert c.stats()["tcp_sent"] == 0
        assert c.infer("big", "1", {"x": big})["total"][0, 0] == 131072.0
        assert c.stats()["tcp_sent"] == 1
        # Pipelined, both transports at once, answers in request order.
        reqs = [("mlp", "1", {"x": X}) if i % 2 else ("big", "1", {"x": big}) for i in range(20)]
        outs = c.infer_many(reqs, window=8)
        assert [("total" in o) for o in outs] == [i % 2 == 0 for i in range(20)]
        assert c.stats()["tcp_sent"] == 11
    # Without a TCP address "auto" is UDP: the large frame is refused here.
    with sluice.Client(appliance.data, tenant=1, key=DEMO_KEY, transport="auto") as c:
        with pytest.raises(sluice.InvalidRequestError) as e:
            c.infer("big", "1", {"x": big})
        assert e.value.wire_error == "TooLarge"


def test_small_requests_over_tcp_match_udp(appliance, client: sluice.Client) -> None:
    x = np.random.default_rng(5).standard_normal((7, 4)).astype(np.float32)
    with tcp_client(appliance) as c:
        over_tcp = c.infer("mlp", "1", {"x": x})
        assert c.ping() > 0
        # A negotiation travels over TCP too (answered as unknown here).
        with pytest.raises(sluice.SchemaError):
            c.negotiate("no-such-subject")
    over_udp = client.infer("mlp", "1", {"x": x})
    assert over_tcp.keys() == over_udp.keys()
    for k in over_tcp:
        np.testing.assert_array_equal(over_tcp[k], over_udp[k])


def test_infer_many_pipelines_on_one_connection(appliance) -> None:
    xs = [np.full((1, 1 << 16), i, np.float32) for i in range(40)]
    with tcp_client(appliance) as c:
        outs = c.infer_many([("large", "1", {"x": x}) for x in xs], window=16)
        assert len(tcp_connections(appliance)) >= 1
        assert c.stats()["tcp_sent"] == 40
    for i, o in enumerate(outs):
        assert o["y"][0, 0] == i * 0.5 + 0.25
        assert o["total"][0, 0] == i * float(1 << 16)


def close_mine(appliance, c: sluice.Client) -> None:
    """Closes this client's connection from the appliance's side."""
    wait_until(lambda: len(tcp_connections(appliance)) > 0, what="the connection listed")
    for conn in tcp_connections(appliance):
        appliance.http("DELETE", f"/v1/connections/{conn['id']}")
    wait_until(lambda: not tcp_connections(appliance), what="the connections closed")


def test_a_closed_connection_fails_its_request_retryably_and_the_next_reconnects(appliance) -> None:
    with tcp_client(appliance) as c:
        assert "y" in c.infer("mlp", "1", {"x": X})
        close_mine(appliance, c)
        with pytest.raises(sluice.ConnectionLostError) as e:
            c.infer("mlp", "1", {"x": X})
        assert e.value.retryable and isinstance(e.value, sluice.TransportError)
        assert "y" in c.infer("mlp", "1", {"x": X})
        st = c.stats()
        assert st["connection_losses"] == 1 and st["tcp_reconnects"] == 1
        # sluice.retry carries a request over a loss.
        close_mine(appliance, c)
        assert "y" in sluice.retry(c.infer, "mlp", "1", {"x": X}, attempts=2)


def test_async_client_over_tcp(appliance) -> None:
    async def main() -> None:
        async with sluice.AsyncClient(
            appliance.data, tenant=1, key=DEMO_KEY, transport="tcp", tcp_addr=appliance.tcp, timeout=20.0
        ) as c:
            xs = [np.full((1, 1 << (10 + i % 9)), i, np.float32) for i in range(300)]
            outs = await asyncio.gather(*(c.infer("large", "1", {"x": x}) for x in xs))
            for i, (x, o) in enumerate(zip(xs, outs)):
                assert o["y"].shape == x.shape and o["y"][0, -1] == i * 0.5 + 0.25
            assert c.stats()["tcp_sent"] == 300
            # The appliance closes the connection: the loop watches the new one.
            close_mine(appliance, c)  # type: ignore[arg-type]
            with pytest.raises(sluice.ConnectionLostError):
                await c.infer("mlp", "1", {"x": X})
            outs = await asyncio.gather(*(c.infer("mlp", "1", {"x": X}) for _ in range(50)))
            assert all("y" in o for o in outs)
            assert c.stats()["tcp_reconnects"] == 1

    asyncio.run(main())


def test_async_auto_mixes_both_transports(appliance) -> None:
    big = np.ones((1, 131072), np.float32)

    async def main() -> None:
        async with sluice.AsyncClient(
            appliance.data, tenant=1, key=DEMO_KEY, transport="auto", tcp_addr=appliance.tcp, timeout=20.0
        ) as c:
            outs = await asyncio.gather(
                *(c.infer("big", "1", {"x": big}) if i % 4 == 0 else c.infer("mlp", "1", {"x": X}) for i in range(200))
            )
            assert sum("total" in o for o in outs) == 50
            assert c.stats()["tcp_sent"] == 50

    asyncio.run(main())
