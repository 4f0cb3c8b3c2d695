"""The counters behind spend caps and rate limits, and the embedded (in-process) store.

Two operations, each atomic: ``admit`` commits nothing unless every check passes (spend, GCRA
rates, concurrent streams); ``record`` charges the cost and tokens and frees the stream slot. The
Redis store (:mod:`gateway.fleet.counters_redis`) must keep the same semantics.

Details: docs/internals/gateway-fleet.md
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
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
class Charge:
    """What ``record`` adds once a request's accounting closes."""

    spend: tuple[SpendCheck, ...]
    micros: int
    token_rates: tuple[RateCheck, ...]
    tokens: int
    slots: tuple[SlotCheck, ...]
    token: str


class Counters(ABC):
    @abstractmethod
    async def admit(
        self,
        now: float,
        spend: tuple[SpendCheck, ...],
        rates: tuple[RateCheck, ...],
        slots: tuple[SlotCheck, ...],
        token: str,
    ) -> Admitted | Refused:
        """Check everything; on success commit the rate charges and slots (see module doc)."""

    @abstractmethod
    def record(self, now: float, charge: Charge) -> None:
        """Add a finished request's spend and tokens, free its slot (in the background if remote)."""

    @abstractmethod
    async def read_spend(self, keys: tuple[str, ...]) -> list[int]:
        """Micro-USD of each spend counter (0 when absent)."""

    @abstractmethod
    async def set_spend(self, key: str, micros: int, expire_at: int) -> None:
        """Set one spend counter (the admin API's reset)."""

    shared = False  # whether other replicas see these counters (and the admin-set caps)

    async def shared_caps(self) -> dict[str, str] | None:
        """The caps set through the admin API on any replica (``None``: nothing shared, one process)."""
        return None

    async def share_cap(self, field: str, value: str) -> None:  # noqa: B027 - optional hook
        """Publish one admin-set cap to the other replicas (nothing to do for one process)."""

    async def flush(self) -> None:  # noqa: B027 - optional hook
        """Wait until the ``record`` calls made so far are stored."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


def gcra(tat: float | None, now: float, check: RateCheck) -> tuple[bool, float, float]:
    """(passes, the new ``tat`` if it does, seconds until it would)."""
    base = now if tat is None or tat < now else tat
    new_tat = base + check.cost * check.interval_s
    excess = new_tat - now - check.tolerance_s
    return excess <= 1e-9, new_tat, max(excess, 0.0)


class MemoryCounters(Counters):
    """The embedded store: one process's counters (a single replica needs nothing else)."""

    def __init__(self) -> None:
        self._spend: dict[str, tuple[int, int]] = {}  # key -> (micros, expire_at)
        self._tat: dict[str, float] = {}
        self._slots: dict[str, dict[str, float]] = {}
        self._purged_at = 0.0

    async def admit(
        self,
        now: float,
        spend: tuple[SpendCheck, ...],
        rates: tuple[RateCheck, ...],
        slots: tuple[SlotCheck, ...],
        token: str,
    ) -> Admitted | Refused:
        return self.admit_now(now, spend, rates, slots, token)

    def admit_now(
        self,
        now: float,
        spend: tuple[SpendCheck, ...],
        rates: tuple[RateCheck, ...],
        slots: tuple[SlotCheck, ...],
        token: str,
    ) -> Admitted | Refused:
        if now - self._purged_at >= PURGE_EVERY_S:
            self._purge(now)
        spent = []
        for index, check in enumerate(spend):
            used = self._spend.get(check.key, (0, 0))[0]
            if used >= check.limit_micros:
                return Refused("spend", index)
            spent.append(used)
        new_tats = []
        for index, rate in enumerate(rates):
            passes, new_tat, wait = gcra(self._tat.get(rate.key), now, rate)
            if not passes:
                return Refused("rate", index, wait)
            new_tats.append(new_tat)
        for index, slot in enumerate(slots):
            open_slots = self._slots.get(slot.key, {})
            live = sum(1 for started in open_slots.values() if started > now - STALE_SLOT_S)
            if live >= slot.limit:
                return Refused("slot", index)
        for rate, new_tat in zip(rates, new_tats, strict=True):
            if rate.cost:
                self._tat[rate.key] = new_tat
        for slot in slots:
            self._slots.setdefault(slot.key, {})[token] = now
        return Admitted(spent)

    def record(self, now: float, charge: Charge) -> None:
        if charge.micros > 0:
            for check in charge.spend:
                used = self._spend.get(check.key, (0, 0))[0]
                self._spend[check.key] = (used + charge.micros, check.expire_at)
        if charge.tokens > 0:
            for rate in charge.token_rates:
                tat = self._tat.get(rate.key)
                base = now if tat is None or tat < now else tat
                self._tat[rate.key] = base + charge.tokens * rate.interval_s
        for slot in charge.slots:
            open_slots = self._slots.get(slot.key)
            if open_slots is not None:
                open_slots.pop(charge.token, None)
                if not open_slots:
                    del self._slots[slot.key]

    async def read_spend(self, keys: tuple[str, ...]) -> list[int]:
        return [self._spend.get(key, (0, 0))[0] for key in keys]

    async def set_spend(self, key: str, micros: int, expire_at: int) -> None:
        self._spend[key] = (micros, expire_at)

    def _purge(self, now: float) -> None:
        self._purged_at = now
        self._spend = {key: value for key, value in self._spend.items() if value[1] > now}
        self._tat = {key: tat for key, tat in self._tat.items() if tat > now}
        for key in [
            key for key, slots in self._slots.items() if all(s <= now - STALE_SLOT_S for s in slots.values())
        ]:
            del self._slots[key]
