"""A bounded "top users by spend": which users get a Prometheus label of their own.

At most ``k`` users hold a label (space-saving algorithm); everyone else is ``other``. A user
losing the label is returned by :meth:`TopSpenders.add` so the caller removes its series.

Details: docs/internals/gateway-fleet.md
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

OTHER: Final = "other"


@dataclass(frozen=True, slots=True)
class Placement:
    label: str  # the user's own label, or ``OTHER``
    evicted: str | None = None  # the user who lost their label to make room, if one did
    admitted: bool = False  # the user took a label with this amount


class TopSpenders:
    def __init__(self, k: int, capacity: int | None = None) -> None:
        if k < 0:
            raise ValueError("k must be >= 0")
        self.k = k
        self.capacity = max(capacity if capacity is not None else 16 * k, k, 1)
        self._spend: dict[str, float] = {}  # tracked users -> estimated spend (never below the true one)
        self._labelled: set[str] = set()

    def add(self, user: str, amount: float) -> Placement:
        """Count ``amount`` for ``user``; the label to count it under (and who was evicted)."""
        if user == OTHER:
            return Placement(OTHER)
        self._track(user, amount)
        if user in self._labelled:
            return Placement(user)
        if len(self._labelled) < self.k:
            self._labelled.add(user)
            return Placement(user, admitted=True)
        if self.k == 0:
            return Placement(OTHER)
        weakest = min(self._labelled, key=lambda name: self._spend.get(name, 0.0))
        if self._spend[user] > self._spend.get(weakest, 0.0):
            self._labelled.discard(weakest)
            self._labelled.add(user)
            return Placement(user, evicted=weakest, admitted=True)
        return Placement(OTHER)

    def _track(self, user: str, amount: float) -> None:
        spend = self._spend
        if user in spend:
            spend[user] += amount
            return
        if len(spend) < self.capacity:
            spend[user] = amount
            return
        # the space-saving step: the least-spending tracked user makes room and lends its count
        least = min(spend, key=spend.__getitem__)
        spend[user] = spend.pop(least) + amount
        # a labelled user keeps its label while untracked (its estimate reads as 0 from now on)

    @property
    def labelled(self) -> frozenset[str]:
        return frozenset(self._labelled)

    def estimate(self, user: str) -> float:
        """The tracked spend of ``user`` (0 when untracked)."""
        return self._spend.get(user, 0.0)
