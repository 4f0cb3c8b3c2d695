"""The session store of a fleet: latches and last-request records shared by every replica in Redis.

The key layout (per team, two keys per session) is documented in the design document; change it
only with a rolling-upgrade plan. The store never fails a request: with Redis down it runs on its
in-memory view and merges back later.

Details: docs/internals/gateway-cache.md
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from typing import Final
from urllib.parse import quote

from gateway.cache.breaks import BreakRecord, PreviousRequest
from gateway.cache.latches import Latches
from gateway.cache.prefix import PrefixHashes
from gateway.cache.session_store import MemorySessionStore, SessionStore, SessionView, merge_latches

log = logging.getLogger("switchyard.session_store")

KEY_PREFIX: Final = "switchyard:sessions:"
LEGACY_KEY_PREFIX: Final = "switchyard:session:"  # before team scoping (never read)


def session_keys(team: str, session_id: str) -> tuple[str, str]:
    """The Redis keys of a team's session: its record hash and its beta set."""
    base = f"{KEY_PREFIX}{quote(team, safe='')}:{session_id}"
    return base + ":record", base + ":betas"


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

    async def begin(
        self, team: str, session_id: str, observed: Latches
    ) -> tuple[Latches, PreviousRequest | None]:
        # the local view first: it is the answer whenever Redis cannot give one
        local_latches, local_previous = self._local.merge(team, session_id, observed)
        if not self._available():
            return local_latches, local_previous
        key, betas_key = session_keys(team, session_id)
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
        self._local.adopt(team, session_id, latches, previous)
        # a Redis that lost the session (restarted, flushed) knows no previous request: ours stands
        return merge_latches(latches, local_latches), previous if previous is not None else local_previous

    def finish(
        self, team: str, session_id: str, request: PreviousRequest | None, break_record: BreakRecord | None
    ) -> None:
        self._local.finish(team, session_id, request, break_record)
        if request is None or not self._available():
            return
        key, _ = session_keys(team, session_id)
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

    def view(self, team: str, session_id: str) -> SessionView | None:
        return self._local.view(team, session_id)

    async def describe(self, team: str, session_id: str) -> SessionView | None:
        local = self._local.view(team, session_id)
        view = (
            SessionView()
            if local is None
            else SessionView(local.latches, local.previous, local.recent_breaks, local.touched)
        )
        if self._available():
            key, betas_key = session_keys(team, session_id)
            try:
                async with asyncio.timeout(self._timeout_s * 2):
                    pipe = self._redis.pipeline(transaction=False)
                    pipe.smembers(betas_key)
                    pipe.hmget(key, "ttl_1h", "global", "prefix", "at", "cached", "check")
                    members, fields = await pipe.execute()
            except Exception as exc:
                self._failed("describe", exc)
            else:
                view.latches = merge_latches(_stored_latches(members, fields), view.latches)
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
