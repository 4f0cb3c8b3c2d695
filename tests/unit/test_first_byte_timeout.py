"""The first-byte bound of an upstream request (``Upstream.request``), against a real aiohttp
server on loopback that holds its answer: asyncio.timeout's semantics — the bound turns into the
gateway's 504 ``UpstreamTimeout``; a cancellation from elsewhere (the client left, shutdown) stays a
cancellation, never a timeout; the task's cancellation count is left as it was found."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from gateway.config import Settings
from gateway.errors import UpstreamTimeout
from gateway.transport import Upstream, open_upstream
from tests.support.local_app import serving


@pytest.fixture
async def slow_server() -> AsyncIterator[tuple[str, asyncio.Event]]:
    """``POST /hold`` answers once the event is set; ``POST /now`` at once."""
    release = asyncio.Event()

    async def hold(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="late")

    async def now(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hold", hold)
    app.router.add_post("/now", now)
    async with serving(app) as base_url:
        try:
            yield base_url, release
        finally:
            release.set()


def _upstream(base_url: str, first_byte_s: float) -> Upstream:
    settings = Settings.from_environ({"GATEWAY_FIRST_BYTE_TIMEOUT_S": str(first_byte_s)})
    return open_upstream(base_url, settings.egress)


async def test_the_bound_becomes_the_gateways_timeout(slow_server: tuple[str, asyncio.Event]) -> None:
    upstream = _upstream(slow_server[0], 0.2)
    try:
        with pytest.raises(UpstreamTimeout) as raised:
            await upstream.request("POST", "/hold", headers=[], body=b"{}")
        assert raised.value.status == 504 and "0.2s" in raised.value.message
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0  # our cancellation fully undone
        response = await upstream.request("POST", "/now", headers=[], body=b"{}")  # the task goes on
        assert response.status == 200 and await response.text() == "ok"
    finally:
        await upstream.close()


async def test_an_answer_in_time_leaves_no_timer_behind(slow_server: tuple[str, asyncio.Event]) -> None:
    upstream = _upstream(slow_server[0], 0.2)
    try:
        response = await upstream.request("POST", "/now", headers=[], body=b"{}")
        assert await response.text() == "ok"
        await asyncio.sleep(0.4)  # past the bound: a timer left armed would cancel this sleep
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0
    finally:
        await upstream.close()


async def test_a_cancellation_from_elsewhere_stays_a_cancellation(
    slow_server: tuple[str, asyncio.Event],
) -> None:
    upstream = _upstream(slow_server[0], 30.0)
    try:
        waiting = asyncio.create_task(upstream.request("POST", "/hold", headers=[], body=b"{}"))
        await asyncio.sleep(0.1)
        waiting.cancel()  # the client went away
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert waiting.cancelled()
    finally:
        await upstream.close()
