"""Sluice: the Python client of the Sluice inference appliance.

numpy arrays in, numpy arrays out::

    import numpy as np, sluice

    with sluice.Client("127.0.0.1:7070", tenant=1, key="hex:...") as c:
        out = c.infer("mlp", "1", {"x": np.ones((1, 4), np.float32)})
        print(out["y"])

The frames are built and parsed by the Rust client (``sluice-client``) that
this package wraps; see the README for the API, the copies it makes and the
errors it raises.
"""

from __future__ import annotations

import sys as _sys

if _sys.byteorder != "little":  # pragma: no cover - no such host here
    raise ImportError("sluice supports little-endian hosts only (the wire is little-endian)")

from . import wire
from ._async import AsyncClient
from ._client import Client
from ._errors import (
    ERROR_CODES,
    AuthError,
    ClientBusyError,
    ClientClosedError,
    ClientError,
    ConnectionLostError,
    FrameLostError,
    DeadlineExceededError,
    InferenceError,
    StreamError,
    InvalidRequestError,
    MalformedAnswerError,
    NotSupportedError,
    ProtocolError,
    RequestTimeoutError,
    RoutingError,
    SchemaError,
    ServerError,
    SluiceError,
    TensorError,
    TooManyOutstandingError,
    TransportError,
    UnavailableError,
    WireError,
    error_class,
)
from ._native import Response
from ._retry import retry, retry_async
from ._stream import AsyncStateStream, StateStream
from ._tokens import END_REASONS, AsyncTokenStream, TokenFrame, TokenStream
from ._types import DTYPES, InferRequest, NegotiatedSchema, Raw

__version__ = "0.1.0"

__all__ = [
    "Client",
    "AsyncClient",
    "InferRequest",
    "Raw",
    "NegotiatedSchema",
    "Response",
    "StateStream",
    "AsyncStateStream",
    "TokenStream",
    "AsyncTokenStream",
    "TokenFrame",
    "FrameLostError",
    "END_REASONS",
    "retry",
    "retry_async",
    "wire",
    "DTYPES",
    "ERROR_CODES",
    "error_class",
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
]
