"""One provider's emulator, a gateway in front of it, and the Claude Code environments for both.

``provider_stack(provider, tmp_path, monkeypatch)`` yields a ``ProviderStack``:

* ``gateway_url``: the gateway (in this event loop) configured for ``provider`` against its emulator;
* ``emulator``: the running emulator (its recorded requests are the upstream traffic);
* ``through_gateway_env``: Claude Code pointed at the gateway (first-party mode, a gateway key);
* ``own_mode_env``: Claude Code in its *own* mode for that provider, straight at the emulator
  (``CLAUDE_CODE_USE_BEDROCK`` with SigV4 keys, ``CLAUDE_CODE_USE_VERTEX`` with a bearer token,
  ``CLAUDE_CODE_USE_FOUNDRY`` with a Foundry key) — the reference for what that cloud is sent;
  ``None`` for the first-party API, where both are the same mode.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from emulators import EmulatorConfig, RunningEmulator, run_emulator
from emulators.bedrock_config import DEFAULT_ACCESS_KEY_ID, DEFAULT_SECRET_ACCESS_KEY
from gateway.app import create_app
from gateway.metrics import GatewayMetrics
from gateway.process import running
from tests.providers import foundry_harness, vertex_harness
from tests.providers.bedrock_harness import apply_aws_env, bedrock_upstream
from tests.support.claude_code import claude_env

GATEWAY_KEY = "sk-gw-claude-code"
UPSTREAM_KEY = "sk-ant-upstream-claude-code"
VERTEX_TOKEN = "ya29.claude-code-own-mode"


@dataclass
class ProviderStack:
    provider: str
    gateway_url: str
    emulator: RunningEmulator
    home: Path
    own_mode_vars: dict[str, str] | None

    def through_gateway_env(self, **extra: str) -> dict[str, str]:
        return claude_env(
            self.home / "gateway",
            ANTHROPIC_BASE_URL=self.gateway_url,
            ANTHROPIC_API_KEY=GATEWAY_KEY,
            **extra,
        )

    def own_mode_env(self, **extra: str) -> dict[str, str] | None:
        if self.own_mode_vars is None:
            return None
        return claude_env(self.home / "own-mode", **self.own_mode_vars, **extra)


@contextlib.asynccontextmanager
async def _gateway(env: dict[str, str]) -> AsyncIterator[str]:
    from gateway.config import Settings

    settings = Settings.from_environ({"GATEWAY_API_KEYS": GATEWAY_KEY, **env})
    async with running(create_app(settings, metrics=GatewayMetrics()), "127.0.0.1", 0) as server:
        yield server.base_url


@contextlib.asynccontextmanager
async def provider_stack(
    provider: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    gateway_env: Mapping[str, str] | None = None,
) -> AsyncIterator[ProviderStack]:
    """``gateway_env``: settings of the gateway's over the provider's (e.g. another credential)."""
    home = tmp_path / "home"
    extra = dict(gateway_env or {})
    if provider == "anthropic":
        async with run_emulator(EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY})), port=0) as emulator:
            env = {"ANTHROPIC_API_KEY": UPSTREAM_KEY, "ANTHROPIC_BASE_URL": emulator.base_url, **extra}
            async with _gateway(env) as url:
                yield ProviderStack(provider, url, emulator, home, None)
    elif provider == "bedrock":
        async with bedrock_upstream(tmp_path) as (env, emulator):
            env.update(extra)
            apply_aws_env(monkeypatch, env)
            own = {
                "CLAUDE_CODE_USE_BEDROCK": "1",
                "ANTHROPIC_BEDROCK_BASE_URL": emulator.base_url,
                "AWS_REGION": env["AWS_REGION"],
                "AWS_ACCESS_KEY_ID": DEFAULT_ACCESS_KEY_ID,
                "AWS_SECRET_ACCESS_KEY": DEFAULT_SECRET_ACCESS_KEY,
            }
            async with _gateway(env) as url:
                yield ProviderStack(provider, url, emulator, home, own)
    elif provider == "vertex":
        async with vertex_harness.vertex_upstream(
            tmp_path, monkeypatch, vertex_tokens=frozenset({VERTEX_TOKEN})
        ) as (env, emulator):
            env.update(extra)
            own = {
                "CLAUDE_CODE_USE_VERTEX": "1",
                "ANTHROPIC_VERTEX_BASE_URL": env["ANTHROPIC_VERTEX_BASE_URL"],
                "CLOUD_ML_REGION": env["CLOUD_ML_REGION"],
                "ANTHROPIC_VERTEX_PROJECT_ID": env["ANTHROPIC_VERTEX_PROJECT_ID"],
                # Claude Code's Vertex mode skips google-auth and sends the bearer as a custom header
                "CLAUDE_CODE_SKIP_VERTEX_AUTH": "1",
                "ANTHROPIC_CUSTOM_HEADERS": f"Authorization: Bearer {VERTEX_TOKEN}",
            }
            async with _gateway(env) as url:
                yield ProviderStack(provider, url, emulator, home, own)
    elif provider == "foundry":
        async with foundry_harness.foundry_upstream(tmp_path) as (env, emulator):
            env.update(extra)
            own = {
                "CLAUDE_CODE_USE_FOUNDRY": "1",
                "ANTHROPIC_FOUNDRY_BASE_URL": env["ANTHROPIC_FOUNDRY_BASE_URL"],
                "ANTHROPIC_FOUNDRY_API_KEY": env["ANTHROPIC_FOUNDRY_API_KEY"],
            }
            async with _gateway(env) as url:
                yield ProviderStack(provider, url, emulator, home, own)
    else:  # pragma: no cover
        raise ValueError(provider)
