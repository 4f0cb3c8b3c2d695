"""The real anthropic SDK against the emulator: messages, streaming, tools, thinking, stop reasons."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from emulators import RunningEmulator
from tests.support.emulator_sdk import MODEL, block

USER: Any = [{"role": "user", "content": "Hello there, emulator"}]
WEATHER: Any = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1},
        },
        "required": ["city", "unit"],
    },
}
CLOCK: Any = {
    "name": "get_time",
    "description": "Current time in a timezone",
    "input_schema": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]},
}


def usage_total(usage: Any) -> int:
    return int(
        usage.input_tokens + (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
    )


def test_create_echoes_the_prompt(client: anthropic.Anthropic, threaded_emu: RunningEmulator) -> None:
    raw = client.messages.with_raw_response.create(model=MODEL, max_tokens=256, messages=USER)
    message = raw.parse()
    assert message.type == "message" and message.role == "assistant" and message.model == MODEL
    assert message.id.startswith("msg_emu_")
    assert [b.type for b in message.content] == ["text"]
    assert block(message, 0).text == "Echo: Hello there, emulator"
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    assert message.usage.cache_creation is not None
    assert raw.headers["request-id"].startswith("req_emu_")
    assert message._request_id == raw.headers["request-id"]
    assert raw.headers["content-type"].startswith("application/json")
    assert int(raw.headers["anthropic-ratelimit-requests-limit"]) > 0
    assert raw.headers["anthropic-ratelimit-tokens-reset"].endswith("Z")
    (recorded,) = threaded_emu.requests
    assert recorded.method == "POST" and recorded.path == "/v1/messages"
    assert recorded.json() == {"model": MODEL, "max_tokens": 256, "messages": USER}


def test_create_is_deterministic(client: anthropic.Anthropic) -> None:
    first = client.messages.create(model=MODEL, max_tokens=64, messages=USER)
    second = client.messages.create(model=MODEL, max_tokens=64, messages=USER)
    assert first.content == second.content and first.usage == second.usage
    assert first.id != second.id


def test_stream_accumulates_like_create(client: anthropic.Anthropic, threaded_emu: RunningEmulator) -> None:
    prompt: Any = [{"role": "user", "content": "one two three four five six seven eight nine ten"}]
    expected = client.messages.create(model=MODEL, max_tokens=256, messages=prompt)
    with client.messages.stream(model=MODEL, max_tokens=256, messages=prompt) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(pieces) > 2  # several text_delta chunks
    assert "".join(pieces) == block(final, 0).text == block(expected, 0).text
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == expected.usage.output_tokens
    assert usage_total(final.usage) == usage_total(expected.usage)
    streamed = threaded_emu.requests[-1]
    assert streamed.json()["stream"] is True


def test_raw_sse_framing(client: anthropic.Anthropic) -> None:
    with client.messages.with_streaming_response.create(
        model=MODEL,
        max_tokens=64,
        messages=USER,
        stream=True,
    ) as response:
        assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
        assert response.headers["request-id"].startswith("req_emu_")
        body = b"".join(response.iter_bytes()).decode()
    frames = [f for f in body.split("\n\n") if f]
    assert all(f.startswith("event: ") and "\ndata: " in f for f in frames)
    names = [f.split("\n", 1)[0].removeprefix("event: ") for f in frames]
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-2:] == ["message_delta", "message_stop"]
    assert names.count("content_block_delta") >= 2


async def test_async_client_create_and_stream(
    aclient: anthropic.AsyncAnthropic, emu: RunningEmulator
) -> None:
    message = await aclient.messages.create(model=MODEL, max_tokens=128, messages=USER)
    async with aclient.messages.stream(model=MODEL, max_tokens=128, messages=USER) as stream:
        final = await stream.get_final_message()
    assert block(final, 0).text == block(message, 0).text
    assert [r.header("x-stainless-async") for r in emu.requests] == ["async:asyncio"] * 2


def test_count_tokens_matches_usage(client: anthropic.Anthropic) -> None:
    params: dict[str, Any] = {
        "model": MODEL,
        "system": [{"type": "text", "text": "You are terse."}],
        "tools": [WEATHER],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]}],
    }
    counted = client.messages.count_tokens(**params)
    created = client.messages.create(max_tokens=64, **params)
    assert counted.input_tokens == usage_total(created.usage) > 0


def test_tool_use_round_trip(client: anthropic.Anthropic) -> None:
    messages: Any = [{"role": "user", "content": "Weather in Paris? [[scenario:tool_use]]"}]
    with client.messages.stream(
        model=MODEL,
        max_tokens=512,
        tools=[WEATHER],
        messages=messages,
    ) as stream:
        events = [event.type for event in stream]
        first = stream.get_final_message()
    assert first.stop_reason == "tool_use"
    assert [b.type for b in first.content] == ["text", "tool_use"]
    tool_use = block(first, 1)
    assert tool_use.type == "tool_use" and tool_use.name == "get_weather"
    assert tool_use.id.startswith("toolu_emu_")
    assert tool_use.input == {"city": "city example", "unit": "celsius"}
    assert events.count("input_json") >= 2  # the input arrived in several input_json_delta chunks

    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "18C, sunny"}],
        },
    ]
    second = client.messages.create(model=MODEL, max_tokens=512, tools=[WEATHER], messages=messages)
    assert second.stop_reason == "end_turn"
    assert block(second, 0).text == "The get_weather tool returned: 18C, sunny"


def test_tool_use_by_header_and_named_tool(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model=MODEL,
        max_tokens=256,
        tools=[WEATHER, CLOCK],
        messages=[{"role": "user", "content": "What time is it?"}],
        extra_headers={"x-emulator-scenario": "tool_use", "x-emulator-tool": "get_time"},
    )
    assert message.stop_reason == "tool_use"
    assert block(message, -1).type == "tool_use" and block(message, -1).name == "get_time"
    assert block(message, -1).input == {"tz": "tz example"}


def test_tool_choice_forces_the_named_tool(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model=MODEL,
        max_tokens=256,
        tools=[WEATHER, CLOCK],
        tool_choice={"type": "tool", "name": "get_time"},
        messages=USER,
    )
    assert message.stop_reason == "tool_use" and block(message, -1).name == "get_time"


def test_agent_script_calls_tools_in_order_then_answers(client: anthropic.Anthropic) -> None:
    messages: Any = [
        {"role": "user", "content": "Plan my trip [[scenario:agent]] [[tools:get_weather,get_time]]"}
    ]
    called: list[str] = []
    for _ in range(5):
        reply = client.messages.create(model=MODEL, max_tokens=512, tools=[WEATHER, CLOCK], messages=messages)
        messages.append(
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]}
        )
        if reply.stop_reason != "tool_use":
            break
        (call,) = [b for b in reply.content if b.type == "tool_use"]
        called.append(call.name)
        result = {"type": "tool_result", "tool_use_id": call.id, "content": f"result of {call.name}"}
        messages.append({"role": "user", "content": [result]})
    assert called == ["get_weather", "get_time"]
    assert reply.stop_reason == "end_turn"
    text = block(reply, 0).text
    assert text.startswith("All tools finished (get_weather, get_time).")
    assert "result of get_time" in text


def test_thinking_with_signature(client: anthropic.Anthropic) -> None:
    with client.messages.stream(
        model=MODEL,
        max_tokens=2048,
        messages=USER,
        extra_headers={"x-emulator-scenario": "thinking"},
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text"]
    thinking = block(final, 0)
    assert thinking.type == "thinking" and thinking.thinking and len(thinking.signature) > 64
    assert kinds.count("thinking") >= 2 and "signature" in kinds
    assert kinds.index("signature") < kinds.index("text")
    again = client.messages.create(
        model=MODEL,
        max_tokens=2048,
        messages=USER,
        extra_headers={"x-emulator-scenario": "thinking"},
    )
    assert block(again, 0) == thinking  # signatures are deterministic


def test_enabled_thinking_param_adds_a_thinking_block(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model=MODEL,
        max_tokens=4096,
        thinking={"type": "enabled", "budget_tokens": 1024},
        tools=[WEATHER],
        messages=[{"role": "user", "content": "[[scenario:tool_use]] weather"}],
    )
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use"]


@pytest.mark.parametrize(
    ("scenario", "stop_reason"),
    [
        ("text", "end_turn"),
        ("max_tokens", "max_tokens"),
        ("stop_sequence", "stop_sequence"),
        ("pause_turn", "pause_turn"),
        ("refusal", "refusal"),
        ("model_context_window_exceeded", "model_context_window_exceeded"),
    ],
)
@pytest.mark.parametrize("streaming", [False, True], ids=["create", "stream"])
def test_each_stop_reason(
    client: anthropic.Anthropic, scenario: str, stop_reason: str, streaming: bool
) -> None:
    params: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 40,
        "messages": [{"role": "user", "content": f"[[scenario:{scenario}]] please respond"}],
        "stop_sequences": ["###"],
    }
    if streaming:
        with client.messages.stream(**params) as stream:
            message = stream.get_final_message()
    else:
        message = client.messages.create(**params)
    assert message.stop_reason == stop_reason
    if scenario == "max_tokens":
        assert message.usage.output_tokens == 40
    if scenario == "stop_sequence":
        assert message.stop_sequence == "###"
    if scenario == "refusal":
        assert message.stop_details is not None and message.stop_details.type == "refusal"


def test_max_tokens_truncates_any_output(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model=MODEL,
        max_tokens=3,
        messages=[{"role": "user", "content": "a fairly long prompt to echo back"}],
    )
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 3
    assert block(message, 0).text == "Echo: a fair"


def test_stop_sequence_found_in_generated_text(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model=MODEL,
        max_tokens=64,
        stop_sequences=["STOPHERE"],
        messages=[{"role": "user", "content": "say this STOPHERE and not this"}],
    )
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == "STOPHERE"
    assert block(message, 0).text == "Echo: say this "


def test_structured_output_is_json_of_the_schema(client: anthropic.Anthropic) -> None:
    schema = {
        "type": "object",
        "properties": {"title": {"type": "string"}, "score": {"type": "integer"}},
        "required": ["title", "score"],
        "additionalProperties": False,
    }
    message = client.messages.create(
        model=MODEL,
        max_tokens=256,
        messages=USER,
        output_config={"format": {"type": "json_schema", "schema": schema}},
    )
    assert block(message, 0).text == '{"title":"title example","score":1}'


def test_system_role_messages_are_accepted(client: anthropic.Anthropic) -> None:
    message = client.messages.create(
        model=MODEL,
        max_tokens=64,
        messages=[
            {"role": "user", "content": "hi"},
            {"role": "system", "content": "Available agent types: none"},
        ],
    )
    assert block(message, 0).text == "Echo: hi"


def test_models_list_and_retrieve(client: anthropic.Anthropic) -> None:
    page = client.models.list()
    ids = [m.id for m in page.data]
    assert "claude-opus-4-8" in ids and "claude-sonnet-4-5-20250929" in ids
    assert page.first_id == ids[0] and page.last_id == ids[-1] and page.has_more is False
    assert client.models.retrieve("claude-sonnet-4-5").id == "claude-sonnet-4-5-20250929"
    with pytest.raises(anthropic.NotFoundError):
        client.models.retrieve("claude-nope-1")
