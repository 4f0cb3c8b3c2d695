"""Which upstreams a request may go to, in which order.

The route of a request is the first whose patterns (fnmatch, on the client's model) match; no match:
every upstream in file order. A route's order is its list, except that with ``weights`` a new
session's first upstream is drawn by weight from a hash of its session id (so every replica draws
the same; a request without a session draws at random), the rest following in list order.

Session affinity then puts the upstream that holds the session's cache first. A session that was
moved away from its route's first choice returns to it only at a natural cache boundary: once
``return_after_s`` has passed since the session's last request (the cache it built meanwhile would
have expired anyway), and only if that upstream's breaker lets traffic through. Upstreams whose
breaker is open are left out; an empty plan means every candidate is unavailable.
"""

from __future__ import annotations

import fnmatch
import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass

from gateway.upstreams.affinity import Placement
from gateway.upstreams.config import Route, UpstreamsConfig

MAX_CACHED_ROUTES = 1024
MAX_CACHED_NAME = 256  # longer model names (no model's) are matched each time, never kept


@dataclass(frozen=True, slots=True)
class Plan:
    """The candidates in order, why the first was chosen, and the session's current placement."""

    candidates: tuple[str, ...]
    reason: str  # route | weighted | affinity | return | breaker_open
    home: str | None  # where the session's cache is (its placement), if known
    skipped: tuple[str, ...]  # candidates left out: breaker open
    route: tuple[str, ...]  # the route's upstreams (for the retry-after of an all-unavailable answer)


class Router:
    def __init__(
        self, config: UpstreamsConfig, *, rng: Callable[[], float] = random.random, slack_s: float = 0.0
    ) -> None:
        """``slack_s``: how stale a placement's time may be (it is refreshed lazily): a session
        returns only once it has surely been idle ``return_after_s``."""
        self._routes = config.routes
        self._all = Route(("*",), config.names(), None)
        after = config.affinity.return_after_s
        self._return_after_s = None if after is None else after + slack_s
        self._rng = rng
        self._cache: dict[str, Route] = {}

    def route_for(self, model: str) -> Route:
        route = self._cache.get(model)
        if route is None:
            route = next(
                (r for r in self._routes if any(fnmatch.fnmatchcase(model, p) for p in r.patterns)), self._all
            )
            if len(model) <= MAX_CACHED_NAME:  # a client's model field may be megabytes long
                if len(self._cache) >= MAX_CACHED_ROUTES:
                    self._cache.clear()
                self._cache[model] = route
        return route

    def preferred(self, route: Route, session_id: str | None) -> tuple[tuple[str, ...], bool]:
        """The route's order for this session (weighted first choice), and whether weights chose."""
        names = route.upstreams
        weights = route.weights
        if weights is None or len(names) < 2:
            return names, False
        if session_id is None:
            point = self._rng()
        else:
            digest = hashlib.blake2b(session_id.encode(), digest_size=8).digest()
            point = int.from_bytes(digest, "big") / 2**64
        total = sum(weights)
        threshold = point * total
        running = 0.0
        chosen = next((i for i, w in enumerate(weights) if w > 0), 0)
        for i, weight in enumerate(weights):
            running += weight
            if weight > 0 and threshold < running:
                chosen = i
                break
        first = names[chosen]
        return (first, *(n for n in names if n != first)), True

    def plan(
        self,
        model: str,
        session_id: str | None,
        placement: Placement | None,
        available: Callable[[str], bool],
        now: float,
    ) -> Plan:
        route = self.route_for(model)
        order, weighted = self.preferred(route, session_id)
        reason = "weighted" if weighted else "route"
        home = placement.upstream if placement is not None and placement.upstream in order else None
        if home is not None:
            first = order[0]
            idle = now - placement.at if placement is not None else 0.0
            if home == first:
                reason = "affinity"
            elif self._return_after_s is not None and idle >= self._return_after_s and available(first):
                reason = "return"  # its cache elsewhere has expired anyway: back to the first choice
            else:
                order = (home, *(n for n in order if n != home))
                reason = "affinity"
        candidates = tuple(n for n in order if available(n))
        skipped = tuple(n for n in order if n not in candidates)
        if candidates and skipped and skipped[0] == order[0]:
            reason = "breaker_open"
        return Plan(candidates, reason, home, skipped, route.upstreams)
