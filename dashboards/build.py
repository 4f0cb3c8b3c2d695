"""Generates the Grafana dashboards in ``dashboards/grafana/`` (the JSON files are committed).

    python dashboards/build.py           # rewrite the JSON files
    python dashboards/build.py --check   # exit 1 if a committed file differs from this source

Every panel queries the metrics of ``gateway/metrics.py`` (in the reliability dashboard's
"Connections" row, the connection layer's collector ``gateway/connection_events.py`` and the team
in-flight cap of ``gateway/transport.py``; in its "Agent loop" row, ``gateway/loop_metrics.py``;
the Fleet dashboard, ``fleet_panels.py``, the fleet series of ``gateway/fleet/fleet_metrics.py``)
through the ``$datasource`` variable,
honours the ``$job``, ``$namespace`` and ``$instance`` variables (the scrape target: one deployment
among several on one Prometheus, one pod) in every selector, and ``$provider``, ``$model`` and
``$team`` wherever the metric has that label. No panel shows NaN: a ratio's denominator is
filtered to ``> 0`` (a team or window without traffic shows nothing, not 0/0), and latency
quantiles to ``>= 0`` (``histogram_quantile`` of empty buckets is NaN).
``tests/observability`` evaluates every expression against a real Prometheus.
The building blocks (targets, panels, selectors) are in ``panel_kit.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # panel_kit beside this file, however it runs
from fleet_panels import fleet_panels, fleet_variables
from panel_kit import (
    DS,
    PER_HOUR,
    PM,
    PMT,
    J,
    P,
    Panel,
    bars,
    panel,
    quantile,
    quantiles,
    ratio,
    row,
    series,
    stat,
    target,
)

OUT = Path(__file__).resolve().parent / "grafana"
PROMPT_KINDS = 'kind=~"input|cache_read|cache_write_5m|cache_write_1h"'
LINKS = {
    "type": "dashboards",
    "title": "Switchyard",
    "tags": ["switchyard"],
    "asDropdown": False,
    "includeVars": True,
    "keepTime": True,
}


def hit_ratio(by: str, window: str, fn: str = "rate") -> str:
    group = f" by ({by})" if by else ""
    read = f'sum{group} ({fn}(gateway_tokens_total{{{PMT},kind="cache_read"}}[{window}]))'
    prompt = f"sum{group} ({fn}(gateway_tokens_total{{{PMT},{PROMPT_KINDS}}}[{window}]))"
    return ratio(read, prompt)


def cost_dashboard() -> list[Panel]:
    spend = f"gateway_cost_usd_total{{{PMT}}}"
    tokens = f"gateway_tokens_total{{{PMT}}}"
    return [
        stat("Spend (range total)", "USD spent over the dashboard's time range.",
             f"sum(increase({spend}[$__range]))", "currencyUSD", 2),
        stat("Spend rate (USD/h)", "Current spend rate, USD per hour.",
             f"sum(rate({spend}[$__rate_interval])){PER_HOUR}", "currencyUSD", 2),
        stat("Projected monthly spend", "The range's average spend rate over 30 days.",
             f"sum(rate({spend}[$__range])) * 86400 * 30", "currencyUSD", 0),
        stat("Tokens (range total)", "Every token billed over the range, all kinds.",
             f"sum(increase({tokens}[$__range]))", "short"),
        series("Spend rate by team (USD/h)", "Teams come from the inbound key file.", "currencyUSD",
               target(f"sum by (team) (rate({spend}[$__rate_interval])){PER_HOUR}", "{{team}}")),
        series("Spend rate by model (USD/h)", "The model that answered (after any model fallback).",
               "currencyUSD",
               target(f"sum by (model) (rate({spend}[$__rate_interval])){PER_HOUR}", "{{model}}")),
        bars("Spend by team (range)", "USD per team over the range.",
             f"sort_desc(sum by (team) (increase({spend}[$__range])))", "{{team}}", "currencyUSD"),
        bars("Spend by model (range)", "USD per model over the range.",
             f"sort_desc(sum by (model) (increase({spend}[$__range])))", "{{model}}", "currencyUSD"),
        bars("Spend by provider (range)", "USD per upstream provider over the range.",
             f"sort_desc(sum by (provider) (increase({spend}[$__range])))", "{{provider}}", "currencyUSD"),
        series("Tokens by kind (tokens/s)",
               "input is the uncached part of the prompt; cache writes are split by TTL.", "short",
               target(f"sum by (kind) (rate({tokens}[$__rate_interval]))", "{{kind}}")),
        panel("table", "Spend by team and model (range)", "USD per team and model over the range.",
              [target(f"sort_desc(sum by (team, model) (increase({spend}[$__range])))", instant=True,
                      table=True)], unit="currencyUSD", width=12),
        bars("Tokens by kind (range)", "Tokens per kind over the range.",
             f"sort_desc(sum by (kind) (increase({tokens}[$__range])))", "{{kind}}", "short"),
    ]  # fmt: skip


def cache_dashboard() -> list[Panel]:
    spend = f"gateway_cost_by_kind_usd_total{{{PM}}}"
    cache_spend = f'gateway_cost_by_kind_usd_total{{{PM},kind=~"cache_.*"}}'
    return [
        stat("Cache hit ratio (range)", "cache_read / (input + cache_read + cache_write) over the range.",
             hit_ratio("", "$__range", "increase"), "percentunit", 1),
        stat("Cache share of spend (range)", "Cache reads and writes as a share of all spend.",
             ratio(f"sum(increase({cache_spend}[$__range]))", f"sum(increase({spend}[$__range]))"),
             "percentunit", 1),
        stat("Cache write / read spend (range)",
             "USD spent writing the cache per USD spent reading it; well above 1 means prefixes are "
             "written but rarely reused (no value while nothing was read).",
             ratio(f'sum(increase(gateway_cost_by_kind_usd_total{{{PM},kind=~"cache_write_.*"}}[$__range]))',
                   f'sum(increase(gateway_cost_by_kind_usd_total{{{PM},kind="cache_read"}}[$__range]))'),
             "short", 2),
        stat("Cache breaks (range)", "Cached prefixes that stopped matching within a session.",
             f"sum(increase(gateway_cache_breaks_total{{{P}}}[$__range]))", "short", 0),
        series("Cache hit ratio by model", "cache_read / (input + cache_read + cache_write).",
               "percentunit", target(hit_ratio("model", "$__rate_interval"), "{{model}}")),
        series("Cache hit ratio by team", "cache_read / (input + cache_read + cache_write); a team without "
               "prompt tokens in the interval has no line (not NaN).",
               "percentunit", target(hit_ratio("team", "$__rate_interval"), "{{team}}")),
        series("Prompt tokens by kind (tokens/s)", "Uncached input, cache reads, 5m and 1h cache writes.",
               "short",
               target(f"sum by (kind) (rate(gateway_tokens_total{{{PMT},{PROMPT_KINDS}}}[$__rate_interval]))",
                      "{{kind}}")),
        series("Cache write vs read spend (USD/h)", "Spend on cache writes (per TTL) and cache reads.",
               "currencyUSD",
               target(f"sum by (kind) (rate({cache_spend}[$__rate_interval])){PER_HOUR}", "{{kind}}")),
        series("Cache breaks by reason", "Breaks per interval, by the detector's reason.", "short",
               target(f"sum by (reason) (increase(gateway_cache_breaks_total{{{P}}}[$__rate_interval]))",
                      "{{reason}}")),
        bars("Dropped betas (range)", "anthropic-beta values the upstream's policy removed.",
             f"sort_desc(sum by (provider, beta) (increase(gateway_betas_dropped_total{{{P}}}[$__range])))",
             "{{provider}} {{beta}}", "short"),
    ]  # fmt: skip


def reliability_dashboard() -> list[Panel]:
    requests = f"gateway_requests_total{{{PM}}}"
    errors = f'gateway_requests_total{{{PM},status_class="5xx"}}'
    return [
        stat("Requests (range)", "Requests answered over the range.",
             f"sum(increase({requests}[$__range]))", "short", 0),
        stat("5xx ratio (range)", "Share of requests answered with a 5xx status.",
             ratio(f"sum(increase({errors}[$__range]))", f"sum(increase({requests}[$__range]))"),
             "percentunit", 2),
        stat("p99 duration (range)", "99th percentile of the request duration over the range.",
             quantile(0.99, f"sum by (le) (increase(gateway_request_duration_seconds_bucket{{{PM}}}[$__range]))"),
             "s", 2),
        stat("Watchdog aborts (range)", "Streams aborted by the idle watchdog over the range.",
             f'sum(increase(gateway_stream_idle_total{{{P},event="abort"}}[$__range]))', "short", 0),
        series("Requests by status class (req/s)", "", "reqps",
               target(f"sum by (status_class) (rate({requests}[$__rate_interval]))", "{{status_class}}")),
        series("Error ratio", "Share of requests answered with a 4xx or 5xx status.", "percentunit",
               target(ratio(f"sum(rate({errors}[$__rate_interval]))", f"sum(rate({requests}[$__rate_interval]))"),
                      "5xx"),
               target(ratio(f'sum(rate(gateway_requests_total{{{PM},status_class="4xx"}}[$__rate_interval]))',
                            f"sum(rate({requests}[$__rate_interval]))"), "4xx")),
        series("Upstream errors by type (errors/s)", "Anthropic error type of upstream failures.", "short",
               target(f"sum by (type) (rate(gateway_upstream_errors_total{{{P}}}[$__rate_interval]))",
                      "{{type}}"), width=8),
        series("Retries by reason (retries/s)", "Upstream attempts the gateway retried.", "short",
               target(f"sum by (reason) (rate(gateway_upstream_retries_total{{{P}}}[$__rate_interval]))",
                      "{{reason}}"), width=8),
        series("Fallbacks by kind", "non_streaming: a failed stream replayed from a complete message; "
               "model: switched to the fallback model.", "short",
               target(f"sum by (kind) (increase(gateway_fallbacks_total{{{P}}}[$__rate_interval]))", "{{kind}}"),
               width=8),
        series("Stream watchdog", "Idle-watchdog warnings and aborts per interval.", "short",
               target(f"sum by (event) (increase(gateway_stream_idle_total{{{P}}}[$__rate_interval]))",
                      "{{event}}"), width=8),
        series("Request duration", "Request received to last byte sent.", "s",
               *quantiles("gateway_request_duration_seconds", PM, ", stream", " stream={{stream}}"), width=8),
        series("Time to first token", "Request received to the first content event of a stream.", "s",
               *quantiles("gateway_time_to_first_token_seconds", PM, "", ""), width=8),
        series("Gateway overhead", "Time spent in the gateway itself, upstream waits excluded.", "s",
               *quantiles("gateway_overhead_seconds", P, ", provider", " {{provider}}"), width=8),
        series("In flight", "Requests being served and streams being relayed (all providers).", "short",
               target(f"sum(gateway_inflight_requests{{{J}}})", "requests"),
               target(f"sum(gateway_inflight_streams{{{J}}})", "streams"), width=8),
        series("Session store errors", "Failed session-store reads or writes per interval.", "short",
               target(f"sum(increase(gateway_session_store_errors_total{{{J}}}[$__rate_interval]))", "errors"),
               width=8),
        *upstream_panels(),
        *connection_panels(),
        *loop_panels(),
    ]  # fmt: skip


def upstream_panels() -> list[Panel]:
    """Several upstreams (``gateway/upstreams/metrics.py``; GATEWAY_UPSTREAMS_FILE): where requests
    went and why, health and breakers, session moves and what they cost in cache re-writes. The
    series are labelled by upstream name, not provider, so only the target variables apply."""
    selected = f"gateway_upstream_selected_total{{{J}}}"
    moves = f"gateway_session_moves_total{{{J}}}"
    rewrites = f"gateway_session_move_cache_write_tokens_total{{{J}}}"
    return [
        row("Upstreams: routing, failover, breakers and session moves"),
        stat("Failovers (range)", "Requests sent on to another upstream after one failed.",
             f'sum(increase(gateway_upstream_selected_total{{{J},reason="failover"}}[$__range]))', "short", 0),
        stat("Session moves (range)", "Sessions moved to another upstream's (cold) prompt cache.",
             f"sum(increase({moves}[$__range]))", "short", 0),
        stat("Cache re-write tokens from moves (range)", "Cache-write tokens of requests whose cache "
             "break was upstream_changed: what moving sessions cost.",
             f"sum(increase({rewrites}[$__range]))", "short", 0),
        stat("Unhealthy upstreams", "Upstreams whose breaker is not closed or whose recent requests "
             "mostly failed (gateway_upstream_health 0), now.",
             f"count(min by (upstream) (gateway_upstream_health{{{J}}}) == 0) or vector(0)", "short", 0),
        series("Requests by upstream and reason (req/s)", "Where requests went first (route, weighted, "
               "affinity, return, breaker_open) and on failover.", "reqps",
               target(f"sum by (upstream, reason) (rate({selected}[$__rate_interval]))",
                      "{{upstream}} {{reason}}")),
        series("Breaker state and health", "Breaker: 0 closed, 1 half-open, 2 open (the worst "
               "replica); health: 1 healthy (the worst replica).", "short",
               target(f"max by (upstream) (gateway_breaker_state{{{J}}})", "breaker {{upstream}}"),
               target(f"min by (upstream) (gateway_upstream_health{{{J}}})", "health {{upstream}}")),
        series("Session moves by route and reason", "Per interval, from the upstream that held the "
               "session's cache to the one that answered.", "short",
               target(f"sum by (from, to, reason) (increase({moves}[$__rate_interval]))",
                      "{{from}} → {{to}} ({{reason}})"), width=8),
        series("Upstream failures by kind (per s)", "Failed attempts: status_429, status_529, "
               "status_5xx, connection_error, timeout, credentials.", "short",
               target(f"sum by (upstream, reason) (rate(gateway_upstream_failures_total{{{J}}}"
                      "[$__rate_interval]))", "{{upstream}} {{reason}}"), width=8),
        series("Upstream latency (to headers)", "Time from sending to an upstream to its answer's "
               "headers, by upstream.", "s",
               *quantiles("gateway_upstream_latency_seconds", J, ", upstream", " {{upstream}}"), width=8),
    ]  # fmt: skip


def connection_panels() -> list[Panel]:
    """The listener's defence (``gateway/connection_events.py``: caps, shedding, timeouts, malformed
    HTTP, accept errors) and the per-team in-flight cap (``gateway/transport.py``). Only the team
    rejections carry a label of the dashboard's variables (``team``)."""
    closed = f"gateway_connections_closed_total{{{J}}}"
    shed = f'gateway_connections_closed_total{{{J},reason=~"shed_incomplete|shed_idle|refused|ip_.*"}}'
    timeouts = f'gateway_connections_closed_total{{{J},reason=~"header_timeout|body_timeout"}}'
    parse = f"gateway_http_parse_errors_total{{{J}}}"
    rejected = f'gateway_team_inflight_rejected_total{{{J},team=~"$team"}}'
    return [
        row("Connections: caps, shedding, slow clients and malformed HTTP"),
        stat("Connections shed or refused (range)", "Closed to stay under a connection cap (the "
             "process-wide caps or GATEWAY_MAX_CONNECTIONS_PER_IP) or refused at one.",
             f"sum(increase({shed}[$__range]))", "short", 0),
        stat("Slow clients timed out (range)", "Connections closed with a 408: headers not in within "
             "GATEWAY_HEADER_TIMEOUT_S, or a body below GATEWAY_BODY_MIN_RATE.",
             f"sum(increase({timeouts}[$__range]))", "short", 0),
        stat("Malformed HTTP (range)", "Requests the HTTP parser refused (answered 400/414/431 JSON).",
             f"sum(increase({parse}[$__range]))", "short", 0),
        stat("Team in-flight 429s (range)", "Requests refused because their team had "
             "GATEWAY_TEAM_MAX_INFLIGHT requests in flight.",
             f"sum(increase({rejected}[$__range]))", "short", 0),
        series("Open connections vs caps", "Open client connections by state, and the caps in force "
               "(GATEWAY_MAX_CONNECTIONS, GATEWAY_MAX_INCOMPLETE_CONNECTIONS; summed over the "
               "selected instances).", "short",
               target(f"sum by (state) (gateway_connections_open{{{J}}})", "{{state}}"),
               target(f'sum(gateway_connections_limit{{{J},kind="open"}})', "cap"),
               target(f'sum(gateway_connections_limit{{{J},kind="incomplete"}})', "incomplete cap"),
               width=8),
        series("Share of the connection cap in use", "Open connections over GATEWAY_MAX_CONNECTIONS; "
               "near 1 the oldest incomplete, then idle, connections are shed.", "percentunit",
               target(ratio(f"sum(gateway_connections_open{{{J}}})",
                            f'sum(gateway_connections_limit{{{J},kind="open"}})'), "in use"), width=8),
        series("Closed by the gateway, by reason", "Per interval: timeouts (header_timeout, "
               "body_timeout), sheds and refusals at the process-wide caps (shed_incomplete, "
               "shed_idle, refused) and at the per-address cap (ip_*).", "short",
               target(f"sum by (reason) (increase({closed}[$__rate_interval]))", "{{reason}}"), width=8),
        series("Connections accepted and accept errors (per s)", "New client connections, and accept() "
               "calls that failed for lack of descriptors or memory (asyncio's loop).", "short",
               target(f"sum(rate(gateway_connections_accepted_total{{{J}}}[$__rate_interval]))", "accepted"),
               target(f"sum by (errno) (rate(gateway_accept_errors_total{{{J}}}[$__rate_interval]))",
                      "accept error {{errno}}"), width=8),
        series("Malformed HTTP by kind", "Per interval, by the parser's error kind.", "short",
               target(f"sum by (kind) (increase({parse}[$__rate_interval]))", "{{kind}}"), width=8),
        series("Team in-flight 429s by team", "Per interval: requests refused at "
               "GATEWAY_TEAM_MAX_INFLIGHT (the team's series start at zero).", "short",
               target(f"sum by (team) (increase({rejected}[$__rate_interval]))", "{{team}}"), width=8),
    ]  # fmt: skip


def loop_panels() -> list[Panel]:
    """The agent loop's context management and recovery (``loop_*``, gateway/loop_metrics.py): the
    process that runs the loop serves them (``switchyard agent --metrics-port``, or the gateway's
    registry when the loop runs in it). They carry no provider/model/team label."""
    terminals = f"loop_terminal_total{{{J}}}"
    compactions = f"loop_compactions_total{{{J}}}"
    return [
        row("Agent loop: context management and recovery"),
        stat("Agent runs (range)", "Agent-loop runs ended over the range, every terminal reason.",
             f"sum(increase({terminals}[$__range]))", "short", 0),
        stat("Runs completed (range)", "Share of the runs that ended with the model's own answer.",
             ratio(f'sum(increase(loop_terminal_total{{{J},reason="completed"}}[$__range]))',
                   f"sum(increase({terminals}[$__range]))"), "percentunit", 1),
        stat("Compactions (range)", "Context rewrites that took effect (every layer, the upstream's own "
             "clearing included).",
             f'sum(increase(loop_compactions_total{{{J},outcome=~"applied|server_applied|truncated"}}[$__range]))',
             "short", 0),
        stat("Breaker trips (range)", "The auto-compact circuit breaker opening, and max_turns or a "
             "guardrail ending a run.", f"sum(increase(loop_breaker_trips_total{{{J}}}[$__range]))", "short", 0),
        series("Compactions by layer", "Per interval, by layer and outcome (failed and breaker_open: "
               "auto-compaction did not happen).", "short",
               target(f"sum by (layer, outcome) (increase({compactions}[$__rate_interval]))",
                      "{{layer}} {{outcome}}"), width=8),
        series("Tokens freed by layer (tokens/s)", "Context tokens the layers freed (the loop's estimate).",
               "short", target(f"sum by (layer) (rate(loop_tokens_freed_total{{{J}}}[$__rate_interval]))",
                               "{{layer}}"), width=8),
        series("Context tokens per model call", "Prompt size of each answered call, as the upstream "
               "reported it.", "short", *quantiles("loop_context_tokens", J, "", ""), width=8),
        series("Recoveries by kind", "Recovery transitions per interval (reactive compaction, collapse "
               "drain, thinking downgrade, output-cap recovery).", "short",
               target(f"sum by (kind) (increase(loop_recoveries_total{{{J}}}[$__rate_interval]))", "{{kind}}"),
               width=8),
        series("Breaker trips by breaker", "Per interval: autocompact (circuit breaker), max_turns, "
               "guardrail kinds.", "short",
               target(f"sum by (breaker) (increase(loop_breaker_trips_total{{{J}}}[$__rate_interval]))",
                      "{{breaker}}"), width=8),
        series("Runs ended by reason", "Terminal reasons per interval.", "short",
               target(f"sum by (reason) (increase({terminals}[$__rate_interval]))", "{{reason}}"), width=8),
    ]  # fmt: skip


def query(name: str, label: str, definition: str) -> dict[str, Any]:
    return {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": DS,
        "definition": definition,
        "query": {"query": definition, "refId": f"{name}-variable", "qryType": 1},
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [],
        "regex": "",
        "sort": 1,
        "hide": 0,
    }


DATASOURCE = {"type": "datasource", "name": "datasource", "label": "Data source", "query": "prometheus",
              "current": {}, "options": [], "refresh": 1, "regex": "", "hide": 0}  # fmt: skip


def variables() -> list[dict[str, Any]]:
    return [
        DATASOURCE,
        query("job", "Job", "label_values(gateway_requests_total, job)"),
        query("namespace", "Namespace", 'label_values(gateway_requests_total{job=~"$job"}, namespace)'),
        query("instance", "Instance",
              'label_values(gateway_requests_total{job=~"$job",namespace=~"$namespace"}, instance)'),
        query("provider", "Provider", f"label_values(gateway_requests_total{{{J}}}, provider)"),
        query("model", "Model", f"label_values(gateway_requests_total{{{P}}}, model)"),
        query("team", "Team", f"label_values(gateway_cost_usd_total{{{P}}}, team)"),
    ]  # fmt: skip


def dashboard(
    uid: str,
    title: str,
    description: str,
    panels: list[Panel],
    templating: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    x = y = row_height = 0
    for number, item in enumerate(panels, start=1):
        grid = item["gridPos"]
        if x + grid["w"] > 24:
            x, y, row_height = 0, y + row_height, 0
        grid |= {"x": x, "y": y}
        item["id"] = number
        x += grid["w"]
        row_height = max(row_height, grid["h"])
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["switchyard"],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "1m",
        "time": {"from": "now-24h", "to": "now"},
        "timezone": "utc",
        "links": [LINKS],
        "templating": {"list": variables() if templating is None else templating},
        "annotations": {"list": []},
        "panels": panels,
    }


def dashboards() -> dict[str, dict[str, Any]]:
    return {
        "switchyard-cost.json": dashboard(
            "switchyard-cost", "Switchyard / Cost and tokens",
            "Spend and tokens by team, model and provider, priced with gateway/pricing.py.", cost_dashboard()),
        "switchyard-cache.json": dashboard(
            "switchyard-cache", "Switchyard / Cache efficiency",
            "Prompt-cache hit ratio, cache spend, cache breaks and dropped betas.", cache_dashboard()),
        "switchyard-reliability.json": dashboard(
            "switchyard-reliability", "Switchyard / Reliability and latency",
            "Errors, retries, fallbacks, the stream watchdog, latency and gateway overhead; connection "
            "caps, shedding and malformed HTTP; the agent loop's context management and recovery.",
            reliability_dashboard()),
        "switchyard-fleet.json": dashboard(
            "switchyard-fleet", "Switchyard / Fleet",
            "Claude Code adoption and spend per group, top users by spend, what the fleet produced, "
            "sign-ins and policy refusals, and the OTLP intake (gateway/fleet).",
            fleet_panels(), fleet_variables(DATASOURCE, query)),
    }  # fmt: skip


def render(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="fail if a committed file is stale")
    args = parser.parse_args(argv)
    stale: list[str] = []
    for name, document in dashboards().items():
        path = OUT / name
        text = render(document)
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            OUT.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"stale dashboards (run python dashboards/build.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
