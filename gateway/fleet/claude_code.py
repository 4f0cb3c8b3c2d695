"""Claude Code's own OTLP metrics, turned into the ``gateway_fleet_*`` series.

Attribute values become labels only through fixed sets (anything else is ``other``; ``model``
through the catalogue); ``session.id``, ``user.email`` and the like never become labels.
Cumulative points are turned into deltas per stream.

Details: docs/internals/gateway-fleet.md
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Final

from gateway.fleet.fleet_labels import user_label
from gateway.fleet.fleet_metrics import DECISIONS, EDIT_TOOLS, FleetMetrics
from gateway.fleet.otlp_decode import SumPoint
from gateway.fleet.principal import Principal
from gateway.fleet.topk import OTHER
from gateway.providers.models import metric_label

MAX_STREAMS: Final = 50_000
TOKEN_TYPES: Final = {"input": "input", "output": "output", "cacheRead": "cache_read",
                      "cacheCreation": "cache_creation", "cache_read": "cache_read",
                      "cache_creation": "cache_creation"}  # fmt: skip
LINE_TYPES: Final = frozenset({"added", "removed"})
ACTIVE_TYPES: Final = frozenset({"user", "cli"})
# the most one point may add (a delta, or a new cumulative stream's whole value): far above what
# a client reports per export, far below what could make a series' total overflow to +Inf
MAX_POINT_VALUE: Final = 1e9  # sessions, tokens, lines, seconds...
MAX_POINT_COST_USD: Final = 1e6

StreamKey = tuple[str, str, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...], int]


def _bounded(value: str | None, allowed: frozenset[str]) -> str:
    return value if value is not None and value in allowed else OTHER


class CumulativeDeltas:
    """Last values of cumulative streams (bounded, least recently updated forgotten first)."""

    def __init__(self, capacity: int = MAX_STREAMS) -> None:
        self.capacity = capacity
        self._last: OrderedDict[StreamKey, float] = OrderedDict()

    def delta(self, subject: str, point: SumPoint) -> float:
        key = (subject, point.metric, point.resource, tuple(sorted(point.attributes.items())), point.start_ns)
        last = self._last.get(key)
        self._last[key] = point.value
        self._last.move_to_end(key)
        while len(self._last) > self.capacity:
            self._last.popitem(last=False)
        if last is None or point.value < last:
            return point.value
        return point.value - last


class ClaudeCodeRecorder:
    """Adds the Claude Code points of one caller's export to the fleet series."""

    def __init__(self, metrics: FleetMetrics, deltas: CumulativeDeltas | None = None) -> None:
        self.metrics = metrics
        self.deltas = deltas or CumulativeDeltas()
        self._primed: set[str] = set()
        self._handlers: dict[str, Callable[[str, SumPoint, float], None]] = {
            "claude_code.session.count": self._sessions,
            "claude_code.token.usage": self._tokens,
            "claude_code.cost.usage": self._cost,
            "claude_code.lines_of_code.count": self._lines,
            "claude_code.commit.count": lambda group, _, value: self.metrics.commits.labels(group).inc(value),
            "claude_code.pull_request.count": self._pull_requests,
            "claude_code.active_time.total": self._active_time,
            "claude_code.code_edit_tool.decision": self._edit_decision,
        }
        self._spent = 0.0  # this export's cost, for the top spenders (one amount per export)

    def record(self, principal: Principal, points: Iterable[SumPoint | None]) -> int:
        """Add every Claude Code point; the number recorded (other points are ignored)."""
        metrics = self.metrics
        group = ""  # found at the first Claude Code point: other exporters take no group label
        self._spent = 0.0
        recorded = 0
        for point in points:
            if point is None:
                continue
            handler = self._handlers.get(point.metric)
            if handler is None:
                continue
            if not group:
                group = metrics.groups(principal)
                if group not in self._primed:
                    self._primed.add(group)
                    metrics.prime_group(group)
            value = self.deltas.delta(principal.subject, point) if point.cumulative else point.value
            if not 0 <= value <= self._bound(point):  # a counter never goes down; NaN, +Inf never count
                continue
            if value:
                handler(group, point, value)
            recorded += 1
        if recorded:  # a Claude Code client (another exporter's metrics make nobody active)
            metrics.points_recorded.inc(recorded)
            metrics.active.saw(principal.subject, group)
        if self._spent > 0:
            metrics.user_spend(user_label(principal), self._spent)
        return recorded

    @staticmethod
    def _bound(point: SumPoint) -> float:
        return MAX_POINT_COST_USD if point.metric == "claude_code.cost.usage" else MAX_POINT_VALUE

    def _sessions(self, group: str, point: SumPoint, value: float) -> None:
        self.metrics.sessions.labels(group).inc(value)

    def _tokens(self, group: str, point: SumPoint, value: float) -> None:
        kind = TOKEN_TYPES.get(point.attributes.get("type", ""), OTHER)
        self.metrics.tokens.labels(group, metric_label(point.attributes.get("model", "")), kind).inc(value)

    def _cost(self, group: str, point: SumPoint, value: float) -> None:
        self.metrics.cost.labels(group, metric_label(point.attributes.get("model", ""))).inc(value)
        self._spent += value

    def _lines(self, group: str, point: SumPoint, value: float) -> None:
        self.metrics.lines.labels(group, _bounded(point.attributes.get("type"), LINE_TYPES)).inc(value)

    def _pull_requests(self, group: str, point: SumPoint, value: float) -> None:
        self.metrics.pull_requests.labels(group).inc(value)

    def _active_time(self, group: str, point: SumPoint, value: float) -> None:
        kind = _bounded(point.attributes.get("type", "user"), ACTIVE_TYPES)
        self.metrics.active_time.labels(group, kind).inc(value)

    def _edit_decision(self, group: str, point: SumPoint, value: float) -> None:
        attributes = point.attributes
        tool = _bounded(attributes.get("tool_name", attributes.get("tool")), EDIT_TOOLS)
        decision = _bounded(attributes.get("decision"), DECISIONS)
        self.metrics.edit_decisions.labels(group, tool, decision).inc(value)
