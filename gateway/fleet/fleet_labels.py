"""Bounded ``group`` and ``user`` label values for the fleet series, and the active-user count.

Who a data point belongs to is the authenticated caller (``gateway.fleet.principal``), never what
the client wrote in its attributes (``user.email``, ``user.account_uuid`` are the client's own
claims). Each caller lands in exactly one group, so per-group series partition the fleet (their
sum is the whole): with ``GATEWAY_TELEMETRY_GROUPS`` set, the first listed group the caller
belongs to (listed order is priority), else ``other``; without it, the caller's first group,
admitted while fewer than ``GATEWAY_TELEMETRY_MAX_GROUPS`` distinct groups have a label, else
``other``. A static key's one group is its team.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Final

from gateway.fleet.principal import Principal
from gateway.fleet.topk import OTHER

MAX_LABEL_CHARS: Final = 128


def _printable(value: str) -> bool:
    return 0 < len(value) <= MAX_LABEL_CHARS and value.isprintable() and value != OTHER


class GroupLabels:
    """The one ``group`` label value of a caller (bounded; see the module docstring)."""

    def __init__(self, configured: Iterable[str], limit: int) -> None:
        self.configured: tuple[str, ...] = tuple(configured)
        self._rank = {group: i for i, group in enumerate(self.configured)}
        self.limit = limit
        self._admitted: dict[str, None] = dict.fromkeys(self.configured)  # insertion-ordered set

    def __call__(self, principal: Principal) -> str:
        groups = principal.groups
        if self.configured:
            ranked = [self._rank[group] for group in groups if group in self._rank]
            return self.configured[min(ranked)] if ranked else OTHER
        if not groups:
            return OTHER
        return self.of_group(groups[0])

    def of_group(self, group: str) -> str:
        """The label of one group a caller belongs to (a request's billing group): the group when
        configured or admitted (while fewer than the limit have a label), else ``other``."""
        if self.configured:
            return group if group in self._rank else OTHER
        if group in self._admitted:
            return group
        if len(self._admitted) >= self.limit or not _printable(group):
            return OTHER
        self._admitted[group] = None
        return group

    @property
    def known(self) -> tuple[str, ...]:
        """Every group value handed out so far (the configured ones from the start), and ``other``."""
        return (*self._admitted, OTHER)


def user_label(principal: Principal) -> str:
    """A person's name for the top-spenders series: the e-mail, else the subject (``key:<team>``
    for a static key). ``other`` for a value that is not a short printable string."""
    value = principal.email or principal.subject
    return value if _printable(value) else OTHER


class ActiveUsers:
    """Callers whose clients sent Claude Code metrics within the last ``window_s`` seconds, per group.

    At most ``capacity`` callers are remembered (the least recently seen are forgotten first), so
    a flood of identities cannot grow memory. Per replica: a caller whose exports reach several
    replicas is counted by each of them.
    """

    def __init__(self, window_s: float, capacity: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self.capacity = capacity
        self._clock = clock
        self._seen: OrderedDict[str, tuple[str, float]] = OrderedDict()  # subject -> (group, when)

    def saw(self, subject: str, group: str) -> None:
        seen = self._seen
        seen[subject] = (group, self._clock())
        seen.move_to_end(subject)
        while len(seen) > self.capacity:
            seen.popitem(last=False)

    def counts(self) -> dict[str, int]:
        """Active callers per group (those seen longer ago than the window are forgotten)."""
        horizon = self._clock() - self.window_s
        seen = self._seen
        while seen:
            subject, (_, when) = next(iter(seen.items()))
            if when >= horizon:
                break
            del seen[subject]
        found: dict[str, int] = {}
        for group, _ in seen.values():
            found[group] = found.get(group, 0) + 1
        return found
