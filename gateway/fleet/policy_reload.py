"""The policy in force, re-read from ``GATEWAY_POLICY_FILE`` while the gateway serves.

Like the keys file (:mod:`gateway.key_reload`): a file change is found by polling its ``stat``
every ``GATEWAY_POLICY_RELOAD_S`` seconds (0: only on SIGHUP; ``stat`` follows symlinks, so a
Kubernetes ConfigMap's ``..data`` swap is seen), and ``SIGHUP`` re-reads it at once. A valid file
replaces the policy in one assignment (a request sees the old or the new one); an unreadable or
invalid one keeps the policy in force and logs one line (once per file version). Every outcome is
an audit line (``policy.reloaded`` / ``policy.reload_failed``).

Caps set through the admin API (:mod:`gateway.fleet.admin_api`) are kept here as overrides and
laid over every policy version read later.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from gateway.fleet import audit
from gateway.fleet.periods import Period
from gateway.fleet.policy import DEFAULT_POLICY, Policy, Scope, owner_key
from gateway.fleet.policy_file import MAX_CAP_USD, PolicyError, load_policy

log = logging.getLogger("switchyard.fleet.policy")

FILE_CHANGE = "file change"
SIGHUP = "SIGHUP"
START_UP = "start-up"
ADMIN_API = "admin API"

Signature = tuple[int, int, int, int]


def _signature(path: Path) -> Signature:
    stat = os.stat(path)
    return (stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_size)


def cap_field(scope: Scope, owner: str, period: Period, limit_usd: float | None) -> tuple[str, str]:
    """How an admin-set cap is shared between replicas (a Redis hash field and its value)."""
    return f"{scope} {period.value} {owner}", "none" if limit_usd is None else repr(limit_usd)


def parse_cap_field(field: str, value: str) -> tuple[Scope, str, Period, float | None] | None:
    scope, _, rest = field.partition(" ")
    period, _, owner = rest.partition(" ")
    if scope not in ("org", "group", "user") or period not in {p.value for p in Period}:
        return None
    try:
        limit = None if value == "none" else float(value)
    except ValueError:
        return None
    if limit is not None and not 0 <= limit <= MAX_CAP_USD:  # NaN and infinities too
        return None
    return scope, owner, Period(period), limit  # type: ignore[return-value]


class PolicyHolder:
    """The policy in force (``policy``) and the admin API's cap overrides laid over it."""

    def __init__(self, policy: Policy = DEFAULT_POLICY) -> None:
        self.policy = policy
        self._overrides: dict[tuple[Scope, str], dict[Period, float | None]] = {}

    def cap(self, scope: Scope, owner: str, period: Period) -> float | None:
        """The cap in force for one owner and period (an override, else the file's)."""
        owner = owner_key(scope, owner)
        changes = self._overrides.get((scope, owner), {})
        if period in changes:
            return changes[period]
        spec = self.policy.spec
        if scope == "org":
            caps = spec.organization.spend_caps
        elif scope == "group":
            caps = next((g.pool for g in spec.groups if g.group == owner), None)
        else:
            entry = next((u for u in spec.users if owner_key(scope, u.user) == owner), None)
            caps = entry.spend_caps if entry is not None else spec.base.spend_caps
        return None if caps is None else getattr(caps, f"{period.value}_usd")

    def set_cap(self, scope: Scope, owner: str, period: Period, limit_usd: float | None) -> None:
        self._overrides.setdefault((scope, owner_key(scope, owner)), {})[period] = limit_usd
        self.policy = self.policy.with_overrides(self._snapshot())

    def adopt(self, shared: dict[str, str]) -> bool:
        """Take the admin-set caps every replica shares (``field: value`` as :func:`cap_field`
        writes them); ``True`` when they changed what is in force."""
        overrides: dict[tuple[Scope, str], dict[Period, float | None]] = {}
        for field, value in shared.items():
            parsed = parse_cap_field(field, value)
            if parsed is not None:
                scope, owner, period, limit = parsed
                overrides.setdefault((scope, owner_key(scope, owner)), {})[period] = limit
        if overrides == self._overrides:
            return False
        self._overrides = overrides
        self.policy = self.policy.with_overrides(self._snapshot())
        return True

    def overrides(self) -> dict[tuple[Scope, str], dict[Period, float | None]]:
        return self._snapshot()

    def _snapshot(self) -> dict[tuple[Scope, str], dict[Period, float | None]]:
        return {owner: dict(changes) for owner, changes in self._overrides.items()}

    def install(self, policy: Policy) -> None:
        self.policy = policy.with_overrides(self._snapshot()) if self._overrides else policy


class PolicyReloader(PolicyHolder):
    """Keeps the policy equal to the file's last valid version."""

    def __init__(
        self,
        path: Path,
        *,
        interval_s: float,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        super().__init__()
        self.path = path
        self.interval_s = interval_s
        self._sleep = sleep
        self._seen: Signature | None = None
        self.reloads = 0
        self.failures = 0
        self._seen = _signature(path)
        self.install(Policy(load_policy(path), source=str(path)))  # a bad file fails start-up

    def check(self) -> bool:
        """Reload if the file changed since it was last read."""
        try:
            signature = _signature(self.path)
        except OSError as exc:
            if self._seen is not None:
                self._seen = None
                self._refuse(f"cannot read it ({type(exc).__name__})", FILE_CHANGE)
            return False
        if signature == self._seen:
            return False
        return self.reload(FILE_CHANGE)

    def reload(self, trigger: str = SIGHUP) -> bool:
        try:
            self._seen = _signature(self.path)
            spec = load_policy(self.path)
        except OSError as exc:
            self._refuse(f"cannot read it ({type(exc).__name__})", trigger)
            return False
        except PolicyError as exc:
            self._refuse(str(exc), trigger)
            return False
        self.install(Policy(spec, source=str(self.path)))
        self.reloads += 1
        log.info(
            "policy reloaded from %s (%s): %d groups, %d users",
            self.path,
            trigger,
            len(spec.groups),
            len(spec.users),
        )
        audit.reloaded(str(self.path), trigger, len(spec.groups), len(spec.users))
        return True

    def _refuse(self, problem: str, trigger: str) -> None:
        self.failures += 1
        log.warning(
            "policy: not reloading %s (%s): %s; keeping the policy in force", self.path, trigger, problem
        )
        audit.reload_failed(str(self.path), trigger, problem)

    async def run(self) -> None:
        """Poll the file every ``interval_s`` seconds until cancelled (nothing if polling is off)."""
        if self.interval_s <= 0:
            return
        while True:
            await self._sleep(self.interval_s)
            try:
                self.check()
            except Exception:  # never let the watcher die
                log.exception("policy: checking %s failed", self.path)
