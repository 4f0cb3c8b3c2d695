"""The building blocks of the dashboards ``build.py`` generates: targets, panels, rows, and the
selectors every query carries (``J``: the scrape target; ``P``/``PM``/``PMT``: plus the provider,
model and team variables), with NaN-free ratios and quantiles (see ``build.py``)."""

from __future__ import annotations

from typing import Any

DS = {"type": "prometheus", "uid": "${datasource}"}

# the scrape target: Prometheus attaches job and instance, the Prometheus Operator namespace too
# (a target without a namespace label still matches the "All" value, .*)
J = 'job=~"$job",namespace=~"$namespace",instance=~"$instance"'
P = f'{J},provider=~"$provider"'
PM = f'{P},model=~"$model"'
PMT = f'{PM},team=~"$team"'
PER_HOUR = " * 3600"

Panel = dict[str, Any]


def target(expr: str, legend: str = "", *, instant: bool = False, table: bool = False) -> dict[str, Any]:
    return {
        "datasource": DS,
        "expr": expr,
        "legendFormat": legend or "__auto",
        "range": not instant,
        "instant": instant,
        "format": "table" if table else "time_series",
    }


def panel(
    kind: str,
    title: str,
    description: str,
    targets: list[dict[str, Any]],
    *,
    unit: str = "short",
    width: int = 8,
    height: int = 8,
    decimals: int | None = None,
) -> Panel:
    defaults: dict[str, Any] = {"unit": unit}
    if decimals is not None:
        defaults["decimals"] = decimals
    options: dict[str, Any] = {}
    if kind == "timeseries":
        defaults["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never"}
        options = {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}}
    elif kind in ("stat", "bargauge"):
        options = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}
        if kind == "bargauge":
            options |= {"orientation": "horizontal", "displayMode": "gradient", "showUnfilled": True}
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DS,
        "targets": [{"refId": chr(ord("A") + i), **t} for i, t in enumerate(targets)],
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
        "gridPos": {"w": width, "h": height},
    }


def row(title: str) -> Panel:
    """A full-width section header (Grafana ``row``; no query of its own)."""
    return {"type": "row", "title": title, "collapsed": False, "panels": [], "gridPos": {"w": 24, "h": 1}}


def stat(title: str, description: str, expr: str, unit: str, decimals: int | None = None) -> Panel:
    return panel("stat", title, description, [target(expr, instant=True)], unit=unit, width=6, height=4,
                 decimals=decimals)  # fmt: skip


def series(title: str, description: str, unit: str, *targets: dict[str, Any], width: int = 12) -> Panel:
    return panel("timeseries", title, description, list(targets), unit=unit, width=width)


def bars(title: str, description: str, expr: str, legend: str, unit: str) -> Panel:
    return panel("bargauge", title, description, [target(expr, legend, instant=True)], unit=unit)


def ratio(numerator: str, denominator: str) -> str:
    """``numerator / denominator`` where the denominator is positive: no traffic gives no sample
    (an empty panel or a missing team), never NaN (0/0) or Inf."""
    return f"{numerator} / ({denominator} > 0)"


def quantile(q: float, buckets: str) -> str:
    """``histogram_quantile`` without its NaN for empty buckets (NaN >= 0 is false: dropped)."""
    return f"histogram_quantile({q}, {buckets}) >= 0"


def quantiles(metric: str, selector: str, by: str, legend: str) -> list[dict[str, Any]]:
    return [
        target(
            quantile(q, f"sum by (le{by}) (rate({metric}_bucket{{{selector}}}[$__rate_interval]))"),
            f"p{round(q * 100)}{legend}",
        )
        for q in (0.5, 0.99)
    ]
