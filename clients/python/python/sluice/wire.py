"""Frames as dicts, parsed and built by the Rust wire crate (``sluice-wire``)
itself: the conformance vectors of ``docs/vectors/`` go through these.

A frame dict has the keys ``kind`` (``"request"``, ``"response"``,
``"error"``, ``"negotiate_request"``, ``"negotiate_response"``, ``"ping"``,
``"pong"``), ``version``, ``flags``, ``tenant_id``, ``request_id``,
``deadline_us``, ``schema_id``, ``schema_version``, ``token_count``,
``trace`` (``{"trace_id": 16 bytes, "span_id": 8 bytes, "flags": int}``),
``model``, ``model_version``, ``adapter``, ``intent``, ``extensions``
(``[{"key", "value"}]``), ``tensors`` (``[{"name", "dtype", "dtype_name",
"dims", "data_offset", "data_len", "data"}]``), ``body`` (None, or one of
``{"error": {"code", "code_name", "message"}}``, ``{"negotiate_request":
{"subject", "version_hint"}}``, ``{"negotiate_response": {"schema_id",
"version", "ttl_ms", "schema_type", "schema"}}``), ``auth_tag`` and
``stream`` (None, or the decoded ``sluice-stream`` extension header:
``{"stream_id", "seq", "flags", "end_reason", "tokens_per_frame",
"max_tokens"}``, docs/wire.md "Streams"; its bytes are also in
``extensions``). :func:`stream_extension` makes that extension.
``sender_id`` is the id of the frame's ``sluice-sender`` header, or None
when it names no sender (docs/wire.md "Replay windows").
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from . import _native
from ._errors import ERROR_CODES, WireError
from ._types import DTYPES

__all__ = [
    "parse",
    "build",
    "sign",
    "verify",
    "stream_extension",
    "STREAM_OPEN",
    "STREAM_CONTINUE",
    "STREAM_END",
    "STREAM_CANCEL",
    "WireError",
    "ERROR_CODES",
    "DTYPES",
    "DATAGRAM_LEN_MAX",
]

#: Stream flag bits (docs/wire.md, "Stream header").
STREAM_OPEN, STREAM_CONTINUE, STREAM_END, STREAM_CANCEL = 1, 2, 4, 8

#: Largest frame one UDP datagram carries.
DATAGRAM_LEN_MAX: int = _native.DATAGRAM_LEN_MAX


def parse(data: bytes) -> Dict[str, Any]:
    """Parses one frame with ``Frame::new_checked``. Raises
    :class:`WireError` (``.name`` = ``BadMagic``, ``Truncated``, ...) when
    the bytes are not a valid frame."""
    return _native.parse(bytes(data))


def build(frame: Dict[str, Any], key: Optional[bytes] = None) -> bytes:
    """Builds a frame from a dict shaped like :func:`parse`'s result
    (missing keys are zero) with ``FrameRepr::emit``: tensors placed at the
    next multiple of 64. With ``key`` the frame is signed (AUTHENTICATED
    flag, HMAC tag). Raises :class:`WireError` when a limit is exceeded."""
    return _native.build(frame, key)


def sign(data: bytes, key: bytes) -> bytes:
    """The frame signed with ``key`` (AUTHENTICATED flag set, tag written)."""
    return _native.sign(bytes(data), key)


def verify(data: bytes, key: bytes) -> bool:
    """Whether the frame's authentication tag verifies with ``key``."""
    return _native.verify(bytes(data), key)


def stream_extension(stream: Dict[str, Any], kind: str = "request") -> Dict[str, Any]:
    """The ``sluice-stream`` extension (``{"key", "value"}``) for a frame of
    ``kind``, from a dict shaped like :func:`parse`'s ``stream``. Raises
    :class:`WireError` (``BadStream``) when the header breaks its rules."""
    return {"key": "sluice-stream", "value": _native.stream_header(stream, kind)}
