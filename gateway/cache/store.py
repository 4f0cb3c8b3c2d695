"""Where session latches and the last request's prefix live: in memory, or in Redis for fleets.

``begin`` is the one call per request on its path: it merges what this request observed into the
session's latches (a set union for betas; the first decided choice for the eligibilities) and
returns the merged latches with the record of the session's last request. For Redis it is a single
pipelined transaction (one round trip). ``finish`` records what the request sent upstream (the
prefix hashes of the body after normalisation, with the betas actually sent) and how many tokens
it left in the cache, so the next request is compared with what the upstream really saw; a request
without breakpoints (a side call) or that failed leaves the record alone. For Redis that write is
sent in the background, off the request's path.

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
import math
import time
from abc import ABC, abstractmethod
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
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
    async def begin(self, session_id: str, observed: Latches) -> tuple[Latches, PreviousRequest | None]:
        """Merge ``observed`` into the session's latches; return the merged latches and the
        record of the session's last request."""

    @abstractmethod
    def finish(
        self, session_id: str, request: PreviousRequest | None, break_record: dict[str, Any] | None
    ) -> None:
        """Record what the request sent and left in the cache (``None``: keep the previous
        record), and its cache break, if any."""

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

    def merge(self, session_id: str, observed: Latches) -> tuple[Latches, PreviousRequest | None]:
        view = self._get(session_id)
        view.latches = _merge(view.latches, observed)
        return view.latches, view.previous

    def adopt(self, session_id: str, latches: Latches, previous: PreviousRequest | None) -> None:
        """Take what the shared store knows (it wins: it has seen every replica's requests)."""
        view = self._get(session_id)
        view.latches = _merge(latches, view.latches)
        if previous is not None:
            view.previous = previous

    async def begin(self, session_id: str, observed: Latches) -> tuple[Latches, PreviousRequest | None]:
        return self.merge(session_id, observed)

    def finish(
        self, session_id: str, request: PreviousRequest | None, break_record: dict[str, Any] | None
    ) -> None:
        view = self._sessions.get(session_id)
        if view is None:
            return
        if request is not None:
            view.previous = request
        if break_record is not None:
            view.recent_breaks.append(break_record)

    def view(self, session_id: str) -> SessionView | None:
        view = self._sessions.get(session_id)
        if view is None or self._clock() - view.touched > self._idle_s:
            return None
        return view


def _stored_latches(members: set[bytes], fields: list[bytes | None]) -> Latches:
    """Latches from a session's Redis beta set and ``HMGET ttl_1h global ...`` fields."""
    return Latches(
        betas=frozenset(m.decode() for m in members),
        ttl_1h=None if fields[0] is None else fields[0] == b"1",
        global_scope=None if fields[1] is None else fields[1] == b"1",
    )


def _stored_request(fields: list[bytes | None]) -> PreviousRequest | None:
    """The last request's record from ``HMGET ... prefix at cached check``; an unreadable one
    (written by another version, or damaged) counts as none rather than failing the request."""
    prefix, at, cached, check = fields[2:6]
    if prefix is None:
        return None
    try:
        count = -1 if cached is None else int(cached)
        hashes = PrefixHashes.from_json(prefix, check.decode() if check is not None else "")
        return PreviousRequest(hashes, float(at or 0.0), count if count >= 0 else None)
    except (ValueError, TypeError, KeyError) as exc:
        log.warning("unreadable session record in Redis (%s: %s); ignoring it", type(exc).__name__, exc)
        return None


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
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
        from redis.exceptions import ConnectionError as RedisConnectionError

        # one immediate retry on a fresh connection: after a Redis restart every pooled connection
        # is dead, and the first command on each must not count as an outage (nor start a back-off)
        self._redis = redis_asyncio.Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 1),
            retry_on_error=[RedisConnectionError],
        )
        self._local = local
        self._idle_s = max(1, math.ceil(idle_s))  # EXPIRE takes whole seconds (0 would delete)
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
        if not self._available():
            return  # a concurrent call already failed and started this back-off: don't escalate
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

    async def begin(self, session_id: str, observed: Latches) -> tuple[Latches, PreviousRequest | None]:
        # the local view first: it is the answer whenever Redis cannot give one
        local_latches, local_previous = self._local.merge(session_id, observed)
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
                pipe.hmget(key, "ttl_1h", "global", "prefix", "at", "cached", "check")
                pipe.expire(key, self._idle_s)
                pipe.expire(betas_key, self._idle_s)
                replies = await pipe.execute()
        except Exception as exc:  # any Redis or network failure: never fail the request
            self._failed("begin", exc)
            return local_latches, local_previous
        self._backoff = 0.5
        offset = 1 if local_latches.betas else 0
        latches = _stored_latches(replies[offset], replies[-3])
        previous = _stored_request(replies[-3])
        self._local.adopt(session_id, latches, previous)
        # a Redis that lost the session (restarted, flushed) knows no previous request: ours stands
        return _merge(latches, local_latches), previous if previous is not None else local_previous

    def finish(
        self, session_id: str, request: PreviousRequest | None, break_record: dict[str, Any] | None
    ) -> None:
        self._local.finish(session_id, request, break_record)
        if request is None or not self._available():
            return
        key, _ = self._keys(session_id)
        task = asyncio.get_running_loop().create_task(self._write_request(key, request))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _write_request(self, key: str, request: PreviousRequest) -> None:
        cached = -1 if request.cached is None else request.cached
        try:
            async with asyncio.timeout(self._timeout_s * 2):
                pipe = self._redis.pipeline(transaction=True)
                pipe.hset(
                    key,
                    mapping={
                        "prefix": request.hashes.to_json(),
                        "at": repr(request.at),
                        "cached": cached,
                        "check": request.hashes.history_check,
                    },
                )
                pipe.expire(key, self._idle_s)
                await pipe.execute()
        except Exception as exc:
            self._failed("finish", exc)

    def view(self, session_id: str) -> SessionView | None:
        return self._local.view(session_id)

    async def describe(self, session_id: str) -> SessionView | None:
        local = self._local.view(session_id)
        view = (
            SessionView()
            if local is None
            else SessionView(
                local.latches, local.previous, deque(local.recent_breaks, maxlen=RECENT_BREAKS), local.touched
            )
        )
        if self._available():
            key, betas_key = self._keys(session_id)
            try:
                async with asyncio.timeout(self._timeout_s * 2):
                    pipe = self._redis.pipeline(transaction=False)
                    pipe.smembers(betas_key)
                    pipe.hmget(key, "ttl_1h", "global", "prefix", "at", "cached", "check")
                    members, fields = await pipe.execute()
            except Exception as exc:
                self._failed("describe", exc)
            else:
                view.latches = _merge(_stored_latches(members, fields), view.latches)
                view.previous = _stored_request(fields) or view.previous
        if view.previous is None and view.latches == Latches():
            return None
        return view

    async def close(self) -> None:
        for task in list(self._pending):
            with contextlib.suppress(Exception):
                await task
        with contextlib.suppress(Exception):
            await self._redis.aclose()
