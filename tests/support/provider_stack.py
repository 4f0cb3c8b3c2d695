"""One gateway per provider, built by the provider factory from environment-style settings, in
front of that provider's emulator (``provider_stack``); the conformance, fault-matrix and cache
tests use it. The gateway's clock is the running event loop's (virtual time in the conformance
tests)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anthropic
import pytest

from emulators import EmulatorConfig, RunningEmulator, run_emulator
from gateway.app import create_app
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import RunningServer, running
from tests.providers.bedrock_harness import apply_aws_env, bedrock_upstream
from tests.providers.foundry_harness import foundry_upstream
from tests.providers.vertex_harness import vertex_upstream

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
