"""The policy in force, and what it says for one principal (:class:`Effective`).

Entries combine per the file's ``mode`` (``layered`` or ``first_match``); group pools, the
organisation cap and the kill switch apply in either mode. The answer per principal is computed
once per policy version, so the request path only looks it up.

Details: docs/internals/gateway-fleet.md
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from gateway.fleet.model_rules import ModelRules
from gateway.fleet.periods import Period
from gateway.fleet.policy_file import (
    EntryIn,
    GroupIn,
    PolicyIn,
    RateLimitsIn,
    SpendCapsIn,
    UserIn,
    default_policy,
)
from gateway.fleet.principal import Principal

Scope = Literal["user", "group", "org"]
RateKind = Literal["requests", "tokens", "streams"]
MAX_CACHED: Final = 10_000
_SETTINGS_NAMESPACE: Final = uuid.UUID("6f1c1f9e-4d1e-4a57-9b0e-5b1f0c8e7a11")


@dataclass(frozen=True, slots=True)
class Cap:
    """One spend cap: whose spend (``scope``, ``owner``), over which period, how many USD."""

    scope: Scope
    owner: str  # the subject, the group name, or "" for the organisation
    period: Period
    limit_usd: float


@dataclass(frozen=True, slots=True)
class Rate:
    """One rate limit: per user or shared by a group; requests or tokens per minute, or streams."""

    scope: Scope
    owner: str
    kind: RateKind
    limit: int


@dataclass(frozen=True, slots=True)
class Effective:
    models: ModelRules
    caps: tuple[Cap, ...]
    rates: tuple[Rate, ...]
    settings: Mapping[str, Any] | None  # None: no managed settings apply (404)
    settings_uuid: str

    @property
    def metered(self) -> bool:
        """Anything to count for this principal (caps or rate limits)."""
        return bool(self.caps or self.rates)


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        previous = merged.get(key)
        if isinstance(previous, Mapping) and isinstance(value, Mapping):
            merged[key] = deep_merge(previous, value)
        else:
            merged[key] = value
    return merged


def _caps_of(caps: SpendCapsIn | None) -> dict[Period, float]:
    if caps is None:
        return {}
    values = {Period.DAILY: caps.daily_usd, Period.WEEKLY: caps.weekly_usd, Period.MONTHLY: caps.monthly_usd}
    return {period: value for period, value in values.items() if value is not None}


def _rates_of(limits: RateLimitsIn | None) -> dict[RateKind, int]:
    if limits is None:
        return {}
    values: dict[RateKind, int | None] = {
        "requests": limits.requests_per_minute,
        "tokens": limits.tokens_per_minute,
        "streams": limits.concurrent_streams,
    }
    return {kind: value for kind, value in values.items() if value is not None}


CapOverrides = Mapping[tuple[Scope, str], Mapping[Period, float | None]]
"""Caps set through the admin API: for ``(scope, owner)`` a period's limit (``None``: removed)."""


def owner_key(scope: Scope, owner: str) -> str:
    """A cap owner as compared: a user named by e-mail case-insensitively (as ``users:`` entries)."""
    return owner.lower() if scope == "user" and "@" in owner else owner


class Policy:
    """A validated policy file, ready to answer for principals."""

    def __init__(self, spec: PolicyIn, *, source: str = "", overrides: CapOverrides | None = None) -> None:
        self.spec = spec
        self.source = source
        self.overrides: CapOverrides = overrides or {}
        self._override_of = {(scope, owner_key(scope, owner)): v for (scope, owner), v in self.overrides.items()}
        self.admin_groups = frozenset(spec.admin_groups)
        self._killed = frozenset(spec.kill_switch)
        self._groups = {entry.group: entry for entry in spec.groups}
        self.named_groups = frozenset(self._groups) | self.admin_groups  # what reads Principal.groups
        self._users = {entry.user: entry for entry in spec.users}
        self._emails = {entry.user.lower(): entry for entry in spec.users if "@" in entry.user}
        self._cache: dict[Principal, Effective] = {}

    def with_overrides(self, overrides: CapOverrides) -> Policy:
        return Policy(self.spec, source=self.source, overrides=overrides)

    def user_entry(self, principal: Principal) -> UserIn | None:
        found = self._users.get(principal.subject)
        if found is None and principal.email:
            found = self._emails.get(principal.email.lower())
        return found

    def group_entries(self, principal: Principal) -> list[GroupIn]:
        return [entry for entry in self.spec.groups if entry.group in principal.groups]

    def for_principal(self, principal: Principal) -> Effective:
        found = self._cache.get(principal)
        if found is None:
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
            found = self._cache[principal] = self._resolve(principal)
        return found

    def _chain(self, principal: Principal, groups: Sequence[GroupIn]) -> list[tuple[str, EntryIn]]:
        chain: list[tuple[str, EntryIn]] = [("base", self.spec.base)]
        user = self.user_entry(principal)
        if self.spec.mode == "first_match":
            if user is not None:
                chain.append((f"user:{user.user}", user))
            elif groups:
                chain.append((f"group:{groups[0].group}", groups[0]))
            return chain
        chain.extend((f"group:{entry.group}", entry) for entry in groups)
        if user is not None:
            chain.append((f"user:{user.user}", user))
        return chain

    def _resolve(self, principal: Principal) -> Effective:
        groups = self.group_entries(principal)
        chain = self._chain(principal, groups)
        allow: list[str] | None = None
        deny: list[str] = []
        caps: dict[Period, float] = {}
        rates: dict[RateKind, int] = {}
        settings: dict[str, Any] | None = None
        contributors: list[str] = []
        for name, entry in chain:
            if entry.models is not None:
                if entry.models.allow is not None:
                    allow = list(entry.models.allow)
                deny.extend(entry.models.deny)
            entry_caps = _caps_of(entry.spend_caps)
            if name == "base":  # the admin API names the base's caps user "*" (as it lists them)
                entry_caps = self._overridden(("user", "*"), entry_caps)
            caps.update(entry_caps)
            rates.update(_rates_of(entry.rate_limits))
            if entry.managed_settings is not None:
                settings = deep_merge(settings or {}, entry.managed_settings)
                contributors.append(name)
        subject = principal.subject
        user = self.user_entry(principal)
        for name in dict.fromkeys((user.user if user else subject, principal.email or subject, subject)):
            caps = self._overridden(("user", name), caps)  # the admin API names a user either way
        cap_list = [Cap("user", subject, period, limit) for period, limit in caps.items()]
        rate_list = [Rate("user", subject, kind, limit) for kind, limit in rates.items()]
        for entry in groups:
            pool = self._overridden(("group", entry.group), _caps_of(entry.pool))
            cap_list.extend(Cap("group", entry.group, period, limit) for period, limit in pool.items())
            shared = _rates_of(entry.pool_rate_limits)
            rate_list.extend(Rate("group", entry.group, kind, limit) for kind, limit in shared.items())
        org = self._overridden(("org", ""), _caps_of(self.spec.organization.spend_caps))
        cap_list.extend(Cap("org", "", period, limit) for period, limit in org.items())
        models = ModelRules(
            allow=None if allow is None or "*" in allow else tuple(allow),
            deny=tuple(dict.fromkeys(deny)),
            killed=self._killed,
        )
        digest = hashlib.sha256("\n".join(contributors).encode()).hexdigest()
        return Effective(
            models=models,
            caps=tuple(cap_list),
            rates=tuple(rate_list),
            settings=settings,
            settings_uuid=str(uuid.uuid5(_SETTINGS_NAMESPACE, digest)),
        )

    def _overridden(self, owner: tuple[Scope, str], caps: dict[Period, float]) -> dict[Period, float]:
        changes = self._override_of.get((owner[0], owner_key(*owner)))
        if not changes:
            return caps
        merged = dict(caps)
        for period, limit in changes.items():
            if limit is None:
                merged.pop(period, None)
            else:
                merged[period] = limit
        return merged


DEFAULT_POLICY: Final = Policy(default_policy(), source="default (no GATEWAY_POLICY_FILE)")
