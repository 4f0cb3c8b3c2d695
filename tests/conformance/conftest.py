"""One gateway per provider, built by the provider factory from environment-style settings, in
front of that provider's emulator: the same client code must work against all four.

Every test here runs on a virtual-time event loop (``tests.support.virtual_time``): the fault
matrix's 0.05-0.3 s watchdogs fire when the emulator stalls on purpose, never because the test
process was paused (a garbage collection, a loaded machine) while an answer was on its way.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import anthropic
import pytest

from emulators import EmulatorConfig, RunningEmulator, run_emulator
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import RunningServer, running
from gateway.server import create_app
from tests.providers.bedrock_harness import apply_aws_env, bedrock_upstream
from tests.providers.foundry_harness import foundry_upstream
from tests.providers.vertex_harness import vertex_upstream
from tests.support.virtual_time import VirtualTimeLoop

PROVIDERS = ["anthropic", "bedrock", "vertex", "foundry"]
GATEWAY_KEY = "sk-conformance"
FIRST_PARTY_KEY = "sk-upstream-first-party"


@dataclass
class ProviderStack:
    provider: str
    gateway: RunningServer
    emulator: RunningEmulator
    metrics: GatewayMetrics

    def client(self, **headers: str) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(
            api_key=GATEWAY_KEY, base_url=self.gateway.base_url, max_retries=0, default_headers=headers
        )

    def model_requests(self) -> list:  # type: ignore[type-arg]
        """Upstream requests that reached a model endpoint (not token or credential endpoints)."""
        return [
            r
            for r in self.emulator.requests
            if "/token" not in r.path and r.method == "POST" and r.path not in ("/",)
        ]


@contextlib.asynccontextmanager
async def upstream_env(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[dict[str, str], RunningEmulator]]:
    if provider == "anthropic":
        async with run_emulator(EmulatorConfig(api_keys=frozenset({FIRST_PARTY_KEY}))) as emulator:
            yield {"ANTHROPIC_API_KEY": FIRST_PARTY_KEY, "ANTHROPIC_BASE_URL": emulator.base_url}, emulator
    elif provider == "bedrock":
        async with bedrock_upstream(tmp_path) as (env, emulator):
            apply_aws_env(monkeypatch, env)
            yield env, emulator
    elif provider == "vertex":
        async with vertex_upstream(tmp_path, monkeypatch) as (env, emulator):
            yield env, emulator
    else:
        async with foundry_upstream(tmp_path) as (env, emulator):
            yield env, emulator


@contextlib.asynccontextmanager
async def provider_stack(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **settings: str
) -> AsyncIterator[ProviderStack]:
    async with upstream_env(provider, tmp_path, monkeypatch) as (env, emulator):
        config = Settings.from_environ({"GATEWAY_API_KEYS": GATEWAY_KEY, **env, **settings})
        assert config.provider.value == provider
        metrics = GatewayMetrics()
        app = create_app(config, metrics=metrics, clock=asyncio.get_running_loop().time)
        async with running(app, "127.0.0.1", 0) as gateway:
            yield ProviderStack(provider, gateway, emulator, metrics)


@pytest.fixture(params=PROVIDERS)
async def stack(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[ProviderStack]:
    async with provider_stack(request.param, tmp_path, monkeypatch, GATEWAY_MAX_RETRIES="0") as built:
        yield built


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, type[VirtualTimeLoop]]:
    return {"virtual_time": VirtualTimeLoop}


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.conformance.test_fault_matrix import summary

    for line in summary():
        terminalreporter.write_line(line)
