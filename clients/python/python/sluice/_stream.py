"""Stateful streams (docs/wire.md "Streams"): the appliance keeps a model's
recurrent state between steps (Silero VAD's ``stateN`` feeds ``state``), so
each step sends only its new input. :class:`StateStream` numbers the steps
and puts the ``sluice-stream`` header on each request; ``for out in
stream.run(chunks)`` (or ``async for`` with :class:`AsyncStateStream`)
iterates over a stream."""

from __future__ import annotations

import itertools
import os
import struct
import time
from typing import Any, AsyncIterable, AsyncIterator, Dict, Iterable, Iterator, Mapping, Optional

from ._errors import MalformedAnswerError, ServerError

__all__ = ["StateStream", "AsyncStateStream"]

_KEY = "sluice-stream"
_OPEN, _CONTINUE, _END, _CANCEL = 1, 2, 4, 8
_LAYOUT = struct.Struct("<QIBBHII")  # 24 bytes: docs/wire.md "Stream header"
_ids = itertools.count(1)
#: Refusals after which the appliance holds no state for the stream.
_GONE = ("unknown_stream", "stream_state_mismatch", "stream_unsupported")


def _new_id() -> int:
    mixed = (time.time_ns() ^ (os.getpid() << 40) ^ next(_ids)) * 0x9E3779B97F4A7C15
    return (mixed % (1 << 64)) or 1


def _header(stream_id: int, seq: int, flags: int) -> bytes:
    return _LAYOUT.pack(stream_id, seq, flags, 0, 0, 0, 0)


def _parse(value: bytes) -> Dict[str, int]:
    sid, seq, flags, reason, tpf, max_tokens, _ = _LAYOUT.unpack(value)
    return {"stream_id": sid, "seq": seq, "flags": flags, "end_reason": reason,
            "tokens_per_frame": tpf, "max_tokens": max_tokens}


class _Steps:
    """The numbering both stream classes share."""

    def __init__(self, model: str, version: str, stream_id: Optional[int]) -> None:
        if stream_id is not None and not 0 < stream_id < (1 << 64):
            raise ValueError("stream_id is a non-zero u64")
        self.model = model
        self.version = version
        self.stream_id = stream_id if stream_id is not None else _new_id()
        self.next_seq = 0
        self.ended = False

    def _next(self, end: bool) -> Dict[str, bytes]:
        if self.ended:
            raise ValueError("the stream has ended")
        flags = _OPEN if self.next_seq == 0 else _CONTINUE
        if end:
            flags |= _END
        return {_KEY: _header(self.stream_id, self.next_seq, flags)}

    def _done(self, end: bool) -> None:
        self.next_seq += 1
        self.ended = end

    def _failed(self, e: ServerError) -> None:
        if e.code_name in _GONE:
            self.ended = True

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(model={self.model!r}, version={self.version!r}, "
                f"stream_id={self.stream_id:#x}, next_seq={self.next_seq}, ended={self.ended})")


class StateStream(_Steps):
    """A stateful stream over a :class:`sluice.Client`. One step in flight at
    a time (each call waits for its answer), all through the client's one
    socket, so the appliance's worker that holds the state sees every step.

    ``step(inputs)`` runs the next step (the first opens the stream) and
    returns its outputs; ``finish(inputs)`` runs the last and frees the
    appliance's slot; ``cancel()`` frees it without a step. A refused step
    raises :class:`StreamError` (``stream_sequence``, ``unknown_stream``,
    ...) and changes no state in the appliance."""

    def __init__(self, client: Any, model: str, version: str, stream_id: Optional[int] = None) -> None:
        super().__init__(model, version, stream_id)
        self._client = client

    def step(self, inputs: Mapping[str, Any], **kwargs: Any) -> Dict[str, Any]:
        """Runs the next step on ``inputs`` (without the state inputs)."""
        return self._send(inputs, False, kwargs)

    def finish(self, inputs: Mapping[str, Any], **kwargs: Any) -> Dict[str, Any]:
        """Runs the last step; the stream ends."""
        return self._send(inputs, True, kwargs)

    def cancel(self) -> None:
        """Ends the stream at once (the appliance frees its state)."""
        if self.ended:
            return
        ext = {_KEY: _header(self.stream_id, self.next_seq, _CANCEL)}
        self.ended = True
        self._client.infer_response(self.model, self.version, {}, extensions=ext)

    def run(self, steps: Iterable[Mapping[str, Any]], **kwargs: Any) -> Iterator[Dict[str, Any]]:
        """Iterates over a stream: yields each step's outputs; when
        ``steps`` is exhausted (or the loop stops early) the stream is
        cancelled, which frees its slot."""
        try:
            for inputs in steps:
                yield self.step(inputs, **kwargs)
        finally:
            if not self.ended and self.next_seq > 0:
                self.cancel()

    def _send(self, inputs: Mapping[str, Any], end: bool, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        ext = self._next(end)
        try:
            r = self._client.infer_response(self.model, self.version, inputs, extensions=ext, **kwargs)
        except ServerError as e:
            self._failed(e)
            raise
        got = next((_parse(v) for k, v in r.extensions if k == _KEY), None)
        if got is None:
            # An appliance that keeps no streams ignores the header.
            self.ended = True
            raise MalformedAnswerError("the answer carries no stream header: the appliance keeps no streams")
        if (got["stream_id"], got["seq"]) != (self.stream_id, self.next_seq):
            raise MalformedAnswerError("answer for another stream step")
        self._done(end)
        outputs: Dict[str, Any] = dict(r.outputs)
        return outputs


class AsyncStateStream(_Steps):
    """:class:`StateStream` over a :class:`sluice.AsyncClient`: ``await
    step(...)``, ``await finish(...)``, ``await cancel()``, and ``async for
    out in stream.run(chunks)``. The answers' stream headers are not read
    (the async client returns outputs only); a refusal raises as above."""

    def __init__(self, client: Any, model: str, version: str, stream_id: Optional[int] = None) -> None:
        super().__init__(model, version, stream_id)
        self._client = client

    async def step(self, inputs: Mapping[str, Any], **kwargs: Any) -> Dict[str, Any]:
        return await self._send(inputs, False, kwargs)

    async def finish(self, inputs: Mapping[str, Any], **kwargs: Any) -> Dict[str, Any]:
        return await self._send(inputs, True, kwargs)

    async def cancel(self) -> None:
        if self.ended:
            return
        ext = {_KEY: _header(self.stream_id, self.next_seq, _CANCEL)}
        self.ended = True
        await self._client.infer(self.model, self.version, {}, extensions=ext)

    async def run(self, steps: "AsyncIterable[Mapping[str, Any]] | Iterable[Mapping[str, Any]]",
                  **kwargs: Any) -> AsyncIterator[Dict[str, Any]]:
        try:
            if hasattr(steps, "__aiter__"):
                async for inputs in steps:
                    yield await self.step(inputs, **kwargs)
            else:
                for inputs in steps:
                    yield await self.step(inputs, **kwargs)
        finally:
            if not self.ended and self.next_seq > 0:
                await self.cancel()

    async def _send(self, inputs: Mapping[str, Any], end: bool, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        ext = self._next(end)
        try:
            out = await self._client.infer(self.model, self.version, inputs, extensions=ext, **kwargs)
        except ServerError as e:
            self._failed(e)
            raise
        self._done(end)
        return dict(out)


