"""The asyncio client: many requests in flight on one socket."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from . import _native
from ._client import Address, Key, Outputs, Schema, _native_client
from ._types import Deadline, InferRequest, NegotiatedSchema, Section

__all__ = ["AsyncClient"]

# Answers taken per readiness callback; the loop calls again while more wait.
_POLL_MAX = 256
# Extra wait past a request's timeout before asking the Rust client to
# report it (it expires requests by its own clock).
_EXPIRY_SLACK_S = 0.001


class AsyncClient:
    """An asyncio client: every ``await client.infer(...)`` shares one UDP
    socket (and, with ``transport="tcp"`` or ``"auto"``, one TCP
    connection), and answers are matched by request id as they arrive (the
    sockets are watched by the event loop; waiting never blocks it).

    Over TCP a send writes its whole frame before ``infer`` awaits the
    answer: while the appliance pushes back (its pipeline or slots are
    full) that write holds the loop, bounded by the timeout, and reads the
    answers that arrive meanwhile. A lost connection fails its requests with
    :class:`ConnectionLostError`; the next send reconnects.

    Takes the same parameters as :class:`Client` (``poll`` excepted), plus
    ``recv_buffer_bytes`` (default 4 MiB) so that a burst of answers to many
    requests in flight queues in the kernel instead of being dropped.
    ``outstanding_max`` bounds the requests in flight: further ``infer``
    calls wait for a free slot.

    Use it from one event loop. ``negotiate`` and ``ping`` run on a second
    socket in the loop's executor, so they never stall the loop.
    """

    def __init__(
        self,
        addr: Address,
        *,
        tenant: int = 0,
        key: Optional[Key] = None,
        transport: str = "udp",
        tcp_addr: Optional[Address] = None,
        timeout: float = 1.0,
        outstanding_max: int = 4096,
        recv_buffer_bytes: Optional[int] = 4 << 20,
    ) -> None:
        self._args = (addr, tenant, key, transport, timeout, tcp_addr)
        self._native = _native_client(
            addr,
            tenant,
            key,
            transport,
            timeout,
            "block",
            outstanding_max,
            recv_buffer_bytes,
            tcp_addr,
        )
        self._control: Optional[_native.NativeClient] = None
        self._fd = self._native.fileno()
        # The TCP connection the loop watches: (fd, reconnects) or None.
        self._tcp: Optional[Tuple[int, int]] = None
        self._uses_tcp = transport != "udp"
        self._futures: Dict[int, "asyncio.Future[Outputs]"] = {}
        # Token streams (AsyncTokenStream): request id -> its frame queue.
        self._streams: Dict[int, "asyncio.Queue[Any]"] = {}
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._slots = outstanding_max
        self._waiters: List["asyncio.Future[None]"] = []
        self.timeout = timeout
        self.tenant = tenant
        self.transport = transport

    def _bind(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
            loop.add_reader(self._fd, self._drain)
            self._watch_tcp()
        elif self._loop is not loop:
            raise RuntimeError("AsyncClient is bound to another event loop")
        return loop

    def _watch_tcp(self) -> None:
        """Makes the loop watch the TCP connection that is open now (a
        reconnect opens a new one, maybe under the old descriptor number)."""
        if not self._uses_tcp or self._loop is None or self._native.closed:
            return
        now = self._native.tcp_fileno()
        if now == self._tcp:
            return
        if self._tcp is not None:
            # A closed descriptor is no longer in the selector's kernel
            # set; asyncio forgets it without complaint.
            self._loop.remove_reader(self._tcp[0])
        self._tcp = now
        if now is not None:
            self._loop.add_reader(now[0], self._drain)

    def _drain(self) -> None:
        """Hands every ready answer (and every expired request) to its
        future."""
        if self._native.closed:
            return
        got = self._native.poll(_POLL_MAX)
        for rid, outputs, exc in got:
            fut = self._futures.pop(rid, None)
            if fut is None or fut.done():
                continue
            if exc is None and outputs is not None:
                fut.set_result(outputs)
            elif exc is not None:
                fut.set_exception(exc)
        for rid, q in list(self._streams.items()):
            # A token stream's frames, kept apart by the Rust client (its
            # follow); a refusal ends the stream.
            while True:
                try:
                    r = self._native.recv_followed(rid, 0.0)
                except Exception as e:  # the stream's error frame
                    q.put_nowait(e)
                    break
                if r is None:
                    break
                q.put_nowait(r)
        if self._uses_tcp:
            self._watch_tcp()
            # Answers buffered past what one poll takes raise no readiness
            # on the TCP socket: come back for them.
            if len(got) == _POLL_MAX and self._loop is not None:
                self._loop.call_soon(self._drain)

    async def _acquire(self) -> None:
        while self._slots == 0:
            assert self._loop is not None
            w: "asyncio.Future[None]" = self._loop.create_future()
            self._waiters.append(w)
            try:
                await w
            except BaseException:
                if w in self._waiters:
                    self._waiters.remove(w)
                raise
        self._slots -= 1

    def _release(self) -> None:
        self._slots += 1
        while self._waiters:
            w = self._waiters.pop(0)
            if not w.done():
                w.set_result(None)
                break

    def _open_stream(self, model: str, version: str, inputs: Mapping[str, Any], queue: "asyncio.Queue[Any]",
                     **kwargs: Any) -> int:
        """Sends a token stream's OPEN; its frames go to ``queue``
        (AsyncTokenStream)."""
        self._bind()
        rid: int = self._native.send(model, version, inputs, **kwargs)
        self._native.follow(rid)
        self._streams[rid] = queue
        return rid

    def _close_stream(self, rid: int) -> None:
        self._streams.pop(rid, None)
        if not self._native.closed:
            self._native.unfollow(rid)

    async def infer(
        self,
        model: str,
        version: str,
        inputs: Mapping[str, Any],
        *,
        adapter: Optional[str] = None,
        intent: Optional[str] = None,
        deadline: Optional[Deadline] = None,
        trace: Optional[str] = None,
        schema: Optional[Schema] = None,
        section: Optional[Section] = None,
        extensions: Optional[Mapping[str, Union[bytes, str]]] = None,
        token_count: int = 0,
        timeout: Optional[float] = None,
    ) -> Outputs:
        """As :meth:`Client.infer`, awaited. The request is sent at once
        (when a slot is free); the coroutine resumes when its answer
        arrives or its timeout passes. Cancelling it abandons the request:
        a late answer is ignored."""
        loop = self._bind()
        await self._acquire()
        try:
            rid = self._native.send(
                model,
                version,
                inputs,
                adapter=adapter,
                intent=intent,
                deadline=deadline,
                trace=trace,
                schema=schema,
                section=section,
                extensions=extensions,
                token_count=token_count,
                timeout=timeout,
            )
            fut: "asyncio.Future[Outputs]" = loop.create_future()
            self._futures[rid] = fut
            if self._uses_tcp:
                # The send may have opened a new connection, or read
                # answers while the appliance pushed back.
                self._watch_tcp()
                if self._native.ready():
                    loop.call_soon(self._drain)
            expiry = loop.call_later((timeout or self.timeout) + _EXPIRY_SLACK_S, self._drain)
            try:
                return await fut
            finally:
                expiry.cancel()
                self._futures.pop(rid, None)
        finally:
            self._release()

    async def infer_many(
        self,
        requests: Iterable[Union[InferRequest, Tuple[str, str, Mapping[str, Any]]]],
        *,
        window: int = 32,
        return_exceptions: bool = False,
    ) -> List[Any]:
        """Runs ``requests`` with up to ``window`` in flight; results in
        order (see :meth:`Client.infer_many`)."""
        if window < 1:
            raise ValueError("window must be at least 1")
        reqs = list(requests)
        results: List[Any] = [None] * len(reqs)
        it = iter(range(len(reqs)))

        async def worker() -> None:
            for i in it:
                r = reqs[i]
                try:
                    if isinstance(r, InferRequest):
                        results[i] = await self.infer(r.model, r.version, r.inputs, **r.kwargs())
                    else:
                        model, version, inputs = r
                        results[i] = await self.infer(model, version, inputs)
                except Exception as e:  # noqa: BLE001 - collected per request
                    results[i] = e

        await asyncio.gather(*(worker() for _ in range(min(window, len(reqs)) or 1)))
        if not return_exceptions:
            for r in results:
                if isinstance(r, BaseException):
                    raise r
        return results

    def _control_client(self) -> _native.NativeClient:
        if self._control is None:
            addr, tenant, key, transport, timeout, tcp_addr = self._args
            self._control = _native_client(
                addr, tenant, key, transport, timeout, "block", 16, None, tcp_addr
            )
        return self._control

    async def negotiate(self, subject: str, version_hint: int = 0) -> NegotiatedSchema:
        """As :meth:`Client.negotiate`, on the control socket."""
        loop = self._bind()
        c = self._control_client()
        d = await loop.run_in_executor(None, c.negotiate, subject, version_hint)
        return NegotiatedSchema(**d)

    async def ping(self) -> float:
        """Round-trip time of a ping on the control socket, in seconds."""
        loop = self._bind()
        return await loop.run_in_executor(None, self._control_client().ping)

    def stats(self) -> Dict[str, int]:
        """Counters of the data socket (see :meth:`Client.stats`)."""
        return self._native.stats()

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered or timed out."""
        return self._native.outstanding()

    async def aclose(self) -> None:
        """Stops watching the socket and closes it; requests still in flight
        fail with :class:`ClientClosedError`."""
        self.close()

    def close(self) -> None:
        """Synchronous :meth:`aclose`."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._fd)
            if self._tcp is not None:
                self._loop.remove_reader(self._tcp[0])
        self._tcp = None
        self._loop = None
        if not self._native.closed:
            self._native.close()
        if self._control is not None:
            self._control.close()
        from ._errors import ClientClosedError

        for fut in self._futures.values():
            if not fut.done():
                fut.set_exception(ClientClosedError("the client was closed"))
        self._futures.clear()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
