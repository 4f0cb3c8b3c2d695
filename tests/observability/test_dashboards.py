"""The committed dashboards match their generator, are well-formed Grafana JSON, query only metrics
the gateway exports, honour the job/namespace/instance variables in every selector and the
provider/model/team variables wherever a metric has the label, and guard every division and
quantile against NaN. (Their expressions are evaluated against a real Prometheus in
``test_prometheus``.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client.metrics import MetricWrapperBase

from gateway.loop_metrics import LoopMetrics
from gateway.metrics import GatewayMetrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "dashboards"
FILES = sorted((DASHBOARDS / "grafana").glob("*.json"))
VARIABLES = ("provider", "model", "team")
# the scrape target's labels, on every series Prometheus stores (namespace: with the Prometheus
# Operator; "All" (.*) also matches a series without it)
TARGET_VARIABLES = ("job", "namespace", "instance")
SELECTOR = re.compile(r"\b((?:gateway|loop)_[a-z0-9_]+)(\{[^}]*\})?")


def load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = orjson.loads(path.read_bytes())
    return document


def exported() -> dict[str, tuple[str, ...]]:
    """Every series name the gateway (and loop) export -> the metric's label names."""
    metrics = GatewayMetrics()
    loop = LoopMetrics(metrics.registry)
    names: dict[str, tuple[str, ...]] = {}
    for holder in (metrics, loop):
        for metric in vars(holder).values():
            if not isinstance(metric, MetricWrapperBase):
                continue
            name, labels, kind = metric._name, tuple(metric._labelnames), metric._type
            suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}.get(
                str(kind), [""]
            )
            for suffix in suffixes:
                names[name + suffix] = labels
    return names


def expressions(document: dict[str, Any]) -> list[str]:
    return [target["expr"] for panel in document["panels"] for target in panel.get("targets", [])]


def test_three_dashboards_are_generated_and_current() -> None:
    assert [path.name for path in FILES] == [
        "switchyard-cache.json",
        "switchyard-cost.json",
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
    assert list(variables) == ["datasource", *TARGET_VARIABLES, *VARIABLES]
    for name in (*TARGET_VARIABLES, *VARIABLES):
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
    for expr in expressions(load(path)):
        found = SELECTOR.findall(expr)
        assert found, expr
        for name, matchers in found:
            assert name in known, f"unknown metric {name} in {expr}"
            for label in TARGET_VARIABLES:
                assert f'{label}=~"${label}"' in matchers, f"{name} ignores ${label} in {expr}"
            for label in VARIABLES:
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
