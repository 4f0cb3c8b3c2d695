"""One preparation per request, reused by every attempt: the real SDK -> gateway -> each of the
four emulators, with a 529 then a 200 (``fail_first``), a model fallback after overloads and the
relay's non-streaming fallback. ``Preparer.prepare`` and ``Provider.messages`` are observed on the
real provider (wrapped, then called through), so the counts are the gateway's own."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import pytest

from emulators import EmulatorConfig, RunningEmulator, run_emulator
from emulators.recorder import RecordedRequest
from gateway.app import create_app
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import running
from gateway.providers.base import ClientRequest, PreparedRequest, Provider, UpstreamResponse
from gateway.providers.factory import build_provider
from tests.providers.bedrock_harness import apply_aws_env, bedrock_upstream
from tests.providers.foundry_harness import foundry_upstream
from tests.providers.vertex_harness import vertex_upstream

KEY = "sk-gw-prepared-once"
UPSTREAM_KEY = "sk-upstream-prepared-once"
MODEL = "claude-sonnet-4-6"
USER: Any = [{"role": "user", "content": "Hello once"}]
IsMessages = Callable[[RecordedRequest], bool]


@dataclass
class Spy:
    prepared: list[ClientRequest] = field(default_factory=list)  # calls of the provider's Preparer
    sent: list[PreparedRequest] = field(default_factory=list)  # one per attempt

    def watch(self, provider: Provider) -> None:
        prepare, messages = provider.preparer.prepare, provider.messages

        def counting(request: ClientRequest) -> PreparedRequest:
            self.prepared.append(request)
            return prepare(request)

        async def sending(request: PreparedRequest) -> UpstreamResponse:
            self.sent.append(request)
            return await messages(request)

        provider.preparer.prepare = counting  # type: ignore[method-assign]
        provider.messages = sending  # type: ignore[method-assign]


@contextlib.asynccontextmanager
async def upstream(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[dict[str, str], RunningEmulator, IsMessages]]:
    if name == "anthropic":
        async with run_emulator(EmulatorConfig(api_keys=frozenset({UPSTREAM_KEY}))) as emulator:
            env = {"ANTHROPIC_API_KEY": UPSTREAM_KEY, "ANTHROPIC_BASE_URL": emulator.base_url}
            yield env, emulator, lambda r: r.path_only == "/v1/messages"
    elif name == "bedrock":
        async with bedrock_upstream(tmp_path) as (env, emulator):
            apply_aws_env(monkeypatch, env)
            yield env, emulator, lambda r: r.path_only.startswith("/model/")
    elif name == "vertex":
        async with vertex_upstream(tmp_path, monkeypatch) as (env, emulator):
            yield env, emulator, lambda r: r.path_only.startswith("/v1/")
    else:
        async with foundry_upstream(tmp_path) as (env, emulator):
            yield env, emulator, lambda r: r.path_only == "/anthropic/v1/messages"


@contextlib.asynccontextmanager
async def gateway(env: dict[str, str], spy: Spy, **extra: str) -> AsyncIterator[anthropic.AsyncAnthropic]:
    settings = Settings.from_environ({"GATEWAY_API_KEYS": KEY, "GATEWAY_MAX_RETRIES": "3", **env, **extra})
    provider = build_provider(settings)
    spy.watch(provider)
    async with running(create_app(settings, provider, metrics=GatewayMetrics()), "127.0.0.1", 0) as server:
        client = anthropic.AsyncAnthropic(api_key=KEY, base_url=server.base_url, max_retries=0)
        try:
            yield client
        finally:
            await client.close()


def fault(spec: str) -> dict[str, str]:
    return {"x-emulator-fault": spec, "x-emulator-fault-key": uuid.uuid4().hex}


@pytest.mark.parametrize("name", ["anthropic", "bedrock", "vertex", "foundry"])
async def test_a_retry_sends_the_same_prepared_bytes(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = Spy()
    async with upstream(name, tmp_path, monkeypatch) as (env, emulator, is_messages):
        async with gateway(env, spy) as client:
            raw = await client.messages.with_raw_response.create(
                model=MODEL,
                max_tokens=16,
                messages=USER,
                extra_headers=fault("fail_first=1:529,retry_after_ms=1"),
            )
        sent = [r for r in emulator.requests if is_messages(r)]
    assert raw.status_code == 200 and raw.headers["x-gateway-retries"] == "1"
    assert len(spy.prepared) == 1  # prepared once, before the retry loop
    assert len(spy.sent) == 2 and spy.sent[0] is spy.sent[1]  # both attempts got the same object
    assert [r.body for r in sent] == [spy.sent[0].body] * 2  # and the upstream the same bytes


async def test_a_model_fallback_prepares_once_per_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain HTTP client (no ``x-stainless-retry-count``) gets the full gateway budget."""
    spy = Spy()
    async with upstream("anthropic", tmp_path, monkeypatch) as (env, emulator, is_messages):
        async with (
            gateway(
                env, spy, GATEWAY_FALLBACK_MODEL="claude-haiku-4-5", GATEWAY_FALLBACK_AFTER_OVERLOADS="2"
            ) as client,
            aiohttp.ClientSession() as session,
            session.post(
                str(client.base_url).rstrip("/") + "/v1/messages",
                json={"model": MODEL, "max_tokens": 16, "messages": USER},
                headers={"x-api-key": KEY, **fault("fail_first=3:529,retry_after_ms=1")},
            ) as response,
        ):
            assert response.status == 200
            assert response.headers["x-gateway-model-fallback"] == "claude-haiku-4-5"
        sent = [r for r in emulator.requests if is_messages(r)]
    # 529, 529 -> fallback -> 529, 200: four attempts, two preparations (one per model)
    assert [r.model for r in spy.prepared] == [MODEL, "claude-haiku-4-5"]
    assert [r.upstream_model for r in spy.sent] == [MODEL, MODEL, "claude-haiku-4-5", "claude-haiku-4-5"]
    assert spy.sent[0] is spy.sent[1] and spy.sent[2] is spy.sent[3]
    assert [r.json()["model"] for r in sent] == [MODEL, MODEL, "claude-haiku-4-5", "claude-haiku-4-5"]


@pytest.mark.parametrize("name", ["anthropic", "bedrock"])
async def test_the_non_streaming_fallback_is_derived_from_the_prepared_request(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = Spy()
    async with upstream(name, tmp_path, monkeypatch) as (env, emulator, is_messages):
        async with (
            gateway(env, spy) as client,
            client.messages.stream(
                model=MODEL, max_tokens=16, messages=USER, extra_headers=fault("first=1,reset_after=1")
            ) as stream,
        ):
            message = await stream.get_final_message()
        sent = [r for r in emulator.requests if is_messages(r)]
    assert message.stop_reason == "end_turn"
    assert len(spy.prepared) == 1  # the variant is derived, not prepared again
    streamed, fallback = spy.sent
    assert streamed.stream and not fallback.stream and fallback.dropped_betas == streamed.dropped_betas
    assert [r.body for r in sent] == [streamed.body, fallback.body]
    if name == "anthropic":
        assert sent[0].json() == {**sent[1].json(), "stream": True}
    else:
        assert sent[0].path.endswith("/invoke-with-response-stream") and sent[1].path.endswith("/invoke")
