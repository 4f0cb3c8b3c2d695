"""The committed dashboards match their generator, are well-formed Grafana JSON, query only metrics
the gateway exports, honour the job/namespace/instance variables in every selector and the
provider/model/team variables wherever a metric has the label, and guard every division and
quantile against NaN. (Their expressions are evaluated against a real Prometheus in
``test_prometheus``.)"""

from __future__ import annotations

import asyncio
import functools
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector, CollectorRegistry

from gateway.app import create_app
from gateway.config import Settings
from gateway.loop_metrics import LoopMetrics
from gateway.metrics import GatewayMetrics
from gateway.process import running

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"
FILES = sorted((DASHBOARDS / "grafana").glob("*.json"))
VARIABLES = ("provider", "model", "team")
# the Fleet dashboard (gateway/fleet) selects by the caller's group instead
DASHBOARD_VARIABLES = {"switchyard-fleet.json": ("group",)}
# the scrape target's labels, on every series Prometheus stores (namespace: with the Prometheus
# Operator; "All" (.*) also matches a series without it)
TARGET_VARIABLES = ("job", "namespace", "instance")
SELECTOR = re.compile(r"\b((?:gateway|loop)_[a-z0-9_]+)(\{[^}]*\})?")


def load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = orjson.loads(path.read_bytes())
    return document


SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}


async def _serving_registry(directory: Path) -> list[Collector]:
    """The collectors on the registry of a real gateway app while it serves on loopback (its
    ``GatewayMetrics``, the team in-flight cap, the connection layer's collector) plus the agent
    loop's metrics, which share the registry when the loop runs in the gateway's process."""
    keys = directory / "keys"
    keys.write_text("sk-dash-alpha alpha\nsk-dash-metrics monitoring role=metrics\n", encoding="utf-8")
    upstreams = directory / "upstreams.json"  # several upstreams: their series are registered too
    upstreams.write_text('{"upstreams": [{"name": "primary", "provider": "anthropic"}]}', encoding="utf-8")
    settings = Settings.from_environ(
        {
            "GATEWAY_API_KEYS": "sk-dash-default",
            "GATEWAY_API_KEYS_FILE": str(keys),
            "GATEWAY_UPSTREAMS_FILE": str(upstreams),
            "ANTHROPIC_API_KEY": "sk-upstream-dash",
            "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",  # never contacted
        }
    )
    metrics = GatewayMetrics()
    LoopMetrics(metrics.registry)
    async with running(create_app(settings, metrics=metrics), "127.0.0.1", 0):
        return list(registered(metrics.registry))


def registered(registry: CollectorRegistry) -> list[Collector]:
    return list(registry._collector_to_names)  # prometheus_client keeps no public list of them


@functools.cache
def exported() -> dict[str, tuple[str, ...]]:
    """Every series name a running gateway (and the agent loop in its process) exports -> the
    metric's label names: read off the collectors of its registry, never a hand-kept list."""
    with tempfile.TemporaryDirectory() as directory:
        collectors = asyncio.run(_serving_registry(Path(directory)))
    names: dict[str, tuple[str, ...]] = {}
    for collector in collectors:
        if isinstance(collector, MetricWrapperBase):  # labels known before any child exists
            for suffix in SUFFIXES.get(str(collector._type), ("",)):
                names[collector._name + suffix] = tuple(collector._labelnames)
            continue
        for family in collector.collect():  # custom collectors: what a scrape of them returns
            labels = tuple(
                sorted({k for sample in family.samples for k in sample.labels} - {"le", "quantile"})
            )
            for suffix in SUFFIXES.get(family.type, ("",)):
                names[family.name + suffix] = labels
    return names


def unknown_metrics(expr: str, known: dict[str, tuple[str, ...]]) -> set[str]:
    return {name for name, _ in SELECTOR.findall(expr)} - set(known)


def test_the_exported_metrics_come_from_a_running_gateway() -> None:
    known = exported()
    # collector-made families: the connection layer's (registered while serving) and the team cap's
    for name in (
        "gateway_connections_accepted_total",
        "gateway_connections_closed_total",
        "gateway_http_parse_errors_total",
        "gateway_accept_errors_total",
        "gateway_connections_open",
        "gateway_connections_limit",
    ):
        assert name in known, name
    assert known["gateway_connections_closed_total"] == ("reason",)
    assert known["gateway_team_inflight_rejected_total"] == ("team",)  # primed for the key file's teams
    assert known["gateway_requests_total"][:2] == ("provider", "model")
    assert "loop_terminal_total" in known
    # a panel naming a metric nobody exports is caught
    assert unknown_metrics('sum(rate(gateway_connections_dropped_total{job=~"$job"}[5m]))', known) == {
        "gateway_connections_dropped_total"
    }


def expressions(document: dict[str, Any]) -> list[str]:
    return [target["expr"] for panel in document["panels"] for target in panel.get("targets", [])]


def test_four_dashboards_are_generated_and_current() -> None:
    assert [path.name for path in FILES] == [
        "switchyard-cache.json",
        "switchyard-cost.json",
        "switchyard-fleet.json",
        "switchyard-reliability.json",
    ]
    result = subprocess.run(
        [sys.executable, str(DASHBOARDS / "build.py"), "--check"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_dashboard_structure(path: Path) -> None:
    document = load(path)
    variables = {v["name"]: v for v in document["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    own = DASHBOARD_VARIABLES.get(path.name, VARIABLES)
    assert list(variables) == ["datasource", *TARGET_VARIABLES, *own]
    for name in (*TARGET_VARIABLES, *own):
        assert variables[name]["datasource"]["uid"] == "${datasource}"
        assert variables[name]["includeAll"] and variables[name]["allValue"] == ".*"
    panels = document["panels"]
    assert len({p["id"] for p in panels}) == len(panels) >= 10
    occupied: set[tuple[int, int]] = set()
    for panel in panels:
        if panel["type"] == "row":  # a section header: full width, no query
            assert "targets" not in panel and panel["gridPos"]["w"] == 24 and panel["title"]
            occupied |= {(x, panel["gridPos"]["y"]) for x in range(24)}
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"] and panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}" and target["refId"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        cells = {(grid["x"] + dx, grid["y"] + dy) for dx in range(grid["w"]) for dy in range(grid["h"])}
        assert not cells & occupied, f"{panel['title']} overlaps another panel"
        occupied |= cells


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_panels_use_exported_metrics_and_honour_the_variables(path: Path) -> None:
    known = exported()
    own = DASHBOARD_VARIABLES.get(path.name, VARIABLES)
    for expr in expressions(load(path)):
        found = SELECTOR.findall(expr)
        assert found, expr
        assert not unknown_metrics(expr, known), f"unknown metric in {expr}"
        for name, matchers in found:
            for label in TARGET_VARIABLES:
                assert f'{label}=~"${label}"' in matchers, f"{name} ignores ${label} in {expr}"
            for label in own:
                if label in known[name]:
                    assert f'{label}=~"${label}"' in matchers, f"{name} ignores ${label} in {expr}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_divisions_and_quantiles_cannot_show_nan(path: Path) -> None:
    """A division's right operand is filtered to > 0 (0/0 is NaN, x/0 is Inf); a quantile is
    filtered to >= 0 (histogram_quantile of empty buckets is NaN). The real-Prometheus test
    evaluates them with a team that has no tokens in the window."""
    for expr in expressions(load(path)):
        for division in re.finditer(r"\) / (.*)$", expr):
            assert division.group(1).startswith("(") and division.group(1).endswith(" > 0)"), expr
        if "histogram_quantile" in expr:
            assert expr.endswith(") >= 0"), expr
    # the variables' queries see only the selected scrape targets too
    for variable in load(path)["templating"]["list"]:
        if variable["type"] == "query" and variable["name"] not in ("job", "namespace"):
            assert 'job=~"$job"' in variable["definition"], variable["name"]


def test_alert_rules_use_exported_metrics() -> None:
    text = (DASHBOARDS / "alerts.rules.yml").read_text(encoding="utf-8")
    known = exported()
    used = {name for name, _ in SELECTOR.findall(text)}
    assert used and used <= set(known), used - set(known)
    alerts = re.findall(r"^\s+- alert: (\w+)$", text, re.MULTILINE)
    assert alerts == [
        "SwitchyardCacheHitRatioCollapse",
        "SwitchyardRetryStorm",
        "SwitchyardStreamWatchdogAborts",
        "SwitchyardHighErrorRate",
        "SwitchyardGatewayOverheadHigh",
        "SwitchyardConnectionsShed",
        "SwitchyardConnectionsNearCap",
    ]


def test_grafana_provisioning_points_at_the_dashboards() -> None:
    provider = (DASHBOARDS / "provisioning" / "dashboards" / "switchyard.yml").read_text(encoding="utf-8")
    datasource = (DASHBOARDS / "provisioning" / "datasources" / "switchyard-prometheus.yml").read_text(
        encoding="utf-8"
    )
    readme = (DASHBOARDS / "README.md").read_text(encoding="utf-8")
    path = re.search(r"^\s+path: (\S+)$", provider, re.MULTILINE)
    assert path and f"dashboards/grafana:{path.group(1)}" in readme
    assert re.search(r"^\s+type: prometheus$", datasource, re.MULTILINE)
    assert "apiVersion: 1" in provider and "apiVersion: 1" in datasource
