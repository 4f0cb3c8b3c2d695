"""One Redis (``GATEWAY_SESSION_STORE``) as a replica's shared state sees it: one client with socket
timeouts, and one outage back-off for every user of it (the session latches and last requests, the
upstream breakers and session placements).

Nothing that goes through it fails a request: a Redis error or timeout is counted and logged, the
caller carries on with its own in-memory view, and Redis is not asked again until the back-off
(0.5 s, doubling to 30 s) passes. The back-off is shared so that a Redis that hangs costs a request
one timeout, not one per user in turn (each user's own back-off would have run out while the
others waited on theirs).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

from gateway.config_checks import REDIS_SCHEMES
from gateway.settings.prompt_cache import CacheSettings

log = logging.getLogger("switchyard.session_store")

FIRST_BACKOFF_S: Final = 0.5
MAX_BACKOFF_S: Final = 30.0
T = TypeVar("T")


def link_for(cache: CacheSettings, on_error: Callable[[], None]) -> RedisLink | None:
    """The link to ``GATEWAY_SESSION_STORE`` when it names a Redis, else ``None`` (state in memory)."""
    if not cache.session_store.startswith(REDIS_SCHEMES):
        return None
    return RedisLink(cache.session_store, timeout_s=cache.session_store_timeout_s, on_error=on_error)


def redis_client(url: str, timeout_s: float) -> Any:
    """A ``redis.asyncio`` client whose every socket operation is bounded by ``timeout_s``. A command
    is retried once, at once, after a connection error only: after a Redis restart every pooled
    connection is dead, and the first command on each must not count as an outage. A timeout is
    never retried (that would double the wait on a Redis that hangs)."""
    import redis.asyncio as redis_asyncio
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError

    return redis_asyncio.Redis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
        retry_on_error=[RedisConnectionError],
    )


class RedisUnavailable(Exception):
    """Redis is in its back-off, or a call failed (the message names how, never the URL)."""


class RedisLink:
    """The client (``redis``) and the shared back-off; ``run`` wraps one call in both."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float,
        on_error: Callable[[], None],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.redis: Any = redis_client(url, timeout_s)
        self.timeout_s = timeout_s
        self._on_error = on_error
        self._monotonic = monotonic
        self._down_until = 0.0
        self._backoff = FIRST_BACKOFF_S

    def available(self) -> bool:
        """Not in a back-off: Redis may be asked."""
        return self._monotonic() >= self._down_until

    def failed(self, action: str, exc: BaseException) -> None:
        """A call failed: count it; the first failure of an episode starts (and logs) the back-off,
        later ones while it runs (calls that were already waiting) do not lengthen it."""
        self._on_error()
        if not self.available():
            return
        self._down_until = self._monotonic() + self._backoff
        log.warning(
            "session store unavailable (Redis, %s: %s); latches, breakers and placements come from "
            "this replica's memory, retrying in %.1fs",
            action,
            type(exc).__name__,
            self._backoff,
        )
        self._backoff = min(self._backoff * 2, MAX_BACKOFF_S)

    def succeeded(self) -> None:
        self._backoff = FIRST_BACKOFF_S

    async def call(self, action: str, call: Callable[[], Awaitable[T]]) -> T:
        """``call()``'s result within two timeouts (connect and command); ``RedisUnavailable`` when
        Redis is in its back-off or the call failed (which starts or continues the back-off)."""
        if not self.available():
            raise RedisUnavailable("Redis in its back-off")
        try:
            async with asyncio.timeout(self.timeout_s * 2):
                result = await call()
        except Exception as exc:  # any Redis or network failure, or the bound
            self.failed(action, exc)
            raise RedisUnavailable(type(exc).__name__) from None
        self.succeeded()
        return result

    async def run(self, action: str, call: Callable[[], Awaitable[T]]) -> T | None:
        """As :meth:`call`, with ``None`` for an unavailable Redis (never the request's failure)."""
        try:
            return await self.call(action, call)
        except RedisUnavailable:
            return None

    async def close(self) -> None:
        try:
            await self.redis.aclose()
        except Exception as exc:  # closing a dead connection: nothing to do
            log.debug("closing the session store connection: %s", type(exc).__name__)
