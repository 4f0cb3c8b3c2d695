"""Injectable time source.

Everything in the emulator that depends on time (prompt-cache TTLs, rate-limit reset stamps,
per-chunk streaming latency) reads it from a :class:`Clock`, so tests can use a
:class:`ManualClock` and move time forward without sleeping.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """A source of wall-clock seconds and a way to wait."""

    def time(self) -> float:
        """Seconds since the Unix epoch."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time."""
        ...


class SystemClock:
    """The real clock: ``time.time()`` and ``asyncio.sleep``."""

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        if seconds > 0:
            await asyncio.sleep(seconds)


DEFAULT_MANUAL_START = 1_798_761_600.0
"""2027-01-01T00:00:00Z: an arbitrary, fixed starting point for :class:`ManualClock`."""


class ManualClock:
    """A clock that only moves when told to.

    ``sleep`` advances the clock by the requested amount and yields to the event loop once, so
    configured streaming latency costs no real time. Thread-safe: tests may advance it from the
    thread that drives a synchronous SDK client while the emulator runs in another.
    """

    def __init__(self, start: float = DEFAULT_MANUAL_START) -> None:
        self._now = start
        self._lock = threading.Lock()

    def time(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move time forward by ``seconds`` (must be >= 0); returns the new time."""
        if seconds < 0:
            raise ValueError("a ManualClock cannot go backwards")
        with self._lock:
            self._now += seconds
            return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)
        await asyncio.sleep(0)
