"""The Redis connection the upstream breakers and session placements share between replicas.

The same URL as the session store (``GATEWAY_SESSION_STORE``). Like the session store, it never
fails a request: a Redis error is logged and counted, the replica carries on with its local view,
and Redis is not asked again until a back-off passes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

log = logging.getLogger("switchyard.upstreams.shared")

KEY_PREFIX: Final = "switchyard:upstreams:"
T = TypeVar("T")


class SharedRedis:
    def __init__(self, url: str, *, timeout_s: float, on_error: Callable[[], None]) -> None:
        import redis.asyncio as redis_asyncio
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
        from redis.exceptions import ConnectionError as RedisConnectionError

        self.redis: Any = redis_asyncio.Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 1),
            retry_on_error=[RedisConnectionError],
        )
        self._on_error = on_error
        self._down_until = 0.0
        self._backoff = 0.5

    def available(self) -> bool:
        return time.monotonic() >= self._down_until

    async def run(self, action: str, call: Callable[[], Awaitable[T]]) -> T | None:
        """``call()``'s result, or ``None`` when Redis is down (or in its back-off)."""
        if not self.available():
            return None
        try:
            result = await call()
        except Exception as exc:  # any Redis or network failure: never fail the request
            self._on_error()
            if self.available():
                self._down_until = time.monotonic() + self._backoff
                log.warning(
                    "upstream state store unavailable (%s: %s); using the local view, retrying in %.1fs",
                    action,
                    type(exc).__name__,
                    self._backoff,
                )
                self._backoff = min(self._backoff * 2, 30.0)
            return None
        self._backoff = 0.5
        return result

    async def close(self) -> None:
        try:
            await self.redis.aclose()
        except Exception as exc:  # closing a dead connection: nothing to do
            log.debug("closing the upstream state store: %s", type(exc).__name__)
