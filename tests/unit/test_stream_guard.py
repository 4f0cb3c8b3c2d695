"""The shared stream guard's pieces on their own: failure classification of a broken read
(including ``IncompleteReadError``, which once only the relay handled), the idle watchdog's
warning then abort, the drain deadline, the hold-back and the recovery decision."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from gateway.providers.base import UpstreamResponse
from gateway.streaming.guard import (
    READ_AHEAD_BYTES,
    DeadlinePassed,
    GuardedReader,
    HoldBack,
    Idle,
    Recovery,
    StreamFailure,
    StreamSettings,
    recovery,
)
from gateway.streaming.watchdog import IdleAction
from tests.support.virtual_time import VirtualTimeLoop

FAST = StreamSettings(
    idle_warning_s=0.02, idle_timeout_s=0.05, ping_every_s=float("inf"), nonstreaming_fallback=True
)
CALM = StreamSettings(  # no watchdog action within a test's run
    idle_warning_s=60.0, idle_timeout_s=120.0, ping_every_s=float("inf"), nonstreaming_fallback=True
)


@dataclass(slots=True)
class Scripted(UpstreamResponse):
    """An upstream whose body yields ``chunks`` then raises ``error`` (or hangs when ``hang``)."""

    chunks: list[bytes]
    error: BaseException | None = None
    hang: bool = False
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    is_event_stream: bool = True
    closed_iterator: bool = False

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        try:
            for chunk in self.chunks:
                yield chunk
            if self.hang:
                await asyncio.Event().wait()
            if self.error is not None:
                raise self.error
        finally:
            self.closed_iterator = True

    async def read(self) -> bytes:
        return b"".join(self.chunks)

    def close(self) -> None:
        return None


async def _drain(reader: GuardedReader) -> list[bytes | Idle]:
    items: list[bytes | Idle] = []
    async with contextlib.aclosing(reader.read()) as stream:
        async for item in stream:
            items.append(item)
            if isinstance(item, bytes):
                reader.data_received(asyncio.get_running_loop().time())
    return items


@pytest.mark.parametrize(
    ("error", "reason", "error_type", "status"),
    [
        (
            asyncio.IncompleteReadError(b"ab", 10),
            "upstream connection lost (IncompleteReadError)",
            "api_error",
            502,
        ),
        (ConnectionResetError(), "upstream connection lost (ConnectionResetError)", "api_error", 502),
        (TimeoutError(), "upstream read timed out", "timeout_error", 504),
    ],
)
async def test_broken_reads_are_classified(
    error: BaseException, reason: str, error_type: str, status: int
) -> None:
    upstream = Scripted([b"event: ping\n\n"], error=error)
    with pytest.raises(StreamFailure) as info:
        await _drain(GuardedReader(upstream, FAST))
    assert (info.value.reason, info.value.error_type, info.value.status) == (reason, error_type, status)
    assert info.value.event_error_type == "api_error"


def test_stall_warns_then_aborts_and_closes_the_body() -> None:
    """On virtual time (``tests.support.virtual_time``): on the wall clock a pause of the test
    process longer than the 0.03 s between warning and abort made the reader wake past both and
    report the abort alone."""
    upstream = Scripted([b"x"], hang=True)
    items: list[bytes | Idle] = []

    async def read() -> StreamFailure:
        reader = GuardedReader(upstream, FAST, clock=asyncio.get_running_loop().time)
        with pytest.raises(StreamFailure) as info:
            async with contextlib.aclosing(reader.read()) as stream:
                async for item in stream:
                    items.append(item)
        return info.value

    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        failure = runner.run(read())
    assert [i if isinstance(i, bytes) else (i.action, round(i.silent_s, 6)) for i in items] == [
        b"x",
        (IdleAction.WARN, 0.02),
        (IdleAction.ABORT, 0.05),
    ]
    assert failure.reason.startswith("upstream stream stalled") and failure.status == 504
    assert upstream.closed_iterator


async def test_deadline_ends_the_read() -> None:
    deadline: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    upstream = Scripted([], hang=True)
    settings = StreamSettings(30.0, 60.0, float("inf"), True)
    reader = GuardedReader(upstream, settings, deadline=deadline)
    asyncio.get_running_loop().call_later(0.01, deadline.set_result, None)
    with pytest.raises(DeadlinePassed):
        await _drain(reader)
    assert upstream.closed_iterator


@dataclass(slots=True)
class Counting(UpstreamResponse):
    """An upstream with ``total`` chunks ready at once, counting the chunks read from it; it
    pauses ``pause`` seconds before the last one."""

    total: int
    pause: float = 0.0
    size: int = 0  # chunk size (padded with "."), else the chunk is just its index
    pulled: int = 0
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    is_event_stream: bool = True

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        for index in range(self.total):
            if index == self.total - 1 and self.pause:
                await asyncio.sleep(self.pause)
            self.pulled += 1
            yield (b"%d" % index).ljust(self.size, b".")

    async def read(self) -> bytes:
        return b""

    def close(self) -> None:
        return None


async def test_a_slow_consumer_holds_the_upstream_back() -> None:
    size = READ_AHEAD_BYTES // 4
    upstream = Counting(20, size=size)
    reader = GuardedReader(upstream, CALM)
    async with contextlib.aclosing(reader.read()) as stream:
        assert (await anext(stream)).startswith(b"0.")
        await asyncio.sleep(0.01)  # the consumer is busy: the reader task reads ahead, then stops
        assert upstream.pulled == 1 + READ_AHEAD_BYTES // size  # the bytes bound, not the chunks
        rest = [item async for item in stream]
    assert rest == [(b"%d" % i).ljust(size, b".") for i in range(1, 20)] and upstream.pulled == 20


async def test_a_burst_of_small_chunks_is_read_ahead_in_one_go() -> None:
    """A fast upstream's small events (most of a stream) are all queued while the consumer is
    busy: the consumer then takes them without a task switch per chunk."""
    upstream = Counting(50)
    reader = GuardedReader(upstream, CALM)
    async with contextlib.aclosing(reader.read()) as stream:
        assert await anext(stream) == b"0"
        await asyncio.sleep(0.01)
        assert upstream.pulled == 50
        rest = [item async for item in stream]
    assert rest == [b"%d" % i for i in range(1, 50)]


async def test_pings_while_a_slow_read_stays_pending() -> None:
    """Idle wake-ups do not disturb the read in flight: the chunk that follows them arrives."""
    upstream = Counting(2, pause=0.05)
    settings = StreamSettings(
        idle_warning_s=1.0, idle_timeout_s=2.0, ping_every_s=0.01, nonstreaming_fallback=True
    )
    reader = GuardedReader(upstream, settings)
    items: list[bytes | IdleAction] = []
    async with contextlib.aclosing(reader.read()) as stream:
        async for item in stream:
            if isinstance(item, Idle):
                reader.wrote(item.at)
                items.append(item.action)
            else:
                items.append(item)
    assert items[0] == b"0" and items[-1] == b"1"
    assert set(items[1:-1]) == {IdleAction.PING} and 1 <= len(items[1:-1]) <= 6


def test_hold_back_until_content_or_end() -> None:
    held: HoldBack[str] = HoldBack()
    assert held.offer("message_start", content=False, final=False) == []
    assert held.offer("ping", content=False, final=False) == []
    assert held.offer("delta", content=True, final=False) == ["message_start", "ping", "delta"]
    assert held.content_forwarded and held.offer("more", content=False, final=False) == ["more"]
    ended: HoldBack[str] = HoldBack()
    ended.offer("message_start", content=False, final=False)
    assert ended.offer("message_stop", content=False, final=True) == ["message_start", "message_stop"]
    assert not ended.content_forwarded


@pytest.mark.parametrize(
    ("content", "finished", "enabled", "decision"),
    [
        (False, False, True, Recovery.FALLBACK),
        (False, False, False, Recovery.FAIL),
        (True, False, True, Recovery.ERROR_EVENT),
        (False, True, True, Recovery.ERROR_EVENT),
    ],
)
def test_recovery(content: bool, finished: bool, enabled: bool, decision: Recovery) -> None:
    assert recovery(content_forwarded=content, finished=finished, fallback_enabled=enabled) is decision
