"""First-party clients through the gateway to Vertex AI: request shaping, streaming, errors, cache."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from emulators import RunningEmulator
from tests.providers.vertex_harness import (
    GATEWAY_KEY,
    PROJECT,
    REGION,
    error_of,
    follow_up,
    predict_requests,
    token_requests,
    vertex_gateway,
    vertex_upstream,
)

MODEL = "claude-sonnet-4-6"
VERTEX_MODEL = "claude-sonnet-4-6"
USER: Any = [{"role": "user", "content": "Hello gateway"}]
TOOL: Any = {
    "name": "read_file",
    "description": "Read a file",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
}


class Stack:
    def __init__(self, url: str, emulator: RunningEmulator) -> None:
        self.url = url
        self.emulator = emulator
        self.client = anthropic.AsyncAnthropic(api_key=GATEWAY_KEY, base_url=url, max_retries=0)

    def predicts(self) -> list[Any]:
        return predict_requests(self.emulator)


@pytest.fixture
async def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Stack]:
    async with vertex_upstream(tmp_path, monkeypatch) as (env, emulator), vertex_gateway(env) as url:
        stack = Stack(url, emulator)
        async with stack.client:
            yield stack


def _path(model: str, verb: str) -> str:
    return f"/v1/projects/{PROJECT}/locations/{REGION}/publishers/anthropic/models/{model}:{verb}"


async def test_create_reshapes_the_request_for_vertex(stack: Stack) -> None:
    message = await stack.client.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=USER,
        extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14,token-counting-2024-11-01"},
    )
    assert message.content[0].type == "text" and message.content[0].text == "Echo: Hello gateway"
    (request,) = stack.predicts()
    assert request.path == _path(VERTEX_MODEL, "rawPredict")
    body = request.json()
    assert list(body) == ["max_tokens", "messages", "anthropic_version"]
    assert body["anthropic_version"] == "vertex-2023-10-16"
    assert request.header("anthropic-beta") == "interleaved-thinking-2025-05-14"
    assert request.header("anthropic-version") is None and request.header("x-client-request-id") is None
    assert request.header("x-api-key") is None
    assert (request.header("authorization") or "").startswith("Bearer ya29.emu-")


async def test_first_request_refreshes_the_token_once_for_a_burst(stack: Stack) -> None:
    import asyncio

    assert token_requests(stack.emulator) == 0
    results = await asyncio.gather(
        *(stack.client.messages.create(model=MODEL, max_tokens=16, messages=USER) for _ in range(5))
    )
    assert len(results) == 5 and token_requests(stack.emulator) == 1


async def test_stream(stack: Stack) -> None:
    async with stack.client.messages.stream(model=MODEL, max_tokens=64, messages=USER) as stream:
        message = await stream.get_final_message()
    assert message.content[0].type == "text" and message.content[0].text == "Echo: Hello gateway"
    (request,) = stack.predicts()
    assert request.path == _path(VERTEX_MODEL, "streamRawPredict")
    assert request.json()["stream"] is True and "model" not in request.json()


async def test_count_tokens(stack: Stack) -> None:
    count = await stack.client.messages.count_tokens(
        model="claude-sonnet-4-5",
        messages=USER,
        extra_headers={"anthropic-beta": "token-counting-2024-11-01"},
    )
    assert count.input_tokens > 0
    (request,) = stack.predicts()
    assert request.path == _path("count-tokens", "rawPredict")
    body = request.json()
    assert body["model"] == "claude-sonnet-4-5@20250929" and body["anthropic_version"] == "vertex-2023-10-16"
    assert request.header("anthropic-beta") is None


async def test_tool_use_round_trip_and_thinking(stack: Stack) -> None:
    first = await stack.client.messages.create(
        model=MODEL,
        max_tokens=4096,
        thinking={"type": "enabled", "budget_tokens": 1024},
        tools=[TOOL],
        messages=USER,
        extra_headers={"x-emulator-scenario": "tool_use"},
    )
    assert first.content[0].type == "thinking"
    call = next(block for block in first.content if block.type == "tool_use")
    assert first.stop_reason == "tool_use" and call.name == "read_file"
    async with stack.client.messages.stream(
        model=MODEL,
        max_tokens=4096,
        thinking={"type": "enabled", "budget_tokens": 1024},
        tools=[TOOL],
        messages=follow_up(USER, first, call.id, "data"),
        extra_headers={"x-emulator-scenario": "tool_use"},
    ) as stream:
        second = await stream.get_final_message()
    assert second.stop_reason == "end_turn"
    assert stack.predicts()[1].json()["messages"][1]["content"][0]["type"] == "thinking"


async def test_cache_usage_passes_through(stack: Stack) -> None:
    system: Any = [{"type": "text", "text": "policy " * 3000, "cache_control": {"type": "ephemeral"}}]
    first = await stack.client.messages.create(model=MODEL, max_tokens=16, system=system, messages=USER)
    second = await stack.client.messages.create(model=MODEL, max_tokens=16, system=system, messages=USER)
    assert first.usage.cache_creation_input_tokens and not first.usage.cache_read_input_tokens
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens


async def test_request_tags_never_reach_vertex(stack: Stack) -> None:
    message = await stack.client.messages.create(
        model=MODEL,
        max_tokens=16,
        messages=USER,
        extra_body={"tags": {"team": "search"}},
        extra_headers={"anthropic-beta": "request-tags-2026-08-21,interleaved-thinking-2025-05-14"},
    )
    assert message.content
    (request,) = stack.predicts()
    assert "tags" not in request.json()
    assert request.header("anthropic-beta") == "interleaved-thinking-2025-05-14"


async def test_unknown_models(stack: Stack) -> None:
    with pytest.raises(anthropic.NotFoundError) as local:
        await stack.client.messages.create(model="gpt-4o", max_tokens=16, messages=USER)
    assert local.value.type == "not_found_error" and not stack.predicts()
    for model in ("claude-nonexistent-9", "claude-nonexistent@20990101"):
        with pytest.raises(anthropic.NotFoundError) as upstream:
            await stack.client.messages.create(model=model, max_tokens=16, messages=USER)
        assert error_of(upstream.value) == {
            "type": "not_found_error",
            "message": f"model: {model} is not served by the vertex upstream (map it with GATEWAY_MODEL_MAP)",
        }
        assert PROJECT not in upstream.value.message and "Publisher Model" not in upstream.value.message
    assert len(stack.predicts()) == 2


@pytest.mark.parametrize(
    ("status", "exception", "error_type"),
    [
        (401, anthropic.AuthenticationError, "authentication_error"),
        (403, anthropic.PermissionDeniedError, "permission_error"),
        (404, anthropic.NotFoundError, "not_found_error"),
        (429, anthropic.RateLimitError, "rate_limit_error"),
        (503, anthropic.ServiceUnavailableError, "api_error"),
        (504, anthropic.GatewayTimeoutError, "timeout_error"),
        (500, anthropic.InternalServerError, "api_error"),
        (529, anthropic.OverloadedError, "overloaded_error"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_errors_are_mapped_and_redacted(
    stack: Stack, status: int, exception: type[anthropic.APIStatusError], error_type: str, stream: bool
) -> None:
    headers = {"x-emulator-scenario": f"error:{status}"}
    with pytest.raises(exception) as info:
        if stream:
            async with stack.client.messages.stream(
                model=MODEL, max_tokens=16, messages=USER, extra_headers=headers
            ) as events:
                await events.get_final_message()
        else:
            await stack.client.messages.create(
                model=MODEL, max_tokens=16, messages=USER, extra_headers=headers
            )
    error = info.value
    assert error.status_code == status and error.type == error_type
    assert PROJECT not in error.message and "anthropic-claude" not in error.message
    # retryable errors carry the gateway's advice (gateway.retry_budget): this SDK client may retry
    advice = "false" if status == 401 else "true" if status == 429 or status >= 500 else None
    assert error.response.headers.get("x-should-retry") == advice


async def test_anthropic_400_is_relayed_with_its_message(stack: Stack) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        await stack.client.messages.create(
            model=MODEL,
            max_tokens=16,
            messages=[{"role": "user", "content": "hi"}],
            extra_body={"temperature": 3.0},
        )
    assert error_of(info.value)["message"] == "temperature: Input should be between 0 and 1"


async def test_request_size_error_becomes_input_is_too_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        vertex_upstream(tmp_path, monkeypatch, vertex_max_request_bytes=4096) as (env, _),
        vertex_gateway(env) as url,
        anthropic.AsyncAnthropic(api_key=GATEWAY_KEY, base_url=url, max_retries=0) as client,
    ):
        with pytest.raises(anthropic.BadRequestError) as info:
            await client.messages.create(
                model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "x" * 8000}]
            )
    assert error_of(info.value) == {"type": "invalid_request_error", "message": "Input is too long."}


async def test_list_models_is_the_model_map(stack: Stack) -> None:
    models = [model.id async for model in stack.client.models.list()]
    assert "claude-sonnet-4-5" in models and "claude-opus-4-8" in models
    assert not stack.emulator.requests
