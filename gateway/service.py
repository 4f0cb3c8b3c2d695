"""Running the gateway as a process: event loop, listener, signal handling.

Kept apart from ``server`` (which only builds the application) so tests can run the same app
in-process and the CLI, the demo and the benchmark start it the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from aiohttp import web

from gateway.config import Settings

log = logging.getLogger("switchyard.service")


@dataclass(frozen=True, slots=True)
class RunningServer:
    runner: web.AppRunner
    host: str
    port: int

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def open_connections(self) -> int:
        """Client connections currently open on this server."""
        server = self.runner.server
        return len(server.connections) if server is not None else 0


@contextlib.asynccontextmanager
async def running(app: web.Application, host: str, port: int) -> AsyncIterator[RunningServer]:
    """Serve ``app`` on ``host:port`` (0 picks a free port) until the block exits."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=1024, reuse_address=True)
    await site.start()
    bound: int = runner.addresses[0][1] if runner.addresses else port
    try:
        yield RunningServer(runner, host, bound)
    finally:
        await runner.cleanup()


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def run(main: Callable[[asyncio.Event], object]) -> None:
    """Run ``main(stop_event)`` on a fresh (uvloop) event loop; SIGINT/SIGTERM set the event."""

    async def wrapper() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        result = main(stop)
        if asyncio.iscoroutine(result):
            await result

    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        runner.run(wrapper())


def serve(settings: Settings) -> None:
    """``switchyard serve``: run the gateway until SIGINT/SIGTERM."""
    from gateway.server import create_app

    async def main(stop: asyncio.Event) -> None:
        app = create_app(settings)
        async with running(app, settings.host, settings.port) as server:
            log.info("switchyard listening on %s", server.base_url)
            await stop.wait()
            log.info("shutting down")

    run(main)
