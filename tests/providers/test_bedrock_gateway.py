"""The real SDK -> gateway (bedrock provider) -> Bedrock emulator, all on loopback sockets."""

from __future__ import annotations

import base64
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import orjson
import pytest
from anthropic.types import MessageParam, TextBlockParam, ToolParam

from emulators import EmulatorConfig, ManualClock, RunningEmulator
from emulators.bedrock_config import DEFAULT_PROFILE_ARN
from tests.providers.bedrock_harness import GATEWAY_KEY, apply_aws_env, bedrock_gateway, bedrock_upstream

MODEL = "claude-sonnet-4-6"
UPSTREAM_ID = "us.anthropic.claude-sonnet-4-6"
WEATHER: ToolParam = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


class Stack:
    def __init__(self, gateway_url: str, emulator: RunningEmulator) -> None:
        self.url = gateway_url
        self.emulator = emulator
        self.client = anthropic.AsyncAnthropic(api_key=GATEWAY_KEY, base_url=gateway_url, max_retries=0)

    def last_upstream(self) -> Any:
        return self.emulator.requests[-1]


@contextlib.asynccontextmanager
async def stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: EmulatorConfig | None = None, **overrides: str
) -> AsyncIterator[Stack]:
    async with bedrock_upstream(tmp_path, config=config or EmulatorConfig(clock=ManualClock())) as (env, emu):
        apply_aws_env(monkeypatch, env)
        async with bedrock_gateway(env, **overrides) as (server, _):
            yield Stack(server.base_url, emu)


def block(message: Any, index: int) -> Any:
    """Content block ``index`` of an SDK message, untyped (tests check the type themselves)."""
    return message.content[index]


def error_of(exc: anthropic.APIStatusError) -> Any:
    """The ``error`` object of an Anthropic error body."""
    assert isinstance(exc.body, dict)
    return exc.body["error"]


def user(text: str) -> list[MessageParam]:
    return [{"role": "user", "content": text}]


async def test_create_maps_model_and_reshapes_body(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with stack(tmp_path, monkeypatch) as s:
        raw = await s.client.messages.with_raw_response.create(
            model=MODEL, max_tokens=64, messages=user("hello bedrock"), metadata={"user_id": "u1"}
        )
        message = await raw.parse()
        assert block(message, 0).text == "Echo: hello bedrock"
        assert message.model == "claude-sonnet-4-6"
        upstream = s.last_upstream()
        assert upstream.path == f"/model/{UPSTREAM_ID}/invoke"
        body = upstream.json()
        assert list(body) == ["max_tokens", "messages", "metadata", "anthropic_version"]
        assert body["anthropic_version"] == "bedrock-2023-05-31"
        assert upstream.header("anthropic-version") is None
        assert upstream.header("anthropic-beta") is None
        assert upstream.header("x-client-request-id") is None
        assert upstream.header("Authorization").startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
        assert uuid.UUID(raw.headers["request-id"])  # the upstream's x-amzn-RequestId
        assert raw.headers["x-amzn-bedrock-input-token-count"] == str(message.usage.input_tokens)


async def test_stream_is_reframed_as_sse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with stack(tmp_path, monkeypatch) as s:
        async with s.client.messages.stream(model=MODEL, max_tokens=64, messages=user("stream me")) as stream:
            texts = [text async for text in stream.text_stream]
            final = await stream.get_final_message()
        assert "".join(texts) == "Echo: stream me"
        assert final.stop_reason == "end_turn"
        assert final.usage.output_tokens > 0
        assert s.last_upstream().path == f"/model/{UPSTREAM_ID}/invoke-with-response-stream"
        assert "stream" not in s.last_upstream().json()


async def test_raw_sse_has_event_lines_and_metrics_passthrough(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with stack(tmp_path, monkeypatch) as s, aiohttp.ClientSession() as http:
        body = {"model": MODEL, "max_tokens": 32, "stream": True, "messages": user("raw")}
        async with http.post(f"{s.url}/v1/messages", json=body, headers={"x-api-key": GATEWAY_KEY}) as r:
            assert r.status == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            text = (await r.read()).decode()
        names = [line[7:] for line in text.splitlines() if line.startswith("event: ")]
        assert names[0] == "message_start" and names[-1] == "message_stop"
        assert "amazon-bedrock-invocationMetrics" in text.split("event: message_stop")[-1]


async def test_tool_use_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with stack(tmp_path, monkeypatch) as s:
        messages = user("weather in Paris? [[scenario:tool_use]]")
        first = await s.client.messages.create(
            model=MODEL, max_tokens=256, tools=[WEATHER], messages=messages
        )
        call = first.content[-1]
        assert first.stop_reason == "tool_use" and call.type == "tool_use"
        assistant: MessageParam = {"role": "assistant", "content": first.content}
        result: MessageParam = {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}],
        }
        messages += [assistant, result]
        async with s.client.messages.stream(
            model=MODEL,
            max_tokens=256,
            tools=[WEATHER],
            messages=messages,
        ) as stream:
            second = await stream.get_final_message()
        assert second.stop_reason == "end_turn"
        assert "get_weather tool returned: sunny" in block(second, 0).text


async def test_thinking_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with stack(tmp_path, monkeypatch) as s:
        async with s.client.messages.stream(
            model=MODEL,
            max_tokens=2048,
            thinking={"type": "enabled", "budget_tokens": 1024},
            messages=user("ponder"),
            extra_headers={"anthropic-beta": "interleaved-thinking-2025-05-14"},
        ) as stream:
            final = await stream.get_final_message()
        assert [b.type for b in final.content] == ["thinking", "text"]
        assert block(final, 0).signature
        assert s.last_upstream().json()["anthropic_beta"] == ["interleaved-thinking-2025-05-14"]


async def test_count_tokens_via_count_tokens_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with stack(tmp_path, monkeypatch) as s:
        counted = await s.client.messages.count_tokens(
            model=MODEL,
            messages=user("count these words please"),
            tools=[],
            thinking={"type": "enabled", "budget_tokens": 4000},
            extra_headers={"anthropic-beta": "token-counting-2024-11-01"},
        )
        created = await s.client.messages.create(
            model=MODEL, max_tokens=8, messages=user("count these words please")
        )
        assert counted.input_tokens == created.usage.input_tokens
        count_request = s.emulator.requests[-2]
        assert count_request.path == "/model/anthropic.claude-sonnet-4-6/count-tokens"
        inner = orjson.loads(base64.b64decode(count_request.json()["input"]["invokeModel"]["body"]))
        assert inner["max_tokens"] == 4001 and "tools" not in inner and "model" not in inner
        assert "anthropic_beta" not in inner  # the count beta is not a Bedrock beta


async def test_count_tokens_for_application_profile_is_501(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with stack(tmp_path, monkeypatch) as s:
        with pytest.raises(anthropic.APIStatusError) as info:
            await s.client.messages.count_tokens(model=DEFAULT_PROFILE_ARN, messages=user("x"))
        assert info.value.status_code == 501
        assert error_of(info.value)["type"] == "not_supported"
        assert info.value.response.headers["x-should-retry"] == "false"
        # ...while messages through the same ARN work, with the ARN's "/" encoded in the path
        message = await s.client.messages.create(
            model=DEFAULT_PROFILE_ARN, max_tokens=16, messages=user("arn")
        )
        assert block(message, 0).text == "Echo: arn"
        assert s.last_upstream().path == (
            "/model/arn:aws:bedrock:us-east-1:123456789012:application-inference-profile%2Femu0profile01/invoke"
        )


async def test_count_tokens_failure_is_501(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with stack(tmp_path, monkeypatch) as s:
        with pytest.raises(anthropic.APIStatusError) as info:
            await s.client.messages.count_tokens(
                model=MODEL, messages=user("x"), extra_headers={"x-emulator-scenario": "error:500"}
            )
        assert info.value.status_code == 501
        assert info.value.response.headers["x-should-retry"] == "false"


@pytest.mark.parametrize(
    ("scenario", "status", "error_type", "exception"),
    [
        ("error:400", 400, "invalid_request_error", anthropic.BadRequestError),
        ("error:401", 401, "authentication_error", anthropic.AuthenticationError),
        ("error:403", 403, "permission_error", anthropic.PermissionDeniedError),
        ("error:408", 408, "timeout_error", anthropic.APITimeoutError),
        ("error:424", 500, "api_error", anthropic.InternalServerError),
        ("error:429", 429, "rate_limit_error", anthropic.RateLimitError),
        ("error:500", 500, "api_error", anthropic.InternalServerError),
        ("error:503", 529, "overloaded_error", anthropic.APIStatusError),
    ],
)
async def test_http_errors_are_mapped_and_redacted(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    scenario: str,
    status: int,
    error_type: str,
    exception: type[Exception],
) -> None:
    async with stack(tmp_path, monkeypatch) as s:
        with pytest.raises(anthropic.APIStatusError) as info:
            await s.client.messages.create(
                model=MODEL, max_tokens=8, messages=user("x"), extra_headers={"x-emulator-scenario": scenario}
            )
    error = info.value
    if exception is not anthropic.APITimeoutError:
        assert isinstance(error, exception)
    assert error.status_code == status
    assert error_of(error)["type"] == error_type
    message = error_of(error)["message"]
    assert "123456789012" not in message and "arn:" not in message
    assert error.response.headers["request-id"]
    if status == 401:
        assert error.response.headers["x-should-retry"] == "false"
    if status == 429:
        assert error.response.headers["retry-after"] == "1"


async def test_input_too_long_is_relayed_exactly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with stack(tmp_path, monkeypatch) as s:
        with pytest.raises(anthropic.BadRequestError) as info:
            await s.client.messages.create(model=MODEL, max_tokens=8, messages=user("word " * 170_000))
        assert error_of(info.value) == {"type": "invalid_request_error", "message": "Input is too long."}


async def test_mid_stream_exception_becomes_error_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with stack(tmp_path, monkeypatch) as s:
        for member, error_type in [
            ("throttlingException", "rate_limit_error"),
            ("modelStreamErrorException", "api_error"),
            ("serviceUnavailableException", "overloaded_error"),
            ("validationException", "invalid_request_error"),
            ("modelTimeoutException", "timeout_error"),
        ]:
            with pytest.raises(anthropic.APIStatusError) as info:
                async with s.client.messages.stream(
                    model=MODEL,
                    max_tokens=64,
                    messages=user("a b c d e f [[scenario:stream_error]]"),
                    extra_headers={"x-emulator-stream-exception": member},
                ) as stream:
                    await stream.get_final_message()
            assert info.value.status_code == 200
            assert error_of(info.value)["type"] == error_type


async def test_unservable_models_are_404_naming_them_and_the_map(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with stack(tmp_path, monkeypatch) as s:
        for model, reaches_bedrock in (
            ("gpt-4o", False),  # no Bedrock naming pattern: refused before any request leaves
            ("claude-nonexistent-9", True),  # pattern-mapped: Bedrock's own 404, same message
            ("us.anthropic.claude-nonexistent-v1:0", True),  # a native id passes through
        ):
            before = len(s.emulator.requests)
            with pytest.raises(anthropic.NotFoundError) as info:
                await s.client.messages.create(model=model, max_tokens=8, messages=user("x"))
            assert error_of(info.value) == {
                "type": "not_found_error",
                "message": f"model: {model} is not served by the bedrock upstream (map it with GATEWAY_MODEL_MAP)",
            }
            assert (len(s.emulator.requests) > before) is reaches_bedrock


async def test_unsupported_betas_are_dropped_with_their_body_halves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker: Any = {"type": "ephemeral", "scope": "global"}  # scope: not in this SDK's types
    system: list[TextBlockParam] = [{"type": "text", "text": "sys", "cache_control": marker}]
    async with stack(tmp_path, monkeypatch) as s:
        message = await s.client.messages.create(
            model=MODEL,
            max_tokens=16,
            system=system,
            messages=user("betas"),
            extra_body={"tags": {"team": "a"}},
            extra_headers={
                "anthropic-beta": "prompt-caching-scope-2026-01-05,request-tags-2026-08-21,"
                "interleaved-thinking-2025-05-14, claude-code-20250219"
            },
        )
        assert message.stop_reason == "end_turn"
        body = s.last_upstream().json()
        assert body["anthropic_beta"] == ["interleaved-thinking-2025-05-14"]
        assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
        assert "tags" not in body


async def test_tags_without_their_beta_are_dropped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with stack(tmp_path, monkeypatch) as s:
        await s.client.messages.create(
            model=MODEL, max_tokens=8, messages=user("t"), extra_body={"tags": {"a": "b"}}
        )
        body = s.last_upstream().json()
        assert "tags" not in body and "anthropic_beta" not in body


async def test_pings_fill_silent_gaps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = EmulatorConfig(chunk_delay_s=0.05)  # real clock: 50 ms before each delta
    async with stack(tmp_path, monkeypatch, config, GATEWAY_DOWNSTREAM_PING_S="0.02") as s:
        async with aiohttp.ClientSession() as http:
            body = {"model": MODEL, "max_tokens": 32, "stream": True, "messages": user("one two three four")}
            async with http.post(f"{s.url}/v1/messages", json=body, headers={"x-api-key": GATEWAY_KEY}) as r:
                text = (await r.read()).decode()
        assert text.count('event: ping\ndata: {"type": "ping"}') >= 2
        last = text.rstrip().rsplit("\n\n", 1)[-1]
        assert last.startswith(
            'event: message_stop\ndata: {"type":"message_stop","amazon-bedrock-invocationMetrics":'
        )
        async with s.client.messages.stream(
            model=MODEL, max_tokens=32, messages=user("one two three four")
        ) as stream:
            final = await stream.get_final_message()
        assert block(final, 0).text == "Echo: one two three four"


async def test_cache_usage_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    system: list[TextBlockParam] = [
        {"type": "text", "text": "policy " * 2400, "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    ]
    async with stack(tmp_path, monkeypatch) as s:
        first = await s.client.messages.create(model=MODEL, max_tokens=8, system=system, messages=user("q"))
        async with s.client.messages.stream(
            model=MODEL, max_tokens=8, system=system, messages=user("q")
        ) as stream:
            second = await stream.get_final_message()
        assert first.usage.cache_creation_input_tokens and not first.usage.cache_read_input_tokens
        assert first.usage.cache_creation and first.usage.cache_creation.ephemeral_1h_input_tokens > 0
        assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
        assert s.last_upstream().json()["system"][0]["cache_control"]["ttl"] == "1h"


async def test_list_models_serves_the_bedrock_catalogue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with stack(tmp_path, monkeypatch) as s:
        page = await s.client.models.list()
        ids = [model.id for model in page.data]
        assert "claude-sonnet-4-5" in ids and "claude-opus-4-6" in ids
        assert not s.emulator.requests  # answered by the gateway itself
