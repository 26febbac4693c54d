"""Every error path: each error code the real appliance can be made to give,
through the client's typed exceptions; frames the client cannot build,
answered by the appliance and mapped; every code's class and retryability
(through a stand-in server for the codes the appliance cannot be made to
give here); and every local failure."""

from __future__ import annotations

import datetime as dt
import errno
import socket
import struct
import threading
import time

import numpy as np
import pytest

import sluice

from conftest import DEMO_KEY, RESTRICTED_KEY, UdpPeer, free_udp_port, wait_until

X = np.ones((1, 4), np.float32)


def expect(exc_type, code_name, fn, *args, **kwargs):
    with pytest.raises(exc_type) as e:
        fn(*args, **kwargs)
    err = e.value
    assert err.code_name == code_name, err
    assert err.code == next(c for c, (n, _) in sluice.ERROR_CODES.items() if n == code_name)
    assert err.retryable == sluice.ERROR_CODES[err.code][1]
    assert code_name in str(err) and err.message
    return err


# --- codes the appliance gives ----------------------------------------------


def test_unauthenticated(appliance) -> None:
    with sluice.Client(appliance.data, tenant=1, key=b"not-the-key") as c:
        expect(sluice.AuthError, "unauthenticated", c.infer, "mlp", "1", {"x": X})
    with sluice.Client(appliance.data, tenant=99, key=b"whoever") as c:
        expect(sluice.AuthError, "unauthenticated", c.infer, "mlp", "1", {"x": X})
    with sluice.Client(appliance.data, tenant=1) as c:  # unsigned
        expect(sluice.AuthError, "unauthenticated", c.infer, "mlp", "1", {"x": X})


def test_outside_the_tenants_lists(appliance) -> None:
    """A model or adapter that exists but is not the tenant's is answered as
    one that does not exist (docs/wire.md, "What a tenant may see")."""
    with sluice.Client(appliance.data, tenant=2, key=RESTRICTED_KEY) as c:
        assert "y" in c.infer("mlp", "1", {"x": X}), "mlp is allowed"
        hidden = expect(sluice.RoutingError, "unknown_model", c.infer, "echo", "1", {"x": X})
        missing = expect(sluice.RoutingError, "unknown_model", c.infer, "nosuch", "1", {"x": X})
        assert hidden.message == missing.message
        expect(sluice.RoutingError, "unknown_adapter", c.infer, "mlp", "1", {"x": X}, adapter="formal")


def test_stale_and_replayed(appliance) -> None:
    """Signed frames built by hand: without a deadline they are stale; the
    same bytes twice are a replay (the client itself never does either)."""
    now_us = int(time.time() * 1e6)
    frame = {"kind": "ping", "request_id": 7, "tenant_id": 1}
    for deadline, want in [(0, "stale"), (now_us + 60_000_000, "stale")]:
        req = dict(frame, kind="negotiate_request", deadline_us=deadline,
                   body={"negotiate_request": {"subject": "nosuch", "version_hint": 0}})
        answer = raw_exchange(appliance, sluice.wire.build(req, key=DEMO_KEY))
        assert answer["body"]["error"]["code_name"] == want
    req = dict(frame, kind="negotiate_request", request_id=8, deadline_us=now_us + 2_000_000,
               body={"negotiate_request": {"subject": "nosuch", "version_hint": 0}})
    signed = sluice.wire.build(req, key=DEMO_KEY)
    assert raw_exchange(appliance, signed)["body"]["error"]["code_name"] == "unknown_subject"
    assert raw_exchange(appliance, signed)["body"]["error"]["code_name"] == "replayed"
    assert sluice.error_class(next(c for c, (n, _) in sluice.ERROR_CODES.items() if n == "replayed")) is sluice.AuthError


def test_routing(client: sluice.Client) -> None:
    expect(sluice.RoutingError, "model_version_required", client.infer, "mlp", "", {"x": X})
    expect(sluice.RoutingError, "unknown_model", client.infer, "nosuch", "1", {"x": X})
    expect(sluice.RoutingError, "unknown_model", client.infer, "mlp", "1.5.0", {"x": X})
    expect(sluice.RoutingError, "unknown_adapter", client.infer, "mlp", "1", {"x": X}, adapter="nope")
    expect(sluice.RoutingError, "no_route_to_shard", client.infer, "accel", "1", {"x": X}, intent="tpu")


def test_peer_down_is_retryable(client: sluice.Client) -> None:
    err = expect(sluice.UnavailableError, "peer_down", client.infer, "remote", "1", {"x": X}, intent="training")
    assert err.retryable


def test_schema_and_tensor_errors(client: sluice.Client) -> None:
    expect(sluice.SchemaError, "unknown_schema", client.infer, "mlp", "1", {"x": X}, schema=(987654, 1))
    expect(sluice.SchemaError, "unknown_subject", client.negotiate, "no-such-subject")
    expect(sluice.TensorError, "bad_tensor", client.infer, "mlp", "1", {"x": np.ones((1, 5), np.float32)})
    expect(sluice.TensorError, "bad_tensor", client.infer, "mlp", "1", {"x": np.ones((1, 4), np.float64)})
    expect(sluice.TensorError, "bad_tensor", client.infer, "mlp", "1", {"wrong_name": X})


def test_deadlines(client: sluice.Client) -> None:
    past = dt.datetime(2001, 1, 1, tzinfo=dt.timezone.utc)
    expect(sluice.DeadlineExceededError, "deadline_exceeded", client.infer, "mlp", "1", {"x": X}, deadline=past)
    expect(sluice.DeadlineExceededError, "deadline_exceeded", client.infer, "mlp", "1", {"x": X}, deadline=0)
    # Generous deadlines, relative and absolute, are met.
    assert "y" in client.infer("mlp", "1", {"x": X}, deadline=0.5)
    assert "y" in client.infer("mlp", "1", {"x": X}, deadline=dt.timedelta(seconds=1))
    soon = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=5)
    assert "y" in client.infer("mlp", "1", {"x": X}, deadline=soon)


def raw_exchange(appliance, frame: bytes) -> dict:
    host, port = appliance.data.rsplit(":", 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2)
        s.sendto(frame, (host, int(port)))
        return sluice.wire.parse(s.recv(1 << 16))


def test_frames_the_client_cannot_build_are_answered_with_codes(appliance) -> None:
    """The package's builder only makes valid requests; these frames come
    from sluice.wire (and a byte patch), and the appliance's answers map to
    the same classes."""
    ping = sluice.wire.build({"kind": "ping", "request_id": 5, "tenant_id": 1}, key=DEMO_KEY)
    assert raw_exchange(appliance, ping)["kind"] == "pong"
    cases = {
        "unsupported_kind": sluice.wire.build({"kind": "pong", "request_id": 6, "tenant_id": 1}, key=DEMO_KEY),
        "unsupported_version": ping[:4] + b"\x02" + ping[5:],
        "malformed_frame": ping[:10] + b"\x01" + ping[11:],  # reserved0 set
    }
    for name, frame in cases.items():
        answer = raw_exchange(appliance, frame)
        assert answer["kind"] == "error", name
        err = answer["body"]["error"]
        assert err["code_name"] == name
        cls = sluice.error_class(err["code"])
        assert issubclass(cls, sluice.ProtocolError), name


# --- every code's class, through the client ----------------------------------

FAMILY = {
    "malformed_frame": sluice.ProtocolError,
    "unsupported_version": sluice.ProtocolError,
    "unauthenticated": sluice.AuthError,
    "forbidden": sluice.AuthError,
    "model_version_required": sluice.RoutingError,
    "no_route": sluice.RoutingError,
    "unknown_model": sluice.RoutingError,
    "unknown_adapter": sluice.RoutingError,
    "unknown_schema": sluice.SchemaError,
    "schema_mismatch": sluice.SchemaError,
    "bad_tensor": sluice.TensorError,
    "deadline_exceeded": sluice.DeadlineExceededError,
    "busy": sluice.UnavailableError,
    "no_route_to_shard": sluice.RoutingError,
    "peer_down": sluice.UnavailableError,
    "inference_failed": sluice.InferenceError,
    "internal": sluice.UnavailableError,
    "shutting_down": sluice.UnavailableError,
    "frame_too_large": sluice.ProtocolError,
    "response_too_large": sluice.ProtocolError,
    "unknown_subject": sluice.SchemaError,
    "connection_lost": sluice.UnavailableError,
    "unsupported_kind": sluice.ProtocolError,
    "stale": sluice.AuthError,
    "replayed": sluice.AuthError,
    "unknown_stream": sluice.StreamError,
    "stream_sequence": sluice.StreamError,
    "stream_limit": sluice.UnavailableError,
    "stream_state_mismatch": sluice.StreamError,
    "stream_unsupported": sluice.StreamError,
}


def test_every_code_has_a_family() -> None:
    assert sorted(FAMILY) == sorted(n for n, _ in sluice.ERROR_CODES.values())
    for code, (name, retryable) in sluice.ERROR_CODES.items():
        assert sluice.error_class(code) is FAMILY[name]
        # Exactly the retryable codes are UnavailableError.
        assert retryable == (FAMILY[name] is sluice.UnavailableError), name
    assert sluice.error_class(9999) is sluice.ServerError


def error_answer(code: int, message: str = "from the stand-in"):
    def handler(data: bytes, addr) -> list:
        req = sluice.wire.parse(data)
        c = code if code in sluice.ERROR_CODES else 1
        frame = sluice.wire.build(
            {"kind": "error", "request_id": req["request_id"], "tenant_id": req["tenant_id"],
             "body": {"error": {"code": c, "message": message}}}
        )
        if c != code:  # a code this build does not know: patch it in
            frame = frame[:96] + struct.pack("<H", code) + frame[98:]
        return [frame]

    return handler


@pytest.mark.parametrize("code", sorted(sluice.ERROR_CODES))
def test_each_code_reaches_its_exception(code: int) -> None:
    name, retryable = sluice.ERROR_CODES[code]
    with UdpPeer(error_answer(code, f"code {name}")) as peer, sluice.Client(peer.addr) as c:
        with pytest.raises(FAMILY[name]) as e:
            c.infer("m", "1", {"x": X})
    assert (e.value.code, e.value.code_name, e.value.retryable) == (code, name, retryable)
    assert e.value.message == f"code {name}"


def test_unknown_code_is_a_plain_server_error_not_retryable() -> None:
    with UdpPeer(error_answer(777, "new")) as peer, sluice.Client(peer.addr) as c:
        with pytest.raises(sluice.ServerError) as e:
            c.infer("m", "1", {"x": X})
    assert type(e.value) is sluice.ServerError
    assert e.value.code == 777 and e.value.code_name is None and not e.value.retryable


# --- the retry helper ---------------------------------------------------------


def test_retry_retries_retryable_codes_only(client: sluice.Client) -> None:
    sent = client.stats()["sent"]
    with pytest.raises(sluice.UnavailableError):
        sluice.retry(client.infer, "remote", "1", {"x": X}, intent="training", attempts=3, backoff=0.001)
    assert client.stats()["sent"] - sent == 3, "peer_down tried three times"
    sent = client.stats()["sent"]
    with pytest.raises(sluice.RoutingError):
        sluice.retry(client.infer, "nosuch", "1", {"x": X}, attempts=3)
    assert client.stats()["sent"] - sent == 1, "unknown_model is not retried"


def test_retry_succeeds_after_transient_failures() -> None:
    answers = iter([13, 18, None])  # busy, shutting_down, then an answer

    def handler(data: bytes, addr) -> list:
        code = next(answers)
        if code is not None:
            return error_answer(code)(data, addr)
        req = sluice.wire.parse(data)
        t = req["tensors"][0]
        return [sluice.wire.build({"kind": "response", "request_id": req["request_id"],
                                   "tensors": [{"name": "y", "dtype": t["dtype"], "dims": t["dims"],
                                                "data": t["data"]}]})]

    with UdpPeer(handler) as peer, sluice.Client(peer.addr) as c:
        out = sluice.retry(c.infer, "m", "1", {"x": X}, attempts=3, backoff=0.001)
    np.testing.assert_array_equal(out["y"], X)


def test_retry_timeouts_only_when_asked() -> None:
    with UdpPeer(lambda d, a: []) as silent, sluice.Client(silent.addr, timeout=0.05) as c:
        with pytest.raises(sluice.RequestTimeoutError):
            sluice.retry(c.infer, "m", "1", {"x": X}, attempts=3)
        wait_until(lambda: silent.received == 1, what="the one try")
        with pytest.raises(sluice.RequestTimeoutError):
            sluice.retry(c.infer, "m", "1", {"x": X}, attempts=3, retry_timeouts=True)
        wait_until(lambda: silent.received == 4, what="three more tries")
        time.sleep(0.05)
        assert silent.received == 4
    with pytest.raises(ValueError):
        sluice.retry(print, attempts=0)


# --- local failures ------------------------------------------------------------


def test_timeout() -> None:
    with UdpPeer(lambda d, a: []) as silent, sluice.Client(silent.addr, timeout=0.05) as c:
        t0 = time.monotonic()
        with pytest.raises(sluice.RequestTimeoutError) as e:
            c.infer("m", "1", {"x": X})
        assert isinstance(e.value, TimeoutError) and not e.value.retryable
        assert 0.04 < time.monotonic() - t0 < 1.0
        with pytest.raises(sluice.RequestTimeoutError):
            c.infer("m", "1", {"x": X}, timeout=0.01)
        assert c.stats()["timeouts"] == 2


def test_nothing_listening_is_a_transport_error() -> None:
    with sluice.Client(f"127.0.0.1:{free_udp_port()}", timeout=1.0) as c:
        with pytest.raises(sluice.TransportError) as e:
            c.infer("m", "1", {"x": X})
    assert isinstance(e.value, OSError) and e.value.errno == errno.ECONNREFUSED


@pytest.mark.parametrize(
    "kwargs,wire_error",
    [
        ({"inputs": {f"t{i}": X for i in range(17)}}, "TooManyTensors"),
        ({"inputs": {"n" * 65: X}}, "FieldTooLong"),
        ({"inputs": {"has space": X}}, "BadString"),
        ({"model": "m" * 65}, "FieldTooLong"),
        ({"model": "bad model"}, "BadString"),
        ({"version": "v" * 33}, "FieldTooLong"),
        ({"adapter": "a" * 65}, "FieldTooLong"),
        ({"intent": "i" * 33}, "FieldTooLong"),
        ({"extensions": {f"k{i}": b"v" for i in range(17)}}, "TooManyExtensions"),
        ({"extensions": {"k": b"v" * 256}}, "FieldTooLong"),
        ({"inputs": {"x": np.ones(20000, np.float32)}}, "TooLarge"),
    ],
)
def test_invalid_requests_name_the_wire_error(client: sluice.Client, kwargs: dict, wire_error: str) -> None:
    args = {"model": "echo", "version": "1", "inputs": {"x": X}}
    args.update(kwargs)
    sent = client.stats()["sent"]
    with pytest.raises(sluice.InvalidRequestError) as e:
        client.infer(args.pop("model"), args.pop("version"), args.pop("inputs"), **args)
    assert isinstance(e.value, ValueError) and e.value.wire_error == wire_error
    assert client.stats()["sent"] == sent, "nothing was sent"


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"trace": "not-a-traceparent"}, "traceparent"),
        ({"trace": "01-" + "a" * 32 + "-" + "b" * 16 + "-01"}, "traceparent"),
        ({"deadline": -1.0}, "not negative"),
        ({"deadline": "soon"}, "deadline must be"),
        ({"schema": "s"}, "schema must be"),
        ({"extensions": {"k": 5}}, "bytes or str"),
        ({"section": object()}, "JSON-encodable"),
    ],
)
def test_bad_options(client: sluice.Client, kwargs: dict, match: str) -> None:
    with pytest.raises(sluice.InvalidRequestError, match=match):
        client.infer("echo", "1", {"x": X}, **kwargs)


def test_inputs_must_be_a_dict(client: sluice.Client) -> None:
    with pytest.raises(sluice.InvalidRequestError, match="dict"):
        client.infer("echo", "1", [X])  # type: ignore[arg-type]
    with pytest.raises(sluice.InvalidRequestError, match="str"):
        client.infer("echo", "1", {1: X})  # type: ignore[dict-item]


def test_transports(appliance) -> None:
    with pytest.raises(sluice.InvalidRequestError, match="transport must be"):
        sluice.Client(appliance.data, transport="quic")
    with sluice.Client(appliance.data, tenant=1, key=DEMO_KEY, transport="auto") as c:
        assert "y" in c.infer("mlp", "1", {"x": X})
        assert c.transport == "auto" and c.stats()["tcp_sent"] == 0
    # TCP where nothing listens for it: refused at once, a transport error.
    with pytest.raises(sluice.TransportError):
        sluice.Client(appliance.data, transport="tcp")


def test_bad_client_settings(appliance) -> None:
    for kw in [{"timeout": 0}, {"timeout": float("nan")}, {"poll": "sometimes"}, {"outstanding_max": 0}]:
        with pytest.raises(sluice.InvalidRequestError):
            sluice.Client(appliance.data, **kw)
    with pytest.raises(sluice.TransportError):
        sluice.Client("no-such-host.invalid:1")
    with pytest.raises(TypeError):
        sluice.Client(appliance.data, key=5)  # type: ignore[arg-type]


def test_closed_client(client: sluice.Client) -> None:
    client.close()
    assert client.closed
    with pytest.raises(sluice.ClientClosedError):
        client.infer("mlp", "1", {"x": X})


def test_a_second_thread_gets_busy_not_a_deadlock() -> None:
    with UdpPeer(lambda d, a: []) as silent, sluice.Client(silent.addr, timeout=1.0) as c:
        outcome = []

        def wait() -> None:
            try:
                c.infer("m", "1", {"x": X})
            except Exception as e:  # noqa: BLE001 - checked below
                outcome.append(e)

        waiting = threading.Thread(target=wait)
        waiting.start()
        t0 = time.monotonic()
        while silent.received == 0 and time.monotonic() - t0 < 5:
            time.sleep(0.005)
        with pytest.raises(sluice.ClientBusyError):
            c.infer("m", "1", {"x": X})
        waiting.join()
        assert len(outcome) == 1 and isinstance(outcome[0], sluice.RequestTimeoutError)
        with pytest.raises(sluice.RequestTimeoutError):  # usable again
            c.infer("m", "1", {"x": X}, timeout=0.01)
