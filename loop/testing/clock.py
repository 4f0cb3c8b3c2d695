"""``VirtualClock``: deterministic time for agent tests (implements ``loop.deps.Clock``).

Time moves only when told (``advance``) or, with ``autojump`` (the default), when something
sleeps on the clock and the program is otherwise idle: once the event loop has gone
``settle_rounds`` scheduling passes with a sleeper pending, the clock jumps to the earliest
deadline (a sleep's or a timeout's) and wakes what was due. So a fake tool that "takes" 30 s
(``await context.clock.sleep(30)``) finishes at once in real time, two such tools running side by
side both finish at t=30, and a 10 s timeout around a 30 s sleep fires at t=10.

A timeout alone never makes time pass: code waiting on real I/O (a thread, a socket) under a
virtual timeout is not cut short. Autojump assumes the sleeping code makes progress without
outside I/O (fake model, fake tools); otherwise drive the clock with ``advance``.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from types import TracebackType


class _Timer:
    __slots__ = ("action", "cancelled", "deadline", "sleeper")

    def __init__(self, deadline: float, action: Callable[[], object], sleeper: bool) -> None:
        self.deadline = deadline
        self.action = action
        self.sleeper = sleeper
        self.cancelled = False


class VirtualTimeout:
    """``async with clock.timeout(s)``: ``TimeoutError`` when the block outlives ``s`` virtual
    seconds (the enclosing task is cancelled at the deadline, as ``asyncio.timeout`` does)."""

    def __init__(self, clock: VirtualClock, seconds: float) -> None:
        self._clock = clock
        self._seconds = seconds
        self._task: asyncio.Task[object] | None = None
        self._timer: _Timer | None = None
        self._cancelling = 0
        self.expired = False

    async def __aenter__(self) -> VirtualTimeout:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("VirtualClock.timeout() must be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._timer = self._clock.call_at(self._clock.now() + self._seconds, self._expire)
        return self

    def _expire(self) -> None:
        if self._task is not None and not self._task.done():
            self.expired = True
            self._task.cancel()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._timer is not None:
            self._timer.cancelled = True
        if (
            self.expired
            and self._task is not None
            and self._task.uncancel() <= self._cancelling
            and exc_type is asyncio.CancelledError
        ):
            raise TimeoutError(f"timed out after {self._seconds:g} virtual seconds") from exc


class VirtualClock:
    def __init__(self, start: float = 0.0, *, autojump: bool = True, settle_rounds: int = 50) -> None:
        self._now = start
        self._timers: list[tuple[float, int, _Timer]] = []
        self._order = itertools.count()
        self._driver: asyncio.Task[None] | None = None
        self.autojump = autojump
        self.settle_rounds = settle_rounds

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not future.done():
                future.set_result(None)

        timer = self.call_at(self._now + seconds, wake, sleeper=True)
        try:
            await future
        finally:
            timer.cancelled = True

    def timeout(self, seconds: float) -> VirtualTimeout:
        return VirtualTimeout(self, seconds)

    def call_at(self, deadline: float, action: Callable[[], object], *, sleeper: bool = False) -> _Timer:
        """Run ``action`` when the clock reaches ``deadline``; cancel with ``timer.cancelled = True``.

        Only ``sleeper`` timers make an autojumping clock move.
        """
        timer = _Timer(deadline, action, sleeper)
        heapq.heappush(self._timers, (deadline, next(self._order), timer))
        if sleeper:
            self._ensure_driver()
        return timer

    def advance(self, seconds: float) -> None:
        """Move time forward, firing due timers in deadline order (ties in scheduling order)."""
        if seconds < 0:
            raise ValueError("time only moves forward")
        target = self._now + seconds
        while self._timers and self._timers[0][0] <= target:
            deadline, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now = max(self._now, deadline)
            timer.action()
        self._now = target

    def pending_timers(self) -> int:
        return sum(1 for _, _, timer in self._timers if not timer.cancelled)

    def _next_deadline(self) -> float | None:
        """The earliest live deadline, provided something sleeps (else ``None``: time stays)."""
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        if not any(timer.sleeper and not timer.cancelled for _, _, timer in self._timers):
            return None
        return self._timers[0][0]

    def _ensure_driver(self) -> None:
        if not self.autojump or (self._driver is not None and not self._driver.done()):
            return
        self._driver = asyncio.get_running_loop().create_task(self._jump_when_idle(), name="virtual-clock")

    async def _jump_when_idle(self) -> None:
        while True:
            for _ in range(self.settle_rounds):
                await asyncio.sleep(0)
            deadline = self._next_deadline()
            if deadline is None:
                return
            self.advance(max(deadline - self._now, 0.0))
