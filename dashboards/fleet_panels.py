"""The "Fleet" dashboard's panels and variables (``build.py`` renders it as ``grafana/switchyard-fleet.json``).

Claude Code's own metrics as the gateway's OTLP intake turns them into ``gateway_fleet_*`` series
(``gateway/fleet/fleet_metrics.py``): adoption (active users, sessions, active time) and spend per
group, the top users by spend (a bounded top-k: ``user="other"`` holds everyone else), what the
fleet produced (lines, commits, pull requests, edit acceptance), sign-ins by outcome, policy
refusals by reason, managed-settings checksum hints by state, and the intake and forwarding. Every selector honours the scrape
target variables (``J``) and, where the metric has a ``group`` label, the ``$group`` variable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from panel_kit import PER_HOUR, J, Panel, bars, panel, ratio, row, series, stat, target

G = f'{J},group=~"$group"'


def fleet_panels() -> list[Panel]:
    cost = f"gateway_fleet_cost_usd_total{{{G}}}"
    sessions = f"gateway_fleet_sessions_total{{{G}}}"
    top_users = f'gateway_fleet_user_cost_usd_total{{{J},user!="other"}}'
    other_users = f'gateway_fleet_user_cost_usd_total{{{J},user="other"}}'
    decisions = f"gateway_fleet_code_edit_decisions_total{{{G}}}"
    accepted = f'gateway_fleet_code_edit_decisions_total{{{G},decision="accept"}}'
    rejected = f'gateway_fleet_telemetry_rejected_total{{{J},reason!="unauthenticated"}}'
    return [
        row("Adoption and spend by group"),
        stat("Active users (24 h)", "Callers whose Claude Code sent telemetry in the last 24 h (per replica, "
             "summed: a user reaching two replicas counts twice).",
             f"sum(gateway_fleet_active_users{{{G}}})", "short", 0),
        stat("Sessions (range)", "Claude Code sessions started over the range.",
             f"sum(increase({sessions}[$__range]))", "short", 0),
        stat("Claude Code spend (range)", "USD Claude Code estimates for itself (claude_code.cost.usage) "
             "over the range; the gateway's own priced spend is on the Cost dashboard.",
             f"sum(increase({cost}[$__range]))", "currencyUSD", 2),
        stat("Sign-ins (range)", "Completed sign-ins (device grants approved) over the range.",
             f'sum(increase(gateway_fleet_signins_total{{{J},outcome="success"}}[$__range]))', "short", 0),
        series("Active users by group", "Callers active in the last 24 h, by group (the group the "
               "caller counts in: GATEWAY_TELEMETRY_GROUPS order, or its first group).", "short",
               target(f"sum by (group) (gateway_fleet_active_users{{{G}}})", "{{group}}"), width=8),
        series("Sessions by group", "Sessions started per interval.", "short",
               target(f"sum by (group) (increase({sessions}[$__rate_interval]))", "{{group}}"), width=8),
        bars("Active time by group (range)", "Time of active use (typing and Claude working), by group.",
             f"sort_desc(sum by (group) (increase(gateway_fleet_active_time_seconds_total{{{G}}}[$__range])))",
             "{{group}}", "s"),
        series("Spend rate by group (USD/h)", "claude_code.cost.usage per hour, by group.", "currencyUSD",
               target(f"sum by (group) (rate({cost}[$__rate_interval])){PER_HOUR}", "{{group}}"), width=8),
        bars("Spend by group (range)", "USD per group over the range.",
             f"sort_desc(sum by (group) (increase({cost}[$__range])))", "{{group}}", "currencyUSD"),
        bars("Top users by spend (range)", "The biggest spenders (at most GATEWAY_TELEMETRY_TOP_USERS hold a "
             "label at a time; the rest are counted as other, shown beside).",
             f"topk(10, sum by (user) (increase({top_users}[$__range])))", "{{user}}",
             "currencyUSD"),
        stat("Spend outside the top users (range)", "USD of every user without a label of their own.",
             f"sum(increase({other_users}[$__range]))", "currencyUSD", 2),
        bars("Spend by model (range)", "USD per model over the range (catalogue aliases; other for "
             "unknown names).", f"sort_desc(sum by (model) (increase({cost}[$__range])))", "{{model}}",
             "currencyUSD"),
        series("Tokens by type (tokens/s)", "claude_code.token.usage: input, output, cache_read, "
               "cache_creation.", "short",
               target(f"sum by (type) (rate(gateway_fleet_tokens_total{{{G}}}[$__rate_interval]))", "{{type}}"),
               width=8),
        row("What the fleet produced"),
        bars("Lines of code by group (range)", "Lines added and removed by Claude Code's edits.",
             f"sort_desc(sum by (group, type) (increase(gateway_fleet_lines_of_code_total{{{G}}}[$__range])))",
             "{{group}} {{type}}", "short"),
        panel("bargauge", "Commits and pull requests by group (range)", "Created with Claude Code.",
              [target(f"sort_desc(sum by (group) (increase(gateway_fleet_commits_total{{{G}}}[$__range])))",
                      "{{group}} commits", instant=True),
               target(f"sort_desc(sum by (group) (increase(gateway_fleet_pull_requests_total{{{G}}}[$__range])))",
                      "{{group}} pull requests", instant=True)]),
        series("Edit acceptance by tool", "Share of Edit/Write/NotebookEdit permission decisions accepted "
               "(no line while a tool had no decision).", "percentunit",
               target(ratio(f"sum by (tool) (increase({accepted}[$__rate_interval]))",
                            f"sum by (tool) (increase({decisions}[$__rate_interval]))"), "{{tool}}"), width=8),
        row("Sign-in, policy refusals and the telemetry intake"),
        series("Sign-ins by outcome", "Sign-in flow outcomes per interval (success, denied, expired, "
               "refreshed, revoked...).", "short",
               target(f"sum by (outcome) (increase(gateway_fleet_signins_total{{{J}}}[$__rate_interval]))",
                      "{{outcome}}"), width=8),
        series("Refusals by reason", "Requests the policy refused per interval (model denied, spend cap, "
               "rate limit, concurrency, kill switch, fetch_error).", "short",
               target(f"sum by (reason) (increase(gateway_fleet_refusals_total{{{J}}}[$__rate_interval]))",
                      "{{reason}}"), width=8),
        bars("Refusals by reason (range)", "Refused requests over the range, by reason.",
             f"sort_desc(sum by (reason) (increase(gateway_fleet_refusals_total{{{J}}}[$__range])))",
             "{{reason}}", "short"),
        bars("Managed settings on model requests (range)", "Requests of callers with managed settings by the "
             "checksum their Claude Code sent (CLAUDE_CODE_GATEWAY_HINT_HEADERS=1 in managed env): current, "
             "previous (before an edit, accepted 2 h), stale, unknown (none sent). A hint, not a control.",
             f"sum by (state) (increase(gateway_fleet_managed_settings_hints_total{{{G}}}[$__range]))",
             "{{state}}", "short"),
        series("OTLP exports (per s)", "Exports accepted by signal, and those answered 200 but not used "
               "(too large, undecodable...) by reason.", "short",
               target(f"sum by (signal) (rate(gateway_fleet_telemetry_exports_total{{{J}}}[$__rate_interval]))",
                      "{{signal}}"),
               target(f"sum by (reason) (rate({rejected}[$__rate_interval]))", "not used: {{reason}}"), width=8),
        series("Forwarded to collectors", "Exports sent on per interval, by collector and outcome.", "short",
               target(f"sum by (destination, outcome) (increase(gateway_fleet_otlp_forward_total{{{J}}}"
                      f"[$__rate_interval]))", "{{destination}} {{outcome}}"), width=8),
        stat("Collector breakers open", "Collectors whose circuit breaker is open (their exports dropped).",
             f"sum(gateway_fleet_otlp_breaker_open{{{J}}})", "short", 0),
    ]  # fmt: skip


def fleet_variables(
    datasource: dict[str, Any], query: Callable[[str, str, str], dict[str, Any]]
) -> list[dict[str, Any]]:
    """The data source, the scrape-target variables and ``group``."""
    return [
        datasource,
        query("job", "Job", "label_values(gateway_fleet_telemetry_exports_total, job)"),
        query("namespace", "Namespace",
              'label_values(gateway_fleet_telemetry_exports_total{job=~"$job"}, namespace)'),
        query("instance", "Instance",
              'label_values(gateway_fleet_telemetry_exports_total{job=~"$job",namespace=~"$namespace"}, instance)'),
        query("group", "Group", f"label_values(gateway_fleet_sessions_total{{{J}}}, group)"),
    ]  # fmt: skip
