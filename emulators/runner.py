"""Starting and stopping an emulator on a real socket.

* :func:`run_emulator`: async context manager for tests running in an event loop;
* :func:`emulator_in_thread`: the same in a background thread with its own loop, for tests that
  drive a synchronous client;
* :func:`serve`: blocking, until SIGINT/SIGTERM (what ``python -m emulators`` runs).

``port=0`` binds a free port; :attr:`RunningEmulator.port` is the real one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import ssl
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, replace

from aiohttp import web

from .cache_model import PromptCache
from .clock import Clock
from .config import EmulatorConfig
from .providers import app_factory
from .recorder import RecordedRequest, RequestLog
from .state import get_state

log = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT_S = 5.0
THREAD_START_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class RunningEmulator:
    """A started emulator: where it listens and its inspectable state."""

    app: web.Application
    host: str
    port: int
    scheme: str = "http"

    @property
    def base_url(self) -> str:
        """``http(s)://host:port`` (no trailing slash), the SDK's ``base_url``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def config(self) -> EmulatorConfig:
        return get_state(self.app).config

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received so far, oldest first."""
        return get_state(self.app).log.snapshot()

    @property
    def request_log(self) -> RequestLog:
        """The live request log (supports ``clear()``)."""
        return get_state(self.app).log

    @property
    def clock(self) -> Clock:
        return get_state(self.app).config.clock

    @property
    def cache(self) -> PromptCache:
        return get_state(self.app).cache

    def accept_keys(
        self,
        *,
        api_keys: frozenset[str] | None = None,
        foundry_api_keys: frozenset[str] | None = None,
        foundry_entra_tokens: frozenset[str] | None = None,
        vertex_tokens: frozenset[str] | None = None,
        vertex_service_accounts: Mapping[str, str] | None = None,
    ) -> None:
        """Accept these credentials, and no other, from the next request on (those not given are
        kept): a key rotated in the provider's console, the old one refused at once.

        ``vertex_service_accounts`` (``client_email`` -> public key PEM) replaces the keys the
        token endpoint verifies assertions with: a service-account key created and the old one
        deleted. Access tokens already issued stay valid until they expire, as Google documents
        for a deleted key (see :mod:`.google_oauth`)."""
        state = get_state(self.app)
        config = state.config
        state.config = replace(
            config,
            api_keys=config.api_keys if api_keys is None else api_keys,
            foundry_api_keys=config.foundry_api_keys if foundry_api_keys is None else foundry_api_keys,
            foundry_entra_tokens=(
                config.foundry_entra_tokens if foundry_entra_tokens is None else foundry_entra_tokens
            ),
            vertex_tokens=config.vertex_tokens if vertex_tokens is None else vertex_tokens,
            vertex_service_accounts=(
                config.vertex_service_accounts if vertex_service_accounts is None else vertex_service_accounts
            ),
        )

    def set_fault(self, spec: str, key: str = "standing") -> None:
        """Apply fault directives (``faults.py``) to every later request without its own
        ``x-emulator-fault`` header: an outage of this upstream; ``""`` ends it. Counting
        directives (``fail_first``, ``first``) count under ``key``."""
        standing = get_state(self.app).standing_fault
        standing.spec, standing.key = spec, key


@contextlib.asynccontextmanager
async def run_emulator(
    config: EmulatorConfig | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    provider: str = "anthropic",
    ssl_context: ssl.SSLContext | None = None,
    app: web.Application | None = None,
) -> AsyncIterator[RunningEmulator]:
    """Serve a fresh emulator on ``host:port`` for the duration of the ``async with`` block.

    ``provider`` picks the upstream to emulate (see :mod:`.providers`); ``app`` serves an app
    already made (e.g. Bedrock's with its own options) instead. With ``ssl_context`` it serves
    HTTPS (tests of CA bundles and client mTLS use this).
    """
    app = app if app is not None else app_factory(provider)(config)
    runner = web.AppRunner(
        app, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S, handler_cancellation=True
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
        await site.start()
        bound_port = int(runner.addresses[0][1])
        yield RunningEmulator(app, host, bound_port, "https" if ssl_context else "http")
    finally:
        await runner.cleanup()


@contextlib.contextmanager
def emulator_in_thread(
    config: EmulatorConfig | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    provider: str = "anthropic",
) -> Iterator[RunningEmulator]:
    """Run an emulator in a daemon thread with its own event loop; stop it on exit."""
    started: Future[RunningEmulator] = Future()
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    async def main() -> None:
        try:
            async with run_emulator(config, host, port, provider=provider) as emulator:
                started.set_result(emulator)
                await stop.wait()
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            raise

    def target() -> None:
        asyncio.set_event_loop(loop)
        with contextlib.suppress(Exception):
            loop.run_until_complete(main())
        loop.close()

    thread = threading.Thread(target=target, name="switchyard-emulator", daemon=True)
    thread.start()
    try:
        yield started.result(timeout=THREAD_START_TIMEOUT_S)
    finally:
        if not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=SHUTDOWN_TIMEOUT_S + 5)


async def _serve(
    config: EmulatorConfig | None,
    host: str,
    port: int,
    on_ready: Callable[[RunningEmulator], None] | None,
    provider: str,
    ssl_context: ssl.SSLContext | None,
    app: web.Application | None,
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - Windows / non-main thread
            pass
    try:
        async with run_emulator(
            config, host, port, provider=provider, ssl_context=ssl_context, app=app
        ) as emulator:
            log.info("%s emulator listening on %s", provider, emulator.base_url)
            if on_ready is not None:
                on_ready(emulator)
            await stop.wait()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


def serve(
    config: EmulatorConfig | None = None,
    host: str = "127.0.0.1",
    port: int = 8080,
    *,
    on_ready: Callable[[RunningEmulator], None] | None = None,
    provider: str = "anthropic",
    ssl_context: ssl.SSLContext | None = None,
    app: web.Application | None = None,
) -> None:
    """Run an emulator until SIGINT or SIGTERM; ``on_ready`` is called once it listens."""
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(config, host, port, on_ready, provider, ssl_context, app))
