"""The counters behind spend caps and rate limits, and the embedded (in-process) store.

Two operations, each atomic: ``admit`` commits nothing unless every check passes (spend, GCRA
rates, concurrent streams); ``record`` charges the cost and tokens and frees the stream slot. The
Redis store (:mod:`gateway.fleet.counters_redis`) must keep the same semantics.

Details: docs/internals/gateway-fleet.md
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import repeat
from operator import add, ge
from types import MappingProxyType
from typing import Final

STALE_SLOT_S: Final = 3600.0
SPEND_KEPT_AFTER_S: Final = 86_400
PURGE_EVERY_S: Final = 60.0


class CountersUnavailable(Exception):
    """The counter store could not answer (Redis down or slow)."""


@dataclass(frozen=True, slots=True)
class SpendCheck:
    key: str
    limit_micros: int
    expire_at: int  # Unix seconds: the period's end plus SPEND_KEPT_AFTER_S


@dataclass(frozen=True, slots=True)
class RateCheck:
    key: str
    interval_s: float  # seconds per unit (60 / the per-minute limit)
    tolerance_s: float  # the burst allowance, seconds
    cost: int  # units charged at admission (1 for a request, 0 for tokens)
    step: float = field(init=False)  # cost * interval_s: what an admission adds to ``tat``

    def __post_init__(self) -> None:
        object.__setattr__(self, "step", self.cost * self.interval_s)


@dataclass(frozen=True, slots=True)
class SlotCheck:
    key: str
    limit: int


@dataclass(frozen=True, slots=True)
class Refused:
    kind: str  # "spend", "rate" or "slot"
    index: int  # which check of that kind
    retry_after_s: float = 0.0


@dataclass(slots=True)
class Admitted:
    spent_micros: list[int] = field(default_factory=list)  # per spend check, before this request


@dataclass(frozen=True, slots=True)
class Checks:
    """What one kind of request of one principal is checked and charged against, made once per
    plan (principal, stream or not, policy version, UTC day), not per request.

    ``admit`` reads ``spend`` and checks ``rates`` and ``slots``; ``record`` adds the cost to
    ``spend`` and ``own`` (the principal's uncapped totals), and the tokens to the rates that
    charge nothing at admission (``cost`` 0: the token rates).
    """

    spend: tuple[SpendCheck, ...] = ()
    rates: tuple[RateCheck, ...] = ()
    slots: tuple[SlotCheck, ...] = ()
    own: tuple[SpendCheck, ...] = ()
    # derived once, so the request path walks no tuple of dataclasses it need not
    spend_keys: tuple[str, ...] = field(init=False)
    spend_limits: tuple[int, ...] = field(init=False)
    charged: tuple[SpendCheck, ...] = field(init=False)  # spend, then own
    charged_keys: tuple[str, ...] = field(init=False)
    charged_expiry: Mapping[str, int] = field(init=False)  # key -> expire_at, of every charged key
    token_rates: tuple[RateCheck, ...] = field(init=False)
    metered: bool = field(init=False)  # anything to check at admission

    def __post_init__(self) -> None:
        charged = self.spend + self.own
        derived = {
            "spend_keys": tuple(check.key for check in self.spend),
            "spend_limits": tuple(check.limit_micros for check in self.spend),
            "charged": charged,
            "charged_keys": tuple(check.key for check in charged),
            "charged_expiry": MappingProxyType({check.key: check.expire_at for check in charged}),
            "token_rates": tuple(rate for rate in self.rates if rate.cost == 0),
            "metered": bool(self.spend or self.rates or self.slots),
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)


class Counters(ABC):
    @abstractmethod
    async def admit(self, now: float, checks: Checks, token: str) -> Admitted | Refused:
        """Check everything; on success commit the rate charges and slots (see the module docstring)."""

    @abstractmethod
    def record(self, now: float, checks: Checks, micros: int, tokens: int, token: str) -> None:
        """Add a finished request's spend (``micros``) and ``tokens``, free its slot (``token``
        names it), in the background if remote."""

    @abstractmethod
    async def read_spend(self, keys: tuple[str, ...]) -> list[int]:
        """Micro-USD of each spend counter (0 when absent)."""

    @abstractmethod
    async def set_spend(self, key: str, micros: int, expire_at: int) -> None:
        """Set one spend counter (the admin API's reset)."""

    shared = False  # whether other replicas see these counters (and the admin-set caps)

    def admit_in_process(self) -> Callable[[float, Checks, str], Admitted | Refused] | None:
        """``admit`` as a plain call when the counters are this process's own (the request path
        then awaits nothing for them); ``None`` for a remote store."""
        return None

    async def shared_caps(self) -> dict[str, str] | None:
        """The caps set through the admin API on any replica (``None``: nothing shared, one process)."""
        return None

    async def share_cap(self, field: str, value: str) -> None:  # noqa: B027 - optional hook
        """Publish one admin-set cap to the other replicas (nothing to do for one process)."""

    async def flush(self) -> None:  # noqa: B027 - optional hook
        """Wait until the ``record`` calls made so far are stored."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


class MemoryCounters(Counters):
    """The embedded store: one process's counters (a single replica needs nothing else).

    The request path does per check what it must (a dictionary read, a comparison), in C where
    a builtin does it (``map`` over the plan's precomputed keys), and nothing else.
    """

    def __init__(self) -> None:
        self._spend: dict[str, int] = {}  # key -> micro-USD
        self._expiry: dict[str, int] = {}  # key -> expire_at (Unix seconds)
        self._tat: dict[str, float] = {}
        self._slots: dict[str, dict[str, float]] = {}  # key -> token -> when taken
        self._purged_at = 0.0

    async def admit(self, now: float, checks: Checks, token: str) -> Admitted | Refused:
        return self.admit_now(now, checks, token)

    def admit_in_process(self) -> Callable[[float, Checks, str], Admitted | Refused]:
        return self.admit_now

    def admit_now(self, now: float, checks: Checks, token: str) -> Admitted | Refused:
        if now - self._purged_at >= PURGE_EVERY_S:
            self._purge(now)
        spent = list(map(self._spend.get, checks.spend_keys, repeat(0)))
        if any(map(ge, spent, checks.spend_limits)):
            return Refused("spend", list(map(ge, spent, checks.spend_limits)).index(True))
        committed: list[tuple[str, float]] = []
        if checks.rates:
            tats = self._tat
            for rate in checks.rates:  # GCRA: tat, the theoretical arrival time
                tat = tats.get(rate.key, now)
                new_tat = (tat if tat > now else now) + rate.step
                excess = new_tat - now - rate.tolerance_s
                if excess > 1e-9:
                    return Refused("rate", checks.rates.index(rate), excess)
                if rate.cost:
                    committed.append((rate.key, new_tat))
        if checks.slots:
            held_by = self._slots
            for slot in checks.slots:
                held = held_by.get(slot.key)
                if held is None:  # kept while empty: ``_purge`` drops it
                    held = held_by[slot.key] = {}
                # fewer held than the limit: within it whatever their age (no count needed)
                if len(held) >= slot.limit and _live(held, now) >= slot.limit:
                    index = checks.slots.index(slot)
                    for earlier in checks.slots[:index]:  # nothing is committed unless all pass
                        del held_by[earlier.key][token]
                    return Refused("slot", index)
                held[token] = now
        if committed:
            self._tat.update(committed)
        return Admitted(spent)

    def record(self, now: float, checks: Checks, micros: int, tokens: int, token: str) -> None:
        if micros > 0 and checks.charged_keys:
            spend, keys = self._spend, checks.charged_keys
            spend.update(zip(keys, map(add, map(spend.get, keys, repeat(0)), repeat(micros)), strict=True))
            self._expiry.update(checks.charged_expiry)
        if tokens > 0:
            for rate in checks.token_rates:
                tat = self._tat.get(rate.key, now)
                self._tat[rate.key] = (tat if tat > now else now) + tokens * rate.interval_s
        for slot in checks.slots:
            held = self._slots.get(slot.key)
            if held is not None:  # an emptied one stays until ``_purge``: the next request reuses it
                held.pop(token, None)

    async def read_spend(self, keys: tuple[str, ...]) -> list[int]:
        return [self._spend.get(key, 0) for key in keys]

    async def set_spend(self, key: str, micros: int, expire_at: int) -> None:
        self._spend[key] = micros
        self._expiry[key] = expire_at

    def _purge(self, now: float) -> None:
        self._purged_at = now
        self._expiry = {key: expire_at for key, expire_at in self._expiry.items() if expire_at > now}
        self._spend = {key: value for key, value in self._spend.items() if key in self._expiry}
        self._tat = {key: tat for key, tat in self._tat.items() if tat > now}
        for key in [key for key, held in self._slots.items() if not _live(held, now)]:
            del self._slots[key]  # nothing held (or only what a dead holder left)


def _live(held: Mapping[str, float], now: float) -> int:
    """How many of the slots ``held`` were taken within ``STALE_SLOT_S`` (older: a holder that
    never finished, as a dead replica)."""
    stale_before = now - STALE_SLOT_S
    return sum(1 for started in held.values() if started > stale_before)
