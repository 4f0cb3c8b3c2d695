"""The upstream connections' protocol (``gateway.upstream_protocol``), against a real aiohttp server
on loopback: no resume call per chunk read while reading is not paused, and flow control intact
(a slow reader pauses the upstream and resumes it, gzip bodies included), bodies byte-identical."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.client_proto import ResponseHandler as AiohttpResponseHandler

from gateway.config import Settings
from gateway.transport import Upstream, open_upstream
from gateway.upstream_protocol import ResponseHandler
from tests.support.local_app import serving

CHUNKS = 60  # a 50-delta stream's events, one HTTP chunk each
BIG_CHUNKS = 4096  # 4 MiB in 1 KiB chunks: far past the 64 KiB read buffer, so reading pauses


def _chunk(i: int, size: int) -> bytes:
    head = f"event: content_block_delta\ndata: {i:08d}".encode()
    return head + b"x" * (size - len(head) - 2) + b"\n\n"


def _body(count: int, size: int) -> bytes:
    return b"".join(_chunk(i, size) for i in range(count))


GZIP_TEXT = b"".join(
    f"line {i:07d}: the quick brown fox jumps over the lazy dog\n".encode() for i in range(150_000)
)


@pytest.fixture
async def server() -> AsyncIterator[str]:
    """``/chunks/<count>/<size>``: a chunked body, one HTTP chunk per write; ``/gzip``: ~9 MB of
    text gzip-compressed, so aiohttp decompresses it in steps while the reader lags."""

    async def chunks(request: web.Request) -> web.StreamResponse:
        count, size = int(request.match_info["count"]), int(request.match_info["size"])
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for i in range(count):
            await response.write(_chunk(i, size))
        await response.write_eof()
        return response

    async def gzipped(request: web.Request) -> web.Response:
        return web.Response(
            body=gzip.compress(GZIP_TEXT, compresslevel=6),
            headers={"content-encoding": "gzip", "content-type": "text/plain"},
        )

    app = web.Application()
    app.router.add_get("/chunks/{count}/{size}", chunks)
    app.router.add_get("/gzip", gzipped)
    async with serving(app) as base_url:
        yield base_url


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often aiohttp's own ``resume_reading`` / ``pause_reading`` ran (any protocol)."""
    counts = {"resume": 0, "pause": 0}

    def counting(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: AiohttpResponseHandler, *args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return original(self, *args, **kwargs)

        return wrapper

    monkeypatch.setattr(
        AiohttpResponseHandler, "resume_reading", counting("resume", AiohttpResponseHandler.resume_reading)
    )
    monkeypatch.setattr(
        AiohttpResponseHandler, "pause_reading", counting("pause", AiohttpResponseHandler.pause_reading)
    )
    return counts


def _upstream(base_url: str) -> Upstream:
    return open_upstream(base_url, Settings.from_environ({}).egress)


async def _read_buffered(response: aiohttp.ClientResponse) -> bytes:
    """The whole body, read once everything has arrived (every chunk waiting in the buffer)."""
    async with asyncio.timeout(30):
        await response.content.wait_eof()
    parts = []
    while chunk := await response.content.readany():
        parts.append(chunk)
    return b"".join(parts)


async def test_upstream_connections_use_the_handler(server: str) -> None:
    upstream = _upstream(server)
    try:
        response = await upstream.request("GET", f"/chunks/{CHUNKS}/100", headers=[])
        assert response.connection is not None
        assert type(response.connection.protocol) is ResponseHandler
        assert await response.read() == _body(CHUNKS, 100)
    finally:
        await upstream.close()


async def test_chunks_are_read_without_a_resume_call_each(server: str, calls: dict[str, int]) -> None:
    # aiohttp's own protocol: a resume call per chunk handed out (what the handler saves; if a new
    # aiohttp stops doing this, the handler is no longer needed)
    async with aiohttp.ClientSession() as session, session.get(f"{server}/chunks/{CHUNKS}/200") as stock:
        assert await _read_buffered(stock) == _body(CHUNKS, 200)
    assert calls["pause"] == 0 and calls["resume"] >= CHUNKS

    calls["resume"] = 0
    upstream = _upstream(server)
    try:
        response = await upstream.request("GET", f"/chunks/{CHUNKS}/200", headers=[])
        assert await _read_buffered(response) == _body(CHUNKS, 200)
    finally:
        await upstream.close()
    assert calls == {"pause": 0, "resume": 0}


async def test_a_slow_reader_pauses_the_upstream_and_resumes_it(server: str, calls: dict[str, int]) -> None:
    upstream = _upstream(server)
    digest = hashlib.sha256()
    try:
        response = await upstream.request("GET", f"/chunks/{BIG_CHUNKS}/1024", headers=[])
        reads = 0
        async with asyncio.timeout(30):  # a resume that never comes: a failure, not a hang
            while chunk := await response.content.readany():
                digest.update(chunk)
                reads += 1
                if reads % 8 == 0:
                    await asyncio.sleep(0.002)  # lagging behind the upstream: the buffer fills up
    finally:
        await upstream.close()
    assert digest.digest() == hashlib.sha256(_body(BIG_CHUNKS, 1024)).digest()
    assert calls["pause"] >= 1 and calls["resume"] >= 1  # flow control did its work, both ways


async def test_a_gzip_body_decompressed_for_a_slow_reader_arrives_whole(
    server: str, calls: dict[str, int]
) -> None:
    upstream = _upstream(server)
    digest = hashlib.sha256()
    try:
        response = await upstream.request("GET", "/gzip", headers=[])
        async with asyncio.timeout(30):
            while chunk := await response.content.read(4096):
                digest.update(chunk)
                await asyncio.sleep(0)
    finally:
        await upstream.close()
    assert digest.digest() == hashlib.sha256(GZIP_TEXT).digest()
    assert calls["pause"] >= 1 and calls["resume"] >= 1
