"""A gateway in front of the first-party emulator, in this event loop, for observability tests."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anthropic
from anthropic.types import MessageParam, TextBlockParam

from emulators import EmulatorConfig, RunningEmulator, run_emulator
from gateway.app import create_app
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.pricing import DEFAULT_TABLE
from gateway.process import running
from gateway.streaming.usage import Usage

KEY = "sk-gw-observability-default-3f9a"
TEAM_KEY = "sk-gw-observability-team-77c1"
TEAM = "platform"
QUIET_KEY = "sk-gw-observability-quiet-51e0"
QUIET_TEAM = "quiet"  # sends one request in the first round only: no tokens in later windows
METRICS_KEY = "sk-gw-observability-metrics-0c4d"  # role=metrics: what Prometheus scrapes with
UPSTREAM_KEY = "sk-upstream-observability-e5d2"
SONNET = "claude-sonnet-4-6"
HAIKU = "claude-haiku-4-5"

FAST = {
    "GATEWAY_STREAM_IDLE_WARNING_S": "0.15",
    "GATEWAY_STREAM_IDLE_TIMEOUT_S": "0.3",
    "GATEWAY_DOWNSTREAM_PING_S": "0.05",
    "GATEWAY_MAX_RETRY_DELAY_S": "0.01",
    "GATEWAY_MAX_RETRIES": "4",
    # these clients do not retry (max_retries=0) but send x-stainless-retry-count like every SDK
    # client: give them the gateway's full budget, which is what is under test here (the shared
    # budget for retrying clients is tested in tests/e2e/test_retry_budget.py)
    "GATEWAY_CLIENT_RETRYING_MAX_RETRIES": "4",
}

# ~10k tokens (4 bytes per token in the emulator): above every model's minimum cacheable length
LONG_SYSTEM = " ".join(f"Rule {i}: answer precisely and cite the file you read." for i in range(750))


@dataclass
class Rig:
    base_url: str
    emulator: RunningEmulator
    metrics: GatewayMetrics
    settings: Settings

    def client(self, key: str = KEY, **headers: str) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(
            api_key=key, base_url=self.base_url, max_retries=0, default_headers=headers, timeout=20
        )

    def value(self, name: str, **labels: str) -> float:
        found = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if found is None else found


def key_file(directory: Path) -> Path:
    path = directory / "keys"
    path.write_text(
        f"# inbound keys\n{TEAM_KEY} {TEAM}\n{QUIET_KEY} {QUIET_TEAM}\n{METRICS_KEY} monitoring role=metrics\n",
        encoding="utf-8",
    )
    return path


def settings_for(upstream: str, keys: Path, **env: str) -> Settings:
    return Settings.from_environ(
        {
            "GATEWAY_API_KEYS": KEY,
            "GATEWAY_API_KEYS_FILE": str(keys),
            "ANTHROPIC_API_KEY": UPSTREAM_KEY,
            "ANTHROPIC_BASE_URL": upstream,
            **FAST,
            **env,
        }
    )


@contextlib.asynccontextmanager
async def gateway_rig(
    directory: Path, env: Mapping[str, str] | None = None, *, metrics: GatewayMetrics | None = None
) -> AsyncIterator[Rig]:
    """The emulator and a gateway in front of it (settings: ``FAST`` plus ``env``)."""
    async with run_emulator(EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY}))) as emulator:
        settings = settings_for(emulator.base_url, key_file(directory), **(env or {}))
        metrics = metrics or GatewayMetrics()
        async with running(create_app(settings, metrics=metrics), "127.0.0.1", 0) as server:
            yield Rig(server.base_url, emulator, metrics, settings)


def gateway_usage(sdk_usage: Any) -> Usage:
    """The SDK's view of a response's usage, as the gateway's ``Usage``."""
    usage = Usage()
    usage.update(sdk_usage.model_dump())
    return usage


def expected_cost(provider: str, model: str, sdk_usage: Any) -> float:
    return DEFAULT_TABLE.cost(provider, model, gateway_usage(sdk_usage)).total


USER: list[MessageParam] = [{"role": "user", "content": "Summarise the rules."}]


def cached_system(ttl: Literal["5m", "1h"] = "5m", prefix: str = "") -> list[TextBlockParam]:
    """A system prompt long enough to be cached, with a ``cache_control`` breakpoint."""
    return [
        {"type": "text", "text": prefix + LONG_SYSTEM, "cache_control": {"type": "ephemeral", "ttl": ttl}}
    ]
