"""A real stack on loopback sockets: client -> gateway -> emulator, both servers in one loop thread."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import anthropic
import pytest

from emulators import EmulatorConfig, run_emulator
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import running
from gateway.server import create_app
from tests.support.threaded import LoopThread

GATEWAY_KEY = "sk-gw-client-key"
TEAM_KEY = "sk-gw-team-key"
METRICS_KEY = "sk-gw-metrics-key"  # role=metrics: reads /metrics, calls no model
UPSTREAM_KEY = "sk-upstream-secret"


@dataclass
class Stack:
    gateway_url: str
    emulator: object  # the running emulator handle (base_url, requests, clock, cache)
    metrics: GatewayMetrics
    settings: Settings

    @property
    def requests(self) -> list:  # type: ignore[type-arg]
        return self.emulator.requests  # type: ignore[attr-defined, no-any-return]

    def client(self, **kwargs: object) -> anthropic.Anthropic:
        options: dict[str, object] = {"api_key": GATEWAY_KEY, "base_url": self.gateway_url, "max_retries": 0}
        options.update(kwargs)
        return anthropic.Anthropic(**options)  # type: ignore[arg-type]

    def async_client(self, **kwargs: object) -> anthropic.AsyncAnthropic:
        options: dict[str, object] = {"api_key": GATEWAY_KEY, "base_url": self.gateway_url, "max_retries": 0}
        options.update(kwargs)
        return anthropic.AsyncAnthropic(**options)  # type: ignore[arg-type]


StackFactory = Callable[..., Stack]


@pytest.fixture
def make_stack(loop_thread: LoopThread, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackFactory]:
    def factory(emulator_config: EmulatorConfig | None = None, **env: str) -> Stack:
        emu = loop_thread.enter(
            run_emulator(emulator_config or EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY})), port=0)
        )
        keys = tmp_path_factory.mktemp("keys") / "keys"
        keys.write_text(f"{TEAM_KEY} platform-team\n{METRICS_KEY} monitoring role=metrics\n")
        environ = {
            "GATEWAY_API_KEYS": GATEWAY_KEY,
            "GATEWAY_API_KEYS_FILE": str(keys),
            "ANTHROPIC_API_KEY": UPSTREAM_KEY,
            "ANTHROPIC_BASE_URL": emu.base_url,
            # pass-through tests see the upstream's answer itself; retries have their own tests
            "GATEWAY_MAX_RETRIES": "0",
            **env,
        }
        settings = Settings.from_environ(environ)
        metrics = GatewayMetrics()

        server = loop_thread.enter(running(create_app(settings, metrics=metrics), "127.0.0.1", 0))
        return Stack(server.base_url, emu, metrics, settings)

    yield factory


@pytest.fixture
def stack(make_stack: StackFactory) -> Stack:
    return make_stack()
