"""An ``error`` event before any content event: the answer a non-streaming request would have had.

Anthropic sends ``event: error`` (``overloaded_error``) inside a 200 stream "where a non-streaming
request would get a 529" (streaming docs, "Error events"); Bedrock sends the overload as a
``serviceUnavailableException`` frame. The gateway holds back what precedes the first content
event, so when the error comes first nothing has reached the client yet. Relayed as it came (a
200 whose stream is one ``error`` event), the SDKs raise without retrying: they retry statuses,
not events. So the gateway answers as for a stream cut before content: one non-streaming retry
when ``GATEWAY_NONSTREAMING_FALLBACK`` is on (the fault matrix's ``overloaded_before_content``),
else the status of the error's type, which the SDK retries. An error type a retry cannot help
(``invalid_request_error``) is answered with its status at once, the upstream's message kept,
without another upstream call. The loop's in-process caller takes the same decision
(``gateway.streaming.guard.error_before_content``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import anthropic
import pytest
from aiohttp import web

from gateway.app import create_app
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import running
from gateway.providers.base import PreparedRequest, UpstreamResponse
from gateway.providers.factory import build_provider
from gateway.streaming.sse import encode_event
from loop.callers.provider import ProviderModelCaller, StreamGuard, retry_policy
from loop.request import ModelRequest
from tests.conformance.test_fault_matrix import FAST, MODEL, _calls
from tests.support.local_app import serving
from tests.support.provider_stack import PROVIDERS, provider_stack, upstream_env
from tests.support.sse_answers import message_start

NO_FALLBACK = {**FAST, "GATEWAY_NONSTREAMING_FALLBACK": "false", "GATEWAY_MAX_RETRIES": "0"}
CALLS = web.AppKey("calls", list[str])
MESSAGES: list[Any] = [{"role": "user", "content": "Tell me about the weather"}]


def _overload_fault(provider: str) -> str:
    """The overload right after ``message_start`` (SSE: after its ping too; Bedrock sends none)."""
    return "overloaded_after=1,first=1" if provider == "bedrock" else "overloaded_after=2,first=1"


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_overload_before_content_is_a_529_the_sdk_retries(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fault = _overload_fault(provider)
    async with provider_stack(provider, tmp_path, monkeypatch, **NO_FALLBACK) as stack:
        headers = {"x-emulator-fault": fault, "x-emulator-fault-key": f"{provider}-once"}
        client = stack.client(**headers)
        with pytest.raises(anthropic.APIStatusError) as info:
            async with client.messages.stream(model=MODEL, max_tokens=64, messages=MESSAGES) as stream:
                await stream.get_final_message()
        await client.close()
        assert info.value.status_code == 529
        assert isinstance(info.value.body, dict)
        assert info.value.body["error"]["type"] == "overloaded_error"
        assert info.value.body["error"]["message"]
        assert _calls(stack) == ("s",)
        errors = {"provider": provider, "type": "overloaded_error"}
        assert stack.metrics.registry.get_sample_value("gateway_upstream_errors_total", errors) == 1

        # the SDK's own retry of that 529 (a fresh fault key: its first request is overloaded)
        retrying = stack.client(**{**headers, "x-emulator-fault-key": f"{provider}-retried"}).with_options(
            max_retries=1
        )
        async with retrying.messages.stream(model=MODEL, max_tokens=64, messages=MESSAGES) as stream:
            message = await stream.get_final_message()
        await retrying.close()
        assert message.stop_reason == "end_turn" and message.content
        assert _calls(stack) == ("s", "s", "s")


async def _refusing_upstream(request: web.Request) -> web.StreamResponse:
    """A 200 stream that refuses after ``message_start``: an error no retry can help."""
    await request.read()
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    await response.write(message_start(MODEL, message_id="msg_refused"))
    error = {"type": "error", "error": {"type": "invalid_request_error", "message": "prompt refused here"}}
    await response.write(encode_event("error", error))
    await response.write_eof()
    request.app[CALLS].append(request.path)
    return response


async def test_a_refusal_before_content_is_its_status_without_another_call() -> None:
    upstream = web.Application()
    upstream[CALLS] = []
    upstream.router.add_post("/v1/messages", _refusing_upstream)
    async with serving(upstream) as url:
        settings = Settings.from_environ(
            {"GATEWAY_API_KEYS": "sk-gw", "ANTHROPIC_API_KEY": "sk-up", "ANTHROPIC_BASE_URL": url}
        )
        metrics = GatewayMetrics()
        async with running(create_app(settings, metrics=metrics), "127.0.0.1", 0) as gateway:
            client = anthropic.AsyncAnthropic(api_key="sk-gw", base_url=gateway.base_url, max_retries=0)
            with pytest.raises(anthropic.BadRequestError) as info:
                async with client.messages.stream(model=MODEL, max_tokens=64, messages=MESSAGES) as stream:
                    await stream.get_final_message()
            await client.close()
    assert isinstance(info.value.body, dict)
    assert info.value.body["error"] == {"type": "invalid_request_error", "message": "prompt refused here"}
    assert upstream[CALLS] == ["/v1/messages"]  # no non-streaming retry of a refusal
    errors = {"provider": "anthropic", "type": "invalid_request_error"}
    assert metrics.registry.get_sample_value("gateway_upstream_errors_total", errors) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_the_loop_caller_gets_the_529_too(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with upstream_env(provider, tmp_path, monkeypatch) as (env, _):
        settings = Settings.from_environ({**env, **NO_FALLBACK})
        provider_ = build_provider(settings)
        send = provider_.messages
        fault = _overload_fault(provider)

        async def faulty(request: PreparedRequest) -> UpstreamResponse:
            headers = [*request.headers, ("x-emulator-fault", fault), ("x-emulator-fault-key", provider)]
            return await send(replace(request, headers=headers))

        provider_.messages = faulty  # type: ignore[method-assign]
        caller = ProviderModelCaller(
            provider_,
            policy=retry_policy(settings),
            guard=StreamGuard.from_settings(settings),
            clock=asyncio.get_running_loop().time,
        )
        request = ModelRequest(
            body={"model": MODEL, "max_tokens": 64, "stream": True, "messages": MESSAGES},
            betas=(),
            request_id=f"rid-{provider}",
        )
        async with caller:
            items = [item async for item in _items(caller, request)]
    events = [i for i in items if isinstance(i, dict)]
    assert [e["type"] for e in events] == ["error"]  # the held-back message_start is not passed on
    assert events[0]["status"] == 529 and events[0]["error"]["type"] == "overloaded_error"


async def _items(caller: ProviderModelCaller, request: ModelRequest) -> AsyncIterator[Any]:
    async for item in caller(request):
        yield item


async def _flooding_upstream(request: web.Request) -> web.StreamResponse:
    """``message_start``, then events that are neither content nor an end (3 MB of them)."""
    await request.read()
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    start = {"type": "message_start", "message": {"id": "msg_flood", "type": "message", "role": "assistant"}}
    await response.write(encode_event("message_start", start))
    pad = encode_event("hello", {"type": "hello", "pad": "y" * 60_000})
    for _ in range(50):
        await response.write(pad)
    await response.write_eof()
    return response


async def test_what_is_held_back_before_content_is_bounded() -> None:
    """All of it was held in memory (a hostile upstream took the gateway to 1.6 GB, the client
    waiting): past ``MAX_HELD_BYTES`` the stream is a failure before content."""
    upstream = web.Application()
    upstream.router.add_post("/v1/messages", _flooding_upstream)
    async with serving(upstream) as url:
        settings = Settings.from_environ(
            {
                "GATEWAY_API_KEYS": "sk-gw",
                "ANTHROPIC_API_KEY": "sk-up",
                "ANTHROPIC_BASE_URL": url,
                "GATEWAY_NONSTREAMING_FALLBACK": "false",
            }
        )
        async with running(create_app(settings), "127.0.0.1", 0) as gateway:
            client = anthropic.AsyncAnthropic(api_key="sk-gw", base_url=gateway.base_url, max_retries=0)
            with pytest.raises(anthropic.APIStatusError) as info:
                async with client.messages.stream(model=MODEL, max_tokens=64, messages=MESSAGES) as stream:
                    await stream.get_final_message()
            await client.close()
    assert info.value.status_code == 502
    assert "bytes before any content" in info.value.body["error"]["message"]  # type: ignore[index]
