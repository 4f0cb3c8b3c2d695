"""Resolved metric children are cached per label set, the caches are bounded, and what a request
records through them is what ``labels()`` would have recorded."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway import metrics as metrics_module
from gateway.metrics import GatewayMetrics
from gateway.pricing import DEFAULT_TABLE
from gateway.streaming.usage import Usage

SONNET = "claude-sonnet-4-6"
HAIKU = "claude-haiku-4-5"


def _samples(metrics: GatewayMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        for sample in family.samples
    }


def test_one_call_records_what_labels_would() -> None:
    usage = Usage(input_tokens=120, output_tokens=30, cache_read_input_tokens=1000)
    cost = DEFAULT_TABLE.cost("anthropic", HAIKU, usage)
    cached = GatewayMetrics()
    direct = GatewayMetrics()
    for _ in range(3):
        cached.observe_finished(
            "anthropic",
            SONNET,
            True,
            200,
            0.5,
            ttft_s=0.1,
            overhead_s=0.001,
            upstream_error="overloaded_error",
            served_model="us.anthropic.claude-haiku-4-5-20251001-v1:0",  # a fallback, native id
            team="platform",
            usage=usage,
            cost=cost,
        )
        direct.requests.labels("anthropic", SONNET, "true", "2xx").inc()
        direct.duration.labels("anthropic", SONNET, "true").observe(0.5)
        direct.ttft.labels("anthropic", SONNET).observe(0.1)
        direct.overhead.labels("anthropic").observe(0.001)
        direct.upstream_errors.labels("anthropic", "overloaded_error").inc()
        for kind, count in (("input", 120), ("output", 30), ("cache_read", 1000)):
            direct.tokens.labels("anthropic", HAIKU, "platform", kind).inc(count)
        direct.cost.labels("anthropic", HAIKU, "platform").inc(cost.total)
        for kind, usd in cost.by_kind():
            if usd > 0:
                direct.cost_by_kind.labels("anthropic", HAIKU, kind).inc(usd)
    assert _samples(cached) == _samples(direct)
    assert cached.exposition() == direct.exposition()


def test_no_spend_and_no_series_for_what_did_not_happen() -> None:
    metrics = GatewayMetrics()
    metrics.observe_finished("bedrock", "mystery-model", False, 502, 0.25)
    created = {name for name, labels in _samples(metrics) if labels}  # no token, spend, ttft series
    assert created == {
        "gateway_requests_total",
        "gateway_request_duration_seconds_bucket",
        "gateway_request_duration_seconds_count",
        "gateway_request_duration_seconds_sum",
    }
    labels = {"provider": "bedrock", "model": "other", "stream": "false", "status_class": "5xx"}
    assert metrics.registry.get_sample_value("gateway_requests_total", labels) == 1


def test_caches_are_bounded_whatever_the_label_values(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hostile upstream error type or model name cannot grow the caches past ``MAX_CACHED``;
    past it every value is still counted (through ``labels()``)."""
    monkeypatch.setattr(metrics_module, "MAX_CACHED", 8)
    metrics = GatewayMetrics()
    for _ in range(2):
        for i in range(50):
            metrics.observe_finished(
                "anthropic", f"model-{i}", False, 500 + i, 0.1, upstream_error=f"error_{i}"
            )
    assert len(metrics._resolved) <= 8 and len(metrics._finished) <= 8 and len(metrics._labels) <= 8
    for i in (0, 7, 8, 49):  # an upstream's type is a label only when the API publishes it
        labels = {"provider": "anthropic", "type": f"error_{i}"}
        assert metrics.registry.get_sample_value("gateway_upstream_errors_total", labels) is None
    other = {"provider": "anthropic", "type": "other"}
    assert metrics.registry.get_sample_value("gateway_upstream_errors_total", other) == 100
    labels = {"provider": "anthropic", "model": "other", "stream": "false", "status_class": "5xx"}
    assert metrics.registry.get_sample_value("gateway_requests_total", labels) == 100
