"""What the gateway records per request: tokens and spend by team and served model, overhead,
bounded labels (never an id), the series primed at zero, and the loop's metrics API."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import anthropic
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.accounting import RequestScope
from gateway.config import Settings
from gateway.keys import InboundKey, Role
from gateway.loop_metrics import LoopMetrics
from gateway.metrics import GatewayMetrics, overhead_seconds
from gateway.outcome import Outcome
from gateway.providers.anthropic import AnthropicProvider
from gateway.providers.base import ClientRequest, Operation
from gateway.providers.models import FIRST_PARTY_MODELS
from gateway.server import Gateway
from tests.observability.rig import (
    HAIKU,
    KEY,
    SONNET,
    TEAM,
    TEAM_KEY,
    UPSTREAM_KEY,
    USER,
    cached_system,
    expected_cost,
    gateway_rig,
)


def close(value: float) -> Any:
    return pytest.approx(value, rel=1e-9, abs=1e-12)


async def test_spend_and_tokens_by_team_and_served_model(tmp_path: Path) -> None:
    env = {"GATEWAY_FALLBACK_MODEL": HAIKU, "GATEWAY_FALLBACK_AFTER_OVERLOADS": "2"}
    async with gateway_rig(tmp_path, env) as rig:
        team = rig.client(TEAM_KEY)
        written = await team.messages.create(
            model=SONNET, max_tokens=32, system=cached_system(), messages=USER
        )
        read = await team.messages.create(model=SONNET, max_tokens=32, system=cached_system(), messages=USER)
        assert written.usage.cache_creation_input_tokens and read.usage.cache_read_input_tokens
        system_1h = cached_system("1h", prefix="1h: ")
        async with rig.client().messages.stream(
            model=SONNET, max_tokens=32, system=system_1h, messages=USER
        ) as stream:
            streamed = await stream.get_final_message()
        assert streamed.usage.cache_creation and streamed.usage.cache_creation.ephemeral_1h_input_tokens
        overloaded = rig.client(**{"x-emulator-fault": "fail_first=2:529", "x-emulator-fault-key": "fb"})
        fallback = await overloaded.messages.create(model=SONNET, max_tokens=32, messages=USER)
        assert fallback.model.startswith(HAIKU)

        team_spend = expected_cost("anthropic", SONNET, written.usage) + expected_cost(
            "anthropic", SONNET, read.usage
        )
        assert rig.value("gateway_cost_usd_total", provider="anthropic", model=SONNET, team=TEAM) == close(
            team_spend
        )
        default_sonnet = expected_cost("anthropic", SONNET, streamed.usage)
        assert rig.value(
            "gateway_cost_usd_total", provider="anthropic", model=SONNET, team="default"
        ) == close(default_sonnet)
        # the fallback's tokens and spend belong to the model that answered, its request to the one asked
        haiku = expected_cost("anthropic", HAIKU, fallback.usage)
        assert haiku > 0
        assert rig.value(
            "gateway_cost_usd_total", provider="anthropic", model=HAIKU, team="default"
        ) == close(haiku)
        assert rig.value(
            "gateway_tokens_total", provider="anthropic", model=HAIKU, team="default", kind="output"
        )
        assert (
            rig.value(
                "gateway_requests_total",
                provider="anthropic",
                model=SONNET,
                stream="false",
                status_class="2xx",
            )
            == 3
        )
        tokens = {
            kind: rig.value("gateway_tokens_total", provider="anthropic", model=SONNET, team=TEAM, kind=kind)
            for kind in ("input", "cache_read", "cache_write_5m")
        }
        assert tokens == {
            "input": written.usage.input_tokens + read.usage.input_tokens,
            "cache_read": read.usage.cache_read_input_tokens,
            "cache_write_5m": written.usage.cache_creation_input_tokens,
        }
        assert rig.value(
            "gateway_tokens_total", provider="anthropic", model=SONNET, team="default", kind="cache_write_1h"
        ) == (streamed.usage.cache_creation.ephemeral_1h_input_tokens)
        by_kind = sum(
            rig.value("gateway_cost_by_kind_usd_total", provider="anthropic", model=model, kind=kind)
            for model in (SONNET, HAIKU)
            for kind in ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h")
        )
        assert by_kind == close(team_spend + default_sonnet + haiku)
        assert rig.value("gateway_overhead_seconds_count", provider="anthropic") == 4


def _gateway(metrics: GatewayMetrics, now: float) -> Gateway:
    settings = Settings.from_environ({"GATEWAY_API_KEYS": KEY, "ANTHROPIC_API_KEY": UPSTREAM_KEY})
    return Gateway(settings, AnthropicProvider(settings), metrics, clock=lambda: now)


def test_overhead_excludes_the_upstream() -> None:
    metrics = GatewayMetrics()
    gateway = _gateway(metrics, now=10.0)
    client = ClientRequest(Operation.MESSAGES, b"{}", {"model": SONNET, "stream": True}, [], "req-1")
    outcome = Outcome(status=200, upstream_started_at=1.002, upstream_done_at=9.9995, relay_busy_s=0.0003)
    gateway._close(RequestScope(Operation.MESSAGES, "req-1", 1.0, outcome, client, "default"))
    registry = metrics.registry
    assert registry.get_sample_value("gateway_overhead_seconds_count", {"provider": "anthropic"}) == 1
    # 2 ms before the upstream + 0.3 ms on chunks + 0.5 ms after it
    assert registry.get_sample_value("gateway_overhead_seconds_sum", {"provider": "anthropic"}) == close(
        0.0028
    )
    labels = {"provider": "anthropic", "le": "0.0025"}
    assert registry.get_sample_value("gateway_overhead_seconds_bucket", labels) == 0
    labels = {"provider": "anthropic", "model": SONNET, "stream": "true"}
    assert registry.get_sample_value("gateway_request_duration_seconds_sum", labels) == 9.0
    # the upstream was never called (the timestamp is not set): no overhead observation
    gateway._close(RequestScope(Operation.MESSAGES, "req-1", 1.0, Outcome(status=502), client, "default"))
    assert registry.get_sample_value("gateway_overhead_seconds_count", {"provider": "anthropic"}) == 1


def test_overhead_arithmetic() -> None:
    assert overhead_seconds(1.0, 5.0, None, None) is None
    assert overhead_seconds(1.0, 5.0, 1.25, None) == 0.25  # failed before an answer arrived
    assert overhead_seconds(1.0, 5.0, 1.25, 4.5, 0.125) == 0.875
    assert overhead_seconds(1.0, 5.0, 0.5, 5.0) == 0.0  # never negative (clock skew in tests)


def test_prime_creates_zero_series_once() -> None:
    metrics = GatewayMetrics()
    keys = [InboundKey(b"x" * 32, TEAM)]
    metrics.prime("bedrock", keys)
    registry = metrics.registry
    for entry in FIRST_PARTY_MODELS:
        for team in (TEAM, "default"):
            labels = {"provider": "bedrock", "model": entry.alias, "team": team}
            assert registry.get_sample_value("gateway_cost_usd_total", labels) == 0.0
    for event in ("warning", "abort"):
        assert (
            registry.get_sample_value("gateway_stream_idle_total", {"provider": "bedrock", "event": event})
            == 0
        )
    # a team first seen later (a reloaded keys file) is primed then; a metrics-only key's is not
    metrics.cost.labels("bedrock", SONNET, TEAM).inc(2.5)
    metrics.prime(
        "bedrock",
        [
            InboundKey(b"x" * 32, TEAM),
            InboundKey(b"y" * 32, "late-team"),
            InboundKey(b"z" * 32, "monitoring", Role.METRICS),
        ],
    )
    labels = {"provider": "bedrock", "model": SONNET, "team": "late-team"}
    assert registry.get_sample_value("gateway_cost_usd_total", labels) == 0.0
    labels = {"provider": "bedrock", "model": SONNET, "team": "monitoring"}
    assert registry.get_sample_value("gateway_cost_usd_total", labels) is None
    labels = {"provider": "bedrock", "model": SONNET, "team": TEAM}
    assert registry.get_sample_value("gateway_cost_usd_total", labels) == 2.5  # primed once, not reset


FORBIDDEN_LABELS = {
    "session",
    "session_id",
    "user",
    "user_id",
    "key",
    "api_key",
    "request_id",
    "id",
    "trace_id",
}
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)


async def test_exposition_has_no_ids_and_bounded_models(tmp_path: Path) -> None:
    session = str(uuid.uuid4())
    other_session = str(uuid.uuid4())
    user_id = orjson.dumps({"device_id": "d3v1c3", "account_uuid": "", "session_id": other_session}).decode()
    request_ids: list[str] = []
    async with gateway_rig(tmp_path) as rig:
        client = rig.client(TEAM_KEY, **{"X-Claude-Code-Session-Id": session, "x-session-id": "sess-xyz"})
        raw = await client.messages.with_raw_response.create(
            model=SONNET, max_tokens=16, messages=USER, metadata={"user_id": user_id}
        )
        request_ids.append(raw.headers["x-client-request-id"])
        with pytest.raises(anthropic.NotFoundError):
            await client.messages.create(model="claude-imaginary-9-20990101", max_tokens=16, messages=USER)
        exposition = rig.metrics.exposition().decode()
    secrets = [KEY, TEAM_KEY, UPSTREAM_KEY, session, other_session, "sess-xyz", "d3v1c3", *request_ids]
    models: set[str] = set()
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name == "gateway_fleet_user_cost_usd_total":
                # the one deliberate per-user series: a bounded top-k of spenders by the
                # authenticated caller's name (GATEWAY_TELEMETRY_TOP_USERS, tests/fleet); no
                # telemetry was sent here, so it holds the rest-of-the-fleet row only
                assert sample.labels == {"user": "other"}, sample.labels
                continue
            assert not FORBIDDEN_LABELS & set(sample.labels), (sample.name, sample.labels)
            for value in sample.labels.values():
                assert not UUID.search(value), (sample.name, sample.labels)
                assert not any(secret in value for secret in secrets), (sample.name, sample.labels)
            if "model" in sample.labels:
                models.add(sample.labels["model"])
    catalogue = {entry.alias for entry in FIRST_PARTY_MODELS}
    assert "other" in models and models <= catalogue | {"other"}
    for secret in secrets:
        assert secret not in exposition


def test_cache_break_reasons_are_bounded() -> None:
    metrics = GatewayMetrics()
    metrics.observe_cache_break("anthropic", "system_changed")
    metrics.observe_cache_break("anthropic", "session 1234 changed its tools")
    registry = metrics.registry
    labels = {"provider": "anthropic", "reason": "system_changed"}
    assert registry.get_sample_value("gateway_cache_breaks_total", labels) == 1
    assert (
        registry.get_sample_value("gateway_cache_breaks_total", {"provider": "anthropic", "reason": "other"})
        == 1
    )
    assert registry.get_sample_value("gateway_session_store_errors_total") == 0


def test_upstream_error_types_are_bounded() -> None:
    """The type comes from the upstream's error body (or stream event): a hostile upstream sent
    200 distinct types and got 200 series."""
    metrics = GatewayMetrics()
    for kind in ("overloaded_error", 'weird_1\n"} x{"', "weird_2", "billing_error"):
        metrics.observe_finished("anthropic", "claude-sonnet-4-5", True, 500, 0.1, upstream_error=kind)
    values = {
        kind: metrics.registry.get_sample_value(
            "gateway_upstream_errors_total", {"provider": "anthropic", "type": kind}
        )
        for kind in ("overloaded_error", "billing_error", "other", "weird_2")
    }
    assert values == {"overloaded_error": 1, "billing_error": 1, "other": 2, "weird_2": None}


def test_loop_metrics_share_the_registry_and_bound_their_labels() -> None:
    gateway = GatewayMetrics()
    loop = LoopMetrics(gateway.registry, known_tools=["Read"], max_tools=2)
    loop.tool_call("Read", "ok")
    loop.tool_call("Grep", "ok")
    loop.tool_call("mcp__github__create_issue", "error")  # over the limit of 2 distinct tools
    loop.tool_call("Read", "a value with spaces")
    loop.compaction("autocompact", "applied")
    loop.terminal("completed")
    loop.terminal("completed")
    value = gateway.registry.get_sample_value
    assert value("loop_tool_calls_total", {"tool": "Read", "outcome": "ok"}) == 1
    assert value("loop_tool_calls_total", {"tool": "Grep", "outcome": "ok"}) == 1
    assert value("loop_tool_calls_total", {"tool": "other", "outcome": "error"}) == 1
    assert value("loop_tool_calls_total", {"tool": "Read", "outcome": "other"}) == 1
    assert value("loop_compactions_total", {"layer": "autocompact", "outcome": "applied"}) == 1
    assert value("loop_terminal_total", {"reason": "completed"}) == 2
    exposition = gateway.exposition().decode()
    assert "gateway_requests_total" in exposition and "loop_terminal_total" in exposition
