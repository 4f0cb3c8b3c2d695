"""Building the policy gate from the settings, and the ``/v1/models`` page it filters.

Without ``GATEWAY_POLICY_FILE`` the gate holds the default policy (everything allowed, no caps,
no managed settings) over the embedded counters and the server keeps it off the request path.
With it, the policy is read (a bad file fails start-up; later it is reloaded) and the counters are
the embedded store, or Redis when ``GATEWAY_SESSION_STORE`` is a ``redis://`` URL (replicas then
share caps and rate limits).
"""

from __future__ import annotations

from gateway.config import Settings
from gateway.fleet.billing_group import BillingGroups
from gateway.fleet.counters import Counters, MemoryCounters
from gateway.fleet.fleet_metrics import FleetMetrics
from gateway.fleet.model_rules import ModelRules
from gateway.fleet.policy_gate import PolicyGate
from gateway.fleet.policy_reload import PolicyHolder, PolicyReloader
from gateway.fleet.routes import filter_models
from gateway.fleet.settings_hint import SettingsHints
from gateway.providers.base import BufferedResponse, UpstreamResponse
from gateway.redis_link import RedisLink
from gateway.upstream_body import read_answer


def build_counters(settings: Settings, link: RedisLink | None) -> Counters:
    """Redis counters through ``link`` (the replica's Redis) when a policy is in force, else in memory."""
    if settings.policy.policy_file is not None and link is not None:
        from gateway.fleet.counters_redis import RedisCounters

        return RedisCounters(link)
    return MemoryCounters()


def build_policy_gate(
    settings: Settings, fleet: FleetMetrics | None = None, link: RedisLink | None = None
) -> PolicyGate:
    """``fleet``: the registry's fleet series (refusals, settings hints, billing groups, group labels);
    ``link``: the replica's Redis (``GATEWAY_SESSION_STORE``), shared with the session store."""
    holder: PolicyHolder = PolicyHolder()
    if settings.policy.policy_file is not None:
        holder = PolicyReloader(settings.policy.policy_file, interval_s=settings.policy.policy_reload_s)
    tag = settings.signin.billing_group_tag
    return PolicyGate(
        holder,
        build_counters(settings, link),
        fail_closed=settings.policy.policy_counters_fail == "closed",
        on_refusal=fleet.refused if fleet is not None else None,
        groups=fleet.groups if fleet is not None else None,
        hints=SettingsHints(fleet.settings_hints if fleet is not None else None),
        billing=None if tag is None else BillingGroups(tag, fleet.billed if fleet is not None else None),
    )


async def filtered_listing(upstream: UpstreamResponse, rules: ModelRules) -> UpstreamResponse:
    """``upstream``'s model page with only what ``rules`` permit (as it is when unrestricted or not
    a readable 200 page)."""
    if rules.unrestricted or upstream.status != 200:
        return upstream
    try:
        body = await read_answer(upstream)  # a cut or oversized page: 502, as when unfiltered
    finally:
        upstream.close()
    filtered = filter_models(body, rules)
    return BufferedResponse(200, body if filtered is None else filtered, list(upstream.headers))
