"""The stream guard shared by the gateway's relay and the loop's in-process caller.

Both read an upstream stream the same way and decide the same things; only what they do with
the result differs (the relay writes bytes to an aiohttp client, the loop yields decoded events),
so those edges stay with the callers:

* ``GuardedReader`` reads the upstream's chunks under the idle watchdog (``streaming.watchdog``):
  it yields each chunk, and an ``Idle`` item when a ping, a warning or an abort is due; the caller
  reports back when a chunk carried a data event (``data_received``) and when it wrote something
  to its client (``wrote``). Every way the read can fail becomes one ``StreamFailure``: the
  connection lost (including ``asyncio.IncompleteReadError``), a read timeout, a stall. An
  optional deadline future (the drain deadline) ends the read with ``DeadlinePassed``.
* ``not_an_event_stream`` and ``ended_early`` are the two failures found around the read.
* ``HoldBack`` keeps the events before the first content event (``message_start``, ``ping``)
  until content arrives, so a stream failing before any content can be replaced transparently.
* ``recovery`` decides what a failure leads to: a non-streaming fallback (nothing was forwarded
  yet and the fallback is enabled), a plain error (nothing forwarded, fallback disabled) or an
  error event (content already reached the client).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import aiohttp

from gateway.providers.base import UpstreamResponse
from gateway.streaming.watchdog import IdleAction, IdleWatchdog

UPSTREAM_BROKEN = (aiohttp.ClientError, OSError, asyncio.IncompleteReadError)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StreamSettings:
    idle_warning_s: float
    idle_timeout_s: float
    ping_every_s: float
    nonstreaming_fallback: bool


class StreamFailure(Exception):
    """The upstream stream broke, stalled or was not a stream; ``reason`` says which."""

    def __init__(self, reason: str, error_type: str = "api_error", status: int = 502) -> None:
        super().__init__(reason)
        self.reason = reason
        self.error_type = error_type
        self.status = status

    @property
    def event_error_type(self) -> str:
        """The type of the SSE ``error`` event that ends a stream cut after content (a timeout
        there is reported as ``api_error``, which every SDK treats as retryable)."""
        return self.error_type if self.error_type != "timeout_error" else "api_error"


class DeadlinePassed(Exception):
    """The deadline future given to ``GuardedReader`` completed while the stream was open."""


def read_failure(exc: BaseException) -> StreamFailure:
    """The failure a broken upstream read means (``exc`` raised by the chunk iterator)."""
    if isinstance(exc, TimeoutError):
        return StreamFailure("upstream read timed out", "timeout_error", 504)
    return StreamFailure(f"upstream connection lost ({type(exc).__name__})")


def not_an_event_stream() -> StreamFailure:
    return StreamFailure("upstream answered 200 with a body that is not an event stream")


def ended_early() -> StreamFailure:
    return StreamFailure("upstream stream ended before message_stop")


def stalled(silent_s: float) -> StreamFailure:
    return StreamFailure(f"upstream stream stalled: no data for {silent_s:.0f}s", "timeout_error", 504)


class Recovery(enum.Enum):
    FALLBACK = "fallback"  # nothing forwarded: retry once without streaming
    FAIL = "fail"  # nothing forwarded, fallback disabled: a plain error
    ERROR_EVENT = "error_event"  # content (or the end) already forwarded: end with an error event


def recovery(*, content_forwarded: bool, finished: bool, fallback_enabled: bool) -> Recovery:
    if content_forwarded or finished:
        return Recovery.ERROR_EVENT
    return Recovery.FALLBACK if fallback_enabled else Recovery.FAIL


@dataclass(frozen=True, slots=True)
class Idle:
    """A watchdog action that is due, with the seconds since the last data event."""

    action: IdleAction
    silent_s: float
    at: float  # the clock reading the action was found due at


@dataclass(slots=True)
class HoldBack(Generic[T]):
    """Holds items back until the first content item (or the stream's end) releases them."""

    content_forwarded: bool = False
    _held: list[T] = field(default_factory=list)

    def offer(self, item: T, *, content: bool, final: bool) -> list[T]:
        """The items to forward now (empty while held back)."""
        if self.content_forwarded:
            return [item]
        self._held.append(item)
        if not content and not final:
            return []
        self.content_forwarded = content
        released, self._held = self._held, []
        return released

    def drop(self) -> None:
        self._held.clear()


class GuardedReader:
    """Reads one upstream stream under the idle watchdog (see the module docstring)."""

    def __init__(
        self,
        upstream: UpstreamResponse,
        settings: StreamSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        deadline: asyncio.Future[Any] | None = None,
    ) -> None:
        self._upstream = upstream
        self._clock = clock
        self._deadline = deadline
        now = clock()
        self._watchdog = IdleWatchdog(
            warn_after=settings.idle_warning_s,
            abort_after=settings.idle_timeout_s,
            ping_every=settings.ping_every_s,
            last_data=now,
            last_write=now,
        )

    def data_received(self, now: float) -> None:
        self._watchdog.data_received(now)

    def wrote(self, now: float) -> None:
        self._watchdog.wrote(now)

    async def read(self) -> AsyncGenerator[bytes | Idle, None]:
        """Chunks and due idle actions until the upstream ends; raises ``StreamFailure`` (after
        yielding the ``Idle`` abort, for a stall) or ``DeadlinePassed``. Use with ``aclosing``."""
        watchdog, clock, deadline = self._watchdog, self._clock, self._deadline
        chunks = self._upstream.iter_chunks().__aiter__()
        pending: asyncio.Future[bytes] | None = None
        try:
            while True:
                if deadline is not None and deadline.done():
                    raise DeadlinePassed
                if pending is None:
                    pending = asyncio.ensure_future(chunks.__anext__())
                timeout = max(watchdog.next_deadline() - clock(), 0.0)
                waiting: set[asyncio.Future[Any]] = {pending} if deadline is None else {pending, deadline}
                done, _ = await asyncio.wait(waiting, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                if pending not in done:
                    if not done:
                        now = clock()
                        for action in watchdog.due(now):
                            silent = now - watchdog.last_data
                            yield Idle(action, silent, now)
                            if action is IdleAction.ABORT:
                                raise stalled(silent)
                    continue
                try:
                    chunk = pending.result()
                except StopAsyncIteration:
                    return
                except UPSTREAM_BROKEN as exc:
                    raise read_failure(exc) from None
                finally:
                    if pending.done():
                        pending = None
                yield chunk
        finally:
            if pending is not None and not pending.done():
                pending.cancel()
                with contextlib.suppress(BaseException):
                    await pending
            with contextlib.suppress(Exception):
                await chunks.aclose()  # type: ignore[attr-defined]
