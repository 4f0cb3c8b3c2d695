"""A stand-in OTLP collector: an HTTP server on loopback that records what it receives."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class Received:
    path: str
    headers: Mapping[str, str]
    body: bytes


@dataclass
class Collector:
    url: str
    received: list[Received] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)


@contextlib.asynccontextmanager
async def collector(
    answer: Callable[[web.Request], Awaitable[web.StreamResponse]] | None = None,
) -> AsyncIterator[Collector]:
    """An HTTP server on loopback that records every request (and answers 200, or ``answer``)."""
    found = Collector("")

    async def handle(request: web.Request) -> web.StreamResponse:
        found.received.append(Received(request.path, request.headers.copy(), await request.read()))
        found.arrived.set()
        if answer is not None:
            return await answer(request)
        return web.Response(body=b"", content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/{tail:.*}", handle)
    runner = web.AppRunner(app, handle_signals=False, auto_decompress=False)  # bodies as they came
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    found.url = f"http://127.0.0.1:{port}"
    try:
        yield found
    finally:
        await runner.cleanup()
