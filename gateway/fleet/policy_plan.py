"""What the policy gate keeps per principal (:class:`Entry`) and per kind of its requests
(:class:`Plan`), made once per policy version and UTC day so a request pays lookups.

Details: docs/internals/gateway-fleet.md (gateway/fleet/policy_gate.py)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gateway.fleet import rate_limits
from gateway.fleet.counters import SPEND_KEPT_AFTER_S, Checks, SpendCheck
from gateway.fleet.managed_settings import checksum
from gateway.fleet.periods import Period, Window, window
from gateway.fleet.policy import Cap, Effective, Rate
from gateway.fleet.principal import Principal
from gateway.fleet.spend_caps import AllowedHeaders, ordered, spend_checks, spend_key

OWN_PERIODS: Final = (Period.DAILY, Period.WEEKLY, Period.MONTHLY)


@dataclass(frozen=True, slots=True)
class Plan:
    """What one kind of request (streaming or not, billed to a group or not) of one principal is
    checked against, made once per policy version and UTC day."""

    caps: tuple[Cap, ...]  # checked in this order (longest period first)
    windows: tuple[Window, ...]  # of each cap, today
    checks: Checks
    rates: tuple[Rate, ...]  # of ``checks.rates``: requests per minute, then tokens per minute
    streams: tuple[Rate, ...]  # of ``checks.slots``
    group: str  # the telemetry group label its requests count under
    settings_checksum: str | None  # of its managed settings (None: none apply)
    hints: Mapping[str, Any]  # the hint counter's children of ``group``, by state
    headers: AllowedHeaders | None  # the usage-limit headers by the caps' counters (None: uncapped)


@dataclass(slots=True)
class Entry:
    """One principal under the policy in force: its answer, and its plans as they are needed."""

    effective: Effective
    restricted: bool  # whether its model rules may refuse anything
    plans: dict[tuple[bool, str | None], Plan]  # by (stream, billing group)


def build_plan(
    principal: Principal,
    effective: Effective,
    stream: bool,
    now: float,
    billing_group: str | None = None,
    group: str = "other",
    hints: Mapping[str, Any] | None = None,
) -> Plan:
    caps = effective.caps
    if billing_group is not None:  # the request names the group that pays: only its pool counts
        caps = tuple(cap for cap in caps if cap.scope != "group" or cap.owner == billing_group)
    caps = ordered(caps)
    spend, windows = spend_checks(caps, now)
    counted = {check.key for check in spend}
    own = []
    for period in OWN_PERIODS:  # the principal's own totals (GET /api/oauth/usage), uncapped too
        win = window(period, now)
        key = spend_key("user", principal.subject, win)
        if key not in counted:
            own.append(SpendCheck(key, 0, win.reset_at + SPEND_KEPT_AFTER_S))
    requests = tuple(rate for rate in effective.rates if rate.kind == "requests")
    tokens = tuple(rate for rate in effective.rates if rate.kind == "tokens")
    streams = tuple(rate for rate in effective.rates if rate.kind == "streams") if stream else ()
    checks = Checks(
        spend=spend,
        rates=tuple(rate_limits.request_check(rate) for rate in requests)
        + tuple(rate_limits.token_check(rate) for rate in tokens),
        slots=tuple(rate_limits.slot_check(rate) for rate in streams),
        own=tuple(own),
    )
    return Plan(
        caps=caps,
        windows=windows,
        checks=checks,
        rates=requests + tokens,
        streams=streams,
        group=group,
        settings_checksum=None if effective.settings is None else checksum(effective.settings),
        hints=hints or {},
        headers=AllowedHeaders(caps, windows, checks.spend_limits) if caps else None,
    )
