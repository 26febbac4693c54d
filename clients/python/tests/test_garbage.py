"""Datagrams that are not the answer, on the client's own socket, are
ignored and counted: garbage, answers to other ids, signed answers with a
bad tag. The answer that follows them is taken. Also the other way round:
garbage sent from the client's socket does not disturb the appliance or the
client. The relay sits between the client and the real appliance."""

from __future__ import annotations

import asyncio
import os
import socket
import struct

import numpy as np
import pytest

import sluice

from conftest import DEMO_KEY, Relay, UdpPeer

X = np.arange(4, dtype=np.float32).reshape(1, 4)


def with_id(frame: bytes, request_id: int) -> bytes:
    return frame[:16] + struct.pack("<Q", request_id) + frame[24:]


@pytest.mark.parametrize(
    "name,extra,counter",
    [
        ("garbage", lambda ans: [os.urandom(200)], "malformed"),
        ("empty", lambda ans: [b""], "malformed"),
        ("magic-only", lambda ans: [b"SLCE"], "malformed"),
        ("truncated-answer", lambda ans: [ans[:-1]], "malformed"),
        ("foreign-id", lambda ans: [with_id(ans, struct.unpack_from("<Q", ans, 16)[0] ^ 0xFF)], "stale"),
        ("duplicate-later", None, "stale"),
    ],
)
def test_ignored_before_the_answer(appliance, name, extra, counter) -> None:
    def mangle(answer: bytes, request: bytes) -> list:
        if extra is None:  # the answer twice: the second is stale
            return [answer, answer]
        return extra(answer) + [answer]

    with Relay(appliance.data, mangle) as relay, sluice.Client(relay.addr, tenant=1, key=DEMO_KEY) as c:
        before = c.stats()
        out = c.infer("echo", "1", {"x": X})
        np.testing.assert_array_equal(out["x"], X)
        out = c.infer("echo", "1", {"x": X + 1})  # and the next request is unaffected
        np.testing.assert_array_equal(out["x"], X + 1)
        after = c.stats()
    assert after[counter] - before[counter] >= 1, (name, after)
    assert after["received"] - before["received"] == 2


def test_bad_tag_on_a_signed_answer_is_dropped(appliance) -> None:
    """A signed answer whose tag fails is not taken; the good one after it
    is. (The appliance answers unsigned; the relay signs its answer with the
    tenant key, as a signing peer would, and forges a copy first.)"""

    def mangle(answer: bytes, request: bytes) -> list:
        signed = sluice.wire.sign(answer, DEMO_KEY)
        assert sluice.wire.verify(signed, DEMO_KEY)
        forged = bytearray(signed)
        forged[80] ^= 0x01
        assert not sluice.wire.verify(bytes(forged), DEMO_KEY)
        return [bytes(forged), signed]

    with Relay(appliance.data, mangle) as relay, sluice.Client(relay.addr, tenant=1, key=DEMO_KEY) as c:
        np.testing.assert_array_equal(c.infer("echo", "1", {"x": X})["x"], X)
        assert c.stats()["bad_tag"] == 1


def test_async_ignores_garbage_too(appliance) -> None:
    def mangle(answer: bytes, request: bytes) -> list:
        return [os.urandom(64), b"SLCE\x01", answer]

    async def main():
        async with sluice.AsyncClient(relay.addr, tenant=1, key=DEMO_KEY) as c:
            outs = await asyncio.gather(*(c.infer("echo", "1", {"v": np.int32(i)}) for i in range(20)))
            assert [int(o["v"]) for o in outs] == list(range(20))
            return c.stats()

    with Relay(appliance.data, mangle) as relay:
        stats = asyncio.run(main())
    assert stats["malformed"] == 40 and stats["received"] == 20


def test_garbage_from_the_clients_socket_to_the_appliance(appliance, client: sluice.Client) -> None:
    # The same socket the client uses (a duplicate descriptor of it).
    s = socket.socket(fileno=socket.dup(client.fileno()))
    try:
        for junk in [os.urandom(100), b"", b"SLCE" + bytes(92), b"\xff" * 96]:
            s.send(junk)
    finally:
        s.detach()
    np.testing.assert_array_equal(client.infer("echo", "1", {"x": X})["x"], X)
    # Whatever the appliance said about the junk (error frames for id 0)
    # was not taken for the answer.
    assert client.stats()["received"] == 1


def test_wrong_kind_for_our_id_is_a_malformed_answer() -> None:
    def pong(data: bytes, addr) -> list:
        req = sluice.wire.parse(data)
        return [sluice.wire.build({"kind": "pong", "request_id": req["request_id"]})]

    with UdpPeer(pong) as peer, sluice.Client(peer.addr) as c:
        with pytest.raises(sluice.MalformedAnswerError, match="wrong frame kind"):
            c.infer("m", "1", {"x": X})
