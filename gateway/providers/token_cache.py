"""A bearer token fetched by a blocking call, cached until shortly before it expires.

Cloud credential libraries (google-auth, azure-identity) are synchronous and may do network I/O
when they refresh, so the fetch runs in the default executor, never on the event loop. Concurrent
requests that find the token stale share one refresh (an ``asyncio.Lock`` with a re-check inside),
so a burst of requests at expiry costs one round trip to the token endpoint, not one per request.
A fetch that fails with a :class:`~gateway.providers.credentials_health.CredentialFailure` counts
once towards the provider's :class:`~gateway.providers.credentials_health.CredentialHealth`.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable
from typing import Final

from gateway.providers.credentials_health import CredentialFailure, CredentialHealth

TokenFetch = Callable[[], tuple[str, float]]
"""Blocking call returning ``(token, expires_at)``; ``expires_at`` in Unix seconds (``inf``: never)."""

DEFAULT_REFRESH_MARGIN_S: Final = 300.0
"""Refresh this long before expiry: covers clock skew and a request that takes a while to reach the
upstream, so a token never expires between the check and its use."""


class TokenCache:
    """The current token of one credential, refreshed off the event loop when due."""

    def __init__(
        self,
        fetch: TokenFetch,
        *,
        margin_s: float = DEFAULT_REFRESH_MARGIN_S,
        clock: Callable[[], float] = time.time,
        health: CredentialHealth | None = None,
    ) -> None:
        self._fetch = fetch
        self.health = health
        self._margin_s = margin_s
        self._clock = clock
        self._token: str | None = None
        self._expires_at = -math.inf
        self._fetched_at = -math.inf
        self._lock = asyncio.Lock()
        self._thread_lock = threading.Lock()  # a fetch abandoned by a cancelled caller may still run
        self.refreshes = 0
        """How many fetches have completed (for the start-up log and tests)."""

    @property
    def expires_at(self) -> float | None:
        """When the cached token expires (Unix seconds), or ``None`` before the first fetch."""
        return self._expires_at if self._token is not None else None

    @property
    def cached(self) -> str | None:
        """The token in the cache (fresh or not), ``None`` before the first fetch or after
        :meth:`invalidate`."""
        return self._token

    def invalidate(self) -> None:
        """Forget the cached token: the next :meth:`token` fetches one (new credentials are in use)."""
        self._token = None

    def fresh(self) -> bool:
        """Whether the cached token may still be used (present and not within the margin).

        A token that lives less than twice the margin is refreshed at half its lifetime instead.
        """
        if self._token is None:
            return False
        margin = min(self._margin_s, (self._expires_at - self._fetched_at) / 2)
        return self._clock() < self._expires_at - margin

    async def token(self) -> str:
        """The cached token, refreshed first when stale. Exceptions of the fetch propagate."""
        token = self._token
        if token is not None and self.fresh():
            return token
        async with self._lock:
            token = self._token
            if token is None or not self.fresh():
                token = await self._fetch_locked(self._fetch)
            return token

    async def refresh(self, fetch: TokenFetch | None = None) -> bool:
        """Fetch a new token now (the upstream rejected the cached one); ``True`` if it changed.

        Requests rejected together share one fetch: a caller that waited for the lock while
        another refreshed gets that result without fetching again. ``fetch``: the call to make
        this time instead of the usual one (say, one that re-reads a credentials file first).
        """
        generation = self.refreshes
        async with self._lock:
            if self.refreshes != generation:
                return True
            previous = self._token
            return await self._fetch_locked(fetch or self._fetch) != previous

    async def _fetch_locked(self, fetch: TokenFetch) -> str:
        loop = asyncio.get_running_loop()
        fetched_at = self._clock()
        try:
            token, expires_at = await loop.run_in_executor(None, self._serialized_fetch, fetch)
        except CredentialFailure as failure:
            if self.health is not None:
                self.health.failed(failure.message)
            raise
        if self.health is not None:
            self.health.succeeded()
        self._token, self._expires_at, self._fetched_at = token, expires_at, fetched_at
        self.refreshes += 1
        return token

    def _serialized_fetch(self, fetch: TokenFetch) -> tuple[str, float]:
        with self._thread_lock:
            return fetch()
