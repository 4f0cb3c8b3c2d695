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
from collections.abc import Awaitable
from typing import Any, Final, cast
from urllib.parse import quote

from gateway.cache.breaks import BreakRecord, PreviousRequest
from gateway.cache.latches import Latches
from gateway.cache.prefix import PrefixHashes
from gateway.cache.session_store import MemorySessionStore, SessionStore, SessionView, merge_latches
from gateway.redis_link import RedisLink

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
    """Latches shared by every replica through Redis, with a local view as the fallback. ``link``
    (the replica's one Redis client and outage back-off, shared with the upstream state) bounds
    every call and says when Redis is not to be asked."""

    def __init__(self, link: RedisLink, *, local: MemorySessionStore, idle_s: float) -> None:
        self._link = link
        self._redis = link.redis
        self._local = local
        self._idle_s = max(1, math.ceil(idle_s))  # EXPIRE takes whole seconds (0 would delete)
        self._pending: set[asyncio.Task[None]] = set()

    async def begin(
        self, team: str, session_id: str, observed: Latches
    ) -> tuple[Latches, PreviousRequest | None]:
        # the local view first: it is the answer whenever Redis cannot give one
        local_latches, local_previous = self._local.merge(team, session_id, observed)
        key, betas_key = session_keys(team, session_id)

        def exchange() -> Awaitable[list[Any]]:
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
            return cast("Awaitable[list[Any]]", pipe.execute())

        replies = await self._link.run("session begin", exchange)
        if replies is None:
            return local_latches, local_previous
        offset = 1 if local_latches.betas else 0
        latches = _stored_latches(replies[offset], replies[-3])
        previous = _stored_request(replies[-3])
        self._local.adopt(team, session_id, latches, previous)
        # a Redis that lost the session (restarted, flushed) knows no previous request: ours stands
        return merge_latches(latches, local_latches), previous if previous is not None else local_previous

    def finish(
        self,
        team: str,
        session_id: str,
        request: PreviousRequest | None,
        break_record: BreakRecord | None,
        earlier: tuple[PreviousRequest, ...] | None = None,
    ) -> None:
        self._local.finish(team, session_id, request, break_record, earlier)  # (other conversations: local)
        if request is None or not self._link.available():
            return
        key, _ = session_keys(team, session_id)
        task = asyncio.get_running_loop().create_task(self._write_request(key, request))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _write_request(self, key: str, request: PreviousRequest) -> None:
        cached = -1 if request.cached is None else request.cached

        def write() -> Awaitable[list[Any]]:
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
            return cast("Awaitable[list[Any]]", pipe.execute())

        await self._link.run("session finish", write)

    def view(self, team: str, session_id: str) -> SessionView | None:
        return self._local.view(team, session_id)

    async def describe(self, team: str, session_id: str) -> SessionView | None:
        local = self._local.view(team, session_id)
        view = (
            SessionView()
            if local is None
            else SessionView(local.latches, local.previous, local.recent_breaks, local.touched, local.earlier)
        )
        key, betas_key = session_keys(team, session_id)

        def read() -> Awaitable[list[Any]]:
            pipe = self._redis.pipeline(transaction=False)
            pipe.smembers(betas_key)
            pipe.hmget(key, "ttl_1h", "global", "prefix", "at", "cached", "check")
            return cast("Awaitable[list[Any]]", pipe.execute())

        replies = await self._link.run("session describe", read)
        if replies is not None:
            members, fields = replies
            view.latches = merge_latches(_stored_latches(members, fields), view.latches)
            view.previous = _stored_request(fields) or view.previous
        if view.previous is None and view.latches == Latches():
            return None
        return view

    async def close(self) -> None:
        for task in list(self._pending):
            with contextlib.suppress(Exception):
                await task
        await self._link.close()
