"""The first-party emulator and a gateway for it on loopback, both in one loop thread, with SDK
clients for the gateway (``start_sdk_stack``); the gateway has a default key, a team key and a
metrics-only key (from a keys file)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anthropic

from emulators import EmulatorConfig, run_emulator
from gateway.app import create_app
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import running
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
"""``make_stack(emulator_config=None, **env)``: the fixture that starts a ``Stack``."""


def start_sdk_stack(
    thread: LoopThread, keys_dir: Path, emulator_config: EmulatorConfig | None = None, **env: str
) -> Stack:
    """Start the emulator and a gateway for it on ``thread`` (they stop when it closes); ``env``
    adds or overrides gateway settings. Retries are off: pass-through tests see the upstream's
    answer itself (retries have their own tests)."""
    emu = thread.enter(
        run_emulator(emulator_config or EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY})), port=0)
    )
    keys = keys_dir / "keys"
    keys.write_text(f"{TEAM_KEY} platform-team\n{METRICS_KEY} monitoring role=metrics\n")
    environ = {
        "GATEWAY_API_KEYS": GATEWAY_KEY,
        "GATEWAY_API_KEYS_FILE": str(keys),
        "ANTHROPIC_API_KEY": UPSTREAM_KEY,
        "ANTHROPIC_BASE_URL": emu.base_url,
        "GATEWAY_MAX_RETRIES": "0",
        **env,
    }
    settings = Settings.from_environ(environ)
    metrics = GatewayMetrics()
    server = thread.enter(running(create_app(settings, metrics=metrics), "127.0.0.1", 0))
    return Stack(server.base_url, emu, metrics, settings)
