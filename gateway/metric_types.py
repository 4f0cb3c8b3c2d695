"""Prometheus metric types for metrics updated on the event loop's thread only.

``prometheus_client``'s types are thread-safe: every update takes a lock, and every child checks
on each call that it is not a labelled parent. The gateway updates its per-request metrics about
fifteen times per request, always from the event loop's thread (``/metrics`` is rendered there
too), so these subclasses keep the value without a lock and skip the per-call checks. Everything
else — label handling, children, exposition — is ``prometheus_client``'s own, unchanged: the
exposition of a metric is byte for byte what the stock type produces
(``tests/observability/test_metric_types.py``).

Not for metrics updated from other threads (a worker thread, a ``run_in_executor`` callback).
"""

from __future__ import annotations

import time
from bisect import bisect_left
from typing import Any

from prometheus_client import Counter, Gauge, Histogram


class LoopValue:
    """A float with the interface of ``prometheus_client.values.MutexValue``, without the mutex."""

    __slots__ = ("_exemplar", "_value")

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        self._value = 0.0
        self._exemplar: Any = None

    def inc(self, amount: float) -> None:
        self._value += amount

    def set(self, value: float, timestamp: float | None = None) -> None:
        self._value = value

    def set_exemplar(self, exemplar: Any) -> None:
        self._exemplar = exemplar

    def get(self) -> float:
        return self._value

    def get_exemplar(self) -> Any:
        return self._exemplar


class LoopCounter(Counter):
    """A ``Counter`` whose children count without a lock (event-loop thread only)."""

    def _metric_init(self) -> None:
        self._value = LoopValue()
        self._created = time.time()

    def inc(self, amount: float = 1, exemplar: dict[str, str] | None = None) -> None:
        if amount < 0 or exemplar:  # the stock path validates and records exemplars
            super().inc(amount, exemplar)
            return
        self._value._value += amount


class LoopGauge(Gauge):
    """A ``Gauge`` (the default ``all`` mode) whose children change without a lock."""

    def _metric_init(self) -> None:
        self._value = LoopValue()

    def inc(self, amount: float = 1) -> None:
        self._value._value += amount

    def dec(self, amount: float = 1) -> None:
        self._value._value -= amount

    def set(self, value: float) -> None:
        self._value.set(float(value))


class LoopHistogram(Histogram):
    """A ``Histogram`` whose children observe without a lock: one binary search for the bucket."""

    def _metric_init(self) -> None:
        super()._metric_init()
        self._sum = LoopValue()
        self._buckets = [LoopValue() for _ in self._upper_bounds]

    def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None:
        if exemplar or amount != amount:  # exemplars and NaN (in no bucket) take the stock path
            super().observe(amount, exemplar)
            return
        self._sum._value += amount
        # the first bucket whose upper bound is >= amount (``le`` is inclusive); the last is +Inf
        self._buckets[bisect_left(self._upper_bounds, amount)]._value += 1
