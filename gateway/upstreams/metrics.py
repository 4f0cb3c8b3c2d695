"""Prometheus series of several upstreams, on the gateway's registry.

Labels are upstream names from the file (bounded by it) and fixed reason words; never a session id.

Details: docs/internals/gateway-upstreams.md
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry

from gateway.metric_types import LoopCounter, LoopGauge, LoopHistogram
from gateway.metrics import LATENCY_BUCKETS
from gateway.upstreams.breaker import BreakerState

log = logging.getLogger("switchyard.upstreams")

SELECTION_REASONS = ("route", "weighted", "affinity", "return", "breaker_open", "failover")
MOVE_REASONS = (
    "breaker_open",
    "status_429",
    "status_529",
    "status_5xx",
    "connection_error",
    "timeout",
    "return",
    "unservable",
    "credentials",
)


class UpstreamMetrics:
    def __init__(self, registry: CollectorRegistry, names: Iterable[str]) -> None:
        self.names = tuple(names)
        self.selected = LoopCounter(
            "gateway_upstream_selected_total",
            "Requests sent to an upstream, by why it was chosen.",
            ["upstream", "reason"],
            registry=registry,
        )
        self.health = LoopGauge(
            "gateway_upstream_health",
            "1: the upstream is healthy; 0: it is not.",
            ["upstream"],
            registry=registry,
        )
        self.breaker = LoopGauge(
            "gateway_breaker_state",
            "Circuit breaker of an upstream: 0 closed, 1 half-open, 2 open.",
            ["upstream"],
            registry=registry,
        )
        self.failures = LoopCounter(
            "gateway_upstream_failures_total",
            "Failed upstream attempts, by kind.",
            ["upstream", "reason"],
            registry=registry,
        )
        self.latency = LoopHistogram(
            "gateway_upstream_latency_seconds",
            "Time from sending a request to an upstream to its answer's headers.",
            ["upstream"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.moves = LoopCounter(
            "gateway_session_moves_total",
            "Sessions moved from the upstream holding their cache to another.",
            ["from", "to", "reason"],
            registry=registry,
        )
        self.move_writes = LoopCounter(
            "gateway_session_move_cache_write_tokens_total",
            "Cache-write tokens of requests whose cache break was upstream_changed (the cost of moves).",
            ["upstream"],
            registry=registry,
        )
        for name in self.names:  # every series exists from the start (dashboards, alerts)
            self.health.labels(name).set(1)
            self.move_writes.labels(name)
            self.latency.labels(name)
            for reason in SELECTION_REASONS:
                self.selected.labels(name, reason)

    def watch_breakers(self, state: Callable[[str], BreakerState]) -> None:
        """``gateway_breaker_state`` read from the breakers at each scrape: an open circuit
        half-opens when its time is up, with no event to report it."""
        for name in self.names:
            self.breaker.labels(name).set_function(functools.partial(_state_value, state, name))

    def breaker_changed(self, name: str, state: BreakerState) -> None:
        log.warning("circuit breaker of upstream %s: %s", name, state.name.lower().replace("_", "-"))
        self.health.labels(name).set(1 if state is BreakerState.CLOSED else 0)


def _state_value(state: Callable[[str], BreakerState], name: str) -> float:
    return float(state(name))
