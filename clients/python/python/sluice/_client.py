"""The synchronous client."""

from __future__ import annotations

import socket
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _native
from ._types import Deadline, InferRequest, NegotiatedSchema, Section

__all__ = ["Client", "Address", "Key"]

#: ``"host:port"`` or ``(host, port)``.
Address = Union[str, Tuple[str, int]]
#: A tenant key: bytes, or a str (``"hex:..."`` as in the appliance's config,
#: otherwise its UTF-8 bytes).
Key = Union[bytes, str]

Outputs = Dict[str, np.ndarray]
Schema = Union[Tuple[int, int], NegotiatedSchema]


def _addr(addr: Address) -> str:
    if isinstance(addr, tuple):
        host, port = addr
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return addr


def _key(key: Optional[Key]) -> Optional[bytes]:
    if key is None or isinstance(key, bytes):
        return key
    if isinstance(key, str):
        if key.startswith("hex:"):
            return bytes.fromhex(key[4:])
        return key.encode()
    raise TypeError("key must be bytes or str")


def _set_rcvbuf(fd: int, size: int) -> None:
    # A duplicate of the descriptor: options apply to the shared socket.
    s = socket.socket(fileno=socket.dup(fd))
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
    finally:
        s.close()


def _native_client(
    addr: Address,
    tenant: int,
    key: Optional[Key],
    transport: str,
    timeout: float,
    poll: str,
    outstanding_max: int,
    recv_buffer_bytes: Optional[int],
    tcp_addr: Optional[Address] = None,
) -> _native.NativeClient:
    n = _native.NativeClient(
        _addr(addr),
        tenant=tenant,
        key=_key(key),
        transport=transport,
        timeout=timeout,
        poll=poll,
        outstanding_max=outstanding_max,
        tcp_addr=None if tcp_addr is None else _addr(tcp_addr),
    )
    if recv_buffer_bytes:
        _set_rcvbuf(n.fileno(), recv_buffer_bytes)
    return n


class Client:
    """A Sluice client over UDP, TCP or both.

    ``Client("127.0.0.1:7070", tenant=1, key="hex:...")`` binds an ephemeral
    local UDP port connected to the appliance. Every request is signed with
    the tenant key when one is given, and signed answers are verified.

    Parameters:
        addr: the appliance's data-plane address (its UDP ``listen``; with
            ``transport="tcp"`` and no ``tcp_addr``, its ``tcp_listen``).
        tenant: tenant id written into every frame.
        key: the tenant key (bytes, or ``"hex:..."``).
        transport: ``"udp"`` (one frame per datagram: at most 65,507 bytes,
            a larger request raises :class:`InvalidRequestError`), ``"tcp"``
            (every frame on one connection to ``tcp_addr`` or ``addr``, of
            any size up to the appliance's ``tcp_frame_len_max``, pipelined
            and answered in request order), or ``"auto"`` (a frame that fits
            a datagram goes by UDP to ``addr``, a larger one over TCP to
            ``tcp_addr``; without ``tcp_addr`` it is ``"udp"``).
        tcp_addr: the appliance's TCP address (``[io_uring] tcp_listen``).
        timeout: seconds to wait for each answer.
        poll: ``"block"`` (sleep in the kernel) or ``"spin"`` (busy-wait on
            the socket, lowest latency, burns a core).
        outstanding_max: most requests in flight (``infer_many`` windows are
            capped to it).
        recv_buffer_bytes: SO_RCVBUF for the UDP socket (bursts of answers
            queue there); None keeps the system default.

    Over TCP the connection is opened by the constructor; when it is lost
    (the appliance closed it, or it failed) the requests outstanding on it
    raise :class:`ConnectionLostError` (retryable) and the next request
    opens a new one. Inputs are written to the connection from the arrays'
    own memory; a large answer is read straight into the buffer its output
    arrays view.

    One client serves one thread at a time; a second thread calling in while
    the first waits gets :class:`ClientBusyError`. Use one client per thread,
    or :class:`AsyncClient` for many requests in flight.
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
        poll: str = "block",
        outstanding_max: int = 4096,
        recv_buffer_bytes: Optional[int] = None,
    ) -> None:
        self._native = _native_client(
            addr,
            tenant,
            key,
            transport,
            timeout,
            poll,
            outstanding_max,
            recv_buffer_bytes,
            tcp_addr,
        )
        self.tenant = tenant
        self.timeout = timeout
        self.transport = transport

    def infer(
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
        """Runs ``model`` at ``version`` on ``inputs`` and returns its
        outputs by name.

        Inputs are numpy arrays (or numpy scalars) of any wire dtype,
        including float16 and bfloat16 (ml_dtypes); C-contiguous arrays in
        native byte order are read in place by the frame builder, anything
        else is converted first (one copy, counted in :meth:`stats`).

        Outputs are writable numpy arrays that view the answer's frame: no
        copy after the one out of the socket's receive buffer. The frame is
        freed when the last output array referring to it goes.

        Parameters:
            adapter: LoRA adapter id.
            intent: intent ("chat", "embed", ...), used by routes.
            deadline: seconds or a timedelta from the send, or an aware
                datetime; the appliance answers ``deadline_exceeded`` when it
                passes first.
            trace: a W3C ``traceparent`` string.
            schema: ``(schema_id, version)`` or a :class:`NegotiatedSchema`.
            section: the structured section (JSON dict/str, or Avro/Protobuf
                bytes) checked against ``schema``.
            extensions: extension headers, key to bytes (or str).
            token_count: declared token count (load accounting).
            timeout: this request's timeout, instead of the client's.

        Raises a :class:`ServerError` subclass when the appliance answers
        with an error, :class:`RequestTimeoutError` when nothing comes back
        in time, :class:`InvalidRequestError` when the request cannot be
        built.
        """
        out: Outputs = self._native.infer(
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
        return out

    def infer_response(
        self,
        model: str,
        version: str,
        inputs: Mapping[str, Any],
        **kwargs: Any,
    ) -> _native.Response:
        """Like :meth:`infer`, returning a :class:`Response` with the outputs
        and the answer's metadata (model version and adapter that served it,
        token count, trace, extensions)."""
        r: _native.Response = self._native.infer(model, version, inputs, full=True, **kwargs)
        return r

    def infer_many(
        self,
        requests: Iterable[Union[InferRequest, Tuple[str, str, Mapping[str, Any]]]],
        *,
        window: int = 32,
        return_exceptions: bool = False,
    ) -> List[Any]:
        """Pipelines ``requests`` over the socket, keeping up to ``window``
        in flight, and returns their outputs in order.

        Each request is an :class:`InferRequest` or a ``(model, version,
        inputs)`` tuple. With ``return_exceptions`` a failed request's place
        holds its exception; otherwise the first failure (in request order)
        is raised after every request has been answered or has timed out.
        """
        reqs: Sequence[Any] = requests if isinstance(requests, list) else list(requests)
        return self._native.infer_many(reqs, window=window, return_exceptions=return_exceptions)

    def negotiate(self, subject: str, version_hint: int = 0) -> NegotiatedSchema:
        """Asks the appliance for the schema of ``subject`` (``version_hint``
        0: the latest). Answers are cached for the ttl the appliance gives.
        Raises :class:`SchemaError` (``unknown_subject``) for an unknown
        subject."""
        d = self._native.negotiate(subject, version_hint)
        return NegotiatedSchema(**d)

    def ping(self) -> float:
        """Round-trip time of a ping, in seconds."""
        return self._native.ping()

    def stats(self) -> Dict[str, int]:
        """Counters: frames sent and received, ignored datagrams (stale,
        malformed, bad tag), timeouts, schema cache hits, frames sent over
        TCP (``tcp_sent``), TCP connections lost and opened again
        (``connection_losses``, ``tcp_reconnects``), and the copies made
        on the way (``inputs_copied``; ``answers_copied``: answers copied
        out of a receive buffer, every datagram and TCP answers up to
        64 KiB, larger TCP answers are read in place; ``outputs_viewed``,
        ``outputs_copied``; and their bytes)."""
        return self._native.stats()

    @property
    def local_addr(self) -> Tuple[str, int]:
        """The local socket's ``(host, port)``."""
        return self._native.local_addr()

    @property
    def server_addr(self) -> Tuple[str, int]:
        """The appliance's ``(host, port)``."""
        return self._native.server_addr()

    def fileno(self) -> int:
        """The UDP socket's file descriptor."""
        return self._native.fileno()

    def close(self) -> None:
        """Closes the socket."""
        self._native.close()

    @property
    def sender_id(self) -> int:
        """The random sender id this client names in its signed frames: its
        request ids are one counter, for the appliance's replay window
        (docs/wire.md, "Replay windows")."""
        return self._native.sender_id

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._native.closed

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.closed:
            return "Client(closed)"
        host, port = self.server_addr
        return f"Client({host}:{port}, tenant={self.tenant}, transport={self.transport!r})"
