"""Session placement: which upstream holds a session's prompt cache, and which provider produced
its conversations' thinking.

A session (the id of :mod:`gateway.session_ids`, per team) is placed, per route, on the upstream that
served it last, with the time of that request; a conversation of it (``h:<first message>:<session
id>``) records the provider kind of its last answer and how many leading messages came from others
(``foreign``). Both are slots of one map, bounded (least recently used first, per team; idle for
``idle_s``: expired). With Redis configured the slots are shared by every replica
(``switchyard:upstreams:placement:<team>:<slot>`` hash ``upstream``, ``at``, ``foreign``; expiring
after ``idle_s``; several read or written in one round trip), with the local map as the fallback
when Redis is unavailable. A slot written while Redis was away (or lost by a Redis restart) stays
the replica's own until Redis is back: then the newer of the two wins; a newer local one is written back.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from gateway.redis_link import RedisLink
from gateway.upstreams.shared import KEY_PREFIX


@dataclass(frozen=True, slots=True)
class Placement:
    upstream: str  # a route slot: the upstream's name; a conversation slot: the provider kind
    at: float  # wall-clock seconds of the last request it served
    # a conversation slot: how many of its leading messages may hold thinking another provider
    # than ``upstream`` signed (it moved between providers, or was resumed unknown)
    foreign: int = 0


class PlacementMap:
    """Placements in memory (one replica), LRU- and idle-bounded, with an equal share of
    ``max_sessions`` per team (``teams``: how many teams have keys now): past its share a team's
    own least recently used placement goes, so one team's sessions cannot push out another's."""

    def __init__(
        self,
        max_sessions: int,
        idle_s: float,
        *,
        clock: Callable[[], float] = time.time,
        teams: Callable[[], int] = lambda: 1,
    ) -> None:
        self.max_sessions = max_sessions
        self.idle_s = idle_s
        self.clock = clock
        self._teams = teams
        self._map: OrderedDict[tuple[str, str], Placement] = OrderedDict()
        self._by_team: dict[str, OrderedDict[str, None]] = {}  # each team's sessions, LRU first

    def __len__(self) -> int:
        return len(self._map)

    def local(self, team: str, session_id: str) -> Placement | None:
        key = (team, session_id)
        placement = self._map.get(key)
        if placement is None:
            return None
        if self.clock() - placement.at > self.idle_s:
            self._forget(key)
            return None
        self._map.move_to_end(key)
        self._by_team[team].move_to_end(session_id)
        return placement

    async def get(self, team: str, session_id: str) -> Placement | None:
        return (await self.get_many(team, (session_id,)))[0]

    async def get_many(self, team: str, slots: tuple[str, ...]) -> list[Placement | None]:
        """The placements of several of a team's slots (one round trip with Redis)."""
        return [self.local(team, slot) for slot in slots]

    async def put(self, team: str, session_id: str, placement: Placement) -> None:
        await self.put_many(team, ((session_id, placement),))

    async def put_many(self, team: str, placed: tuple[tuple[str, Placement], ...]) -> None:
        for slot, placement in placed:
            self._remember(team, slot, placement)

    def _remember(self, team: str, session_id: str, placement: Placement) -> None:
        key = (team, session_id)
        self._map[key] = placement
        self._map.move_to_end(key)
        own = self._by_team.setdefault(team, OrderedDict())
        own[session_id] = None
        own.move_to_end(session_id)
        share = max(1, self.max_sessions // max(1, self._teams()))
        while len(own) > share:  # the team's own oldest first
            self._forget((team, next(iter(own))))
        while len(self._map) > self.max_sessions:
            self._forget(next(iter(self._map)))

    def _forget(self, key: tuple[str, str]) -> None:
        del self._map[key]
        team, session_id = key
        own = self._by_team[team]
        del own[session_id]
        if not own:
            del self._by_team[team]

    async def close(self) -> None:
        return None


def placement_key(team: str, session_id: str) -> str:
    return f"{KEY_PREFIX}placement:{quote(team, safe='')}:{session_id}"


class RedisPlacementMap(PlacementMap):
    """Placements shared by every replica; the local map answers when Redis cannot."""

    def __init__(
        self,
        max_sessions: int,
        idle_s: float,
        shared: RedisLink,
        *,
        clock: Callable[[], float] = time.time,
        teams: Callable[[], int] = lambda: 1,
    ) -> None:
        super().__init__(max_sessions, idle_s, clock=clock, teams=teams)
        self._shared = shared
        self._idle_whole_s = max(1, math.ceil(idle_s))
        # placements whose write to Redis failed (Redis was away): newer than what Redis holds
        self._unsynced: set[tuple[str, str]] = set()

    async def get_many(self, team: str, slots: tuple[str, ...]) -> list[Placement | None]:
        keys = [placement_key(team, slot) for slot in slots]

        async def read() -> Any:
            pipe = self._shared.redis.pipeline(transaction=False)
            for key in keys:
                pipe.hmget(key, "upstream", "at", "foreign")
            return await pipe.execute()

        replies: Any = await self._shared.run("placement read", read)
        if replies is None:
            return [self.local(team, slot) for slot in slots]
        return [await self._resolve(team, slot, fields) for slot, fields in zip(slots, replies, strict=True)]

    async def _resolve(self, team: str, slot: str, fields: Any) -> Placement | None:
        """Redis's record of ``slot`` against this replica's (a newer one placed while Redis was
        away is written back)."""
        upstream, at, foreign = fields
        shared: Placement | None = None
        if upstream is not None:
            try:
                shared = Placement(upstream.decode(), float(at or 0.0), int(foreign or 0))
            except (ValueError, UnicodeDecodeError):
                return self.local(team, slot)
        if (team, slot) in self._unsynced:  # placed here while Redis was away
            own = self.local(team, slot)
            if own is not None and (shared is None or own.at >= shared.at):
                await self.put(team, slot, own)  # the fleet learns it now
                return own
            self._unsynced.discard((team, slot))
        if shared is None:  # a record never outlives Redis's (both expire idle_s after the last
            own = self.local(team, slot)  # write): one here means Redis lost it (restarted, flushed)
            if own is not None:
                await self.put(team, slot, own)  # the fleet learns it again
            return own
        self._remember(team, slot, shared)
        return shared

    def _forget(self, key: tuple[str, str]) -> None:
        super()._forget(key)
        self._unsynced.discard(key)

    async def put_many(self, team: str, placed: tuple[tuple[str, Placement], ...]) -> None:
        for slot, placement in placed:
            self._remember(team, slot, placement)

        async def write() -> Any:
            pipe = self._shared.redis.pipeline(transaction=True)
            for slot, placement in placed:
                key = placement_key(team, slot)
                pipe.hset(
                    key,
                    mapping={"upstream": placement.upstream, "at": repr(placement.at), "foreign": placement.foreign},
                )
                pipe.expire(key, self._idle_whole_s)
            return await pipe.execute()

        synced = await self._shared.run("placement write", write) is not None
        for slot, _ in placed:
            if synced:
                self._unsynced.discard((team, slot))
            else:
                self._unsynced.add((team, slot))
