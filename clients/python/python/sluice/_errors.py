"""Exceptions: one class per family of appliance error codes, and one per
kind of local failure. Every exception carries ``code`` (the wire code, or
None for local failures), ``code_name``, ``message`` and ``retryable``."""

from __future__ import annotations

from typing import Dict, Optional, Tuple, Type

from . import _native

__all__ = [
    "SluiceError",
    "ServerError",
    "ProtocolError",
    "AuthError",
    "RoutingError",
    "SchemaError",
    "TensorError",
    "DeadlineExceededError",
    "UnavailableError",
    "InferenceError",
    "StreamError",
    "ClientError",
    "FrameLostError",
    "RequestTimeoutError",
    "TransportError",
    "ConnectionLostError",
    "InvalidRequestError",
    "MalformedAnswerError",
    "NotSupportedError",
    "ClientBusyError",
    "ClientClosedError",
    "TooManyOutstandingError",
    "WireError",
    "ERROR_CODES",
    "error_class",
]


class SluiceError(Exception):
    """Base of every exception the package raises."""

    code: Optional[int]
    code_name: Optional[str]
    message: str
    retryable: bool

    def __init__(
        self,
        message: str,
        code: Optional[int] = None,
        code_name: Optional[str] = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.code_name = code_name
        self.retryable = retryable

    def __str__(self) -> str:
        if self.code is None:
            return self.message
        return f"{self.code_name or 'unknown code'} ({self.code}): {self.message}"


# --- the appliance answered with an error frame -----------------------------


class ServerError(SluiceError):
    """The appliance answered with an error frame. Codes this build does not
    know (a newer appliance) arrive as this class, not retryable."""


class ProtocolError(ServerError):
    """The frame itself was refused: malformed_frame, unsupported_version,
    frame_too_large, response_too_large, unsupported_kind."""


class AuthError(ServerError):
    """unauthenticated (unknown tenant, unsigned or bad tag), stale (a
    signed frame's deadline is 0 or beyond the appliance's freshness
    window), replayed (the appliance already accepted a frame with this
    tag), or forbidden (not sent by the appliance, which answers a thing
    outside a tenant's lists as one that does not exist)."""


class RoutingError(ServerError):
    """The request could not be placed: model_version_required, no_route,
    unknown_model, unknown_adapter, no_route_to_shard."""


class SchemaError(ServerError):
    """unknown_schema, schema_mismatch (the structured section or tensors do
    not match the schema) or unknown_subject (negotiation)."""


class TensorError(ServerError):
    """bad_tensor: a tensor's dtype, shape or alignment does not fit the
    model."""


class DeadlineExceededError(ServerError):
    """deadline_exceeded: the deadline passed before the request ran."""


class UnavailableError(ServerError):
    """Retryable: busy, peer_down, internal, shutting_down, connection_lost.
    The same request may succeed later (see :func:`sluice.retry`)."""


class InferenceError(ServerError):
    """inference_failed: the model ran and failed."""


class StreamError(ServerError):
    """A stream frame was refused: unknown_stream (never opened, ended,
    reclaimed or on another worker), stream_sequence (not the seq the
    appliance expects next), stream_state_mismatch (the alias moved to a
    version with other state shapes), stream_unsupported. stream_limit is
    retryable and therefore an UnavailableError."""


_FAMILIES: Dict[str, Type[ServerError]] = {
    "malformed_frame": ProtocolError,
    "unsupported_version": ProtocolError,
    "frame_too_large": ProtocolError,
    "response_too_large": ProtocolError,
    "unsupported_kind": ProtocolError,
    "unauthenticated": AuthError,
    "forbidden": AuthError,
    "stale": AuthError,
    "replayed": AuthError,
    "model_version_required": RoutingError,
    "no_route": RoutingError,
    "unknown_model": RoutingError,
    "unknown_adapter": RoutingError,
    "no_route_to_shard": RoutingError,
    "unknown_schema": SchemaError,
    "schema_mismatch": SchemaError,
    "unknown_subject": SchemaError,
    "bad_tensor": TensorError,
    "deadline_exceeded": DeadlineExceededError,
    "busy": UnavailableError,
    "peer_down": UnavailableError,
    "internal": UnavailableError,
    "shutting_down": UnavailableError,
    "connection_lost": UnavailableError,
    "inference_failed": InferenceError,
    "unknown_stream": StreamError,
    "stream_sequence": StreamError,
    "stream_limit": UnavailableError,
    "stream_state_mismatch": StreamError,
    "stream_unsupported": StreamError,
}

#: The wire's error-code table, from the Rust crate: code -> (name, retryable).
ERROR_CODES: Dict[int, Tuple[str, bool]] = {
    code: (name, retryable) for code, name, retryable in _native.error_codes()
}


def error_class(code: int) -> Type[ServerError]:
    """The exception class for a wire error code (ServerError when unknown)."""
    entry = ERROR_CODES.get(code)
    if entry is None:
        return ServerError
    return _FAMILIES.get(entry[0], ServerError)


# --- failures on this side ---------------------------------------------------


class ClientError(SluiceError):
    """A failure on the client side: nothing came back from the appliance
    that says why."""


class RequestTimeoutError(ClientError, TimeoutError):
    """No answer within the timeout. Not retryable by default: the request
    may have run (inference is not assumed idempotent)."""


class TransportError(ClientError, OSError):
    """The socket failed (for example: connection refused, nothing listens
    on the appliance's port). ``errno`` is set when the OS gave one."""

    def __init__(self, message: str, errno: Optional[int] = None) -> None:
        ClientError.__init__(self, message)
        self.errno = errno

    def __str__(self) -> str:
        return self.message


class ConnectionLostError(TransportError):
    """The TCP connection was lost while this request was outstanding (the
    appliance closed it, or it failed). Retryable: the client opens a new
    connection for the next request. The request may have run."""

    def __init__(self, message: str) -> None:
        TransportError.__init__(self, message)
        self.retryable = True


class InvalidRequestError(ClientError, ValueError):
    """The request cannot be built: a field exceeds a wire limit, a dtype is
    not in the wire table, the frame exceeds one datagram on
    ``transport="udp"`` (or on ``"auto"`` without a ``tcp_addr``). ``wire_error`` is
    the ``sluice_wire::Error`` variant name when the builder refused it."""

    def __init__(self, message: str, wire_error: Optional[str] = None) -> None:
        ClientError.__init__(self, message)
        self.wire_error = wire_error


class MalformedAnswerError(ClientError):
    """An answer carried this request's id but was not a valid answer to it
    (wrong frame kind, bad body)."""


class FrameLostError(MalformedAnswerError):
    """A token stream's frame did not arrive (a gap in ``seq``, UDP loss).
    The stream is cancelled; ``expected`` and ``got`` are the seqs."""

    def __init__(self, expected: int, got: int) -> None:
        MalformedAnswerError.__init__(self, f"a token frame was lost: expected seq {expected}, got {got}")
        self.expected = expected
        self.got = got


class NotSupportedError(ClientError):
    """The option is not supported by this build."""


class ClientBusyError(ClientError, RuntimeError):
    """Another thread is using this client; use one client per thread."""


class ClientClosedError(ClientError):
    """The client was closed."""


class TooManyOutstandingError(ClientError):
    """More requests in flight than ``outstanding_max``."""


class WireError(SluiceError, ValueError):
    """``sluice.wire.parse``/``build`` refused a frame. ``name`` is the
    ``sluice_wire::Error`` variant (``BadMagic``, ``Truncated``, ...)."""

    def __init__(self, message: str, name: str) -> None:
        SluiceError.__init__(self, message)
        self.name = name

    def __str__(self) -> str:
        return f"{self.name}: {self.message}"


def from_native(
    kind: str,
    code: Optional[int],
    message: str,
    retryable: bool,
    detail: object,
) -> SluiceError:
    """Called by the native module to build the exception it raises."""
    if kind == "server":
        assert code is not None
        entry = ERROR_CODES.get(code)
        name = entry[0] if entry else None
        return error_class(code)(message, code=code, code_name=name, retryable=retryable)
    if kind == "timeout":
        return RequestTimeoutError(message)
    if kind == "connection_lost":
        return ConnectionLostError(message)
    if kind == "io":
        return TransportError(message, errno=detail if isinstance(detail, int) else None)
    if kind == "malformed":
        return MalformedAnswerError(message)
    if kind == "invalid":
        return InvalidRequestError(message, wire_error=detail if isinstance(detail, str) else None)
    if kind == "unsupported":
        return NotSupportedError(message)
    if kind == "busy":
        return ClientBusyError(message)
    if kind == "closed":
        return ClientClosedError(message)
    if kind in ("too_many_outstanding", "nothing_pending"):
        return TooManyOutstandingError(message)
    if kind == "wire":
        return WireError(message, str(detail))
    return ClientError(message)
