"""The managed-settings checksum Claude Code sends on model requests, classified per request.

With managed ``env`` ``CLAUDE_CODE_GATEWAY_HINT_HEADERS=1`` the client sends
``x-claude-code-managed-settings-checksum`` over what it loaded. Each ``POST /v1/messages`` of a
caller with managed settings counts once in ``gateway_fleet_managed_settings_hints_total`` as
``current``, ``previous`` (a checksum the caller's group had before an edit, for
``PREVIOUS_ACCEPTED_S``), ``stale`` or ``unknown`` (none sent). A hint only: never refused on,
and the value is never logged nor a label (fleet-gateway.md s2: "treat it as sensitive in logs").
History is per replica, in memory, and bounded (groups by their bounded label, checksums per group).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final

HINT_HEADER: Final = "x-claude-code-managed-settings-checksum"
PREVIOUS_ACCEPTED_S: Final = 2 * 3600.0
"""fleet-gateway.md s2: "expect several valid values per policy and accept the previous one for
>= 1 h after an edit"; two hours covers the client's hourly poll with room to spare."""
STATES: Final = ("current", "previous", "stale", "unknown")
MAX_PER_GROUP: Final = 16
MAX_GROUPS: Final = 1024  # the group labels are bounded already; this bounds the history outright


class SettingsHints:
    """The checksums each group's settings had (``None``: current under the policy in force; else
    the time it stopped being current), and the per-request classification."""

    def __init__(self, counter: Any | None) -> None:
        self._counter = counter  # gateway_fleet_managed_settings_hints_total{group,state}, or None
        self._groups: dict[str, OrderedDict[str, float | None]] = {}

    def children(self, group: str) -> Mapping[str, Any]:
        """The counter children of one group label, by state (made once per plan, not per request)."""
        if self._counter is None:
            return {}
        return {state: self._counter.labels(group, state) for state in STATES}

    def saw_current(self, group: str, checksum: str) -> None:
        """``checksum`` is current for a caller of ``group`` under the policy in force."""
        seen = self._groups.get(group)
        if seen is None:
            if len(self._groups) >= MAX_GROUPS:
                self._groups.pop(next(iter(self._groups)))
            seen = self._groups[group] = OrderedDict()
        seen[checksum] = None
        seen.move_to_end(checksum)
        while len(seen) > MAX_PER_GROUP:
            seen.popitem(last=False)

    def policy_changed(self, now: float) -> None:
        """A new policy is in force: every checksum current until now may be a previous one from
        now on (one still current is marked current again when a caller of its group is next seen)."""
        for seen in self._groups.values():
            for checksum, retired in seen.items():
                if retired is None:
                    seen[checksum] = now

    def state(self, group: str, current: str | None, sent: str | None, now: float) -> str:
        if sent is None:
            return "unknown"
        if sent == current:
            return "current"
        seen = self._groups.get(group)
        if seen is None or sent not in seen:
            return "stale"
        retired = seen[sent]  # None: current for another caller of the group, not this one's
        return "previous" if retired is not None and now - retired <= PREVIOUS_ACCEPTED_S else "stale"
