"""Where session latches and the last request's prefix live: in memory, or in Redis for fleets.

``begin`` is the one call per request: it merges what this request observed into the session's
latches (a set union for betas; the first request's choice for the eligibilities), swaps in this
request's prefix hashes and returns the merged latches with the previous request's record. For
Redis it is a single pipelined transaction (one round trip). ``finish`` records how many tokens the
request left in the cache; for Redis that write is sent in the background, off the request's path.

The Redis store keeps an in-memory view of every session it has seen. If Redis is down or slow,
requests keep flowing on that view (the failure is logged and counted, and Redis is not asked again
until a back-off passes); because every ``begin`` sends the session's whole known beta set and its
eligibilities, the latches merge back into Redis on the next request once it returns. The store
never fails a request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from abc import ABC, abstractmethod
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.cache.breaks import PreviousRequest
from gateway.cache.latches import Latches
from gateway.cache.prefix import PrefixHashes

log = logging.getLogger("switchyard.session_store")

RECENT_BREAKS = 20


@dataclass(slots=True)
class SessionView:
    latches: Latches = field(default_factory=Latches)
    previous: PreviousRequest | None = None
    recent_breaks: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=RECENT_BREAKS))
    touched: float = 0.0


def _merge(current: Latches, observed: Latches) -> Latches:
    return Latches(
        betas=current.betas | observed.betas,
        ttl_1h=current.ttl_1h if current.ttl_1h is not None else observed.ttl_1h,
        global_scope=current.global_scope if current.global_scope is not None else observed.global_scope,
    )


class SessionStore(ABC):
    @abstractmethod
    async def begin(
        self, session_id: str, observed: Latches, hashes: PrefixHashes, now: float
    ) -> tuple[Latches, PreviousRequest | None]:
        """Merge ``observed`` into the session's latches, record ``hashes``; return the merged
        latches and the previous request's record."""

    @abstractmethod
    def finish(self, session_id: str, cached: int, break_record: dict[str, Any] | None) -> None:
        """Record what the request left in the cache (and its cache break, if any)."""

    @abstractmethod
    def view(self, session_id: str) -> SessionView | None:
        """This replica's view of a session (for ``GET /v1/sessions/{id}``)."""

    async def describe(self, session_id: str) -> SessionView | None:
        return self.view(session_id)

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


class MemorySessionStore(SessionStore):
    """A bounded LRU of sessions with idle expiry (one replica)."""

    def __init__(self, max_sessions: int, idle_s: float, clock: Callable[[], float] = time.time) -> None:
        self._sessions: OrderedDict[str, SessionView] = OrderedDict()
        self._max = max_sessions
        self._idle_s = idle_s
        self._clock = clock

    def __len__(self) -> int:
        return len(self._sessions)

    def _get(self, session_id: str) -> SessionView:
        now = self._clock()
        view = self._sessions.get(session_id)
        if view is not None and now - view.touched > self._idle_s:
            del self._sessions[session_id]
            view = None
        if view is None:
            view = SessionView()
            self._sessions[session_id] = view
            while len(self._sessions) > self._max:
                self._sessions.popitem(last=False)
        else:
            self._sessions.move_to_end(session_id)
        view.touched = now
        return view

    def merge(
        self, session_id: str, observed: Latches, hashes: PrefixHashes, now: float
    ) -> tuple[Latches, PreviousRequest | None]:
        view = self._get(session_id)
        view.latches = _merge(view.latches, observed)
        previous = view.previous
        view.previous = PreviousRequest(hashes, now, None)
        return view.latches, previous

    def adopt(self, session_id: str, latches: Latches, previous: PreviousRequest | None) -> None:
        """Take what the shared store knows (it wins: it has seen every replica's requests)."""
        view = self._get(session_id)
        view.latches = _merge(latches, view.latches)
        if previous is not None:
            view.previous = previous

    async def begin(
        self, session_id: str, observed: Latches, hashes: PrefixHashes, now: float
    ) -> tuple[Latches, PreviousRequest | None]:
        return self.merge(session_id, observed, hashes, now)

    def finish(self, session_id: str, cached: int, break_record: dict[str, Any] | None) -> None:
        view = self._sessions.get(session_id)
        if view is None:
            return
        if view.previous is not None:
            view.previous = replace(view.previous, cached=cached)
        if break_record is not None:
            view.recent_breaks.append(break_record)

    def view(self, session_id: str) -> SessionView | None:
        view = self._sessions.get(session_id)
        if view is None or self._clock() - view.touched > self._idle_s:
            return None
        return view


class RedisSessionStore(SessionStore):
    """Latches shared by every replica through Redis, with a local view as the fallback."""

    PREFIX = "switchyard:session:"

    def __init__(
        self,
        url: str,
        *,
        local: MemorySessionStore,
        idle_s: float,
        timeout_s: float,
        on_error: Callable[[], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        import redis.asyncio as redis_asyncio

        self._redis = redis_asyncio.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry_on_timeout=False
        )
        self._local = local
        self._idle_s = int(idle_s)
        self._timeout_s = timeout_s
        self._on_error = on_error
        self._clock = clock
        self._down_until = 0.0
        self._backoff = 0.5
        self._pending: set[asyncio.Task[None]] = set()

    def _keys(self, session_id: str) -> tuple[str, str]:
        base = self.PREFIX + session_id
        return base, base + ":betas"

    def _failed(self, action: str, exc: BaseException) -> None:
        self._on_error()
        self._down_until = time.monotonic() + self._backoff
        log.warning(
            "session store unavailable (%s: %s); serving from memory, retrying in %.1fs",
            action,
            type(exc).__name__,
            self._backoff,
        )
        self._backoff = min(self._backoff * 2, 30.0)

    def _available(self) -> bool:
        return time.monotonic() >= self._down_until

    async def begin(
        self, session_id: str, observed: Latches, hashes: PrefixHashes, now: float
    ) -> tuple[Latches, PreviousRequest | None]:
        # the local view first: it is the answer whenever Redis cannot give one
        local_latches, local_previous = self._local.merge(session_id, observed, hashes, now)
        if not self._available():
            return local_latches, local_previous
        key, betas_key = self._keys(session_id)
        try:
            async with asyncio.timeout(self._timeout_s * 2):
                pipe = self._redis.pipeline(transaction=True)
                if local_latches.betas:
                    pipe.sadd(betas_key, *sorted(local_latches.betas))
                pipe.smembers(betas_key)
                if local_latches.ttl_1h is not None:
                    pipe.hsetnx(key, "ttl_1h", int(local_latches.ttl_1h))
                if local_latches.global_scope is not None:
                    pipe.hsetnx(key, "global", int(local_latches.global_scope))
                pipe.hmget(key, "ttl_1h", "global", "prefix", "at", "cached")
                pipe.hset(key, mapping={"prefix": hashes.to_json(), "at": repr(now), "cached": -1})
                pipe.expire(key, self._idle_s)
                pipe.expire(betas_key, self._idle_s)
                replies = await pipe.execute()
        except Exception as exc:  # any Redis or network failure: never fail the request
            self._failed("begin", exc)
            return local_latches, local_previous
        self._backoff = 0.5
        offset = 1 if local_latches.betas else 0
        members: set[bytes] = replies[offset]
        fields = replies[-4]
        latches = Latches(
            betas=frozenset(m.decode() for m in members),
            ttl_1h=None if fields[0] is None else fields[0] == b"1",
            global_scope=None if fields[1] is None else fields[1] == b"1",
        )
        previous = None
        if fields[2] is not None:
            cached = int(fields[4]) if fields[4] is not None else -1
            previous = PreviousRequest(
                PrefixHashes.from_json(fields[2]), float(fields[3] or 0.0), cached if cached >= 0 else None
            )
        self._local.adopt(session_id, latches, None)
        return _merge(latches, local_latches), previous

    def finish(self, session_id: str, cached: int, break_record: dict[str, Any] | None) -> None:
        self._local.finish(session_id, cached, break_record)
        if not self._available():
            return
        key, _ = self._keys(session_id)
        task = asyncio.get_running_loop().create_task(self._write_cached(key, cached))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _write_cached(self, key: str, cached: int) -> None:
        try:
            async with asyncio.timeout(self._timeout_s * 2):
                await self._redis.hset(key, "cached", cached)
        except Exception as exc:
            self._failed("finish", exc)

    def view(self, session_id: str) -> SessionView | None:
        return self._local.view(session_id)

    async def describe(self, session_id: str) -> SessionView | None:
        view = self._local.view(session_id) or SessionView()
        if self._available():
            key, betas_key = self._keys(session_id)
            try:
                async with asyncio.timeout(self._timeout_s * 2):
                    pipe = self._redis.pipeline(transaction=False)
                    pipe.smembers(betas_key)
                    pipe.hmget(key, "ttl_1h", "global", "prefix", "at", "cached")
                    members, fields = await pipe.execute()
            except Exception as exc:
                self._failed("describe", exc)
            else:
                if members or fields[2] is not None:
                    view.latches = _merge(
                        Latches(
                            frozenset(m.decode() for m in members),
                            None if fields[0] is None else fields[0] == b"1",
                            None if fields[1] is None else fields[1] == b"1",
                        ),
                        view.latches,
                    )
                    if fields[2] is not None:
                        cached = int(fields[4]) if fields[4] is not None else -1
                        view.previous = PreviousRequest(
                            PrefixHashes.from_json(fields[2]),
                            float(fields[3] or 0.0),
                            cached if cached >= 0 else None,
                        )
        if view.previous is None and not view.latches.betas and view.latches.ttl_1h is None:
            return None
        return view

    async def close(self) -> None:
        for task in list(self._pending):
            with contextlib.suppress(Exception):
                await task
        with contextlib.suppress(Exception):
            await self._redis.aclose()
