"""Where the policy meets the request path: one ``admit`` before proxying, one ``record`` at close.

``admit`` (``Gateway._forward``, after the body is parsed, before ``_exchange``):

1. the model: refused (``400 invalid_request_error`` naming it) when the principal's rules or the
   kill switch exclude it (``/v1/messages`` and ``/v1/messages/count_tokens``);
2. for ``/v1/messages`` of a principal with caps or rate limits: one counter round trip
   (:class:`~gateway.fleet.counters.Counters`) that checks every cap and limit and takes the
   request's rate and stream slots; a refusal is a ``429`` (``billing_error`` for a cap,
   ``rate_limit_error`` otherwise). A counter outage fails open (the request goes through
   unmetered, one warning per outage) or closed (``429`` with ``fetch_error``), per
   ``GATEWAY_POLICY_COUNTERS_FAIL``.

The returned :class:`Admission` rides on the request's accounting scope; ``Gateway._close`` hands it
to ``record`` exactly once with the request's cost (the existing price table, from the final usage),
which adds the spend to every cap's counter and to the principal's own daily/weekly/monthly totals
(``GET /api/oauth/usage``), charges the tokens and frees the stream slot.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.errors import ClientInputError
from gateway.fleet import audit, rate_limits
from gateway.fleet.counters import (
    Charge,
    Counters,
    CountersUnavailable,
    RateCheck,
    Refused,
    SlotCheck,
    SpendCheck,
)
from gateway.fleet.periods import Period, window
from gateway.fleet.policy import Effective, Rate
from gateway.fleet.policy_reload import PolicyHolder
from gateway.fleet.principal import Principal
from gateway.fleet.spend_caps import (
    CapState,
    allowed_headers,
    binding,
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
OWN_PERIODS = (Period.DAILY, Period.WEEKLY, Period.MONTHLY)


@dataclass(slots=True)
class Admission:
    """One admitted ``/v1/messages`` request: what to record for it, and its response headers."""

    principal: Principal
    token: str
    spend: tuple[SpendCheck, ...]  # the caps' counters and the principal's own totals
    token_rates: tuple[RateCheck, ...]
    slots: tuple[SlotCheck, ...]
    headers: dict[str, str]  # the usage-limit headers ({} for an uncapped principal)
    recorded: bool = False

    def apply(self, upstream_headers: list[tuple[str, str]], extra: dict[str, str]) -> list[tuple[str, str]]:
        """For a capped principal: the upstream's rate-limit headers stripped, ours added."""
        if not self.headers:
            return upstream_headers
        extra.update(self.headers)
        return strip_upstream_limits(upstream_headers)


class PolicyGate:
    def __init__(
        self,
        holder: PolicyHolder,
        counters: Counters,
        *,
        fail_closed: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.holder = holder
        self.counters = counters
        self.fail_closed = fail_closed
        self.clock = clock
        self._outage = False

    def effective(self, principal: Principal) -> Effective:
        return self.holder.policy.for_principal(principal)

    async def admit(self, principal: Principal, client: ClientRequest, request_id: str) -> Admission | None:
        effective = self.holder.policy.for_principal(principal)
        models = effective.models
        if not models.unrestricted:
            refusal = models.refusal(client.model)
            if refusal is not None:
                audit.refused(principal, "model", request_id, model=client.model[:100])
                raise ClientInputError(400, refusal, error_type="invalid_request_error")
        if client.operation is not Operation.MESSAGES:
            return None
        now = self.clock()
        caps = ordered(effective.caps)
        checks, windows = spend_checks(caps, now)
        own = self._own_totals(principal, checks, now)
        requests = [rate for rate in effective.rates if rate.kind == "requests"]
        tokens = [rate for rate in effective.rates if rate.kind == "tokens"]
        streams = [rate for rate in effective.rates if rate.kind == "streams"] if client.stream else []
        rate_list = requests + tokens
        rate_checks = tuple(
            rate_limits.request_check(rate) if rate.kind == "requests" else rate_limits.token_check(rate)
            for rate in rate_list
        )
        slot_checks = tuple(rate_limits.slot_check(rate) for rate in streams)
        headers: dict[str, str] = {}
        if checks or rate_checks or slot_checks:
            try:
                result = await self.counters.admit(now, checks, rate_checks, slot_checks, request_id)
            except CountersUnavailable as exc:
                return self._unavailable(principal, request_id, exc)
            self._outage = False
            if isinstance(result, Refused):
                raise self._refusal(principal, request_id, result, caps, windows, rate_list, streams, now)
            states = [
                CapState(cap, win, used)
                for cap, win, used in zip(caps, windows, result.spent_micros, strict=True)
            ]
            active = binding(states)
            if active is not None:
                headers = allowed_headers(active)
        return Admission(
            principal,
            request_id,
            checks + own,
            rate_checks[len(requests) :],
            slot_checks,
            headers,
        )

    def _own_totals(
        self, principal: Principal, checks: tuple[SpendCheck, ...], now: float
    ) -> tuple[SpendCheck, ...]:
        """The principal's own daily/weekly/monthly counters that no cap already counts."""
        counted = {check.key for check in checks}
        own = []
        for period in OWN_PERIODS:
            win = window(period, now)
            key = spend_key("user", principal.subject, win)
            if key not in counted:
                own.append(SpendCheck(key, 0, win.reset_at + 86_400))
        return tuple(own)

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
            audit.refused(principal, "counters_unavailable", request_id)
            raise counters_down()
        return None

    def _refusal(
        self,
        principal: Principal,
        request_id: str,
        refused: Refused,
        caps: tuple[Any, ...],
        windows: tuple[Any, ...],
        rates: list[Rate],
        streams: list[Rate],
        now: float,
    ) -> Exception:
        if refused.kind == "spend":
            cap, win = caps[refused.index], windows[refused.index]
            state = CapState(cap, win, micros(cap.limit_usd))
            audit.refused(
                principal,
                "spend_cap",
                request_id,
                scope=cap.scope,
                owner=cap.owner,
                period=cap.period.value,
                limit_usd=cap.limit_usd,
            )
            return cap_reached(state, now)
        rate = rates[refused.index] if refused.kind == "rate" else streams[refused.index]
        retry = refused.retry_after_s if refused.kind == "rate" else 1.0
        audit.refused(
            principal,
            "rate_limit",
            request_id,
            scope=rate.scope,
            owner=rate.owner,
            kind=rate.kind,
            limit=rate.limit,
        )
        return rate_limits.rate_limited(rate, retry)

    def record(self, admission: Admission, cost_usd: float | None, usage: Usage) -> None:
        """The request's accounting closed: add its spend and tokens, free its slot (once)."""
        if admission.recorded:
            return
        admission.recorded = True
        tokens = (
            usage.input_tokens
            + usage.output_tokens
            + usage.cache_read_input_tokens
            + usage.cache_write_5m_tokens
            + usage.cache_write_1h_tokens
        )
        charge = Charge(
            admission.spend,
            micros(cost_usd) if cost_usd else 0,
            admission.token_rates,
            tokens,
            admission.slots,
            admission.token,
        )
        self.counters.record(self.clock(), charge)

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
