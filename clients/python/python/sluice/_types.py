"""Small value types: requests for ``infer_many``, typed raw tensors, and
negotiated schemas."""

from __future__ import annotations

import datetime as _dt
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from . import _native

__all__ = ["InferRequest", "Raw", "NegotiatedSchema", "DTYPES", "Deadline", "Section"]

#: The wire's dtype table, from the Rust crate: name -> (code, bytes per element).
DTYPES: Dict[str, Tuple[int, int]] = {name: (code, size) for code, name, size in _native.dtypes()}

#: A deadline: seconds (or a timedelta) from the moment the request is sent,
#: or an absolute, timezone-aware datetime.
Deadline = Union[float, int, _dt.timedelta, _dt.datetime]

#: A structured section: JSON (a dict, list or str; dicts are encoded
#: compactly) or the Avro/Protobuf encoding of one value as bytes.
Section = Union[bytes, bytearray, memoryview, str, Mapping[str, Any], List[Any]]


class Raw:
    """An array sent with an explicit wire dtype, byte for byte.

    For dtypes numpy lacks without extra packages: ``Raw(bits, "bf16")``
    sends a uint16 array holding bfloat16 bit patterns as ``bf16``. The
    element size must match the dtype's.
    """

    __slots__ = ("array", "_sluice_wire_dtype")

    def __init__(self, array: np.ndarray, dtype: str) -> None:
        if dtype not in DTYPES:
            raise ValueError(f"unknown wire dtype {dtype!r}; one of {sorted(DTYPES)}")
        self.array = array
        self._sluice_wire_dtype = DTYPES[dtype][0]

    def __repr__(self) -> str:
        name = next(n for n, (c, _) in DTYPES.items() if c == self._sluice_wire_dtype)
        return f"Raw({self.array!r}, {name!r})"


class InferRequest:
    """One request for :meth:`Client.infer_many` and
    :meth:`AsyncClient.infer_many`; the fields are ``infer``'s arguments."""

    __slots__ = (
        "model",
        "version",
        "inputs",
        "adapter",
        "intent",
        "deadline",
        "trace",
        "schema",
        "section",
        "extensions",
        "token_count",
        "timeout",
    )

    def __init__(
        self,
        model: str,
        version: str,
        inputs: Mapping[str, Any],
        *,
        adapter: Optional[str] = None,
        intent: Optional[str] = None,
        deadline: Optional[Deadline] = None,
        trace: Optional[str] = None,
        schema: Optional[Union[Tuple[int, int], "NegotiatedSchema"]] = None,
        section: Optional[Section] = None,
        extensions: Optional[Mapping[str, Union[bytes, str]]] = None,
        token_count: int = 0,
        timeout: Optional[float] = None,
    ) -> None:
        self.model = model
        self.version = version
        self.inputs = inputs
        self.adapter = adapter
        self.intent = intent
        self.deadline = deadline
        self.trace = trace
        self.schema = schema
        self.section = section
        self.extensions = extensions
        self.token_count = token_count
        self.timeout = timeout

    def kwargs(self) -> Dict[str, Any]:
        """The keyword arguments of ``infer`` this request stands for."""
        return {
            "adapter": self.adapter,
            "intent": self.intent,
            "deadline": self.deadline,
            "trace": self.trace,
            "schema": self.schema,
            "section": self.section,
            "extensions": self.extensions,
            "token_count": self.token_count,
            "timeout": self.timeout,
        }

    def __repr__(self) -> str:
        return f"InferRequest({self.model!r}, {self.version!r}, inputs={sorted(self.inputs)})"


class NegotiatedSchema:
    """A schema the appliance gave by in-band negotiation. Pass it as
    ``schema=`` to send requests that carry its id and version."""

    __slots__ = ("schema_id", "version", "ttl", "schema_type", "schema")

    def __init__(self, schema_id: int, version: int, ttl: float, schema_type: str, schema: bytes) -> None:
        #: Global schema id.
        self.schema_id = schema_id
        #: Version within the subject.
        self.version = version
        #: How long the answer may be cached, in seconds.
        self.ttl = ttl
        #: "AVRO", "PROTOBUF", "JSON" or "TENSOR".
        self.schema_type = schema_type
        #: The schema text or descriptor bytes.
        self.schema = schema

    @property
    def text(self) -> str:
        """The schema as text (Avro, JSON Schema, .proto, tensor signature)."""
        return self.schema.decode("utf-8", errors="replace")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NegotiatedSchema):
            return NotImplemented
        return (self.schema_id, self.version, self.schema_type, self.schema) == (
            other.schema_id,
            other.version,
            other.schema_type,
            other.schema,
        )

    def __hash__(self) -> int:
        return hash((self.schema_id, self.version))

    def __repr__(self) -> str:
        return (
            f"NegotiatedSchema(schema_id={self.schema_id}, version={self.version}, "
            f"schema_type={self.schema_type!r}, ttl={self.ttl})"
        )
