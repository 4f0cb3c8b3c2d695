"""Claude Code's first-party requests through the gateway to the Bedrock and Vertex emulators, with
the official SDK as the client: every 2.1.197 first-party capture, its count_tokens capture, and two
turns shaped like 2.1.332. Each must be accepted (the emulators refuse what the clouds refuse, from
their own sources) and reach the cloud in the shape Claude Code gives that cloud in its own
provider mode: the same betas in the same places (providers.md s7; captures 047/050) and the same
top-level keys."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from emulators import EmulatorConfig, ManualClock, RunningEmulator
from emulators.recorder import RecordedRequest
from tests.providers import bedrock_harness, vertex_harness
from tests.providers.claude_code_turns import FIRST_PARTY_REPLAYS, cc332_turns, headers_of, load

CM = "context-management-2025-06-27"
# what Claude Code's 2.1.197 first-party opus-4-8 betas become (fixtures README 1.3, the table)
CC197_BEDROCK_HEADER = "claude-code-20250219,thinking-token-count-2026-05-13,effort-2025-11-24"
CC197_BEDROCK_BODY = [
    "interleaved-thinking-2025-05-14",
    "context-1m-2025-08-07",
    "thinking-token-count-2026-05-13",
]
CC197_VERTEX_HEADER = (
    "claude-code-20250219,interleaved-thinking-2025-05-14,thinking-token-count-2026-05-13,"
    "effort-2025-11-24,context-1m-2025-08-07"
)
ONE_HOUR = {"025_cc_firstparty_1h_turn1", "026_cc_firstparty_1h_turn2"}  # + advanced-tool-use


def expected_bedrock(name: str) -> tuple[str, list[str]]:
    if name in ONE_HOUR:  # advanced-tool-use-2025-11-20 goes to the body as tool-search-tool
        body = [*CC197_BEDROCK_BODY[:2], "tool-search-tool-2025-10-19", CC197_BEDROCK_BODY[2]]
        return CC197_BEDROCK_HEADER, body
    if name == "074_cc_interactive_title_generation":  # the beta without context_management: kept
        return CC197_BEDROCK_HEADER, [*CC197_BEDROCK_BODY, CM]
    return CC197_BEDROCK_HEADER, CC197_BEDROCK_BODY


def expected_vertex(name: str) -> str:
    if name in ONE_HOUR:
        return CC197_VERTEX_HEADER.replace(
            "effort-2025-11-24", "tool-search-tool-2025-10-19,effort-2025-11-24"
        )
    return CC197_VERTEX_HEADER


def provider_mode_keys(capture: str, body: dict[str, Any]) -> set[str]:
    """Claude Code's own top-level keys on that cloud (its Bedrock/Vertex capture), plus
    ``output_config`` where the model gets one (2.1.332 and 2.1.197 with opus send it there)."""
    keys = set(load(capture)["body"])
    return keys | {"output_config"} if "output_config" in body else keys


async def send(
    client: anthropic.AsyncAnthropic, body: dict[str, Any], headers: dict[str, str]
) -> anthropic.types.Message:
    """The capture's body and headers through the SDK (model, max_tokens, messages as parameters;
    every other field as it was captured)."""
    rest = copy.deepcopy(body)
    model, max_tokens, messages = rest.pop("model"), rest.pop("max_tokens"), rest.pop("messages")
    rest.pop("stream", None)
    async with client.messages.stream(
        model=model,
        max_tokens=max_tokens,
        messages=messages,
        extra_body=rest,
        extra_headers=headers,
        extra_query={"beta": "true"},
    ) as stream:
        return await stream.get_final_message()


def model_requests(emulator: RunningEmulator) -> list[RecordedRequest]:
    return [r for r in emulator.requests if r.path_only.startswith(("/model/", "/v1/projects/"))]


def assert_first_party_only_fields_gone(sent: dict[str, Any]) -> None:
    assert "context_management" not in sent and "model" not in sent
    assert all("output_config" not in m for m in sent["messages"])
    markers = [
        b.get("cache_control", {})
        for section in (sent.get("system") or [], *(m["content"] for m in sent["messages"]))
        if isinstance(section, list)
        for b in section
    ]
    assert all("scope" not in m for m in markers)


@pytest.fixture
async def bedrock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[anthropic.AsyncAnthropic, RunningEmulator]]:
    config = EmulatorConfig(clock=ManualClock())
    async with bedrock_harness.bedrock_upstream(tmp_path, config=config) as (env, emulator):
        bedrock_harness.apply_aws_env(monkeypatch, env)
        async with (
            bedrock_harness.bedrock_gateway(env) as (server, _),
            anthropic.AsyncAnthropic(
                api_key=bedrock_harness.GATEWAY_KEY, base_url=server.base_url, max_retries=0
            ) as client,
        ):
            yield client, emulator


@pytest.fixture
async def vertex(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[anthropic.AsyncAnthropic, RunningEmulator]]:
    async with (
        vertex_harness.vertex_upstream(tmp_path, monkeypatch) as (env, emulator),
        vertex_harness.vertex_gateway(env) as url,
        anthropic.AsyncAnthropic(api_key=vertex_harness.GATEWAY_KEY, base_url=url, max_retries=0) as client,
    ):
        yield client, emulator


async def test_claude_code_2_1_197_captures_on_bedrock(
    bedrock: tuple[anthropic.AsyncAnthropic, RunningEmulator],
) -> None:
    client, emulator = bedrock
    for name in FIRST_PARTY_REPLAYS:
        fixture = load(name)
        message = await send(client, fixture["body"], headers_of(fixture))
        assert message.stop_reason == "end_turn", name
        upstream = model_requests(emulator)[-1]
        assert upstream.path.endswith("/invoke-with-response-stream"), name
        sent = upstream.json()
        header, body = expected_bedrock(name)
        assert upstream.header("anthropic-beta") == header, name
        assert sent["anthropic_beta"] == body, name
        assert set(sent) == provider_mode_keys("047_cc_bedrock_turn1", fixture["body"]), name
        assert [m["role"] for m in sent["messages"]] == [m["role"] for m in fixture["body"]["messages"]]
        assert_first_party_only_fields_gone(sent)
        if name in ONE_HOUR:  # Bedrock takes ttl "1h" without extended-cache-ttl-2025-04-11
            assert {b["cache_control"].get("ttl") for b in sent["system"] if "cache_control" in b} == {"1h"}


async def test_claude_code_2_1_197_captures_on_vertex(
    vertex: tuple[anthropic.AsyncAnthropic, RunningEmulator],
) -> None:
    client, emulator = vertex
    for name in FIRST_PARTY_REPLAYS:
        fixture = load(name)
        message = await send(client, fixture["body"], headers_of(fixture))
        assert message.stop_reason == "end_turn", name
        upstream = model_requests(emulator)[-1]
        assert upstream.path.endswith(":streamRawPredict"), name
        sent = upstream.json()
        assert upstream.header("anthropic-beta") == expected_vertex(name), name
        assert set(sent) == provider_mode_keys("050_cc_vertex_turn1", fixture["body"]), name
        assert [m["role"] for m in sent["messages"]] == [m["role"] for m in fixture["body"]["messages"]]
        assert_first_party_only_fields_gone(sent)


async def count(client: anthropic.AsyncAnthropic) -> int:
    fixture = load("039_cc_count_tokens_tools")
    body = fixture["body"]
    counted = await client.messages.count_tokens(
        model=body["model"], messages=body["messages"], tools=body["tools"], extra_headers=headers_of(fixture)
    )
    return counted.input_tokens


async def test_claude_code_count_tokens_on_bedrock(
    bedrock: tuple[anthropic.AsyncAnthropic, RunningEmulator],
) -> None:
    client, emulator = bedrock
    assert await count(client) > 0
    upstream = emulator.requests[-1]
    assert upstream.path == "/model/anthropic.claude-opus-4-8-v1/count-tokens"
    # token-counting-2024-11-01 belongs to the first-party endpoint; context-management without a
    # context_management field is one of the AWS-listed betas
    assert upstream.header("anthropic-beta") == "claude-code-20250219"
    inner = json.loads(base64.b64decode(upstream.json()["input"]["invokeModel"]["body"]))
    assert inner["anthropic_beta"] == ["interleaved-thinking-2025-05-14", CM]


async def test_claude_code_count_tokens_on_vertex(
    vertex: tuple[anthropic.AsyncAnthropic, RunningEmulator],
) -> None:
    client, emulator = vertex
    assert await count(client) > 0
    upstream = model_requests(emulator)[-1]
    assert upstream.path.endswith("/models/count-tokens:rawPredict")
    assert upstream.header("anthropic-beta") == "claude-code-20250219,interleaved-thinking-2025-05-14"


async def test_claude_code_2_1_332_turns_on_bedrock(
    bedrock: tuple[anthropic.AsyncAnthropic, RunningEmulator],
) -> None:
    client, emulator = bedrock
    answers = [await send(client, body, headers) for body, headers in cc332_turns()]
    sent = [r.json() for r in model_requests(emulator)]
    headers = [r.header("anthropic-beta") for r in model_requests(emulator)]
    # providers.md s7, Bedrock mode, exactly
    assert headers == ["claude-code-20250219,thinking-token-count-2026-05-13,effort-2025-11-24"] * 2
    for body in sent:
        assert body["anthropic_beta"] == [
            "interleaved-thinking-2025-05-14",
            "tool-search-tool-2025-10-19",
            "thinking-token-count-2026-05-13",
        ]
        assert set(body) == {
            "messages",
            "system",
            "tools",
            "metadata",
            "max_tokens",
            "thinking",
            "anthropic_beta",
            "output_config",
            "anthropic_version",
        }
        assert_first_party_only_fields_gone(body)
    assert [m["role"] for m in sent[0]["messages"]] == ["user", "system"]  # sent as they are
    assert [m["role"] for m in sent[1]["messages"]] == ["user", "system", "assistant", "user"]
    assert (
        (answers[1].usage.cache_read_input_tokens or 0)
        == (answers[0].usage.cache_creation_input_tokens or 0)
        > 0
    )


async def test_claude_code_2_1_332_turns_on_vertex(
    vertex: tuple[anthropic.AsyncAnthropic, RunningEmulator],
) -> None:
    client, emulator = vertex
    answers = [await send(client, body, headers) for body, headers in cc332_turns()]
    requests = model_requests(emulator)
    # providers.md s7, Vertex mode, less web-search-2025-03-05 (only Vertex mode adds it)
    assert [r.header("anthropic-beta") for r in requests] == [
        "claude-code-20250219,interleaved-thinking-2025-05-14,thinking-token-count-2026-05-13,"
        "tool-search-tool-2025-10-19,effort-2025-11-24"
    ] * 2
    for request in requests:
        body = request.json()
        assert set(body) == {
            "messages",
            "system",
            "tools",
            "metadata",
            "max_tokens",
            "thinking",
            "output_config",
            "stream",
            "anthropic_version",
        }
        assert_first_party_only_fields_gone(body)
        assert "system" in [m["role"] for m in body["messages"]]
    assert (
        (answers[1].usage.cache_read_input_tokens or 0)
        == (answers[0].usage.cache_creation_input_tokens or 0)
        > 0
    )


async def test_folding_for_a_target_configured_to_refuse_system_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = EmulatorConfig(clock=ManualClock())
    async with bedrock_harness.bedrock_upstream(tmp_path, config=config) as (env, emulator):
        bedrock_harness.apply_aws_env(monkeypatch, env)
        fold = {"GATEWAY_FOLD_SYSTEM_MESSAGES": "us.anthropic.claude-opus-4-8*"}
        async with (
            bedrock_harness.bedrock_gateway(env, **fold) as (server, _),
            anthropic.AsyncAnthropic(
                api_key=bedrock_harness.GATEWAY_KEY, base_url=server.base_url, max_retries=0
            ) as client,
        ):
            answers = [await send(client, body, headers) for body, headers in cc332_turns()]
    sent = [r.json() for r in model_requests(emulator)]
    assert [[m["role"] for m in body["messages"]] for body in sent] == [
        ["user"],
        ["user", "assistant", "user"],
    ]
    system_text = cc332_turns()[0][0]["messages"][1]["content"][0]["text"]
    assert (
        sent[0]["messages"][0]["content"][-1]["text"]
        == f"<system-reminder>\n{system_text}\n</system-reminder>"
    )
    assert (
        (answers[1].usage.cache_read_input_tokens or 0)
        == (answers[0].usage.cache_creation_input_tokens or 0)
        > 0
    )
