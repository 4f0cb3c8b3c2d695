"""The stream guard's task-free start: what the upstream has already delivered is taken with
``UpstreamResponse.read_ready`` (no reader task), then the reader task takes over for the chunks
still to come. Scripted upstreams pin the hand-over; a real aiohttp response over loopback
(``HttpUpstreamResponse``) pins what aiohttp's buffered reads give."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web

from gateway.providers.base import UpstreamResponse
from gateway.streaming.guard import DeadlinePassed, GuardedReader, Idle, StreamFailure, StreamSettings
from gateway.transport import HttpUpstreamResponse
from gateway.upstream_body import BodyLimits

CALM = StreamSettings(
    idle_warning_s=60.0, idle_timeout_s=120.0, ping_every_s=float("inf"), nonstreaming_fallback=True
)


@dataclass(slots=True)
class Buffered(UpstreamResponse):
    """``ready`` chunks already received, then ``later`` ones read by the reader task;
    ``error`` raised where the buffered chunks end."""

    ready: list[bytes]
    later: list[bytes] = field(default_factory=list)
    error: BaseException | None = None
    iterated: bool = False
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    is_event_stream: bool = True

    def read_ready(self) -> bytes | None:
        if self.ready:
            return self.ready.pop(0)
        if self.error is not None:
            raise self.error
        return None

    def ended(self) -> bool:
        return not self.ready and not self.later

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        self.iterated = True
        for chunk in self.later:
            await asyncio.sleep(0)
            yield chunk
        self.later = []

    async def read(self) -> bytes:
        return b""

    def close(self) -> None:
        return None


async def _drain(reader: GuardedReader) -> list[bytes]:
    items: list[bytes] = []
    async with contextlib.aclosing(reader.read()) as stream:
        async for item in stream:
            assert not isinstance(item, Idle)
            items.append(item)
    return items


async def test_a_stream_already_received_is_read_without_a_reader_task() -> None:
    upstream = Buffered([b"a", b"b"])
    assert await _drain(GuardedReader(upstream, CALM)) == [b"a", b"b"]
    assert not upstream.iterated


async def test_the_reader_task_takes_over_where_the_received_bytes_end() -> None:
    upstream = Buffered([b"a", b"b"], later=[b"c", b"d"])
    assert await _drain(GuardedReader(upstream, CALM)) == [b"a", b"b", b"c", b"d"]
    assert upstream.iterated


async def test_a_broken_body_found_without_waiting_is_a_stream_failure() -> None:
    upstream = Buffered([b"a"], later=[b"never"], error=aiohttp.ClientPayloadError("cut"))
    items: list[bytes] = []
    with pytest.raises(StreamFailure) as info:
        async with contextlib.aclosing(GuardedReader(upstream, CALM).read()) as stream:
            async for item in stream:
                assert isinstance(item, bytes)
                items.append(item)
    assert items == [b"a"] and not upstream.iterated
    assert info.value.reason == "upstream connection lost (ClientPayloadError)"


async def test_a_passed_deadline_stops_the_task_free_read_too() -> None:
    deadline: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    deadline.set_result(None)
    upstream = Buffered([b"a"])
    with pytest.raises(DeadlinePassed):
        await _drain(GuardedReader(upstream, CALM, deadline=deadline))


async def _serve(handler: web.RequestHandler) -> tuple[web.AppRunner, str]:  # type: ignore[type-arg]
    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/"


EVENTS = [b"event: e%d\ndata: {}\n\n" % i for i in range(20)]


@pytest.mark.parametrize("pause", [False, True])
async def test_an_aiohttp_stream_arrives_whole_whether_buffered_or_waited_for(pause: bool) -> None:
    """All of a fast upstream's stream is buffered before the first read (no reader task); a
    paused one is partly buffered, the rest read by the task: the bytes are the same."""
    go_on = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"".join(EVENTS[:10]))
        if pause:
            await go_on.wait()
        await response.write(b"".join(EVENTS[10:]))
        await response.write_eof()
        return response

    runner, url = await _serve(handler)
    try:
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            if not pause:
                await response.content.wait_eof()  # everything received before the first read
            upstream = HttpUpstreamResponse(response, BodyLimits())
            reader = GuardedReader(upstream, CALM)
            got: list[bytes] = []
            async with contextlib.aclosing(reader.read()) as stream:
                async for item in stream:
                    assert isinstance(item, bytes)
                    got.append(item)
                    if b"".join(got) == b"".join(EVENTS[:10]):
                        go_on.set()
            assert b"".join(got) == b"".join(EVENTS) and upstream.ended()
    finally:
        await runner.cleanup()


async def test_an_aiohttp_stream_cut_after_buffered_bytes_is_a_stream_failure() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"".join(EVENTS[:3]))
        assert request.transport is not None
        request.transport.abort()  # chunked body never terminated
        return response

    runner, url = await _serve(handler)
    try:
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            with contextlib.suppress(aiohttp.ClientPayloadError):
                await response.content.wait_eof()
            reader = GuardedReader(HttpUpstreamResponse(response, BodyLimits()), CALM)
            with pytest.raises(StreamFailure) as info:
                await _drain(reader)
        assert info.value.reason.startswith("upstream connection lost")
    finally:
        await runner.cleanup()


@dataclass(slots=True)
class Bursts(UpstreamResponse):
    """``bursts`` of chunks, each burst yielded back to back, a pause between bursts: the first
    chunk of a burst is handed to the waiting consumer, the rest are queued behind it."""

    bursts: list[list[bytes]]
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    is_event_stream: bool = True

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        for burst in self.bursts:
            await asyncio.sleep(0.001)
            for chunk in burst:
                yield chunk

    async def read(self) -> bytes:
        return b""

    def close(self) -> None:
        return None


async def test_chunks_handed_over_and_queued_keep_their_order() -> None:
    bursts = [[b"%d.%d" % (i, j) for j in range(i % 4 + 1)] for i in range(12)]
    got = await _drain(GuardedReader(Bursts(bursts), CALM))
    assert got == [chunk for burst in bursts for chunk in burst]
