"""A gateway in front of the first-party emulator, both on loopback in one background loop thread.

The gateway is the real application served by ``gateway.process.running`` (the listener
``switchyard serve`` uses), so raw-socket clients see exactly what a deployment would answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from emulators import EmulatorConfig, run_emulator
from emulators.runner import RunningEmulator
from gateway.app import create_app
from gateway.config import Settings
from gateway.process import RunningServer, running
from tests.support.raw_http import RawConnection
from tests.support.threaded import LoopThread

CLIENT_KEY = "sk-gw-hostile-client"
UPSTREAM_KEY = "sk-upstream-hostile"


@dataclass(frozen=True)
class GatewayStack:
    gateway: RunningServer
    emulator: RunningEmulator
    settings: Settings

    @property
    def port(self) -> int:
        return self.gateway.port

    @property
    def upstream_count(self) -> int:
        """Requests the emulator received so far."""
        return len(self.emulator.request_log)


def start_stack(thread: LoopThread, **env: str) -> GatewayStack:
    """Start the emulator and a gateway for it on ``thread``; they stop when the thread closes."""
    emulator = thread.enter(run_emulator(EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY})), port=0))
    environ = {
        "GATEWAY_API_KEYS": CLIENT_KEY,
        "ANTHROPIC_API_KEY": UPSTREAM_KEY,
        "ANTHROPIC_BASE_URL": emulator.base_url,
        **env,
    }
    settings = Settings.from_environ(environ)
    server = thread.enter(running(create_app(settings), "127.0.0.1", 0))
    return GatewayStack(server, emulator, settings)


StackFactory = Callable[..., GatewayStack]
"""``make_stack(**env)``: the fixture that starts a ``GatewayStack`` with extra settings."""
Connect = Callable[[GatewayStack], RawConnection]
"""``connect(stack)``: the fixture that opens a raw connection to the stack's gateway (closed
after the test)."""
