"""Running the gateway as a process: event loop, listener, signal handling, graceful shutdown.

Kept apart from ``server`` (which only builds the application) so tests, the CLI, the demo and the
benchmark start it the same way. Shutdown takes at most ``GATEWAY_DRAIN_TIMEOUT_S`` plus a few
seconds (the drain order is in the design document).

Details: docs/internals/gateway.md
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import logging
import signal
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Final

from aiohttp import web

from gateway.config import ConfigError, Settings
from gateway.connection_events import ConnectionCollector, register
from gateway.connections import ConnectionGuard, ConnectionLimits
from gateway.drain import DRAIN_KEY, Drain
from gateway.http_protocol import GuardedRunner, watch_accept_errors

GC_GEN0_THRESHOLD: Final = 20_000

log = logging.getLogger("switchyard.process")

# time given, after the drain deadline, to the streams that end with an error event then
ABORT_GRACE_S: Final = 2.0


@dataclass(frozen=True, slots=True)
class RunningServer:
    runner: web.AppRunner
    host: str
    port: int
    guard: ConnectionGuard | None = None  # the connection caps and counts (gateway.connections)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def open_connections(self) -> int:
        """Client connections currently open on this server."""
        server = self.runner.server
        return len(server.connections) if server is not None else 0

    async def stop_listening(self) -> None:
        """Close the listening socket: new connections are refused, open ones carry on."""
        for site in list(self.runner.sites):
            await site.stop()

    async def close_connections(self, timeout_s: float) -> None:
        """Close idle connections; wait up to ``timeout_s`` for busy ones to finish, then cancel them.

        Busy connections close after their current response (no keep-alive while shutting down).
        """
        server = self.runner.server
        if server is None:
            return
        server.pre_shutdown()
        await server.shutdown(max(timeout_s, 0.0))


@contextlib.asynccontextmanager
async def running(app: web.Application, host: str, port: int) -> AsyncIterator[RunningServer]:
    """Serve ``app`` on ``host:port`` (0 picks a free port) until the block exits.

    Connection limits come from the app's settings (``gateway.app.SETTINGS_KEY``; defaults
    without), connection metrics go to its registry (``METRICS_KEY``)."""
    from gateway.app import METRICS_KEY, SETTINGS_KEY

    guard = ConnectionGuard(ConnectionLimits.from_settings(app.get(SETTINGS_KEY)))
    metrics = app.get(METRICS_KEY)
    unregister = register(metrics.registry if metrics else None, ConnectionCollector(guard.events, guard))
    restore = watch_accept_errors(asyncio.get_running_loop(), guard.events)
    # handler_cancellation: a client that disconnects cancels its handler at once, so its upstream
    # request (waiting, streaming or in a retry back-off) is closed too (gateway.accounting);
    # auto_decompress off: request bodies reach the handlers as sent, a Content-Encoding is decoded
    # there within the gateway's limits or refused with 415 (gateway.content_coding)
    runner = GuardedRunner(
        app, guard, access_log=None, handle_signals=False, handler_cancellation=True, auto_decompress=False
    )
    try:
        await runner.setup()
        try:  # a failed bind still closes what start-up opened (the provider's sessions)
            site = web.TCPSite(runner, host, port, backlog=1024, reuse_address=True)
            try:
                await site.start()
            except OSError as exc:
                raise listen_error(exc, host, port) from None
            bound: int = runner.addresses[0][1] if runner.addresses else port
            yield RunningServer(runner, host, bound, guard)
        finally:
            await runner.cleanup()
    finally:
        restore()
        unregister()


def listen_error(exc: OSError, host: str, port: int) -> ConfigError:
    """A failed bind as one line naming the variable to change (no traceback at start-up)."""
    if isinstance(exc, socket.gaierror):
        return ConfigError(f"GATEWAY_HOST: cannot resolve {host!r} ({exc.strerror})")
    if exc.errno == errno.EADDRINUSE:
        return ConfigError(f"GATEWAY_PORT: {host}:{port} is already in use (another process listens there)")
    if exc.errno == errno.EADDRNOTAVAIL:
        return ConfigError(f"GATEWAY_HOST: {host} is not an address of this machine (cannot listen there)")
    if exc.errno == errno.EACCES:
        return ConfigError(
            f"GATEWAY_PORT: permission denied listening on port {port} (below 1024 needs privileges)"
        )
    reason = exc.strerror or str(exc)
    return ConfigError(f"GATEWAY_HOST / GATEWAY_PORT: cannot listen on {host}:{port} ({reason})")


def check_listen(host: str, port: int) -> None:
    """Fail fast, before the provider starts, when ``host:port`` cannot be listened on.

    Binds (and closes) a socket per address the way ``loop.create_server`` will, with
    ``SO_REUSEADDR``; raises the :func:`listen_error` of the first failure.
    """
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in infos:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                probe.bind(address)
    except OSError as exc:
        raise listen_error(exc, host, port) from None


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


async def drain(server: RunningServer, state: Drain, *, delay_s: float, timeout_s: float) -> None:
    """Shut ``server`` down gracefully (steps 1-3 of the module docstring)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    state.begin()
    log.info(
        "draining: readiness now fails; %d connection(s) open; deadline in %.1fs",
        server.open_connections,
        timeout_s,
    )
    expiry = loop.call_at(deadline, state.expire)
    try:
        if delay_s > 0:
            with state.watch() as expired:  # a second signal cuts the delay short
                await asyncio.wait({expired}, timeout=delay_s)
        await server.stop_listening()
        log.info("listener closed; waiting for %d connection(s)", server.open_connections)
        await server.close_connections(deadline + ABORT_GRACE_S - loop.time())
    finally:
        expiry.cancel()
    log.info("drained%s", " (deadline reached: open streams ended)" if state.expired else "")


def settle_heap() -> None:
    """Move everything built at start-up out of the cyclic collector's reach, and collect less often.

    Start-up leaves ~100k long-lived objects (modules, pydantic models, metric families); without
    ``gc.freeze`` every full collection walks them all again. Only the younger generations are
    collected first: the few hundred objects of start-up garbage that reached the oldest one stay
    (frozen), which costs less than a full collection on the way to the first request. Request
    handling allocates many short-lived containers, so the youngest generation's threshold is
    raised from 700 to ``GC_GEN0_THRESHOLD``: fewer collections, each over objects that are mostly
    garbage already.
    """
    gc.collect(1)  # the young garbage; a full collection would walk every long-lived object once more
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


def serve(settings: Settings) -> None:
    """``switchyard serve``: run the gateway until SIGINT/SIGTERM, then drain and return."""
    from gateway.app import KEY_RELOADER_KEY, POLICY_RELOADER_KEY, PROVIDERS_KEY, create_app
    from gateway.key_reload import SIGHUP

    async def main(stop: asyncio.Event) -> None:
        app = create_app(settings)
        state = app[DRAIN_KEY]
        reloader = app.get(KEY_RELOADER_KEY)
        policy = app.get(POLICY_RELOADER_KEY)
        providers = app[PROVIDERS_KEY]
        loop = asyncio.get_running_loop()

        def hangup() -> None:
            # kill -HUP re-reads GATEWAY_API_KEYS_FILE, GATEWAY_POLICY_FILE and the upstream key
            # files (GATEWAY_FOUNDRY_API_KEY_FILE, GATEWAY_BEDROCK_BEARER_TOKEN_FILE, Vertex's
            # GOOGLE_APPLICATION_CREDENTIALS, that one in the executor) now (never exits)
            if reloader is not None:
                reloader.reload(SIGHUP)
            if policy is not None:
                policy.reload(SIGHUP)
            key_files = [each.reload_key_file() for each in providers]
            if reloader is None and policy is None and all(read is None for read in key_files):
                log.info(
                    "SIGHUP ignored: no GATEWAY_API_KEYS_FILE, GATEWAY_POLICY_FILE nor upstream key file"
                )

        loop.add_signal_handler(signal.SIGHUP, hangup)
        async with running(app, settings.listener.host, settings.listener.port) as server:
            settle_heap()
            log.info("switchyard listening on %s", server.base_url)
            if server.guard is not None:
                log.info("connections: %s", server.guard.limits.describe())
            await stop.wait()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal ends open streams now
                loop.add_signal_handler(sig, state.expire)
            listener = settings.listener
            await drain(server, state, delay_s=listener.drain_delay_s, timeout_s=listener.drain_timeout_s)
        log.info("stopped")

    run(main)
