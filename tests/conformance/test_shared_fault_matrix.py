"""One fault matrix, two clients of the shared stream guard (``gateway.streaming.guard``): the
gateway's relay (the real SDK streaming through the gateway) and the loop's in-process
``ProviderModelCaller``, built from the same settings against the same emulator.

For every provider and every streaming fault of ``test_fault_matrix``, both must reach the same
outcome class, and the one the matrix expects: ``completed`` (a whole message, straight or after
retries), ``fallback`` (the stream failed before content and was replaced by one non-streaming
request: for the relay a complete message after a non-streaming upstream call (its
``x-gateway-fallback`` header cannot be relied on once keep-alive pings started the response),
for the loop its ``fallback`` status event) or ``error`` (an Anthropic error reached the client) — with the same
upstream calls, in the same order.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import anthropic
import pytest

from gateway.config import Settings
from gateway.providers.base import PreparedRequest, UpstreamResponse
from gateway.providers.factory import build_provider
from loop.callers.provider import ProviderModelCaller, StreamGuard, retry_policy
from loop.events import StatusEvent
from loop.request import ModelRequest
from tests.conformance.test_fault_matrix import CASES, FAST, MODEL, Case, _calls
from tests.support.provider_stack import PROVIDERS, ProviderStack, provider_stack, upstream_env

STREAMING = [case for case in CASES if case.streaming]
MESSAGES = [{"role": "user", "content": "Tell me about the weather"}]


def expected(case: Case) -> str:
    if case.outcome == "error":
        return "error"
    return "fallback" if "n" in case.upstream_calls else "completed"


async def _relay(stack: ProviderStack, fault: str, key: str) -> str:
    client = stack.client(**{"x-emulator-fault": fault, "x-emulator-fault-key": key}).with_options(timeout=10)
    try:
        async with client.messages.stream(model=MODEL, max_tokens=64, messages=MESSAGES) as stream:  # type: ignore[arg-type]
            message = await stream.get_final_message()
    except anthropic.APIStatusError as exc:
        assert isinstance(exc.body, dict) and exc.body["error"]["message"], exc.body
        return "error"
    finally:
        await client.close()
    assert message.stop_reason == "end_turn" and message.content
    return "fallback" if "n" in _calls(stack) else "completed"


async def _loop(settings: Settings, fault: str, key: str) -> str:
    provider = build_provider(settings)
    send = provider.messages

    async def faulty(request: PreparedRequest) -> UpstreamResponse:
        headers = [*request.headers, ("x-emulator-fault", fault), ("x-emulator-fault-key", key)]
        return await send(replace(request, headers=headers))

    provider.messages = faulty  # type: ignore[method-assign]
    request = ModelRequest(
        body={"model": MODEL, "max_tokens": 64, "stream": True, "messages": MESSAGES},
        betas=(),
        request_id=f"rid-{key}",
    )
    items: list[Any] = []
    caller = ProviderModelCaller(
        provider,
        policy=retry_policy(settings),
        guard=StreamGuard.from_settings(settings),
        clock=asyncio.get_running_loop().time,  # the virtual time of conftest's loop
    )
    async with caller:
        async for item in caller(request):
            items.append(item)
    events = [i for i in items if isinstance(i, dict)]
    fell_back = any(isinstance(i, StatusEvent) and i.kind == "fallback" for i in items)
    last = events[-1]
    if last["type"] == "error":
        assert last["error"]["message"], last
        return "error"
    kinds = [e["type"] for e in events]
    assert last["type"] == "message_stop" and kinds.count("message_start") == 1, kinds
    assert "content_block_delta" in kinds
    return "fallback" if fell_back else "completed"


@pytest.mark.parametrize("case", STREAMING, ids=lambda c: c.name)
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_relay_and_loop_caller_agree(
    provider: str, case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fault = case.bedrock_fault if provider == "bedrock" and case.bedrock_fault else case.fault
    async with provider_stack(provider, tmp_path, monkeypatch, **FAST) as stack:
        relay_outcome = await _relay(stack, fault, f"relay-{provider}-{case.name}")
        relay_calls = _calls(stack)
    (tmp_path / "loop").mkdir()
    async with upstream_env(provider, tmp_path / "loop", monkeypatch) as (env, emulator):
        settings = Settings.from_environ({**env, **FAST})
        loop_outcome = await _loop(settings, fault, f"loop-{provider}-{case.name}")
        loop_stack = ProviderStack(provider, stack.gateway, emulator, stack.metrics)
        loop_calls = _calls(loop_stack)
    assert (relay_outcome, loop_outcome) == (expected(case), expected(case))
    assert relay_calls == loop_calls == case.upstream_calls
