"""The OpenTelemetry Python SDK as a Claude Code stand-in: it records Claude Code's metrics (the
names and attributes ``gateway/fleet/claude_code.py`` cites) and exports them with the real OTLP/HTTP
exporter (protobuf, optionally gzip) or as OTLP JSON (the SDK's own OTLP encoding in protobuf's JSON
mapping, enums as integers, as OTLP JSON requires).

The exporter is synchronous (``requests``): tests call these from a worker thread
(``asyncio.to_thread``) while the gateway serves on the test's event loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common._internal.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import Counter, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader, MetricsData
from opentelemetry.sdk.resources import Resource

SONNET = "claude-sonnet-4-6"
HAIKU = "claude-haiku-4-5"


@dataclass
class Activity:
    """What one Claude Code session reports (all counters, as the CLI records them)."""

    sessions: int = 1
    cost: dict[str, float] = field(default_factory=lambda: {SONNET: 0.25, HAIKU: 0.01})
    tokens: dict[tuple[str, str], int] = field(
        default_factory=lambda: {
            (SONNET, "input"): 1200,
            (SONNET, "output"): 300,
            (SONNET, "cacheRead"): 5000,
            (SONNET, "cacheCreation"): 800,
            (HAIKU, "input"): 90,
        }
    )
    lines: dict[str, int] = field(default_factory=lambda: {"added": 40, "removed": 7})
    commits: int = 2
    pull_requests: int = 1
    active: dict[str, float] = field(default_factory=lambda: {"user": 12.5, "cli": 30.0})
    decisions: dict[tuple[str, str], int] = field(
        default_factory=lambda: {("Edit", "accept"): 3, ("Write", "reject"): 1}
    )


class Recorder:
    """A meter provider with Claude Code's counters and an in-memory reader to collect them."""

    def __init__(self, session_id: str = "session-1", *, cumulative: bool = False) -> None:
        temporality = AggregationTemporality.CUMULATIVE if cumulative else AggregationTemporality.DELTA
        self.reader = InMemoryMetricReader(preferred_temporality={Counter: temporality})
        resource = Resource.create({"service.name": "claude-code", "service.version": "2.1.332"})
        self.provider = MeterProvider(metric_readers=[self.reader], resource=resource)
        meter = self.provider.get_meter("com.anthropic.claude_code")
        self.base = {"session.id": session_id, "user.email": "someone-else@example.com"}  # client claims
        self.session = meter.create_counter("claude_code.session.count")
        self.cost = meter.create_counter("claude_code.cost.usage", unit="USD")
        self.tokens = meter.create_counter("claude_code.token.usage", unit="tokens")
        self.lines = meter.create_counter("claude_code.lines_of_code.count")
        self.commits = meter.create_counter("claude_code.commit.count")
        self.pull_requests = meter.create_counter("claude_code.pull_request.count")
        self.active = meter.create_counter("claude_code.active_time.total", unit="s")
        self.decisions = meter.create_counter("claude_code.code_edit_tool.decision")
        self.unrelated = meter.create_counter("some.other.library.requests")

    def record(self, activity: Activity) -> MetricsData:
        base = self.base
        if activity.sessions:
            self.session.add(activity.sessions, base)
        for model, usd in activity.cost.items():
            self.cost.add(usd, {**base, "model": model})
        for (model, kind), count in activity.tokens.items():
            self.tokens.add(count, {**base, "model": model, "type": kind})
        for kind, count in activity.lines.items():
            self.lines.add(count, {**base, "type": kind})
        if activity.commits:
            self.commits.add(activity.commits, base)
        if activity.pull_requests:
            self.pull_requests.add(activity.pull_requests, base)
        for kind, seconds in activity.active.items():
            self.active.add(seconds, {**base, "type": kind})
        for (tool, decision), count in activity.decisions.items():
            self.decisions.add(
                count, {**base, "tool_name": tool, "decision": decision, "source": "config", "language": "Go"}
            )
        self.unrelated.add(5, {"route": "/x"})
        data = self.reader.get_metrics_data()
        assert data is not None
        return data


def export_protobuf(endpoint: str, data: MetricsData, token: str, *, gzip: bool = False) -> bool:
    """The real OTLP/HTTP exporter (protobuf); True when it reports success."""
    exporter = OTLPMetricExporter(
        endpoint=endpoint,
        headers={"Authorization": f"Bearer {token}"},
        compression=Compression.Gzip if gzip else Compression.NoCompression,
        timeout=10,
    )
    try:
        return exporter.export(data).name == "SUCCESS"
    finally:
        exporter.shutdown()


def otlp_json(data: MetricsData) -> bytes:
    """The SDK's OTLP encoding of ``data`` as OTLP JSON."""
    request = encode_metrics(data)
    return json_format.MessageToJson(request, use_integers_for_enums=True, indent=None).encode()


def expected_series(activity: Activity, times: int = 1) -> Mapping[tuple[str, tuple[str, ...]], float]:
    """The gateway_fleet_* samples ``times`` exports of ``activity`` by one caller in ``group``
    add (labels besides ``group``, in the metric's label order)."""
    found: dict[tuple[str, tuple[str, ...]], float] = {}

    def add(name: str, labels: tuple[str, ...], value: float) -> None:
        found[(name, labels)] = found.get((name, labels), 0.0) + value * times

    add("gateway_fleet_sessions_total", (), activity.sessions)
    for model, usd in activity.cost.items():
        add("gateway_fleet_cost_usd_total", (model,), usd)
    kinds = {"cacheRead": "cache_read", "cacheCreation": "cache_creation"}
    for (model, kind), count in activity.tokens.items():
        add("gateway_fleet_tokens_total", (model, kinds.get(kind, kind)), count)
    for kind, count in activity.lines.items():
        add("gateway_fleet_lines_of_code_total", (kind,), count)
    add("gateway_fleet_commits_total", (), activity.commits)
    add("gateway_fleet_pull_requests_total", (), activity.pull_requests)
    for kind, seconds in activity.active.items():
        add("gateway_fleet_active_time_seconds_total", (kind,), seconds)
    for (tool, decision), count in activity.decisions.items():
        add("gateway_fleet_code_edit_decisions_total", (tool, decision), count)
    return found
