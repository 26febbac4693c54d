"""Type stubs of the native module (Rust, PyO3). Use the wrappers in
``sluice`` (``Client``, ``AsyncClient``, ``sluice.wire``) rather than this
module directly."""

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

DATAGRAM_LEN_MAX: int

class Response:
    """An answer with its metadata (``Client.infer_response``)."""

    @property
    def outputs(self) -> Dict[str, np.ndarray]: ...
    @property
    def request_id(self) -> int: ...
    @property
    def model(self) -> str: ...
    @property
    def model_version(self) -> str: ...
    @property
    def adapter(self) -> str: ...
    @property
    def token_count(self) -> int: ...
    @property
    def schema(self) -> Tuple[int, int]: ...
    @property
    def trace(self) -> Optional[str]: ...
    @property
    def extensions(self) -> List[Tuple[str, bytes]]: ...

class OutputArray:
    """One output tensor's place in an answer frame; ``numpy.asarray``
    turns it into a view."""

    @property
    def __array_interface__(self) -> Dict[str, Any]: ...

class NativeClient:
    def __init__(
        self,
        addr: str,
        tenant: int = 0,
        key: Optional[bytes] = None,
        transport: str = "udp",
        timeout: float = 1.0,
        poll: str = "block",
        outstanding_max: int = 4096,
        schema_cache_max: int = 1024,
        tcp_addr: Optional[str] = None,
    ) -> None: ...
    def send(
        self,
        model: str,
        version: str,
        inputs: Mapping[str, Any],
        *,
        adapter: Optional[str] = None,
        intent: Optional[str] = None,
        deadline: Any = None,
        trace: Optional[str] = None,
        schema: Any = None,
        section: Any = None,
        extensions: Any = None,
        token_count: int = 0,
        timeout: Optional[float] = None,
    ) -> int: ...
    def infer(
        self,
        model: str,
        version: str,
        inputs: Mapping[str, Any],
        *,
        adapter: Optional[str] = None,
        intent: Optional[str] = None,
        deadline: Any = None,
        trace: Optional[str] = None,
        schema: Any = None,
        section: Any = None,
        extensions: Any = None,
        token_count: int = 0,
        timeout: Optional[float] = None,
        full: bool = False,
    ) -> Any: ...
    def infer_many(
        self, requests: Sequence[Any], window: int = 32, return_exceptions: bool = False
    ) -> List[Any]: ...
    def poll(self, max: int = 256) -> List[Tuple[int, Optional[Dict[str, np.ndarray]], Optional[BaseException]]]: ...
    def negotiate(self, subject: str, version_hint: int = 0) -> Dict[str, Any]: ...
    def ping(self) -> float: ...
    def fileno(self) -> int: ...
    def tcp_fileno(self) -> Optional[Tuple[int, int]]: ...
    def ready(self) -> bool: ...
    def local_addr(self) -> Tuple[str, int]: ...
    def server_addr(self) -> Tuple[str, int]: ...
    def outstanding(self) -> int: ...
    def stats(self) -> Dict[str, int]: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...

def parse(data: bytes) -> Dict[str, Any]: ...
def build(frame: Mapping[str, Any], key: Optional[bytes] = None) -> bytes: ...
def sign(data: bytes, key: bytes) -> bytes: ...
def verify(data: bytes, key: bytes) -> bool: ...
def error_codes() -> List[Tuple[int, str, bool]]: ...
def dtypes() -> List[Tuple[int, str, int]]: ...
