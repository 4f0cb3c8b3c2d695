"""The real anthropic SDK -> gateway -> each provider's emulator: identical client code and
results whichever upstream the deployment is configured for."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from tests.support.provider_stack import ProviderStack

MODEL = "claude-sonnet-4-5"
USER: list[dict[str, Any]] = [{"role": "user", "content": "What is the weather like in Paris?"}]
TOOLS: list[dict[str, Any]] = [
    {
        "name": "get_weather",
        "description": "Current weather for a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]
LONG_SYSTEM = [
    {
        "type": "text",
        "text": "You are a meticulous assistant. " * 400,  # ~3,200 tokens: above every minimum
        "cache_control": {"type": "ephemeral"},
    }
]


async def test_create(stack: ProviderStack) -> None:
    client = stack.client()
    message = await client.messages.create(model=MODEL, max_tokens=128, messages=USER)  # type: ignore[arg-type]
    assert message.type == "message" and message.role == "assistant"
    assert message.stop_reason == "end_turn"
    assert message.content[0].type == "text" and message.content[0].text
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    await client.close()


async def test_stream(stack: ProviderStack) -> None:
    client = stack.client()
    async with client.messages.stream(model=MODEL, max_tokens=128, messages=USER) as stream:  # type: ignore[arg-type]
        text = "".join([chunk async for chunk in stream.text_stream])
        final = await stream.get_final_message()
    assert text and final.content[0].text == text  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn" and final.usage.output_tokens > 0
    await client.close()


async def test_count_tokens_matches_usage(stack: ProviderStack) -> None:
    client = stack.client()
    counted = await client.messages.count_tokens(model=MODEL, messages=USER, tools=TOOLS)  # type: ignore[arg-type]
    created = await client.messages.create(model=MODEL, max_tokens=64, messages=USER, tools=TOOLS)  # type: ignore[arg-type]
    usage = created.usage
    total = (
        usage.input_tokens + (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
    )
    assert counted.input_tokens == total
    await client.close()


async def test_tool_use_round_trip(stack: ProviderStack) -> None:
    client = stack.client(**{"x-emulator-scenario": "tool_use"})
    first = await client.messages.create(model=MODEL, max_tokens=256, messages=USER, tools=TOOLS)  # type: ignore[arg-type]
    assert first.stop_reason == "tool_use"
    (call,) = [b for b in first.content if b.type == "tool_use"]
    assert call.name == "get_weather" and isinstance(call.input, dict) and call.input.get("city")
    follow_up = [
        *USER,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "18C, sunny"}],
        },
    ]
    async with stack.client().messages.stream(
        model=MODEL,
        max_tokens=256,
        messages=follow_up,
        tools=TOOLS,  # type: ignore[arg-type]
    ) as stream:
        final = await stream.get_final_message()
    assert final.stop_reason == "end_turn" and final.content[0].type == "text"
    await client.close()


async def test_thinking_with_signatures(stack: ProviderStack) -> None:
    client = stack.client(**{"x-emulator-scenario": "thinking"})
    async with client.messages.stream(
        model=MODEL,
        max_tokens=4096,
        messages=USER,  # type: ignore[arg-type]
        thinking={"type": "enabled", "budget_tokens": 2048},
    ) as stream:
        final = await stream.get_final_message()
    thinking = [b for b in final.content if b.type == "thinking"]
    assert thinking and thinking[0].thinking and thinking[0].signature  # type: ignore[union-attr]
    assert final.content[-1].type == "text"
    await client.close()


@pytest.mark.parametrize(
    ("scenario", "status", "error_type", "exception"),
    [
        ("error:429", 429, "rate_limit_error", anthropic.RateLimitError),
        ("error:400", 400, "invalid_request_error", anthropic.BadRequestError),
        ("error:500", 500, "api_error", anthropic.InternalServerError),
    ],
)
async def test_errors_keep_their_type_and_status(
    stack: ProviderStack, scenario: str, status: int, error_type: str, exception: type[Exception]
) -> None:
    client = stack.client(**{"x-emulator-scenario": scenario})
    with pytest.raises(exception) as info:
        await client.messages.create(model=MODEL, max_tokens=32, messages=USER)  # type: ignore[arg-type]
    error = info.value
    assert isinstance(error, anthropic.APIStatusError)
    assert error.status_code == status
    body = error.body
    assert isinstance(body, dict) and body["type"] == "error" and body["error"]["type"] == error_type
    await client.close()


async def test_overloaded_is_529_everywhere(stack: ProviderStack) -> None:
    client = stack.client(**{"x-emulator-scenario": "error:529"})
    with pytest.raises(anthropic.APIStatusError) as info:
        await client.messages.create(model=MODEL, max_tokens=32, messages=USER)  # type: ignore[arg-type]
    assert info.value.status_code == 529
    assert info.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    await client.close()


async def test_unknown_model_is_404(stack: ProviderStack) -> None:
    client = stack.client()
    with pytest.raises(anthropic.NotFoundError) as info:
        await client.messages.create(model="claude-nonexistent-9", max_tokens=32, messages=USER)  # type: ignore[arg-type]
    assert "claude-nonexistent-9" in info.value.body["error"]["message"]  # type: ignore[index]
    await client.close()


async def test_cache_usage_reported(stack: ProviderStack) -> None:
    client = stack.client()
    first = await client.messages.create(model=MODEL, max_tokens=32, system=LONG_SYSTEM, messages=USER)  # type: ignore[arg-type]
    async with client.messages.stream(
        model=MODEL, max_tokens=32, system=LONG_SYSTEM, messages=USER
    ) as stream:  # type: ignore[arg-type]
        second = await stream.get_final_message()
    assert (first.usage.cache_creation_input_tokens or 0) > 1000
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    exposition = stack.metrics.exposition().decode()
    assert (
        f'gateway_tokens_total{{kind="cache_read",model="claude-sonnet-4-5",provider="{stack.provider}"'
        in exposition
    )
    await client.close()


async def test_models_listing(stack: ProviderStack) -> None:
    client = stack.client()
    page = await client.models.list()
    assert any(m.id.startswith(MODEL) for m in page.data)  # alias or dated id
    await client.close()
