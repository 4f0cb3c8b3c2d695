"""Where the policy meets the request path: one ``admit`` before proxying, one ``record`` at close.

One counter round trip per request at most; ``record`` runs exactly once per admitted request.
A counter outage fails open or closed per ``GATEWAY_POLICY_COUNTERS_FAIL``. ``admit`` also counts
the managed-settings checksum hint (:mod:`gateway.fleet.settings_hint`) and, with
``GATEWAY_BILLING_GROUP_TAG``, bills a request to the group its ``tags`` name (:mod:`.billing_group`).

Details: docs/internals/gateway-fleet.md
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from gateway.errors import ClientInputError
from gateway.fleet import audit, rate_limits
from gateway.fleet.billing_group import BillingGroups
from gateway.fleet.counters import Checks, Counters, CountersUnavailable, Refused
from gateway.fleet.fleet_labels import GroupLabels
from gateway.fleet.managed_settings import checksum
from gateway.fleet.periods import window
from gateway.fleet.policy import Effective, Policy
from gateway.fleet.policy_plan import OWN_PERIODS, Entry, Plan, build_plan
from gateway.fleet.policy_reload import PolicyHolder
from gateway.fleet.principal import Principal
from gateway.fleet.settings_hint import HINT_HEADER, SettingsHints
from gateway.fleet.spend_caps import (
    CapState,
    cap_reached,
    counters_down,
    micros,
    ordered,
    spend_checks,
    spend_key,
    strip_upstream_limits,
    usage_body,
)
from gateway.providers.base import ClientRequest, Operation
from gateway.streaming.usage import Usage

log = logging.getLogger("switchyard.fleet.policy")
MAX_PLANS = 10_000


@dataclass(slots=True)
class Admission:
    """One admitted ``/v1/messages`` request: what to record for it, and its response headers."""

    token: str  # the request id (it names the request's stream slot)
    checks: Checks  # its plan's: the counters ``record`` charges
    headers: Mapping[str, str]  # the usage-limit headers ({} for an uncapped principal)
    recorded: bool = False

    def apply(self, upstream_headers: list[tuple[str, str]], extra: dict[str, str]) -> list[tuple[str, str]]:
        """For a capped principal: the upstream's rate-limit headers stripped, ours added."""
        if not self.headers:
            return upstream_headers
        extra.update(self.headers)
        return strip_upstream_limits(upstream_headers)


_NO_HEADERS: Final[Mapping[str, str]] = MappingProxyType({})


_METRIC_REASONS: Final = {
    "model": "model_denied",
    "counters_unavailable": "fetch_error",
}
"""Audit reasons whose ``gateway_fleet_refusals_total`` reason is named otherwise."""


class PolicyGate:
    def __init__(
        self,
        holder: PolicyHolder,
        counters: Counters,
        *,
        fail_closed: bool = False,
        clock: Callable[[], float] = time.time,
        on_refusal: Callable[[str], None] | None = None,
        groups: GroupLabels | None = None,
        hints: SettingsHints | None = None,
        billing: BillingGroups | None = None,
    ) -> None:
        self.holder = holder
        self.groups = groups or GroupLabels((), 0)  # every caller "other" unless given the fleet's
        self.hints = hints or SettingsHints(None)
        self.billing = billing  # None: GATEWAY_BILLING_GROUP_TAG unset, tags are not read
        self.on_refusal = on_refusal  # counts refusals by reason (gateway_fleet_refusals_total)
        self.counters = counters
        self.fail_closed = fail_closed
        self.clock = clock
        self._outage = False
        self._entries: dict[Principal, Entry] = {}  # under ``_plans_policy``, on ``_plans_day``
        self._plans_policy: Policy | None = None
        self._plans_day = -1.0  # the UTC day (Unix seconds // 86 400) the plans were made on
        self._admit_now = counters.admit_in_process()
        self._subjects: dict[str, str] = {}  # e-mail or policy name -> subject, seen here (bounded)

    async def sync_caps(self) -> bool:
        """Take the admin-set caps the replicas share (Redis); ``True`` if they changed here."""
        try:
            shared = await self.counters.shared_caps()
        except CountersUnavailable:
            return False  # the caps in force stay; the next round tries again
        return shared is not None and self.holder.adopt(shared)

    async def run_cap_sync(self, interval_s: float) -> None:
        """``sync_caps`` every ``interval_s`` seconds until cancelled (only with shared counters)."""
        if interval_s <= 0 or not self.counters.shared:
            return
        while True:
            try:
                await self.sync_caps()
            except Exception:  # never let the loop die
                log.exception("fleet: syncing admin-set caps failed")
            await asyncio.sleep(interval_s)

    def effective(self, principal: Principal) -> Effective:
        return self.holder.policy.for_principal(principal)

    def group_label(self, principal: Principal, billing_group: str | None = None) -> str:
        return self.groups(principal) if billing_group is None else self.groups.of_group(billing_group)

    def settings_served(self, principal: Principal, effective: Effective) -> None:
        """``GET /managed/settings`` answered the caller with its settings: their checksum is current."""
        if effective.settings is not None:
            self.hints.saw_current(self.group_label(principal), checksum(effective.settings))

    async def admit(
        self,
        principal: Principal,
        client: ClientRequest,
        request_id: str,
        headers: Mapping[str, str] | None = None,
    ) -> Admission | None:
        """``headers``: the request's own (a case-insensitive mapping), read for the settings hint."""
        now = self.clock()
        # the principal's entry, made once per policy version and UTC day (see ``_entry``)
        entry = self._entries.get(principal)
        if entry is None or self.holder.policy is not self._plans_policy or now // 86_400 != self._plans_day:
            entry = self._entry(principal, now)
        if entry.restricted:
            refusal = entry.effective.models.refusal(client.model)
            if refusal is not None:
                self._refused(principal, "model", request_id, model=client.model[:100])
                raise ClientInputError(400, refusal, error_type="invalid_request_error")
        if client.operation is not Operation.MESSAGES:
            return None
        billing_group = None
        if self.billing is not None:  # one dictionary lookup in the body, only with the tag set
            billing_group = self.billing.group_of(principal, client.payload)
        plan = entry.plans.get((client.stream, billing_group))
        if plan is None:
            plan = self._plan(entry, principal, client.stream, now, billing_group)
        if plan.hints:
            sent = headers.get(HINT_HEADER) if headers is not None else None
            if sent is None:
                if plan.settings_checksum is not None:  # no settings, nothing sent: nothing to count
                    plan.hints["unknown"].inc()
            elif sent == plan.settings_checksum:
                plan.hints["current"].inc()
            else:  # never the value itself: it is sensitive, and unbounded
                plan.hints[self.hints.state(plan.group, plan.settings_checksum, sent, now)].inc()
        checks = plan.checks
        if not checks.metered:
            return Admission(request_id, checks, _NO_HEADERS)
        try:
            if self._admit_now is not None:  # the embedded store: nothing to await
                result = self._admit_now(now, checks, request_id)
            else:
                result = await self.counters.admit(now, checks, request_id)
        except CountersUnavailable as exc:
            return self._unavailable(principal, request_id, exc)
        self._outage = False
        if isinstance(result, Refused):
            raise self._refusal(principal, request_id, result, plan, now)
        if plan.headers is None:
            return Admission(request_id, checks, _NO_HEADERS)
        return Admission(request_id, checks, plan.headers(result.spent_micros))

    def _entry(self, principal: Principal, now: float) -> Entry:
        """The principal under the policy in force: made once per policy version and UTC day (the
        plans' windows are today's), then one dictionary lookup per request."""
        policy = self.holder.policy
        day = now // 86_400
        if policy is not self._plans_policy or day != self._plans_day:
            if policy is not self._plans_policy and self._plans_policy is not None:
                self.hints.policy_changed(now)  # a reload or a cap change: the old checksums retire
            self._entries = {}
            self._plans_policy, self._plans_day = policy, day
        entry = self._entries.get(principal)
        if entry is None:
            if len(self._entries) >= MAX_PLANS:
                self._entries = {}
            effective = policy.for_principal(principal)
            entry = Entry(effective, not effective.models.unrestricted, {})
            self._entries[principal] = entry
            self._remember(policy, principal)
        return entry

    def _plan(
        self, entry: Entry, principal: Principal, stream: bool, now: float, billing_group: str | None
    ) -> Plan:
        """The counter keys and checks of a principal's requests of one kind (made once per entry)."""
        group = self.group_label(principal, billing_group)
        hints = self.hints.children(group)
        plan = build_plan(principal, entry.effective, stream, now, billing_group, group, hints)
        if plan.settings_checksum is not None:
            self.hints.saw_current(group, plan.settings_checksum)
        entry.plans[(stream, billing_group)] = plan  # bounded: two per group of the principal, and two
        return plan

    def _remember(self, policy: Policy, principal: Principal) -> None:
        """Note the names the policy file or an admin may use for ``principal`` (once per plan)."""
        names = {principal.email.lower()} if principal.email else set()
        entry = policy.user_entry(principal)
        if entry is not None:
            names.add(entry.user.lower())
        for name in names - {principal.subject}:
            if name in self._subjects or len(self._subjects) < MAX_PLANS:
                self._subjects[name] = principal.subject

    def subject_of(self, name: str) -> str | None:
        """The subject a user cap named ``name`` (a subject or an e-mail) counts spend under:
        ``name`` itself unless it is a name this replica has seen used for another subject;
        ``None`` for an e-mail this replica has not seen (its spend cannot be found)."""
        seen = self._subjects.get(name.lower())
        if seen is not None:
            return seen
        return None if "@" in name else name

    def _unavailable(
        self, principal: Principal, request_id: str, exc: CountersUnavailable
    ) -> Admission | None:
        if not self._outage:
            mode = (
                "closed: refusing metered requests"
                if self.fail_closed
                else "open: requests go through unmetered"
            )
            log.warning("fleet counters unavailable (%s); failing %s", exc, mode)
            self._outage = True
        if self.fail_closed:
            self._refused(principal, "counters_unavailable", request_id)
            raise counters_down()
        return None

    def _refusal(
        self, principal: Principal, request_id: str, refused: Refused, plan: Plan, now: float
    ) -> Exception:
        if refused.kind == "spend":
            cap, win = plan.caps[refused.index], plan.windows[refused.index]
            state = CapState(cap, win, micros(cap.limit_usd))
            self._refused(
                principal,
                "spend_cap",
                request_id,
                scope=cap.scope,
                owner=cap.owner,
                period=cap.period.value,
                limit_usd=cap.limit_usd,
            )
            return cap_reached(state, now)
        rate = plan.rates[refused.index] if refused.kind == "rate" else plan.streams[refused.index]
        retry = refused.retry_after_s if refused.kind == "rate" else 1.0
        self._refused(
            principal,
            "rate_limit",
            request_id,
            scope=rate.scope,
            owner=rate.owner,
            kind=rate.kind,
            limit=rate.limit,
            counted_as="rate_limit" if refused.kind == "rate" else "concurrency",
        )
        return rate_limits.rate_limited(rate, retry)

    def _refused(
        self, principal: Principal, reason: str, request_id: str, counted_as: str | None = None, **facts: Any
    ) -> None:
        """One refusal: its audit line and its count (``counted_as``: the metric's reason, when
        it is not the audit's)."""
        audit.refused(principal, reason, request_id, **facts)
        if self.on_refusal is not None:
            self.on_refusal(counted_as or _METRIC_REASONS.get(reason, reason))

    def record(self, admission: Admission, cost_usd: float | None, usage: Usage) -> None:
        """The request's accounting closed: add its spend and tokens, free its slot (once)."""
        if admission.recorded:
            return
        admission.recorded = True
        checks = admission.checks
        tokens = 0
        if checks.token_rates:  # counted only where a token rate charges them
            tokens = (
                usage.input_tokens
                + usage.output_tokens
                + usage.cache_read_input_tokens
                + usage.cache_write_5m_tokens
                + usage.cache_write_1h_tokens
            )
        spent = micros(cost_usd) if cost_usd else 0
        self.counters.record(self.clock(), checks, spent, tokens, admission.token)

    async def usage(self, principal: Principal) -> dict[str, Any]:
        """``GET /api/oauth/usage`` for the principal (``CountersUnavailable`` when unreadable)."""
        now = self.clock()
        effective = self.effective(principal)
        caps = ordered(effective.caps)
        checks, windows = spend_checks(caps, now)
        if caps:
            spent = await self.counters.read_spend(tuple(check.key for check in checks))
            states = [CapState(cap, win, used) for cap, win, used in zip(caps, windows, spent, strict=True)]
            return usage_body(states, None)
        keys = tuple(spend_key("user", principal.subject, window(period, now)) for period in OWN_PERIODS)
        own = await self.counters.read_spend(keys)
        return usage_body([], dict(zip(OWN_PERIODS, own, strict=True)))
