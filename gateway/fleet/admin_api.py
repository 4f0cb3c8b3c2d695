"""The admin API for spend limits, shaped like Anthropic's gateway: ``/v1/organizations/spend_limits``.

Only ``admin`` keys and principals in the policy's ``admin_groups`` may call it (else ``403
permission_error``); every change is an audit line (``policy.cap_changed``) and, with Redis,
reaches every replica within ``GATEWAY_POLICY_RELOAD_S``.

Details: docs/internals/gateway-fleet.md
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.errors import GatewayError
from gateway.fleet import audit
from gateway.fleet.counters import CountersUnavailable
from gateway.fleet.periods import Period, window
from gateway.fleet.policy import Scope, owner_key
from gateway.fleet.policy_file import MAX_CAP_USD
from gateway.fleet.policy_gate import PolicyGate
from gateway.fleet.policy_reload import PolicyHolder, cap_field
from gateway.fleet.principal import Principal
from gateway.fleet.spend_caps import MICROS, spend_key

MAX_ADMIN_BODY = 64 * 1024


class CapChange(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)  # built on the first admin change

    scope: Literal["org", "group", "user"]
    owner: str = Field("", max_length=320)
    period: Period
    limit_usd: float | None = Field(..., ge=0, le=MAX_CAP_USD, allow_inf_nan=False, strict=True)


def _listing(holder: PolicyHolder) -> list[tuple[Scope, str, Period, float, str]]:
    spec = holder.policy.spec
    # keyed by the owner as compared (an e-mail in lower case), shown as the file spells it
    rows: dict[tuple[Scope, str, Period], tuple[str, float, str]] = {}

    def add(scope: Scope, owner: str, caps: Any) -> None:
        if caps is None:
            return
        for period in Period:
            value = getattr(caps, f"{period.value}_usd")
            if value is not None:
                rows[(scope, owner_key(scope, owner), period)] = (owner, value, "file")

    add("org", "", spec.organization.spend_caps)
    add("user", "*", spec.base.spend_caps)
    for group in spec.groups:
        add("group", group.group, group.pool)
    for user in spec.users:
        add("user", user.user, user.spend_caps)
    for (scope, owner), changes in holder.overrides().items():
        for period, limit in changes.items():
            key = (scope, owner_key(scope, owner), period)
            if limit is None:
                rows.pop(key, None)
            else:
                rows[key] = (rows[key][0] if key in rows else owner, limit, "admin")
    return [(scope, owner, period, limit, source) for (scope, _, period), (owner, limit, source) in rows.items()]


class AdminApi:
    def __init__(self, gate: PolicyGate, admin_for: Any, enforced: bool = True) -> None:
        self._gate = gate
        self._admin_for = admin_for  # (request, admin groups) -> Principal, or a GatewayError
        self._enforced = enforced  # False without GATEWAY_POLICY_FILE: nothing would apply a cap

    def _caller(self, request: web.Request) -> Principal:
        principal: Principal = self._admin_for(request, self._gate.holder.policy.admin_groups)
        return principal

    async def get_limits(self, request: web.Request) -> web.Response:
        self._caller(request)
        now = self._gate.clock()
        rows = _listing(self._gate.holder)
        # spend is counted per subject; a user row may name an e-mail (the policy file's choice)
        owners = [self._gate.subject_of(owner) if scope == "user" else owner for scope, owner, *_ in rows]
        known = [(row, owner) for row, owner in zip(rows, owners, strict=True) if owner is not None]
        keys = tuple(spend_key(scope, owner, window(period, now)) for (scope, _, period, _, _), owner in known)
        try:
            read = await self._gate.counters.read_spend(keys)
        except CountersUnavailable:
            read = [-1] * len(keys)
        found = iter(read)
        spent = [-1 if owner is None else next(found) for owner in owners]
        data = [
            {
                "scope": scope,
                "owner": owner,
                "period": period.value,
                "limit_usd": limit,
                "source": source,
                "spent_usd": None if used < 0 or owner == "*" else used / MICROS,
            }
            for (scope, owner, period, limit, source), used in zip(rows, spent, strict=True)
        ]
        return web.json_response({"data": data}, headers={"cache-control": "no-store"})

    async def put_limit(self, request: web.Request) -> web.Response:
        actor = self._caller(request)
        if not self._enforced:
            raise GatewayError(
                409, "no policy file: spend caps are not enforced (set GATEWAY_POLICY_FILE)", should_retry=False
            )
        body = await request.content.read(MAX_ADMIN_BODY + 1)
        if len(body) > MAX_ADMIN_BODY:
            raise GatewayError(
                413, "the request body is too large for the admin API", error_type="request_too_large"
            )
        try:
            change = CapChange.model_validate(orjson.loads(body))
        except orjson.JSONDecodeError:
            raise GatewayError(400, "the request body is not valid JSON") from None
        except ValidationError as exc:
            first = exc.errors(include_input=False, include_url=False)[0]
            where = ".".join(str(part) for part in first["loc"]) or "body"
            raise GatewayError(400, f"{where}: {first['msg']}") from None
        owner = "" if change.scope == "org" else owner_key(change.scope, change.owner)  # e-mail: lower case
        if change.scope != "org" and not owner:
            raise GatewayError(400, "owner: required for a group or user cap")
        holder = self._gate.holder
        old = holder.cap(change.scope, owner, change.period)
        try:  # the other replicas take it from Redis (gateway.fleet.policy_gate.PolicyGate.sync_caps)
            await self._gate.counters.share_cap(
                *cap_field(change.scope, owner, change.period, change.limit_usd)
            )
        except CountersUnavailable:
            raise GatewayError(
                503, "the cap could not be stored: the shared counter store is unavailable"
            ) from None
        holder.set_cap(change.scope, owner, change.period, change.limit_usd)
        audit.cap_changed(actor, change.scope, owner, change.period.value, old, change.limit_usd)
        return web.json_response(
            {
                "scope": change.scope,
                "owner": owner,
                "period": change.period.value,
                "limit_usd": change.limit_usd,
                "previous_usd": old,
            }
        )
