"""Prometheus metrics of the gateway, on a registry of their own (one per app, so tests can run
several gateways in one process). Labels are bounded: models are normalised to the catalogue,
teams come from the key file, and no request, session, user or key id is ever a label.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gateway.providers.models import metric_label
from gateway.streaming.usage import Usage

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)

EXPOSITION_CONTENT_TYPE = CONTENT_TYPE_LATEST

# ``*_created`` series double the cardinality and no dashboard reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "gateway_requests_total",
            "Requests answered, by upstream provider, model, streaming and status class.",
            ["provider", "model", "stream", "status_class"],
            registry=r,
        )
        self.duration = Histogram(
            "gateway_request_duration_seconds",
            "Time from request received to the last byte sent.",
            ["provider", "model", "stream"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "gateway_time_to_first_token_seconds",
            "Time from request received to the first content event of a stream.",
            ["provider", "model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.overhead = Histogram(
            "gateway_overhead_seconds",
            "Time spent in the gateway before the request left for the upstream.",
            ["provider"],
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "gateway_tokens_total",
            "Tokens by kind: input (uncached), output, cache_read, cache_write_5m, cache_write_1h.",
            ["provider", "model", "team", "kind"],
            registry=r,
        )
        self.upstream_errors = Counter(
            "gateway_upstream_errors_total",
            "Errors from or on the way to the upstream, by Anthropic error type.",
            ["provider", "type"],
            registry=r,
        )
        self.retries = Counter(
            "gateway_upstream_retries_total",
            "Upstream attempts retried by the gateway, by reason (status_529, connection_error...).",
            ["provider", "reason"],
            registry=r,
        )
        self.fallbacks = Counter(
            "gateway_fallbacks_total",
            "Fallbacks taken: kind non_streaming (stream replaced by a complete message) or model.",
            ["provider", "kind"],
            registry=r,
        )
        self.stream_idle = Counter(
            "gateway_stream_idle_total",
            "Idle-watchdog firings on relayed streams: event warning or abort.",
            ["provider", "event"],
            registry=r,
        )
        self.betas_dropped = Counter(
            "gateway_betas_dropped_total",
            "anthropic-beta values removed because the upstream does not accept them.",
            ["provider", "beta"],
            registry=r,
        )
        self.inflight_requests = Gauge("gateway_inflight_requests", "Requests being served.", registry=r)
        self.inflight_streams = Gauge("gateway_inflight_streams", "Streams being relayed.", registry=r)

    def observe_usage(self, provider: str, model: str, team: str, usage: Usage) -> None:
        label = metric_label(model)
        for kind, count in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cache_read", usage.cache_read_input_tokens),
            ("cache_write_5m", usage.cache_write_5m_tokens),
            ("cache_write_1h", usage.cache_write_1h_tokens),
        ):
            if count:
                self.tokens.labels(provider, label, team, kind).inc(count)

    def observe_request(
        self, provider: str, model: str, stream: bool, status: int, duration_s: float
    ) -> None:
        label = metric_label(model)
        stream_label = "true" if stream else "false"
        self.requests.labels(provider, label, stream_label, f"{status // 100}xx").inc()
        self.duration.labels(provider, label, stream_label).observe(duration_s)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
