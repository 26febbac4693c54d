"""Retrying requests that failed with a retryable code."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, TypeVar

from ._errors import RequestTimeoutError, SluiceError

__all__ = ["retry", "retry_async"]

T = TypeVar("T")


def _should_retry(e: BaseException, retry_timeouts: bool) -> bool:
    if isinstance(e, RequestTimeoutError):
        return retry_timeouts
    return isinstance(e, SluiceError) and e.retryable


def retry(
    fn: Callable[..., T],
    *args: Any,
    attempts: int = 3,
    backoff: float = 0.001,
    backoff_max: float = 0.1,
    retry_timeouts: bool = False,
    **kwargs: Any,
) -> T:
    """Calls ``fn(*args, **kwargs)``; when it raises a :class:`SluiceError`
    whose ``retryable`` is true (busy, peer_down, internal, shutting_down,
    connection_lost), sleeps and calls again, up to ``attempts`` calls in
    all. The pause starts at ``backoff`` seconds and doubles up to
    ``backoff_max``. Timeouts are retried only with ``retry_timeouts``: a
    request that timed out may have run. The last exception propagates.

    >>> out = sluice.retry(client.infer, "mlp", "1", {"x": x}, attempts=5)
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    pause = backoff
    for attempt in range(1, attempts + 1):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            if attempt == attempts or not _should_retry(e, retry_timeouts):
                raise
        time.sleep(pause)
        pause = min(pause * 2, backoff_max)
    raise AssertionError("unreachable")


async def retry_async(
    fn: Callable[..., Awaitable[T]],
    *args: Any,
    attempts: int = 3,
    backoff: float = 0.001,
    backoff_max: float = 0.1,
    retry_timeouts: bool = False,
    **kwargs: Any,
) -> T:
    """:func:`retry` for coroutine functions (``AsyncClient.infer``)."""
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    pause = backoff
    for attempt in range(1, attempts + 1):
        try:
            return await fn(*args, **kwargs)
        except Exception as e:
            if attempt == attempts or not _should_retry(e, retry_timeouts):
                raise
        await asyncio.sleep(pause)
        pause = min(pause * 2, backoff_max)
    raise AssertionError("unreachable")
