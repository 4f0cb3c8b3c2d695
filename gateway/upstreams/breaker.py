"""A circuit breaker per upstream: open after N failures in a window, half-open probes, close on success.

States (the value of ``gateway_breaker_state``): ``0`` closed (traffic flows), ``1`` half-open
(``half_open_probes`` requests at a time may try the upstream; the first success closes it, a
failure opens it again), ``2`` open (the upstream is skipped until ``open_s`` has passed).

The clock is injected (wall-clock seconds, so replicas sharing Redis agree on ``open_until``). This
module keeps the state in memory; :mod:`.breaker_redis` shares it, half-open probe slots included,
between replicas (the hooks at the end of :class:`BreakerBoard`).
"""

from __future__ import annotations

import enum
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from gateway.upstreams.config import BreakerOptions


class BreakerState(enum.IntEnum):
    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


@dataclass(slots=True)
class _Circuit:
    failures: deque[float] = field(default_factory=deque)
    open_until: float | None = None  # set while open or half-open
    probes: int = 0  # half-open requests in flight
    tokens: list[str] = field(default_factory=list)  # the shared slots they hold (a Redis board)

    def free_probes(self) -> None:
        self.probes = 0
        self.tokens.clear()


class BreakerBoard:
    """The breakers of every upstream, in memory (one replica)."""

    def __init__(
        self,
        names: Iterable[str],
        options: BreakerOptions,
        *,
        clock: Callable[[], float] = time.time,
        on_change: Callable[[str, BreakerState], None] | None = None,
    ) -> None:
        self.options = options
        self.clock = clock
        self._circuits = {name: _Circuit() for name in names}
        self._on_change = on_change

    def _notify(self, name: str) -> None:
        if self._on_change is not None:
            self._on_change(name, self.state(name))

    def state(self, name: str) -> BreakerState:
        circuit = self._circuits[name]
        if circuit.open_until is None:
            return BreakerState.CLOSED
        return BreakerState.OPEN if self.clock() < circuit.open_until else BreakerState.HALF_OPEN

    def probes(self, name: str) -> int:
        """Half-open probes this replica has in flight."""
        return self._circuits[name].probes

    def available(self, name: str) -> bool:
        """Whether a request may be sent now (without taking a half-open probe slot)."""
        state = self.state(name)
        if state is BreakerState.HALF_OPEN:
            return self._circuits[name].probes < self.options.half_open_probes
        return state is BreakerState.CLOSED

    async def acquire(self, name: str) -> bool:
        """Take the right to send one request: always when closed, a probe slot when half-open
        (a shared board asks Redis only then: while closed, the common case, it costs nothing)."""
        state = self.state(name)
        if state is BreakerState.CLOSED:
            return True
        circuit = self._circuits[name]
        if state is not BreakerState.HALF_OPEN or circuit.probes >= self.options.half_open_probes:
            return False
        circuit.probes += 1  # held locally while a shared board asks the other replicas
        period = circuit.open_until
        taken = await self._take_probe(name)
        if circuit.open_until != period:  # opened or closed meanwhile: that reset the slots
            return self.state(name) is BreakerState.CLOSED
        if taken == "refused":
            circuit.probes -= 1
            return False
        if taken == "closed":  # another replica's probe closed it: traffic flows again
            self._adopt(name, None)
            return True
        if circuit.probes == 1:  # the first probe of this half-open period: say so
            self._notify(name)
        return True

    def retry_after(self, names: Iterable[str]) -> float:
        """Seconds until the first of ``names`` half-opens (0 if one is not open)."""
        now = self.clock()
        waits = [
            max(0.0, until - now) for name in names if (until := self._circuits[name].open_until) is not None
        ]
        return min(waits) if waits else 0.0

    async def success(self, name: str) -> None:
        circuit = self._circuits[name]
        if circuit.open_until is not None and self.state(name) is not BreakerState.OPEN:
            self._close(circuit)
            await self._shared_close(name)
            self._notify(name)
        elif circuit.probes:
            circuit.probes -= 1
            self._give_back(name)

    async def failure(self, name: str) -> None:
        circuit = self._circuits[name]
        now = self.clock()
        state = self.state(name)
        if state is BreakerState.HALF_OPEN:
            self._open(circuit, now)
            await self._shared_open(name, circuit.open_until or now)
            self._notify(name)
            return
        if state is BreakerState.OPEN:  # opened again by another replica meanwhile
            return
        failures = await self._count_failure(name, circuit, now)
        if failures >= self.options.failures:
            self._open(circuit, now)
            await self._shared_open(name, circuit.open_until or now)
            self._notify(name)

    def release(self, name: str) -> None:
        """A probe slot given back without an outcome (the request ended otherwise)."""
        circuit = self._circuits[name]
        if circuit.probes:
            circuit.probes -= 1
            self._give_back(name)

    def _open(self, circuit: _Circuit, now: float) -> None:
        circuit.open_until = now + self.options.open_s
        circuit.failures.clear()
        circuit.free_probes()

    @staticmethod
    def _close(circuit: _Circuit) -> None:
        circuit.open_until = None
        circuit.failures.clear()
        circuit.free_probes()

    # -- what a shared board overrides --------------------------------------------------------
    async def _count_failure(self, name: str, circuit: _Circuit, now: float) -> int:
        """Record one failure at ``now``; how many fell within the window."""
        failures = circuit.failures
        failures.append(now)
        horizon = now - self.options.window_s
        while failures and failures[0] <= horizon:
            failures.popleft()
        return len(failures)

    async def _shared_open(self, name: str, until: float) -> None:
        return None

    async def _take_probe(self, name: str) -> Literal["taken", "refused", "closed"]:
        """Take one of the fleet's half-open probe slots (this replica's own count allowed it)."""
        return "taken"

    def _give_back(self, name: str) -> None:
        """A probe slot this replica held is free again (without an outcome for the breaker)."""
        return None

    async def _shared_close(self, name: str) -> None:
        return None

    async def sync(self) -> None:
        """Bring the local view up to date with the other replicas' (a shared board)."""
        return None

    def _adopt(self, name: str, open_until: float | None) -> None:
        """Take another replica's view of one circuit."""
        circuit = self._circuits[name]
        if circuit.open_until == open_until:
            return
        before = self.state(name)
        if open_until is None:
            self._close(circuit)
        else:  # a new open period: its half-open slots start free
            circuit.open_until = open_until
            circuit.failures.clear()
            circuit.free_probes()
        if self.state(name) is not before:
            self._notify(name)

    async def close(self) -> None:
        return None
