"""Session placement: which upstream holds a session's prompt cache.

A session (the id of :mod:`gateway.session_ids`, per team) is placed on the upstream that served it
last, with the time of that request. The map is bounded (least recently used sessions go first,
and a placement idle for ``idle_s`` expires). With Redis configured the placements are shared by
every replica (``switchyard:upstreams:placement:<team>:<route>:<session id>`` hash ``upstream``,
``at``, ``foreign``;
expiring after ``idle_s``), with the local map as the fallback when Redis is unavailable. A
placement made while Redis was away stays the replica's own until Redis is back: then the newer of
it and Redis's record wins, and a newer local one is written back.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

from gateway.redis_link import RedisLink
from gateway.upstreams.shared import KEY_PREFIX

ALL_MESSAGES: Final = 1 << 62  # ``Placement.foreign`` for "every message"


@dataclass(frozen=True, slots=True)
class Placement:
    upstream: str
    at: float  # wall-clock seconds of the last request it served
    # how many leading messages of its history may hold thinking another provider signed (it moved
    # between providers, or was resumed unknown on a route over several): 0 for none
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
        return self.local(team, session_id)

    async def put(self, team: str, session_id: str, placement: Placement) -> None:
        self._remember(team, session_id, placement)

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

    async def get(self, team: str, session_id: str) -> Placement | None:
        key = placement_key(team, session_id)
        fields: Any = await self._shared.run(
            "placement read", lambda: self._shared.redis.hmget(key, "upstream", "at", "foreign", "mixed")
        )
        if fields is None:
            return self.local(team, session_id)
        upstream, at, foreign, mixed = fields
        shared: Placement | None = None
        if upstream is not None:
            try:
                # (a record of an earlier version: ``mixed`` 1, every message foreign)
                count = int(foreign) if foreign is not None else (ALL_MESSAGES if mixed == b"1" else 0)
                shared = Placement(upstream.decode(), float(at or 0.0), count)
            except (ValueError, UnicodeDecodeError):
                return self.local(team, session_id)
        if (team, session_id) in self._unsynced:  # placed here while Redis was away
            own = self.local(team, session_id)
            if own is not None and (shared is None or own.at >= shared.at):
                await self.put(team, session_id, own)  # the fleet learns it now
                return own
            self._unsynced.discard((team, session_id))
        if shared is None:
            return None  # unknown to the fleet (or expired): the local map would be stale
        self._remember(team, session_id, shared)
        return shared

    def _forget(self, key: tuple[str, str]) -> None:
        super()._forget(key)
        self._unsynced.discard(key)

    async def put(self, team: str, session_id: str, placement: Placement) -> None:
        self._remember(team, session_id, placement)
        key = placement_key(team, session_id)

        async def write() -> Any:
            pipe = self._shared.redis.pipeline(transaction=True)
            pipe.hset(
                key,
                mapping={
                    "upstream": placement.upstream,
                    "at": repr(placement.at),
                    "foreign": placement.foreign,
                },
            )
            pipe.expire(key, self._idle_whole_s)
            return await pipe.execute()

        if await self._shared.run("placement write", write) is None:
            self._unsynced.add((team, session_id))
        else:
            self._unsynced.discard((team, session_id))
