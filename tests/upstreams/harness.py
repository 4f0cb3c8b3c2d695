"""A gateway over four emulated upstreams at once (first party, Bedrock, Vertex AI, Foundry).

``four_upstreams`` starts each provider's emulator with fixture credentials
(``emulators.upstreams.emulated_upstream``), writes a ``GATEWAY_UPSTREAMS_FILE`` naming them
``primary`` (first party), ``bedrock``, ``vertex`` and ``foundry`` (route order: that order unless
``order`` says otherwise) and serves a real gateway on loopback. Outages are the emulators'
standing faults (``RunningEmulator.set_fault``), so each upstream fails on its own.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic.types import TextBlockParam

from emulators.runner import RunningEmulator
from emulators.upstreams import EmulatedUpstream, emulated_upstream
from gateway.app import METRICS_KEY, create_app
from gateway.config import Settings
from gateway.process import RunningServer, running

CLIENT_KEY = "sk-gw-failover"
MODEL = "claude-opus-5-5"
NAMES = {"anthropic": "primary", "bedrock": "bedrock", "vertex": "vertex", "foundry": "foundry"}
# a system prompt long enough to be cached (above every model's minimum cacheable prefix)
SYSTEM: list[TextBlockParam] = [
    {"type": "text", "text": "You are a careful assistant. " * 800, "cache_control": {"type": "ephemeral"}}
]


def entry(upstream: EmulatedUpstream) -> dict[str, Any]:
    env = upstream.env
    name = NAMES[upstream.provider]
    if upstream.provider == "anthropic":
        return {
            "name": name,
            "provider": "anthropic",
            "base_url": env["ANTHROPIC_BASE_URL"],
            "credentials": {"ANTHROPIC_API_KEY": env["ANTHROPIC_API_KEY"]},
        }
    if upstream.provider == "bedrock":
        return {
            "name": name,
            "provider": "bedrock",
            "region": env["AWS_REGION"],
            "base_url": env["ANTHROPIC_BEDROCK_BASE_URL"],
        }
    if upstream.provider == "vertex":
        return {
            "name": name,
            "provider": "vertex",
            "region": env["CLOUD_ML_REGION"],
            "project": env["ANTHROPIC_VERTEX_PROJECT_ID"],
            "base_url": env["ANTHROPIC_VERTEX_BASE_URL"],
            "credentials": {"GOOGLE_APPLICATION_CREDENTIALS": env["GOOGLE_APPLICATION_CREDENTIALS"]},
        }
    return {
        "name": name,
        "provider": "foundry",
        "base_url": env["ANTHROPIC_FOUNDRY_BASE_URL"],
        "credentials": {"ANTHROPIC_FOUNDRY_API_KEY": env["ANTHROPIC_FOUNDRY_API_KEY"]},
    }


@dataclass
class Fleet:
    gateway: RunningServer
    emulators: dict[str, RunningEmulator]  # by upstream name
    settings: Settings

    @property
    def url(self) -> str:
        return self.gateway.base_url

    def client(self, session: str | None = None, **kwargs: Any) -> anthropic.AsyncAnthropic:
        headers = {} if session is None else {"x-claude-code-session-id": session}
        return anthropic.AsyncAnthropic(
            api_key=CLIENT_KEY, base_url=self.url, max_retries=0, default_headers=headers, **kwargs
        )

    def served(self, name: str) -> int:
        """Messages requests the upstream answered (its emulator's request log)."""
        return sum(1 for r in self.emulators[name].requests if r.method == "POST" and "token" not in r.path)

    def failures(self, upstream: str) -> int:
        """``gateway_upstream_failures_total`` of ``upstream``, every reason summed."""
        registry = self.gateway.runner.app[METRICS_KEY].registry
        return int(
            sum(
                sample.value
                for family in registry.collect()
                if family.name == "gateway_upstream_failures"
                for sample in family.samples
                if sample.name.endswith("_total") and sample.labels.get("upstream") == upstream
            )
        )

    def metric(self, name: str, **labels: str) -> float:
        registry = self.gateway.runner.app[METRICS_KEY].registry
        value = registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


def write_file(path: Path, upstreams: list[dict[str, Any]], **sections: Any) -> Path:
    path.write_text(json.dumps({"upstreams": upstreams, **sections}))
    return path


@contextlib.asynccontextmanager
async def four_upstreams(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    order: tuple[str, ...] = ("primary", "bedrock", "vertex", "foundry"),
    env: Mapping[str, str] | None = None,
    app_kwargs: Mapping[str, Any] | None = None,
    extra: tuple[dict[str, Any], ...] = (),
    sections: Mapping[str, Any] | None = None,
    providers: tuple[str, ...] = ("anthropic", "bedrock", "vertex", "foundry"),
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> AsyncIterator[Fleet]:
    """``overrides``: fields added to an upstream's entry, by name (``{"bedrock": {"model_map": ...}}``)."""
    async with contextlib.AsyncExitStack() as stack:
        emulated: list[EmulatedUpstream] = []
        for provider in providers:
            workdir = tmp_path / provider
            workdir.mkdir(exist_ok=True)
            upstream = await stack.enter_async_context(emulated_upstream(provider, workdir))
            for name, value in upstream.process_env.items():  # botocore reads its chain from the process
                monkeypatch.setenv(name, value)
            emulated.append(upstream)
        entries = [*extra, *(entry(u) for u in emulated)]
        entries = [{**e, **(overrides or {}).get(e["name"], {})} for e in entries]
        names = [e["name"] for e in entries]
        route = [n for n in order if n in names] + [e["name"] for e in extra if e["name"] not in order]
        options = {"routes": [{"models": ["*"], "upstreams": route}], **(sections or {})}
        path = write_file(tmp_path / "upstreams.json", entries, **options)
        settings = Settings.from_environ(
            {
                "GATEWAY_API_KEYS": CLIENT_KEY,
                "GATEWAY_UPSTREAMS_FILE": str(path),
                # short enough for a test to see a stall, long enough for a whole non-streaming
                # answer on a loaded 2-core machine (a test of stalled headers sets its own)
                "GATEWAY_FIRST_BYTE_TIMEOUT_S": "5",
                "GATEWAY_MAX_RETRY_DELAY_S": "0.05",
                "GATEWAY_NONSTREAMING_FALLBACK": "0",
                **(env or {}),
            }
        )
        app = create_app(settings, **(app_kwargs or {}))
        server = await stack.enter_async_context(running(app, "127.0.0.1", 0))
        yield Fleet(server, {NAMES[u.provider]: u.emulator for u in emulated}, settings)
