"""A gateway in front of one provider's emulator with one ``ManualClock`` for the emulator's prompt
cache and the gateway's cache pipeline (``cache_stack``), and what the cache tests read from it:
answers' usage, upstream betas, ``gateway_cache_breaks_total`` samples."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from emulators import EmulatorConfig, RunningEmulator, run_emulator
from emulators.clock import ManualClock
from emulators.recorder import RecordedRequest
from gateway.app import create_app
from gateway.cache.pipeline import CachePipeline
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import RunningServer, running
from gateway.server import Gateway
from tests.providers.bedrock_harness import apply_aws_env, bedrock_upstream
from tests.providers.foundry_harness import foundry_upstream
from tests.providers.vertex_harness import vertex_upstream
from tests.support.cache_turns import Turn
from tests.support.provider_stack import FIRST_PARTY_KEY, GATEWAY_KEY


@dataclass
class Answer:
    status: int
    body: bytes
    headers: dict[str, str]

    @property
    def usage(self) -> dict[str, Any]:
        """``message_start`` usage of an SSE answer (or ``usage`` of a JSON one)."""
        if self.body.startswith(b"{"):
            return orjson.loads(self.body)["usage"]  # type: ignore[no-any-return]
        for line in self.body.split(b"\n"):
            if line.startswith(b"data: ") and b'"message_start"' in line:
                return orjson.loads(line[6:])["message"]["usage"]  # type: ignore[no-any-return]
        raise AssertionError(f"no message_start in {self.body[:300]!r}")

    @property
    def cached(self) -> int:
        usage = self.usage
        return int(usage["cache_read_input_tokens"]) + int(usage["cache_creation_input_tokens"])

    @property
    def read(self) -> int:
        return int(self.usage["cache_read_input_tokens"])


async def post(
    http: aiohttp.ClientSession, base_url: str, turn: Turn, *, key: str | None = GATEWAY_KEY
) -> Answer:
    headers = [(k, v) for k, v in turn.headers if k.lower() not in ("x-api-key", "authorization")]
    if key is not None:
        headers.append(("x-api-key", key))
    async with http.post(base_url + turn.path, data=turn.wire(), headers=headers) as response:
        return Answer(response.status, await response.read(), dict(response.headers))


def pipeline_of(app: web.Application) -> CachePipeline:
    """The cache pipeline of the gateway ``create_app`` built (found through its routes)."""
    for route in app.router.routes():
        owner = getattr(route.handler, "__self__", None)
        if isinstance(owner, Gateway):
            return owner.cache
    raise LookupError("no Gateway behind this app")


@dataclass
class CacheStack:
    provider: str
    gateway: RunningServer
    app: web.Application
    emulator: RunningEmulator
    metrics: GatewayMetrics
    clock: ManualClock
    http: aiohttp.ClientSession

    @property
    def base_url(self) -> str:
        return self.gateway.base_url

    async def send(self, turn: Turn, *, key: str | None = GATEWAY_KEY) -> Answer:
        return await post(self.http, self.base_url, turn, key=key)

    async def session(self, session_id: str, *, key: str | None = GATEWAY_KEY) -> tuple[int, Any]:
        headers = {"x-api-key": key} if key is not None else {}
        async with self.http.get(f"{self.base_url}/v1/sessions/{session_id}", headers=headers) as response:
            return response.status, await response.json(content_type=None)

    def model_requests(self) -> list[RecordedRequest]:
        """Upstream requests that reached a model endpoint (not token endpoints)."""
        return [r for r in self.emulator.requests if r.method == "POST" and "/token" not in r.path]

    def breaks(self) -> dict[str, float]:
        return cache_breaks(self.metrics, self.provider)

    def advance(self, seconds: float) -> None:
        """Move the emulator's and the gateway's clocks together."""
        self.clock.advance(seconds)


def cache_breaks(metrics: GatewayMetrics, provider: str) -> dict[str, float]:
    """Non-zero ``gateway_cache_breaks_total`` samples of ``provider``, by reason."""
    found: dict[str, float] = {}
    for family in metrics.registry.collect():
        if family.name != "gateway_cache_breaks":
            continue
        for sample in family.samples:
            if sample.name.endswith("_total") and sample.labels["provider"] == provider and sample.value:
                found[sample.labels["reason"]] = sample.value
    return found


def upstream_betas(request: RecordedRequest) -> list[str]:
    """The betas an upstream request carried: the header and Bedrock's ``anthropic_beta`` body
    field (Bedrock gets some in each, as Claude Code's own Bedrock mode sends them)."""
    header = request.header("anthropic-beta")
    names = [b.strip() for b in header.split(",") if b.strip()] if header is not None else []
    body = request.json()
    if isinstance(body, dict):
        names += [b for b in body.get("anthropic_beta", []) if b not in names]
    return names


@contextlib.asynccontextmanager
async def clocked_upstream(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: ManualClock
) -> AsyncIterator[tuple[dict[str, str], RunningEmulator]]:
    """``tests.support.provider_stack.upstream_env`` with the emulator on ``clock`` (its prompt
    cache TTLs follow it)."""
    if provider == "anthropic":
        config = EmulatorConfig(api_keys=frozenset({FIRST_PARTY_KEY}), clock=clock)
        async with run_emulator(config) as emulator:
            yield {"ANTHROPIC_API_KEY": FIRST_PARTY_KEY, "ANTHROPIC_BASE_URL": emulator.base_url}, emulator
    elif provider == "bedrock":
        async with bedrock_upstream(tmp_path, config=EmulatorConfig(clock=clock)) as (env, emulator):
            apply_aws_env(monkeypatch, env)
            yield env, emulator
    elif provider == "vertex":
        async with vertex_upstream(tmp_path, monkeypatch, clock=clock) as (env, emulator):
            yield env, emulator
    else:
        async with foundry_upstream(tmp_path, clock=clock) as (env, emulator):
            yield env, emulator


@contextlib.asynccontextmanager
async def cache_stack(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **settings: str
) -> AsyncIterator[CacheStack]:
    """A gateway (built by the provider factory, as ``provider_stack`` does) in front of
    ``provider``'s emulator; the emulator's clock and the gateway's cache clock are one
    ``ManualClock`` starting now."""
    clock = ManualClock(time.time())
    async with clocked_upstream(provider, tmp_path, monkeypatch, clock) as (env, emulator):
        config = Settings.from_environ(
            {"GATEWAY_API_KEYS": GATEWAY_KEY, "GATEWAY_MAX_RETRIES": "0", **env, **settings}
        )
        assert config.provider.value == provider
        metrics = GatewayMetrics()
        app = create_app(config, metrics=metrics)
        pipeline_of(app).clock = clock.time
        async with running(app, "127.0.0.1", 0) as gateway, aiohttp.ClientSession() as http:
            yield CacheStack(provider, gateway, app, emulator, metrics, clock, http)
