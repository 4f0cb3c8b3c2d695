"""The lock-free metric types record exactly what ``prometheus_client``'s own types record: the same
operations on a stock metric and on its ``Loop*`` twin give byte-identical expositions."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import generate_latest as _exposition

from gateway.metric_types import LoopCounter, LoopGauge, LoopHistogram

BUCKETS = (0.005, 0.01, 0.5, 1, 2.5, 60)


def generate_latest(registry: CollectorRegistry) -> bytes:
    """The exposition without ``*_created`` lines (creation times differ between two metrics)."""
    return b"\n".join(line for line in _exposition(registry).split(b"\n") if b"_created" not in line)


amounts = st.one_of(
    st.sampled_from([0.0, 0.005, 0.01, 0.5, 1.0, 2.5, 60.0, 60.000001, -1.0, math.inf]),
    st.floats(min_value=-10, max_value=1e6, allow_nan=False),
)
labels = st.sampled_from([("a", "x"), ("a", "y"), ("b", "x")])


def _pair(
    stock_type: type[Counter] | type[Gauge] | type[Histogram],
    loop_type: type[Counter] | type[Gauge] | type[Histogram],
    **kwargs: object,
) -> tuple[CollectorRegistry, object, CollectorRegistry, object]:
    r1, r2 = CollectorRegistry(), CollectorRegistry()
    stock = stock_type("m", "help", ["k", "j"], registry=r1, **kwargs)  # type: ignore[arg-type]
    loop = loop_type("m", "help", ["k", "j"], registry=r2, **kwargs)  # type: ignore[arg-type]
    return r1, stock, r2, loop


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(st.tuples(labels, amounts), max_size=30))
def test_histogram_matches_the_stock_histogram(ops: list[tuple[tuple[str, str], float]]) -> None:
    r1, stock, r2, loop = _pair(Histogram, LoopHistogram, buckets=BUCKETS)
    for values, amount in ops:
        stock.labels(*values).observe(amount)  # type: ignore[attr-defined]
        loop.labels(*values).observe(amount)  # type: ignore[attr-defined]
    assert generate_latest(r1) == generate_latest(r2)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.lists(st.tuples(labels, st.floats(min_value=0, max_value=1e9, allow_nan=False)), max_size=30))
def test_counter_matches_the_stock_counter(ops: list[tuple[tuple[str, str], float]]) -> None:
    r1, stock, r2, loop = _pair(Counter, LoopCounter)
    for values, amount in ops:
        stock.labels(*values).inc(amount)  # type: ignore[attr-defined]
        loop.labels(*values).inc(amount)  # type: ignore[attr-defined]
    assert generate_latest(r1) == generate_latest(r2)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.lists(st.tuples(labels, st.sampled_from(["inc", "dec", "set"]), amounts), max_size=30))
def test_gauge_matches_the_stock_gauge(ops: list[tuple[tuple[str, str], str, float]]) -> None:
    r1, stock, r2, loop = _pair(Gauge, LoopGauge)
    for values, op, amount in ops:
        getattr(stock.labels(*values), op)(amount)  # type: ignore[attr-defined]
        getattr(loop.labels(*values), op)(amount)  # type: ignore[attr-defined]
    assert generate_latest(r1) == generate_latest(r2)


def test_a_negative_counter_increment_is_refused_as_by_the_stock_counter() -> None:
    _, _, _, loop = _pair(Counter, LoopCounter)
    child = loop.labels("a", "x")  # type: ignore[attr-defined]
    try:
        child.inc(-1)
    except ValueError:
        pass
    else:  # pragma: no cover - the assertion below reports it
        raise AssertionError("a negative increment was accepted")


def test_nan_and_exemplars_take_the_stock_path() -> None:
    r1, stock, r2, loop = _pair(Histogram, LoopHistogram, buckets=BUCKETS)
    for metric in (stock, loop):
        metric.labels("a", "x").observe(math.nan)  # type: ignore[attr-defined]
        metric.labels("a", "x").observe(0.5, {"trace_id": "abc"})  # type: ignore[attr-defined]
    assert generate_latest(r1) == generate_latest(r2)
    assert b'le="0.5"} 1.0' in generate_latest(r2)  # NaN counted in no bucket, 0.5 in its own
