"""Prometheus metrics of the gateway, on a registry of their own (one per app, so tests can run
several gateways in one process). Labels are bounded: models are normalised to the catalogue,
teams come from the key file (every signed-in user is `signed_in`), and no request, session, user or key id is ever a label.

Metric names are an interface: the dashboards and alerts in ``dashboards/`` rely on them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final, TypeVar, cast

from prometheus_client import CollectorRegistry, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.errors import error_type_label
from gateway.keys import DEFAULT_TEAM, InboundKey, KeyRing, Role
from gateway.logging_setup import dropped_log_lines
from gateway.metric_series import FinishedSeries, SpendRow, observe_spend
from gateway.metric_types import LoopCounter, LoopGauge, LoopHistogram
from gateway.pricing import TOKEN_KINDS, Cost
from gateway.providers.models import FIRST_PARTY_MODELS, OTHER, metric_label
from gateway.streaming.usage import Usage

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)

EXPOSITION_CONTENT_TYPE = CONTENT_TYPE_LATEST

# most resolved label sets (and model names) remembered per cache: what bounded labels produce
# (catalogue models x teams x kinds) fits; beyond it ``labels()`` runs each time, correct, only slower
MAX_CACHED: Final = 4096
# longer model names (no model's: a client's model field is whatever it sent) are never kept
MAX_CACHED_NAME: Final = 256

M = TypeVar("M", bound=MetricWrapperBase)

# Reasons a cache-break detector may report: ``gateway.cache.breaks.BreakReason`` and the API's
# ``diagnostics.cache_miss_reason`` values. Anything else is counted as ``other``.
CACHE_BREAK_REASONS: Final = frozenset(
    {
        "first_request",
        "model_changed",
        "betas_changed",
        "tools_changed",
        "system_changed",
        "compaction",
        "messages_edited",
        "messages_changed",
        "previous_message_not_found",
        "ttl_expired",
        "unavailable",
        "unknown",
        "upstream_changed",
    }
)

# ``*_created`` series double the cardinality and no dashboard reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]

_LABEL_VALUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")


class BoundedLabel:
    """Admits at most ``limit`` distinct, well-formed values of one label; the rest are ``other``.

    For label values that come from code outside the gateway (tool names, loop reasons): a bug or
    an unbounded source (MCP tool names) cannot blow up the series count.
    """

    def __init__(self, limit: int, known: Iterable[str] = ()) -> None:
        self.limit = limit
        self._seen: set[str] = set(known)

    def __call__(self, value: str) -> str:
        if value in self._seen:
            return value
        if len(self._seen) >= self.limit or not _LABEL_VALUE.match(value):
            return OTHER
        self._seen.add(value)
        return value


def overhead_seconds(
    started: float,
    finished: float,
    upstream_started_at: float | None,
    upstream_done_at: float | None,
    relay_busy_s: float = 0.0,
) -> float | None:
    """Time spent in the gateway itself, upstream excluded; ``None`` if the upstream was not called.

    Before the upstream (auth, body, preparation) + after its answer was complete (final writes)
    + what the stream relay spent on upstream chunks in between. Waiting for the upstream, retry
    back-offs and fallback requests fall between ``upstream_started_at`` and ``upstream_done_at``.
    """
    if upstream_started_at is None:
        return None
    spent = upstream_started_at - started + relay_busy_s
    if upstream_done_at is not None:
        spent += finished - upstream_done_at
    return max(spent, 0.0)


class _DroppedLogLines(Collector):
    """``gateway_log_lines_dropped_total``: the process's log writer's count (``gateway.line_writer``)."""

    def collect(self) -> Iterable[Metric]:
        yield CounterMetricFamily(
            "gateway_log_lines_dropped",
            "Log lines (access lines included) dropped because stderr did not keep up.",
            value=dropped_log_lines(),
        )


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = LoopCounter(
            "gateway_requests_total",
            "Requests answered, by upstream provider, requested model, streaming and status class.",
            ["provider", "model", "stream", "status_class"],
            registry=r,
        )
        self.duration = LoopHistogram(
            "gateway_request_duration_seconds",
            "Time from request received to the last byte sent.",
            ["provider", "model", "stream"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = LoopHistogram(
            "gateway_time_to_first_token_seconds",
            "Time from request received to the first content event of a stream.",
            ["provider", "model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.overhead = LoopHistogram(
            "gateway_overhead_seconds",
            "Time spent in the gateway itself: before the request left for the upstream and after "
            "its answer was complete, plus stream processing; upstream waits and retry back-offs excluded.",
            ["provider"],
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        )
        self.tokens = LoopCounter(
            "gateway_tokens_total",
            "Tokens by served model and kind: input (uncached), output, cache_read, cache_write_5m, "
            "cache_write_1h.",
            ["provider", "model", "team", "kind"],
            registry=r,
        )
        self.cost = LoopCounter(
            "gateway_cost_usd_total",
            "Spend in USD by served model and team, from each request's final usage and the price table.",
            ["provider", "model", "team"],
            registry=r,
        )
        self.cost_by_kind = LoopCounter(
            "gateway_cost_by_kind_usd_total",
            "Spend in USD by served model and token kind (input, output, cache_read, cache_write_5m, "
            "cache_write_1h).",
            ["provider", "model", "kind"],
            registry=r,
        )
        self.upstream_errors = LoopCounter(
            "gateway_upstream_errors_total",
            "Errors from or on the way to the upstream, by Anthropic error type.",
            ["provider", "type"],
            registry=r,
        )
        self.retries = LoopCounter(
            "gateway_upstream_retries_total",
            "Upstream attempts retried by the gateway, by reason (status_529, connection_error...).",
            ["provider", "reason"],
            registry=r,
        )
        self.retry_final_errors = LoopCounter(
            "gateway_retry_final_errors_total",
            "Requests answered with an error a client would retry, by why the gateway stopped retrying "
            "(budget: its retry budget for this client attempt was spent; deadline; refused: retrying "
            "cannot help) and the x-should-retry sent to the client.",
            ["provider", "stop", "should_retry"],
            registry=r,
        )
        self.fallbacks = LoopCounter(
            "gateway_fallbacks_total",
            "Fallbacks taken: kind non_streaming (stream replaced by a complete message) or model.",
            ["provider", "kind"],
            registry=r,
        )
        self.stream_idle = LoopCounter(
            "gateway_stream_idle_total",
            "Idle-watchdog firings on relayed streams: event warning or abort.",
            ["provider", "event"],
            registry=r,
        )
        self.cache_breaks = LoopCounter(
            "gateway_cache_breaks_total",
            "Prompt-cache breaks detected (a session's cached prefix stopped matching), by reason.",
            ["provider", "reason"],
            registry=r,
        )
        self.betas_dropped = LoopCounter(
            "gateway_betas_dropped_total",
            "anthropic-beta values removed because the upstream does not accept them.",
            ["provider", "beta"],
            registry=r,
        )
        self.session_store_errors = LoopCounter(
            "gateway_session_store_errors_total",
            "Failed reads or writes of the session store (the gateway carried on without it).",
            registry=r,
        )
        self.inflight_requests = LoopGauge("gateway_inflight_requests", "Requests being served.", registry=r)
        self.inflight_streams = LoopGauge("gateway_inflight_streams", "Streams being relayed.", registry=r)
        r.register(_DroppedLogLines())
        self._primed: dict[str, set[str]] = {}  # provider -> teams primed
        # resolved children, so a request does dict lookups instead of ``labels()``; label values
        # are bounded already, ``MAX_CACHED`` bounds these caches even if one were not
        self._finished: dict[tuple[str, str, bool, int, str, str], FinishedSeries] = {}
        self._spend: dict[tuple[str, str, str], SpendRow] = {}
        self._resolved: dict[tuple[MetricWrapperBase, tuple[str, ...]], MetricWrapperBase] = {}
        self._labels: dict[str, str] = {}  # model name -> metric label

    def prime(self, provider: str, keys: KeyRing | Iterable[InboundKey]) -> None:
        """Create the bounded series dashboards sum over ranges at zero: spend per catalogue model
        and team, watchdog events, fallbacks and cache-break reasons (once per provider; a team
        that appears later, in a reloaded keys file, is primed when it first appears).

        ``increase()`` misses a counter's first increment when the series is born with it, so a
        team's first request of a pod's life (or a rare watchdog abort) would never show in
        over-the-range panels. ``Gateway`` calls it at start-up and after each key reload.
        Metrics-only keys spend nothing: their teams are not primed.
        """
        if isinstance(keys, KeyRing):
            teams = set(keys.teams | {DEFAULT_TEAM})
        else:
            teams = {DEFAULT_TEAM, *(key.team for key in keys if key.role is Role.CLIENT)}
        primed = self._primed.get(provider)
        if primed is not None and teams <= primed:
            return
        models = {OTHER, *(entry.alias for entry in FIRST_PARTY_MODELS)}
        if primed is None:
            primed = self._primed[provider] = set()
            for model in models:
                for kind in TOKEN_KINDS:
                    self.cost_by_kind.labels(provider, model, kind)
            for event in ("warning", "abort"):
                self.stream_idle.labels(provider, event)
            for kind in ("non_streaming", "model"):
                self.fallbacks.labels(provider, kind)
            for reason in CACHE_BREAK_REASONS | {OTHER}:
                self.cache_breaks.labels(provider, reason)
        for team in teams - primed:
            for model in models:
                self.cost.labels(provider, model, team)
        primed |= teams

    def observe_finished(
        self,
        provider: str,
        model: str,
        stream: bool,
        status: int,
        duration_s: float,
        *,
        ttft_s: float | None = None,
        overhead_s: float | None = None,
        upstream_error: str | None = None,
        served_model: str = "",
        team: str = "",
        usage: Usage | None = None,
        cost: Cost | None = None,
    ) -> None:
        """Everything one finished API request adds, in one call: its ``gateway_requests_total``
        sample, duration, time to first token and overhead, an upstream error, and (``usage`` and
        ``cost`` given) the tokens and spend of the model that answered."""
        # keyed by labels, never by the client's names (a model field may be megabytes long)
        label, served = self.model_label(model), self.model_label(served_model)
        key = (provider, label, stream, status, served, team)
        series = self._finished.get(key)
        if series is None:
            series = FinishedSeries(self, provider, label, stream, status)
            if len(self._finished) < MAX_CACHED:
                self._finished[key] = series
        series.requests.inc()
        series.duration.observe(duration_s)
        if ttft_s is not None:
            ttft = series.ttft
            if ttft is None:  # resolved on first use: a series for what happened only
                ttft = series.ttft = self.ttft.labels(provider, series.label)
            ttft.observe(ttft_s)
        if overhead_s is not None:
            overhead = series.overhead
            if overhead is None:
                overhead = series.overhead = self.overhead.labels(provider)
            overhead.observe(overhead_s)
        if upstream_error is not None:
            self._child(self.upstream_errors, (provider, error_type_label(upstream_error))).inc()
        if usage is not None and cost is not None:
            row = series.spend
            if row is None:
                row = series.spend = self._spend_row(provider, served, team)
            observe_spend(row, usage, cost)

    def _spend_row(self, provider: str, label: str, team: str) -> SpendRow:
        key = (provider, label, team)
        row = self._spend.get(key)
        if row is None:
            row = SpendRow(self, provider, label, team)
            if len(self._spend) < MAX_CACHED:
                self._spend[key] = row
        return row

    def model_label(self, model: str) -> str:
        """:func:`metric_label`, remembered for up to ``MAX_CACHED`` model names."""
        label = self._labels.get(model)
        if label is None:
            label = metric_label(model)
            if len(self._labels) < MAX_CACHED and len(model) <= MAX_CACHED_NAME:
                self._labels[model] = label
        return label

    def _child(self, metric: M, values: tuple[str, ...]) -> M:
        """``metric.labels(*values)``, resolved once per label tuple (at most ``MAX_CACHED``)."""
        key = (metric, values)
        child = self._resolved.get(key)
        if child is None:
            child = metric.labels(*values)
            if len(self._resolved) < MAX_CACHED:
                self._resolved[key] = child
        return cast(M, child)

    def observe_cache_break(self, provider: str, reason: str) -> None:
        """One detected cache break; reasons outside ``CACHE_BREAK_REASONS`` count as ``other``."""
        label = reason if reason in CACHE_BREAK_REASONS else OTHER
        self._child(self.cache_breaks, (provider, label)).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
