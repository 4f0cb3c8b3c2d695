"""An asyncio event loop on virtual time, for tests whose outcome hangs on sub-second timers.

The fault matrix runs the SDK client, the gateway and the emulator in one process on one loop,
with 0.05-0.3 s watchdogs. On wall-clock time any pause of the process longer than a threshold
trips it: a garbage collection of the full suite's heap (about 1.4 million objects; gen-2 pauses
of 0.3-4 s were measured in ``make test`` runs) or a loaded 2-core machine. A first-byte timeout
that fires while the emulator's one-shot fault is being answered makes the gateway retry, and the
retry succeeds: a 200 where the test expects the fault's 401 or its fallback.

``VirtualTimeLoop`` keeps ``loop.time()`` still while anything can run and jumps it to the next
timer only when the whole process waits on time (the way trio's autojump clock works):

* no callback is ready, and no socket became readable or writable within ``IDLE_S`` (real
  seconds);
* no job is running in the loop's executor (token fetches, credential resolution...) and no
  ``sock_connect`` is under way (a loopback handshake the kernel has not finished);
* no TCP socket the loop watches has bytes sent but not yet taken by its peer (``TIOCOUTQ``: a
  write over loopback that the kernel has not delivered yet).

So a watchdog fires exactly when every party is waiting (an emulator stalling on purpose), never
because the process was paused, and a one-second stall costs a few milliseconds. Code whose
timers should follow this loop reads ``loop.time`` (the gateway takes it as its ``clock``).
It suits loopback peers only: a connect to an address that never answers would keep the clock
still, and with it the connect timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import selectors
import socket
import struct
import termios
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

T = TypeVar("T")

IDLE_S: Final = 0.005
"""Real seconds with no I/O before the loop counts as waiting on time."""

_OUTQ: Final = struct.Struct("i")


def unsent_bytes(fd: int) -> int:
    """Bytes written to socket ``fd`` that its peer has not received yet (0 if not a TCP socket)."""
    try:
        return int(_OUTQ.unpack(fcntl.ioctl(fd, termios.TIOCOUTQ, b"\0" * _OUTQ.size))[0])
    except OSError:
        return 0


class _JumpingSelector(selectors.DefaultSelector):
    """The loop's selector: a wait for the next timer becomes a jump once the process is idle."""

    def __init__(self, idle: Callable[[], bool], jump: Callable[[float], None]) -> None:
        super().__init__()
        self._idle = idle
        self._jump = jump

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None or timeout <= 0:  # nothing scheduled, or callbacks ready
            events: list[tuple[selectors.SelectorKey, int]] = super().select(timeout)
            return events
        # checked before the wait: anything in flight now is readable by the end of it
        idle = self._idle() and not any(unsent_bytes(key.fd) for key in self.get_map().values())
        events = super().select(IDLE_S)
        if not events and idle:
            self._jump(timeout)
        return events


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose ``time()`` only moves when every task waits on a timer."""

    def __init__(self, start: float | None = None) -> None:
        self._now = time.monotonic() if start is None else start  # ``start``: for the loop's own tests
        self._jobs = 0  # executor jobs and connects under way
        self.jumped_s = 0.0  # virtual seconds skipped so far
        super().__init__(_JumpingSelector(self._no_jobs, self._advance))

    def time(self) -> float:
        return self._now

    def _no_jobs(self) -> bool:
        return self._jobs == 0

    def _advance(self, seconds: float) -> None:
        target = self._now + seconds
        # land on the due timer's own deadline: now + (when - now) can round to just short of it
        scheduled = cast("list[asyncio.TimerHandle]", self.__dict__.get("_scheduled", []))
        if scheduled and 0.0 < scheduled[0].when() - target < 1e-6:
            target = scheduled[0].when()
        self.jumped_s += target - self._now
        self._now = target

    def _job_finished(self) -> None:
        self._jobs -= 1

    def run_in_executor(  # type: ignore[override]
        self, executor: concurrent.futures.Executor | None, func: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        """As usual; time stands still until the job returns (even if its caller gave up)."""

        def job() -> T:
            try:
                return func(*args)
            finally:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    self.call_soon_threadsafe(self._job_finished)

        self._jobs += 1
        try:
            return super().run_in_executor(executor, job)
        except BaseException:
            self._jobs -= 1
            raise

    async def sock_connect(self, sock: socket.socket, address: Any) -> None:
        """As usual; time stands still until the handshake is done (or failed)."""
        self._jobs += 1
        try:
            await super().sock_connect(sock, address)
        finally:
            self._jobs -= 1
