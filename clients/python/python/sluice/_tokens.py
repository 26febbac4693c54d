"""Token streams (server-driven, docs/wire.md "Streams"): one ``OPEN``
request carries a prompt, then the appliance sends token frames, one per
``tokens_per_frame`` tokens, until the last one, marked END, says why it
ended (``eos``, ``max_tokens``, ``deadline``, ``cancelled``).

:class:`TokenStream` iterates over the frames (``for f in stream``, or
``stream.tokens()`` for the tokens alone); :class:`AsyncTokenStream` does
the same with ``async for``. Both are context managers that cancel a stream
left running. Over UDP a lost frame shows as a gap in ``seq``: the iterator
raises :class:`FrameLostError` and the stream is cancelled, which frees its
slot in the appliance."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Dict, Iterator, List, NamedTuple, Optional, Tuple

import numpy as np

from ._errors import FrameLostError, MalformedAnswerError, RequestTimeoutError, ServerError
from ._stream import _CANCEL, _END, _KEY, _LAYOUT, _OPEN, _new_id, _parse

__all__ = ["TokenFrame", "TokenStream", "AsyncTokenStream", "END_REASONS"]

#: docs/wire.md "Stream header": the END frame's reason byte.
END_REASONS = {0: "none", 1: "eos", 2: "max_tokens", 3: "deadline", 4: "cancelled", 5: "client", 6: "error"}


class TokenFrame(NamedTuple):
    """One frame of a token stream."""

    #: 0, 1, 2, ... within the stream.
    seq: int
    #: Its tokens (int64), at most ``tokens_per_frame``; the END frame may
    #: carry none.
    tokens: np.ndarray
    #: On the END frame the reason (``"eos"``, ``"max_tokens"``,
    #: ``"deadline"``, ``"cancelled"``), else ``None``.
    end: Optional[str]


def _open_header(stream_id: int, tokens_per_frame: int, max_tokens: int) -> bytes:
    if not 0 < tokens_per_frame < (1 << 16):
        raise ValueError("tokens_per_frame is 1..65535")
    if not 0 <= max_tokens < (1 << 32):
        raise ValueError("max_tokens is a u32 (0: the model's limit)")
    return _LAYOUT.pack(stream_id, 0, _OPEN, 0, tokens_per_frame, max_tokens, 0)


def _prompt(prompt: Any) -> np.ndarray:
    if isinstance(prompt, (bytes, bytearray)):
        prompt = list(prompt)
    elif isinstance(prompt, str):
        prompt = list(prompt.encode())
    a = np.ascontiguousarray(prompt, dtype=np.int64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError("the prompt is a non-empty 1-D sequence of tokens (or bytes / str)")
    return a


class _Frames:
    """What both stream classes share: the OPEN, seq checking, CANCEL."""

    def __init__(self, model: str, version: str, prompt: Any, token_input: str, tokens_per_frame: int,
                 max_tokens: int, stream_id: Optional[int]) -> None:
        if stream_id is not None and not 0 < stream_id < (1 << 64):
            raise ValueError("stream_id is a non-zero u64")
        self.model = model
        self.version = version
        self.stream_id = stream_id if stream_id is not None else _new_id()
        self.next_seq = 0
        self.ended = False
        #: Why the stream ended (see :class:`TokenFrame`), once it has.
        self.end_reason: Optional[str] = None
        self._inputs = {token_input: _prompt(prompt)}
        self._header = _open_header(self.stream_id, tokens_per_frame, max_tokens)
        self._rid: Optional[int] = None

    def _frame(self, r: Any) -> TokenFrame:
        h = next((_parse(v) for k, v in r.extensions if k == _KEY), None)
        if h is None:
            raise MalformedAnswerError("the answer carries no stream header: the appliance keeps no streams")
        if h["stream_id"] != self.stream_id:
            raise MalformedAnswerError("a frame of another stream")
        if h["seq"] != self.next_seq:
            raise FrameLostError(self.next_seq, h["seq"])
        self.next_seq += 1
        outs = r.outputs
        tokens = np.asarray(next(iter(outs.values())), dtype=np.int64).reshape(-1) if outs else np.empty(0, np.int64)
        end = None
        if h["flags"] & _END:
            end = END_REASONS.get(h["end_reason"], f"reason_{h['end_reason']}")
        return TokenFrame(h["seq"], tokens, end)

    def _cancel_ext(self) -> Dict[str, bytes]:
        return {_KEY: _LAYOUT.pack(self.stream_id, 1, _CANCEL, 0, 0, 0, 0)}

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(model={self.model!r}, version={self.version!r}, "
                f"stream_id={self.stream_id:#x}, next_seq={self.next_seq}, ended={self.ended}, "
                f"end_reason={self.end_reason!r})")


class TokenStream(_Frames):
    """A token stream over a :class:`sluice.Client` (UDP): opens at once
    with ``prompt`` (int64 tokens, or bytes / str for a byte-level model)
    fed to the model's ``token_input``.

    Iterate for :class:`TokenFrame` s; ``tokens()`` yields the tokens alone;
    ``collect()`` returns ``(tokens, end_reason)``. ``timeout`` (default: the
    client's) bounds the wait for each frame (:class:`RequestTimeoutError`);
    ``deadline`` and the other keyword arguments go on the OPEN as for
    :meth:`Client.infer` (a deadline ends the stream with ``"deadline"``).
    ``cancel()`` stops it (the appliance answers with the number of frames
    it sent). Other calls may share the client meanwhile: the stream's
    frames are kept apart by request id."""

    def __init__(self, client: Any, model: str, version: str, prompt: Any, *, token_input: str = "token",
                 tokens_per_frame: int = 1, max_tokens: int = 0, stream_id: Optional[int] = None,
                 timeout: Optional[float] = None, **kwargs: Any) -> None:
        super().__init__(model, version, prompt, token_input, tokens_per_frame, max_tokens, stream_id)
        self._client = client
        self._native = client._native
        self.timeout = float(timeout if timeout is not None else client.timeout)
        ext = dict(kwargs.pop("extensions", None) or {})
        ext[_KEY] = self._header
        rid = self._native.send(model, version, self._inputs, extensions=ext, **kwargs)
        self._native.follow(rid)
        self._rid = rid

    def _close(self, reason: Optional[str]) -> None:
        if not self.ended:
            self.ended = True
            self.end_reason = reason
            if self._rid is not None:
                self._native.unfollow(self._rid)

    def __iter__(self) -> Iterator[TokenFrame]:
        return self

    def __next__(self) -> TokenFrame:
        if self.ended:
            raise StopIteration
        assert self._rid is not None
        try:
            r = self._native.recv_followed(self._rid, self.timeout)
        except ServerError:
            self._close("error")
            raise
        if r is None:
            self._close(None)
            raise RequestTimeoutError(f"no token frame in {self.timeout} s")
        try:
            f = self._frame(r)
        except FrameLostError:
            self.cancel()
            raise
        if f.end is not None:
            self._close(f.end)
        return f

    def tokens(self) -> Iterator[int]:
        """The tokens, one by one, to the end of the stream."""
        for f in self:
            yield from (int(t) for t in f.tokens)

    def collect(self) -> Tuple[List[int], Optional[str]]:
        """All remaining tokens and the end reason."""
        return list(self.tokens()), self.end_reason

    def cancel(self) -> Optional[int]:
        """Stops the stream before the appliance's next step and returns
        the number of token frames it sent (``None`` if it had ended)."""
        if self.ended:
            return None
        self._close("cancelled")
        r = self._client.infer_response(self.model, self.version, {}, extensions=self._cancel_ext())
        h = next((_parse(v) for k, v in r.extensions if k == _KEY), None)
        if h is None or END_REASONS.get(h["end_reason"]) != "cancelled":
            raise MalformedAnswerError("a cancel answer that is not one")
        return int(h["seq"])

    def __enter__(self) -> "TokenStream":
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.ended:
            try:
                self.cancel()
            except ServerError:
                pass  # it ended meanwhile (unknown_stream)


class AsyncTokenStream(_Frames):
    """:class:`TokenStream` over a :class:`sluice.AsyncClient`: ``stream =
    await AsyncTokenStream.open(client, model, version, prompt, ...)``, then
    ``async for frame in stream`` (or ``async for t in stream.tokens()``),
    ``await stream.collect()``, ``await stream.cancel()``, ``async with``.
    The frames are read by the client's event-loop reader, next to the
    other requests' answers."""

    def __init__(self, client: Any, model: str, version: str, prompt: Any, *, token_input: str = "token",
                 tokens_per_frame: int = 1, max_tokens: int = 0, stream_id: Optional[int] = None,
                 timeout: Optional[float] = None) -> None:
        super().__init__(model, version, prompt, token_input, tokens_per_frame, max_tokens, stream_id)
        self._client = client
        self.timeout = float(timeout if timeout is not None else client.timeout)
        self._queue: "asyncio.Queue[Any]" = asyncio.Queue()

    @classmethod
    async def open(cls, client: Any, model: str, version: str, prompt: Any, *, token_input: str = "token",
                   tokens_per_frame: int = 1, max_tokens: int = 0, stream_id: Optional[int] = None,
                   timeout: Optional[float] = None, **kwargs: Any) -> "AsyncTokenStream":
        """Sends the OPEN (keyword arguments as for ``AsyncClient.infer``)."""
        s = cls(client, model, version, prompt, token_input=token_input, tokens_per_frame=tokens_per_frame,
                max_tokens=max_tokens, stream_id=stream_id, timeout=timeout)
        ext = dict(kwargs.pop("extensions", None) or {})
        ext[_KEY] = s._header
        s._rid = client._open_stream(model, version, s._inputs, s._queue, extensions=ext, **kwargs)
        return s

    def _close(self, reason: Optional[str]) -> None:
        if not self.ended:
            self.ended = True
            self.end_reason = reason
            if self._rid is not None:
                self._client._close_stream(self._rid)

    def __aiter__(self) -> "AsyncTokenStream":
        return self

    async def __anext__(self) -> TokenFrame:
        if self.ended:
            raise StopAsyncIteration
        try:
            item = await asyncio.wait_for(self._queue.get(), self.timeout)
        except asyncio.TimeoutError:
            self._close(None)
            raise RequestTimeoutError(f"no token frame in {self.timeout} s") from None
        if isinstance(item, BaseException):
            self._close("error")
            raise item
        try:
            f = self._frame(item)
        except FrameLostError:
            await self.cancel()
            raise
        if f.end is not None:
            self._close(f.end)
        return f

    async def tokens(self) -> AsyncIterator[int]:
        async for f in self:
            for t in f.tokens:
                yield int(t)

    async def collect(self) -> Tuple[List[int], Optional[str]]:
        return [t async for t in self.tokens()], self.end_reason

    async def cancel(self) -> None:
        """Stops the stream (the appliance frees its slot)."""
        if self.ended:
            return
        self._close("cancelled")
        await self._client.infer(self.model, self.version, {}, extensions=self._cancel_ext())

    async def __aenter__(self) -> "AsyncTokenStream":
        return self

    async def __aexit__(self, *exc: object) -> None:
        if not self.ended:
            try:
                await self.cancel()
            except ServerError:
                pass

