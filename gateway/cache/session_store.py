"""Where session latches and the last request's prefix live: in memory here, or in Redis for fleets
(:mod:`gateway.cache.redis_store`).

Every call names the team: one team never reads, extends or evicts another team's session. The
memory store is bounded by ``max_sessions`` and a per-team quota.

Details: docs/internals/gateway-cache.md
"""

from __future__ import annotations

import dataclasses
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Final, TypeVar

from gateway.cache.breaks import BreakRecord, PreviousRequest
from gateway.cache.latches import Latches

RECENT_BREAKS: Final = 20
RECENT_CONVERSATIONS: Final = 4  # last requests kept per session: its own and three other conversations
SHARED_VALUES: Final = 4096  # distinct shared values kept before the table starts over

T = TypeVar("T", bound=Hashable)


@dataclass(slots=True)
class SessionView:
    latches: Latches = field(default_factory=Latches)
    previous: PreviousRequest | None = None
    recent_breaks: tuple[BreakRecord, ...] = ()
    touched: float = 0.0
    # the last requests of the session's other conversations, most recent first (this replica's)
    earlier: tuple[PreviousRequest, ...] = ()


def merge_latches(current: Latches, observed: Latches) -> Latches:
    """``current`` with what ``observed`` adds (``current`` itself when it adds nothing)."""
    betas = current.betas if observed.betas <= current.betas else current.betas | observed.betas
    ttl_1h = current.ttl_1h if current.ttl_1h is not None else observed.ttl_1h
    scope = current.global_scope if current.global_scope is not None else observed.global_scope
    if betas is current.betas and ttl_1h is current.ttl_1h and scope is current.global_scope:
        return current
    return Latches(betas, ttl_1h, scope)


class SharedValues:
    """One instance of each equal value kept by many sessions (a bounded table: when it holds
    ``limit`` values it starts over, so a stream of distinct values cannot grow it)."""

    def __init__(self, limit: int = SHARED_VALUES) -> None:
        self._values: dict[Hashable, Hashable] = {}
        self._limit = limit

    def __len__(self) -> int:
        return len(self._values)

    def get(self, value: T) -> T:
        found = self._values.get(value)
        if found is not None and type(found) is type(value):
            return found  # equal and of the same type: interchangeable
        if len(self._values) >= self._limit:
            self._values.clear()
        self._values[value] = value
        return value

    def request(self, request: PreviousRequest) -> PreviousRequest:
        """``request`` with the parts sessions share taken from the table."""
        hashes = request.hashes
        shared = dataclasses.replace(
            hashes,
            model=self.get(hashes.model),
            betas=self.get(hashes.betas),
            tools=self.get(hashes.tools),
            system_static=self.get(hashes.system_static),
            ttls=self.get(hashes.ttls),
        )
        return PreviousRequest(shared, request.at, request.cached)


class SessionStore(ABC):
    @abstractmethod
    async def begin(
        self, team: str, session_id: str, observed: Latches
    ) -> tuple[Latches, PreviousRequest | None]:
        """Merge ``observed`` into the session's latches; return the merged latches and the
        record of the session's last request."""

    @abstractmethod
    def finish(
        self,
        team: str,
        session_id: str,
        request: PreviousRequest | None,
        break_record: BreakRecord | None,
        earlier: tuple[PreviousRequest, ...] | None = None,
    ) -> None:
        """Record what the request sent and left in the cache (``None``: keep the previous
        record), its cache break, if any, and the other conversations' last requests (``None``:
        unchanged)."""

    @abstractmethod
    def view(self, team: str, session_id: str) -> SessionView | None:
        """This replica's view of a team's session (the cache step's look at its last request)."""

    async def describe(self, team: str, session_id: str) -> SessionView | None:
        """What ``GET /v1/sessions/{id}`` shows a team of its session."""
        return self.view(team, session_id)

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


Quota = Callable[[], int]


class MemorySessionStore(SessionStore):
    """Per-team LRUs of sessions with idle expiry, within a global bound (one replica).

    ``max_per_team``: the team quota, or a function giving the one in force (the gateway's follows
    the number of teams with keys); ``None``: ``max_sessions`` (one team may use the whole store).
    """

    def __init__(
        self,
        max_sessions: int,
        idle_s: float,
        *,
        max_per_team: int | Quota | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._teams: dict[str, OrderedDict[str, SessionView]] = {}
        self._count = 0
        self._max = max_sessions
        if max_per_team is None or isinstance(max_per_team, int):
            fixed = max_sessions if max_per_team is None else max_per_team
            self._quota: Quota = lambda: fixed
        else:
            self._quota = max_per_team
        self._idle_s = idle_s
        self._clock = clock
        self.shared = SharedValues()

    def __len__(self) -> int:
        return self._count

    def team_sizes(self) -> dict[str, int]:
        return {team: len(sessions) for team, sessions in self._teams.items()}

    def _get(self, team: str, session_id: str) -> SessionView:
        now = self._clock()
        sessions = self._teams.get(team)
        if sessions is None:
            sessions = self._teams[team] = OrderedDict()
        view = sessions.get(session_id)
        if view is not None and now - view.touched > self._idle_s:
            del sessions[session_id]
            self._count -= 1
            view = None
        if view is None:
            self._expire(sessions, now)
            view = SessionView()
            sessions[session_id] = view
            self._count += 1
            self._bound(team, sessions)
        else:
            sessions.move_to_end(session_id)
        view.touched = now
        return view

    def _expire(self, sessions: OrderedDict[str, SessionView], now: float) -> None:
        """Drop the team's idle sessions (the least recently used come first)."""
        while sessions:
            oldest = next(iter(sessions.values()))
            if now - oldest.touched <= self._idle_s:
                return
            sessions.popitem(last=False)
            self._count -= 1

    def _bound(self, team: str, sessions: OrderedDict[str, SessionView]) -> None:
        """Evict the team's own oldest sessions beyond its quota; then, while the store holds more
        than ``max_sessions``, the oldest of the team holding the most (this one on a tie)."""
        quota = max(1, self._quota())
        while len(sessions) > quota:
            sessions.popitem(last=False)
            self._count -= 1
        while self._count > self._max:
            largest = max(self._teams, key=lambda name: (len(self._teams[name]), name == team))
            victims = self._teams[largest]
            victims.popitem(last=False)
            self._count -= 1
            if not victims and largest != team:
                del self._teams[largest]

    def merge(self, team: str, session_id: str, observed: Latches) -> tuple[Latches, PreviousRequest | None]:
        view = self._get(team, session_id)
        merged = merge_latches(view.latches, observed)
        if merged is not view.latches:
            view.latches = self.shared.get(merged)
        return view.latches, view.previous

    def adopt(self, team: str, session_id: str, latches: Latches, previous: PreviousRequest | None) -> None:
        """Take what the shared store knows (it wins: it has seen every replica's requests)."""
        view = self._get(team, session_id)
        view.latches = self.shared.get(merge_latches(latches, view.latches))
        if previous is not None:
            adopted = self.shared.request(previous)
            if view.previous is not None and view.previous != adopted:  # ours may be another conversation's
                others = (view.previous, *view.earlier)
                view.earlier = tuple(dict.fromkeys(r for r in others if r != adopted))[: RECENT_CONVERSATIONS - 1]
            view.previous = adopted

    async def begin(
        self, team: str, session_id: str, observed: Latches
    ) -> tuple[Latches, PreviousRequest | None]:
        return self.merge(team, session_id, observed)

    def finish(
        self,
        team: str,
        session_id: str,
        request: PreviousRequest | None,
        break_record: BreakRecord | None,
        earlier: tuple[PreviousRequest, ...] | None = None,
    ) -> None:
        sessions = self._teams.get(team)
        view = sessions.get(session_id) if sessions is not None else None
        if view is None:
            return
        if request is not None:
            view.previous = self.shared.request(request)
        if earlier is not None:
            view.earlier = earlier[: RECENT_CONVERSATIONS - 1]
        if break_record is not None:
            view.recent_breaks = (*view.recent_breaks[1 - RECENT_BREAKS :], break_record)

    def view(self, team: str, session_id: str) -> SessionView | None:
        sessions = self._teams.get(team)
        view = sessions.get(session_id) if sessions is not None else None
        if view is None or self._clock() - view.touched > self._idle_s:
            return None
        return view
