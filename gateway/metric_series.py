"""The resolved metric children of one kind of finished request, so recording a request is a
few attribute reads and increments instead of ``labels()`` lookups (``GatewayMetrics`` caches
them, bounded)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.metric_types import LoopCounter, LoopHistogram
from gateway.pricing import TOKEN_KINDS, Cost
from gateway.streaming.usage import Usage

if TYPE_CHECKING:
    from gateway.metrics import GatewayMetrics


class SpendRow:
    """The spend series of one (provider, served model, team), each resolved on its first use (a
    kind never spent on has no series, as with ``labels()`` on demand)."""

    __slots__ = ("_by_kind", "_cost", "_metrics", "_tokens", "key")

    def __init__(self, metrics: GatewayMetrics, provider: str, label: str, team: str) -> None:
        self._metrics = metrics
        self.key = (provider, label, team)
        self._cost: LoopCounter | None = None
        self._tokens: list[LoopCounter | None] = [None] * len(TOKEN_KINDS)
        self._by_kind: list[LoopCounter | None] = [None] * len(TOKEN_KINDS)

    @property
    def cost(self) -> LoopCounter:
        child = self._cost
        if child is None:
            child = self._cost = self._metrics.cost.labels(*self.key)
        return child

    def tokens(self, i: int) -> LoopCounter:
        child = self._tokens[i]
        if child is None:
            child = self._tokens[i] = self._metrics.tokens.labels(*self.key, TOKEN_KINDS[i])
        return child

    def cost_by_kind(self, i: int) -> LoopCounter:
        child = self._by_kind[i]
        if child is None:
            provider, label, _ = self.key
            child = self._by_kind[i] = self._metrics.cost_by_kind.labels(provider, label, TOKEN_KINDS[i])
        return child


def observe_spend(row: SpendRow, usage: Usage, cost: Cost) -> None:
    """One request's tokens and spend, on the series of the model that answered."""
    # indices in ``TOKEN_KINDS`` order: input, output, cache_read, cache_write_5m, cache_write_1h
    if usage.input_tokens:
        row.tokens(0).inc(usage.input_tokens)
    if usage.output_tokens:
        row.tokens(1).inc(usage.output_tokens)
    if usage.cache_read_input_tokens:
        row.tokens(2).inc(usage.cache_read_input_tokens)
    if usage.cache_write_5m_tokens:
        row.tokens(3).inc(usage.cache_write_5m_tokens)
    if usage.cache_write_1h_tokens:
        row.tokens(4).inc(usage.cache_write_1h_tokens)
    total = cost.total
    if total > 0:
        row.cost.inc(total)
        if cost.input > 0:
            row.cost_by_kind(0).inc(cost.input)
        if cost.output > 0:
            row.cost_by_kind(1).inc(cost.output)
        if cost.cache_read > 0:
            row.cost_by_kind(2).inc(cost.cache_read)
        if cost.cache_write_5m > 0:
            row.cost_by_kind(3).inc(cost.cache_write_5m)
        if cost.cache_write_1h > 0:
            row.cost_by_kind(4).inc(cost.cache_write_1h)


class FinishedSeries:
    """The series one kind of finished request adds to: its ``gateway_requests_total`` and
    duration children, resolved when made; time to first token, overhead and the served model's
    spend row, resolved on first use (series only for what happened)."""

    __slots__ = ("duration", "label", "overhead", "requests", "spend", "ttft")

    def __init__(self, metrics: GatewayMetrics, provider: str, label: str, stream: bool, status: int) -> None:
        self.label = label
        stream_label = "true" if stream else "false"
        self.requests = metrics.requests.labels(provider, label, stream_label, f"{status // 100}xx")
        self.duration = metrics.duration.labels(provider, label, stream_label)
        self.ttft: LoopHistogram | None = None
        self.overhead: LoopHistogram | None = None
        self.spend: SpendRow | None = None
