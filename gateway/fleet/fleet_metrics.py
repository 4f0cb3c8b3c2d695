"""The fleet's Prometheus series (``gateway_fleet_*``), on the gateway's registry.

What Claude Code reports about itself, by ``group`` (bounded: ``gateway.fleet.fleet_labels``) —
sessions, tokens, cost, lines of code, commits, pull requests, active time, code-edit decisions
(turned from OTLP by ``gateway.fleet.claude_code``) — the top spenders by ``user`` (at most
``GATEWAY_TELEMETRY_TOP_USERS`` labels, the rest ``other``: ``gateway.fleet.topk``), the callers
active in the last 24 h per group, and the intake's and forwarder's own counters.

The sign-in flow's and the policy's counters (``gateway_fleet_signins_total``,
``_refusals_total``, ``_managed_settings_hints_total``, ``_billing_group_tags_total``) are defined
here so the Fleet dashboard has them (values outside the known sets count as ``other``). Every
label is bounded; no session, request or account id, nor a checksum, is ever one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.fleet.fleet_labels import ActiveUsers, GroupLabels
from gateway.fleet.otlp_signals import Reason, Signal
from gateway.fleet.topk import OTHER, TopSpenders
from gateway.metric_types import LoopCounter, LoopGauge
from gateway.providers.models import FIRST_PARTY_MODELS

SIGNIN_OUTCOMES: Final = ("success", "denied", "expired", "error", "refreshed", "revoked")
REFUSAL_REASONS: Final = (
    "model_denied",
    "spend_cap",
    "rate_limit",
    "concurrency",
    "kill_switch",
    "fetch_error",
    "revoked_token",
)
HINT_STATES: Final = ("current", "previous", "stale", "unknown")
BILLING_GROUP_OUTCOMES: Final = ("applied", "ignored")
FORWARD_OUTCOMES: Final = ("delivered", "refused", "failed", "dropped_queue_full", "dropped_breaker_open")
CATALOGUE_LABELS: Final = (*dict.fromkeys(entry.alias for entry in FIRST_PARTY_MODELS), OTHER)
EDIT_TOOLS: Final = frozenset({"Edit", "Write", "NotebookEdit", "MultiEdit"})  # Claude Code's editing tools
DECISIONS: Final = frozenset({"accept", "reject"})
ACTIVE_WINDOW_S: Final = 24 * 3600.0
ACTIVE_CAPACITY: Final = 100_000


class _ActiveUsersCollector(Collector):
    def __init__(self, active: ActiveUsers, groups: GroupLabels) -> None:
        self._active = active
        self._groups = groups
        self.collections = 0  # how many times the registry was read (/metrics scrapes)

    def collect(self) -> Iterable[Metric]:
        self.collections += 1
        family = GaugeMetricFamily(
            "gateway_fleet_active_users",
            "Callers whose Claude Code sent telemetry to this replica in the last 24 h, by group.",
            labels=["group"],
        )
        counts = self._active.counts()
        for group in self._groups.known:
            family.add_metric([group], counts.get(group, 0))
        yield family


class FleetMetrics:
    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        groups: GroupLabels,
        top_users: int,
        active: ActiveUsers | None = None,
    ) -> None:
        r = registry
        self.groups = groups
        self.top = TopSpenders(top_users)
        self.active = active or ActiveUsers(ACTIVE_WINDOW_S, ACTIVE_CAPACITY)
        self.sessions = LoopCounter(
            "gateway_fleet_sessions_total",
            "Claude Code sessions started (claude_code.session.count).",
            ["group"],
            registry=r,
        )
        self.tokens = LoopCounter(
            "gateway_fleet_tokens_total",
            "Tokens Claude Code reports using (claude_code.token.usage), by model and type (input, output, "
            "cache_read, cache_creation).",
            ["group", "model", "type"],
            registry=r,
        )
        self.cost = LoopCounter(
            "gateway_fleet_cost_usd_total",
            "Spend in USD Claude Code estimates for itself (claude_code.cost.usage), by model.",
            ["group", "model"],
            registry=r,
        )
        self.user_cost = LoopCounter(
            "gateway_fleet_user_cost_usd_total",
            "claude_code.cost.usage of the top spenders (at most GATEWAY_TELEMETRY_TOP_USERS users hold a "
            'label at a time; everyone else is user="other").',
            ["user"],
            registry=r,
        )
        self.lines = LoopCounter(
            "gateway_fleet_lines_of_code_total",
            "Lines of code Claude Code modified (claude_code.lines_of_code.count), type added or removed.",
            ["group", "type"],
            registry=r,
        )
        self.commits = LoopCounter(
            "gateway_fleet_commits_total",
            "Git commits Claude Code created (claude_code.commit.count).",
            ["group"],
            registry=r,
        )
        self.pull_requests = LoopCounter(
            "gateway_fleet_pull_requests_total",
            "Pull requests Claude Code created (claude_code.pull_request.count).",
            ["group"],
            registry=r,
        )
        self.active_time = LoopCounter(
            "gateway_fleet_active_time_seconds_total",
            "Active time in Claude Code (claude_code.active_time.total), type user or cli.",
            ["group", "type"],
            registry=r,
        )
        self.edit_decisions = LoopCounter(
            "gateway_fleet_code_edit_decisions_total",
            "Permission decisions on Claude Code's file-editing tools (claude_code.code_edit_tool.decision).",
            ["group", "tool", "decision"],
            registry=r,
        )
        self.signins = LoopCounter(
            "gateway_fleet_signins_total",
            "Sign-in flow outcomes (device grants approved or denied, refreshes, revocations).",
            ["outcome"],
            registry=r,
        )
        self.refusals = LoopCounter(
            "gateway_fleet_refusals_total",
            "Requests the fleet policy refused, by reason (model denied, spend cap, rate limit...).",
            ["reason"],
            registry=r,
        )
        self.settings_hints = LoopCounter(
            "gateway_fleet_managed_settings_hints_total",
            "POST /v1/messages of callers with managed settings, by the x-claude-code-managed-settings-checksum "
            "they sent: current, previous (the group's settings before an edit, accepted for 2 h), stale "
            "(anything else) or unknown (none sent). A hint, not a control: never refused on.",
            ["group", "state"],
            registry=r,
        )
        self.billing_groups = LoopCounter(
            "gateway_fleet_billing_group_tags_total",
            "Requests whose tags named a billing group (GATEWAY_BILLING_GROUP_TAG): applied (one of the "
            "caller's groups) or ignored (any other value: not trusted, the request is billed as untagged).",
            ["outcome"],
            registry=r,
        )
        self.exports = LoopCounter(
            "gateway_fleet_telemetry_exports_total",
            "OTLP export requests accepted on /v1/metrics, /v1/logs and /v1/traces.",
            ["signal"],
            registry=r,
        )
        self.items = LoopCounter(
            "gateway_fleet_telemetry_items_total",
            "Data points, log records and spans in accepted OTLP exports.",
            ["signal"],
            registry=r,
        )
        self.points_recorded = LoopCounter(
            "gateway_fleet_telemetry_points_recorded_total",
            "OTLP data points turned into gateway_fleet_* series (Claude Code's own metrics).",
            registry=r,
        )
        self.rejected = LoopCounter(
            "gateway_fleet_telemetry_rejected_total",
            "OTLP export requests not used (answered 200 all the same, but unauthenticated ones: 401), "
            "by reason.",
            ["signal", "reason"],
            registry=r,
        )
        self.forwarded = LoopCounter(
            "gateway_fleet_otlp_forward_total",
            "OTLP exports sent on to a configured collector, by outcome (delivered, refused: a 4xx for the "
            "payload, failed, dropped_queue_full, dropped_breaker_open).",
            ["destination", "signal", "outcome"],
            registry=r,
        )
        self.forward_inflight = LoopGauge(
            "gateway_fleet_otlp_forward_inflight",
            "Exports being sent to a collector.",
            ["destination"],
            registry=r,
        )
        self.breaker_open = LoopGauge(
            "gateway_fleet_otlp_breaker_open",
            "1 from when a collector's circuit breaker opens until an export to it is tried again.",
            ["destination"], registry=r,
        )  # fmt: skip
        self._collector = _ActiveUsersCollector(self.active, groups)
        r.register(self._collector)
        self._labelled_at: dict[str, int] = {}  # top user -> collections when its series appeared
        self.prime()

    def prime(self) -> None:
        """Create the bounded series dashboards read with ``increase()`` at zero (a counter born
        with its first increment is missed by it): sign-in outcomes, refusal reasons, rejects, the
        intake counters, and the per-group series of every group already known."""
        for outcome in (*SIGNIN_OUTCOMES, OTHER):
            self.signins.labels(outcome)
        for reason in (*REFUSAL_REASONS, OTHER):
            self.refusals.labels(reason)
        for signal in Signal:
            self.exports.labels(signal.value)
            self.items.labels(signal.value)
            for rejected in Reason:
                self.rejected.labels(signal.value, rejected.value)
        self.points_recorded.inc(0)
        for outcome in BILLING_GROUP_OUTCOMES:
            self.billing_groups.labels(outcome)
        self.user_cost.labels(OTHER)
        for group in self.groups.known:
            self.prime_group(group)

    def prime_group(self, group: str) -> None:
        for counter in (self.sessions, self.commits, self.pull_requests):
            counter.labels(group)
        for kind in ("added", "removed"):
            self.lines.labels(group, kind)
        for kind in ("user", "cli"):
            self.active_time.labels(group, kind)
        for model in CATALOGUE_LABELS:
            self.cost.labels(group, model)
        for tool in EDIT_TOOLS:
            for decision in DECISIONS:
                self.edit_decisions.labels(group, tool, decision)
        for state in HINT_STATES:
            self.settings_hints.labels(group, state)

    def prime_destination(self, destination: str) -> None:
        for signal in Signal:
            for outcome in FORWARD_OUTCOMES:
                self.forwarded.labels(destination, signal.value, outcome)
        self.forward_inflight.labels(destination).set(0)
        self.breaker_open.labels(destination).set(0)

    def signed_in(self, outcome: str) -> None:
        """One sign-in flow outcome (``SIGNIN_OUTCOMES``; anything else counts as ``other``)."""
        self.signins.labels(outcome if outcome in SIGNIN_OUTCOMES else OTHER).inc()

    def refused(self, reason: str) -> None:
        """One request the policy refused (``REFUSAL_REASONS``; anything else counts as ``other``)."""
        self.refusals.labels(reason if reason in REFUSAL_REASONS else OTHER).inc()

    def billed(self, outcome: str) -> None:
        """A request's billing-group tag: ``applied`` or ``ignored`` (``BILLING_GROUP_OUTCOMES``)."""
        self.billing_groups.labels(outcome if outcome in BILLING_GROUP_OUTCOMES else OTHER).inc()

    def user_spend(self, user: str, amount: float) -> None:
        """``amount`` USD for ``user``: under their own label while they are a top spender.

        A user's series appears at zero when they earn a label, and counts from the first read
        of the registry (a scrape) after that; until then their amounts go to ``other``. A counter
        whose first sample is already above zero would be extrapolated by ``increase()``: this
        way the top users plus ``other`` are exactly all the spend, in Prometheus too."""
        placement = self.top.add(user, amount)
        if placement.evicted is not None:
            self._labelled_at.pop(placement.evicted, None)
            with contextlib.suppress(KeyError):  # never created
                self.user_cost.remove(placement.evicted)
        label = placement.label
        if placement.admitted:
            self.user_cost.labels(label)
            self._labelled_at[label] = self._collector.collections
            label = OTHER
        elif self._labelled_at.get(label) == self._collector.collections:
            label = OTHER  # not scraped at zero yet
        self.user_cost.labels(label).inc(amount)
