"""The Fleet dashboard against a real Prometheus scraping a gateway that receives OTLP exports.

Three callers (static keys of teams alpha, beta, gamma; ``GATEWAY_TELEMETRY_GROUPS=alpha,beta`` so
gamma counts as ``other``) export Claude Code's metrics with the OpenTelemetry SDK (protobuf and
gzip, and OTLP JSON) in two rounds a scrape apart; a garbage export is answered 200 and counted;
the gateway forwards to a collector on loopback. The sign-in and refusal counters get stand-in
increments (the sign-in and policy code counts them). Then every panel expression must parse and
return a finite value (none NaN), and the dashboard's spend, per group and over the top users plus
``other``, must equal what the clients exported.
"""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from gateway.fleet.telemetry import fleet_metrics
from tests.fleet.collector import collector
from tests.fleet.otlp_client import Activity, Recorder, export_protobuf, otlp_json
from tests.fleet.telemetry_rig import ALPHA_KEY, BETA_KEY, GAMMA_KEY, METRICS_KEY, telemetry_rig
from tests.observability.prom import (
    MISSING,
    PROMETHEUS,
    Prometheus,
    finite_values,
    running_prometheus,
    scrape_config,
)

pytestmark = [pytest.mark.skipif(PROMETHEUS is None, reason=MISSING), pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
FLEET = ROOT / "dashboards" / "grafana" / "switchyard-fleet.json"
SUBSTITUTIONS = {
    "$__rate_interval": "1m",
    "$__range": "1h",
    "$job": "switchyard",
    "$namespace": ".*",
    "$instance": ".*",
    "$group": ".*",
}
CALLERS = {ALPHA_KEY: "alpha", BETA_KEY: "beta", GAMMA_KEY: "other"}


def targets() -> list[tuple[str, str]]:
    document = orjson.loads(FLEET.read_bytes())
    return [(panel["title"], t["expr"]) for panel in document["panels"] for t in panel.get("targets", [])]


def substitute(expr: str) -> str:
    for variable, value in SUBSTITUTIONS.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, expr
    return expr


async def traffic(base_url: str, spend: dict[str, float], sessions: list[int], round: int) -> None:
    activity = Activity()
    per_export = sum(activity.cost.values())
    endpoint = f"{base_url}/v1/metrics"
    recorders = {key: Recorder(f"session-{round}-{group}") for key, group in CALLERS.items()}
    # alpha: protobuf, gzip; beta: twice, OTLP JSON; gamma: protobuf
    assert await asyncio.to_thread(
        export_protobuf, endpoint, recorders[ALPHA_KEY].record(activity), ALPHA_KEY, gzip=True
    )
    async with aiohttp.ClientSession() as session:
        for _ in range(2):
            body = otlp_json(recorders[BETA_KEY].record(activity))
            headers = {"authorization": f"Bearer {BETA_KEY}", "content-type": "application/json"}
            async with session.post(endpoint, data=body, headers=headers) as response:
                assert response.status == 200
        garbage = {"authorization": f"Bearer {GAMMA_KEY}", "content-type": "application/x-protobuf"}
        async with session.post(endpoint, data=b"\xff\xfe not otlp", headers=garbage) as response:
            assert response.status == 200  # answered, not used, counted
    assert await asyncio.to_thread(
        export_protobuf, endpoint, recorders[GAMMA_KEY].record(activity), GAMMA_KEY
    )
    for group, exports in (("alpha", 1), ("beta", 2), ("other", 1)):
        spend[group] = spend.get(group, 0.0) + exports * per_export
        sessions.append(exports * activity.sessions)


async def test_fleet_dashboard_on_a_real_prometheus(tmp_path: Path) -> None:
    started = time.monotonic()
    async with collector() as sink:
        env = {
            "GATEWAY_TELEMETRY_GROUPS": "alpha,beta",
            "GATEWAY_TELEMETRY_TOP_USERS": "2",
            "GATEWAY_OTLP_FORWARD_URLS": sink.url,
        }
        async with telemetry_rig(tmp_path, env) as rig:
            fleet = fleet_metrics(rig.metrics.registry, rig.settings.telemetry)  # the app's own instance
            config = scrape_config(rig.base_url.removeprefix("http://"), METRICS_KEY, [])
            async with running_prometheus(tmp_path, config) as prometheus:
                await prometheus.scrapes_after(0, 1)  # the primed zero series are in first
                spend: dict[str, float] = {}
                sessions: list[int] = []
                for round in (1, 2):
                    await traffic(rig.base_url, spend, sessions, round)
                    # stand-ins for the sign-in flow and the policy (their code counts these)
                    fleet.signed_in("success")
                    fleet.signed_in("denied")
                    fleet.refused("spend_cap")
                    fleet.refused("model_denied")
                    fleet.settings_hints.labels("alpha", "stale").inc()
                    await prometheus.scrapes_after(time.time(), 1)
                at = await prometheus.scrapes_after(time.time(), 2)
                results = await check_panels(prometheus, at)
    check_figures(results, spend, sum(sessions), len(sink.received))
    assert time.monotonic() - started < 90


async def check_panels(prometheus: Prometheus, at: float) -> dict[str, list[dict[str, Any]]]:
    results: dict[str, list[dict[str, Any]]] = {}
    empty, nan = [], []
    for title, expr in targets():
        samples = await prometheus.query(substitute(expr), at)  # raises unless it parses
        results.setdefault(title, []).extend(samples)
        if not finite_values(samples):
            empty.append(f"{title}: {expr}")
        if any(math.isnan(float(sample["value"][1])) for sample in samples):
            nan.append(f"{title}: {samples}")
    assert not nan, "panels showing NaN:\n" + "\n".join(nan)
    assert not empty, "panels without data:\n" + "\n".join(empty)
    return results


def check_figures(
    results: dict[str, list[dict[str, Any]]], spend: dict[str, float], sessions: int, forwarded: int
) -> None:
    def by(title: str, label: str) -> dict[str, float]:
        return {sample["metric"].get(label, ""): float(sample["value"][1]) for sample in results[title]}

    total = sum(spend.values())
    assert by("Claude Code spend (range)", "")[""] == pytest.approx(total, rel=1e-9)
    assert by("Spend by group (range)", "group") == pytest.approx(spend, rel=1e-9)
    top = by("Top users by spend (range)", "user")
    assert set(top) <= {"key:alpha", "key:beta", "key:gamma"} and len(top) == 2  # GATEWAY_TELEMETRY_TOP_USERS
    assert "key:beta" in top  # the biggest spender
    other = by("Spend outside the top users (range)", "")[""]
    assert sum(top.values()) + other == pytest.approx(total, rel=1e-9)
    assert by("Sessions (range)", "")[""] == sessions
    assert by("Active users (24 h)", "")[""] == 3
    assert by("Active users by group", "group") == {"alpha": 1, "beta": 1, "other": 1}
    assert by("Sign-ins (range)", "")[""] == 2
    assert by("Refusals by reason (range)", "reason")["spend_cap"] == 2
    hints = by("Managed settings on model requests (range)", "state")
    assert hints == {"current": 0, "previous": 0, "stale": 2, "unknown": 0}
    assert by("Edit acceptance by tool", "tool") == pytest.approx({"Edit": 1.0, "Write": 0.0})
    assert by("Collector breakers open", "")[""] == 0
    delivered = [s for s in results["Forwarded to collectors"] if s["metric"]["outcome"] == "delivered"]
    assert delivered and forwarded == 8  # every accepted export, none of the garbage
