"""The stream guard shared by the gateway's relay and the loop's in-process caller.

Only the decisions live here (reading under the watchdog, hold-back, recovery); what is done with
the result (writing bytes, yielding events) stays with the callers.

Details: docs/internals/gateway-streaming.md
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

import aiohttp

from gateway.echoed_secrets import redact
from gateway.errors import status_for_error_type
from gateway.providers.base import UpstreamResponse
from gateway.streaming.failure import StreamFailure as StreamFailure  # (re-exported)
from gateway.streaming.watchdog import IdleAction, IdleWatchdog

UPSTREAM_BROKEN = (aiohttp.ClientError, OSError, asyncio.IncompleteReadError)
READ_AHEAD_BYTES: Final = 64 * 1024
"""Upstream bytes read ahead of the consumer: a burst of small events (most of a stream when the
upstream is fast) is taken in one go, a slow client still pushes back on the upstream."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StreamSettings:
    idle_warning_s: float
    idle_timeout_s: float
    ping_every_s: float
    nonstreaming_fallback: bool
    write_stall_s: float | None = None  # a write waiting this long for the client ends it (None: never)


class HandedBack(Exception):
    """A stream failed before anything reached the client, one its caller asked to get back (see
    ``HandBack``) instead of the fallback or an error: several upstreams try the next one."""

    def __init__(self, failure: StreamFailure) -> None:
        super().__init__(failure.reason)
        self.failure = failure


@dataclass(frozen=True, slots=True)
class HandBack:
    """Several upstreams: which failures before content the relay hands back (``wanted``), and
    what is done when the stream commits instead (``on_commit``: its first bytes are about to go
    to the client; from then on the request stays on this upstream)."""

    wanted: Callable[[StreamFailure], bool]
    on_commit: Callable[[], Awaitable[None]]


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


TRANSIENT_STREAM_ERRORS: Final = frozenset({"overloaded_error", "api_error"})
"""``error`` event types worth one non-streaming retry when they come before any content."""


def error_before_content(error_type: str, message: str) -> StreamFailure:
    """The upstream sent an ``error`` event before any content event (right after ``message_start``,
    say). Held back, nothing of the stream has reached the client, so it gets the answer a
    non-streaming request would have had: Anthropic sends this event "where a non-streaming request
    would get a 529" (streaming docs, "Error events"). A transient type (``overloaded_error``,
    ``api_error``) is a failure like a stream cut before content (one non-streaming retry when
    that is on); any other is the plain HTTP error of its type, the upstream's message kept.
    A 200 carrying only an ``error`` event is not retried by the SDKs; a 529 is."""
    transient = error_type in TRANSIENT_STREAM_ERRORS
    message = redact(message)  # an echoed credential goes neither to the client nor to the log
    reason = f"upstream sent {error_type} before any content: {message}" if transient else message
    return StreamFailure(reason, error_type, status_for_error_type(error_type), fallback=transient)


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


MAX_HELD_BYTES: Final = 1 << 20
"""What may be held back before the first content event (a ``message_start`` and pings are a few
hundred bytes): more is an upstream that is not streaming a Message, and a failure."""


def held_too_long(limit: int) -> StreamFailure:
    return StreamFailure(f"upstream sent over {limit} bytes before any content")


@dataclass(slots=True)
class HoldBack(Generic[T]):
    """Holds items back until the first content item (or the stream's end) releases them, within
    ``limit`` bytes (``StreamFailure`` past it: one upstream cannot fill the gateway's memory)."""

    content_forwarded: bool = False
    limit: int = MAX_HELD_BYTES
    _held: list[T] = field(default_factory=list)
    _size: int = 0

    def offer(self, item: T, *, content: bool, final: bool, size: int = 0) -> list[T]:
        """The items to forward now (empty while held back); ``size``: the item's bytes."""
        if self.content_forwarded:
            return [item]
        self._held.append(item)
        if not content and not final:
            self._size += size
            if self._size > self.limit:
                self.drop()
                raise held_too_long(self.limit)
            return []
        self.content_forwarded = content
        released, self._held = self._held, []
        return released

    def drop(self) -> None:
        self._held.clear()
        self._size = 0


class GuardedReader:
    """Reads one upstream stream under the idle watchdog (see the module docstring).

    One task per stream reads the upstream's chunks into a short queue (``READ_AHEAD_BYTES``, so
    a slow client still pushes back on the upstream) and wakes the consumer; the watchdog's next
    deadline is one timer, armed only when the consumer waits and none is armed (``read``). A
    chunk therefore costs one future and one task switch, not a task and an ``asyncio.wait``.
    """

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
        self._queue: collections.deque[bytes] = collections.deque()
        self._queued = 0  # bytes in the queue
        self._end: BaseException | None = None  # StopAsyncIteration, or what ended the read
        self._waiter: asyncio.Future[bytes | None] | None = None  # the consumer, waiting for news
        self._room: asyncio.Future[None] | None = None  # the reader task, waiting for room
        self._timer: asyncio.TimerHandle | None = None

    def data_received(self, now: float) -> None:
        watchdog = self._watchdog
        watchdog.last_data = now
        if watchdog.warned:  # the warning is re-armed: its deadline may come before the armed timer's
            watchdog.warned = False
            self._disarm()

    def wrote(self, now: float) -> None:
        self._watchdog.last_write = now

    def progress(self, now: float, data: bool) -> None:
        """A chunk was passed on at ``now`` (``data``: it completed a data event): ``wrote`` and,
        with ``data``, ``data_received`` in one call (the relay's per-chunk bookkeeping)."""
        watchdog = self._watchdog
        watchdog.last_write = now
        if data:
            watchdog.last_data = now
            if watchdog.warned:
                watchdog.warned = False
                self._disarm()

    async def read(self) -> AsyncGenerator[bytes | Idle, None]:
        """Chunks and due idle actions until the upstream ends; raises ``StreamFailure`` (after
        yielding the ``Idle`` abort, for a stall) or ``DeadlinePassed``. Use with ``aclosing``.

        The watchdog's timer is armed only when none is: the deadlines only move later as data
        arrives and writes happen (a re-armed warning, the exception, disarms it), so an armed
        timer is never late, and a chunk costs no clock read or deadline sum here.
        """
        watchdog, clock, deadline, queue = self._watchdog, self._clock, self._deadline, self._queue
        upstream = self._upstream
        loop = asyncio.get_running_loop()
        reader: asyncio.Task[None] | None = None
        try:
            # what the upstream has already sent is taken without a reader task (all of a fast
            # upstream's stream often is); the task starts at the first chunk to wait for
            while True:
                if deadline is not None and deadline.done():
                    raise DeadlinePassed
                try:
                    chunk = upstream.read_ready()
                except UPSTREAM_BROKEN as exc:
                    raise read_failure(exc) from None
                if chunk is None:
                    break
                yield chunk
            if upstream.ended():
                return
            reader = loop.create_task(self._read_upstream(loop))
            if deadline is not None:
                deadline.add_done_callback(self._wake)
            while True:
                if deadline is not None and deadline.done():
                    raise DeadlinePassed
                if queue:
                    chunk = queue.popleft()
                    self._queued -= len(chunk)
                    room = self._room
                    if room is not None:
                        self._room = None
                        if not room.done():
                            room.set_result(None)
                    yield chunk
                    continue
                end = self._end
                if end is not None:
                    if isinstance(end, StopAsyncIteration):
                        return
                    if isinstance(end, UPSTREAM_BROKEN):
                        raise read_failure(end) from None
                    raise end
                if self._timer is None:
                    now = clock()
                    delay = watchdog.next_deadline() - now
                    if delay <= 0:
                        actions = watchdog.due(now)
                        for action in actions:
                            silent = now - watchdog.last_data
                            yield Idle(action, silent, now)
                            if action is IdleAction.ABORT:
                                raise stalled(silent)
                        if actions:
                            continue
                    self._timer = loop.call_at(loop.time() + max(delay, 0.0), self._timer_fired)
                waiter = self._waiter = loop.create_future()
                try:
                    handed = await waiter
                finally:
                    self._waiter = None
                if handed is not None:  # a chunk handed over by the reader task, the queue bypassed
                    if deadline is not None and deadline.done():
                        raise DeadlinePassed
                    yield handed
        finally:
            self._disarm()
            if reader is not None:
                if deadline is not None:
                    deadline.remove_done_callback(self._wake)
                if not reader.done():
                    reader.cancel()
                with contextlib.suppress(BaseException):
                    await reader

    async def _read_upstream(self, loop: asyncio.AbstractEventLoop) -> None:
        """The reader task: upstream chunks into the queue, then how the read ended."""
        chunks = self._upstream.iter_chunks()
        queue = self._queue
        try:
            async for chunk in chunks:
                waiter = self._waiter
                if waiter is not None and not waiter.done():
                    if not queue:  # the consumer waits for this very chunk: handed over directly
                        waiter.set_result(chunk)
                        continue
                    waiter.set_result(None)
                queue.append(chunk)
                queued = self._queued = self._queued + len(chunk)
                if queued >= READ_AHEAD_BYTES:
                    room = self._room = loop.create_future()
                    await room
            self._end = StopAsyncIteration()
        except Exception as exc:  # handed to the consumer, after the chunks read before it
            self._end = exc
        finally:
            if self._end is None:  # cancelled: the consumer is gone
                self._end = StopAsyncIteration()
            self._wake()
            close = getattr(chunks, "aclose", None)  # an async generator's (aiohttp's iterator has none)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()

    def _disarm(self) -> None:
        timer = self._timer
        if timer is not None:
            timer.cancel()
            self._timer = None

    def _timer_fired(self) -> None:
        self._timer = None
        self._wake()

    def _wake(self, _: object = None) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
