"""The prompt-cache model over HTTP: Claude Code turn sequences, TTLs, minimums, billing block."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from emulators import DEFAULT_API_KEY, ManualClock, RunningEmulator
from gateway.streaming.sse import SSEParser
from tests.support.emulator_sdk import MODEL
from tests.support.real_clients import load_real_client_fixture, replay_headers

HEADERS = {
    "x-api-key": DEFAULT_API_KEY,
    "anthropic-version": "2023-06-01",
    "content-type": "application/json",
}
FILLER = "The quick brown fox jumps over the lazy dog. "  # 45 bytes


def text_of_tokens(tokens: int, seed: str = "") -> str:
    """Roughly ``tokens`` tokens of text (4 bytes per token)."""
    body = (seed + FILLER * (tokens * 4 // len(FILLER) + 1))[: tokens * 4]
    return body


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def total(usage: dict[str, Any]) -> int:
    return int(
        usage["input_tokens"] + usage["cache_creation_input_tokens"] + usage["cache_read_input_tokens"]
    )


async def send(
    http: aiohttp.ClientSession,
    emu: RunningEmulator,
    body: dict[str, Any],
    *,
    path: str = "/v1/messages",
    headers: Any = None,
) -> dict[str, Any]:
    """POST a body; return the final usage (from the JSON Message or the SSE stream)."""
    async with http.post(
        emu.base_url + path, data=orjson.dumps(body), headers=headers or HEADERS
    ) as response:
        raw = await response.read()
        assert response.status == 200, raw[:400]
        if not body.get("stream"):
            usage: dict[str, Any] = orjson.loads(raw)["usage"]
            return usage
    events = {e.event: orjson.loads(e.data) for e in SSEParser().feed(raw)}
    start = events["message_start"]["message"]["usage"]
    delta = events["message_delta"]["usage"]
    for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"):
        assert start[key] == delta[key], key  # cumulative usage agrees with message_start
    return {**start, **delta}


async def count(http: aiohttp.ClientSession, emu: RunningEmulator, body: dict[str, Any]) -> int:
    keep = {
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "thinking",
        "context_management",
        "output_config",
    }
    async with http.post(
        emu.base_url + "/v1/messages/count_tokens",
        data=orjson.dumps({k: v for k, v in body.items() if k in keep}),
        headers=HEADERS,
    ) as response:
        assert response.status == 200
        return int((await response.json())["input_tokens"])


async def replay(http: aiohttp.ClientSession, emu: RunningEmulator, name: str) -> dict[str, Any]:
    fixture = load_real_client_fixture(name)
    async with http.post(
        emu.base_url + fixture["raw_path"],
        data=orjson.dumps(fixture["body"]),
        headers=replay_headers(fixture),
    ) as response:
        raw = await response.read()
        assert response.status == 200, raw[:400]
    events = {e.event: orjson.loads(e.data) for e in SSEParser().feed(raw)}
    return {**events["message_start"]["message"]["usage"], **events["message_delta"]["usage"]}


@pytest.mark.parametrize(
    "turns",
    [
        ["015_cc_tool_bash_turn1", "016_cc_tool_bash_turn2", "017_cc_tool_bash_turn3"],
        ["025_cc_firstparty_1h_turn1", "026_cc_firstparty_1h_turn2"],
    ],
    ids=["cc_tool_bash_5m", "cc_firstparty_1h"],
)
async def test_claude_code_turn_reads_what_the_previous_turn_wrote(
    http: aiohttp.ClientSession, emu: RunningEmulator, turns: list[str]
) -> None:
    previous: dict[str, Any] | None = None
    for name in turns:
        usage = await replay(http, emu, name)
        body = load_real_client_fixture(name)["body"]
        assert total(usage) == await count(http, emu, body)
        assert usage["cache_creation_input_tokens"] > 0
        assert usage["input_tokens"] < 2_000  # the billing block, the role:"system" tail and overhead
        if previous is None:
            assert usage["cache_read_input_tokens"] == 0
        else:
            written = previous["cache_read_input_tokens"] + previous["cache_creation_input_tokens"]
            assert usage["cache_read_input_tokens"] == written
        ttl = "1h" if "1h" in name else "5m"
        other = "5m" if ttl == "1h" else "1h"
        assert (
            usage["cache_creation"][f"ephemeral_{ttl}_input_tokens"] == usage["cache_creation_input_tokens"]
        )
        assert usage["cache_creation"][f"ephemeral_{other}_input_tokens"] == 0
        previous = usage


def cached_body(
    model: str = MODEL, ttl: str | None = None, tokens: int = 3_000, tail: str = "hi"
) -> dict[str, Any]:
    marker = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    return {
        "model": model,
        "max_tokens": 32,
        "system": [{"type": "text", "text": text_of_tokens(tokens), "cache_control": marker}],
        "messages": [{"role": "user", "content": tail}],
    }


async def test_second_identical_request_reads_the_cache(
    http: aiohttp.ClientSession, emu: RunningEmulator
) -> None:
    first = await send(http, emu, cached_body())
    second = await send(http, emu, cached_body(tail="a different question"))
    assert first["cache_read_input_tokens"] == 0 and first["cache_creation_input_tokens"] > 3_000
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    assert second["cache_creation_input_tokens"] == 0
    assert len(emu.cache) == 1


@pytest.mark.parametrize(("ttl", "hit_after_301"), [(None, False), ("5m", False), ("1h", True)])
async def test_ttl_expiry(
    http: aiohttp.ClientSession,
    emu: RunningEmulator,
    clock: ManualClock,
    ttl: str | None,
    hit_after_301: bool,
) -> None:
    body = cached_body(ttl=ttl)
    written = (await send(http, emu, body))["cache_creation_input_tokens"]
    clock.advance(301)
    usage = await send(http, emu, body)
    assert usage["cache_read_input_tokens"] == (written if hit_after_301 else 0)
    assert usage["cache_creation_input_tokens"] == (0 if hit_after_301 else written)
    if ttl == "1h":
        clock.advance(3_601)
        assert (await send(http, emu, body))["cache_read_input_tokens"] == 0


async def test_a_read_refreshes_the_ttl(
    http: aiohttp.ClientSession, emu: RunningEmulator, clock: ManualClock
) -> None:
    body = cached_body()
    written = (await send(http, emu, body))["cache_creation_input_tokens"]
    clock.advance(200)
    assert (await send(http, emu, body))["cache_read_input_tokens"] == written
    clock.advance(200)  # 400 s after the write, 200 s after the read
    assert (await send(http, emu, body))["cache_read_input_tokens"] == written


@pytest.mark.parametrize(
    ("model", "tokens", "cached"),
    [
        ("claude-sonnet-4-6", 1_900, False),
        ("claude-sonnet-4-6", 2_100, True),
        ("claude-haiku-4-5", 3_900, False),
        ("claude-haiku-4-5", 4_200, True),
        ("claude-opus-4-1", 1_100, True),
        ("claude-opus-4-8", 3_900, False),
    ],
)
async def test_minimum_cacheable_length(
    http: aiohttp.ClientSession, emu: RunningEmulator, model: str, tokens: int, cached: bool
) -> None:
    body = cached_body(model=model, tokens=tokens)
    first = await send(http, emu, body)
    second = await send(http, emu, body)
    assert (first["cache_creation_input_tokens"] > 0) is cached
    assert (second["cache_read_input_tokens"] > 0) is cached
    if not cached:
        assert first["input_tokens"] == total(first)


async def test_billing_header_is_outside_the_cache_key(
    http: aiohttp.ClientSession, emu: RunningEmulator
) -> None:
    def body(cch: str) -> dict[str, Any]:
        billing = f"x-anthropic-billing-header: cc_version=2.1.197.c40; cc_entrypoint=sdk-cli; cch={cch};"
        base = cached_body()
        base["system"] = [{"type": "text", "text": billing}, *base["system"]]
        return base

    first = await send(http, emu, body("70e58"))
    second = await send(http, emu, body("b67de"))
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"] > 0
    without = await send(http, emu, cached_body())
    assert without["cache_read_input_tokens"] == first["cache_creation_input_tokens"]
    assert first["input_tokens"] > without["input_tokens"]  # the billing block still counts, uncached


async def test_moving_the_marker_keeps_the_prefix(http: aiohttp.ClientSession, emu: RunningEmulator) -> None:
    chunk = text_of_tokens(1_200)
    turn1 = [
        {"type": "text", "text": chunk + "1"},
        {"type": "text", "text": chunk + "2", "cache_control": {"type": "ephemeral"}},
    ]
    first = await send(
        http, emu, {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": turn1}]}
    )
    turn2 = [
        {"role": "user", "content": [turn1[0], {"type": "text", "text": chunk + "2"}]},
        {"role": "assistant", "content": "ok"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "next", "cache_control": {"type": "ephemeral"}}],
        },
    ]
    second = await send(http, emu, {"model": MODEL, "max_tokens": 8, "messages": turn2})
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"] > 0
    assert second["cache_creation_input_tokens"] > 0


async def test_lookback_is_limited_to_20_blocks(http: aiohttp.ClientSession, emu: RunningEmulator) -> None:
    head = [{"type": "text", "text": text_of_tokens(2_500), "cache_control": {"type": "ephemeral"}}]
    await send(http, emu, {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": head}]})

    def later(extra_blocks: int) -> dict[str, Any]:
        tail: list[dict[str, Any]] = [{"type": "text", "text": f"block {i}"} for i in range(extra_blocks)]
        tail[-1] = {**tail[-1], "cache_control": {"type": "ephemeral"}}
        content = [{"type": "text", "text": head[0]["text"]}, *tail]
        return {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": content}]}

    assert (await send(http, emu, later(20)))["cache_read_input_tokens"] > 0
    emu.cache.clear()
    await send(http, emu, {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": head}]})
    assert (await send(http, emu, later(21)))["cache_read_input_tokens"] == 0


async def test_top_level_cache_control_caches_the_last_block(
    http: aiohttp.ClientSession, emu: RunningEmulator
) -> None:
    body: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 8,
        "cache_control": {"type": "ephemeral"},
        "system": text_of_tokens(2_500),
        "messages": [{"role": "user", "content": "question one"}],
    }
    first = await send(http, emu, body)
    assert first["cache_creation_input_tokens"] == total(first) - first["input_tokens"] > 2_500
    body["messages"] = [
        *body["messages"],
        {"role": "assistant", "content": "answer"},
        {"role": "user", "content": "two"},
    ]
    second = await send(http, emu, body)
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"]


async def test_mixed_ttls_split_the_write(http: aiohttp.ClientSession, emu: RunningEmulator) -> None:
    body = {
        "model": MODEL,
        "max_tokens": 8,
        "system": [
            {
                "type": "text",
                "text": text_of_tokens(2_500),
                "cache_control": {"type": "ephemeral", "ttl": "1h"},
            },
            {"type": "text", "text": text_of_tokens(500, "x"), "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
    }
    usage = await send(http, emu, body)
    split = usage["cache_creation"]
    assert split["ephemeral_1h_input_tokens"] > 2_500 and 500 <= split["ephemeral_5m_input_tokens"] < 600
    assert (
        usage["cache_creation_input_tokens"]
        == split["ephemeral_1h_input_tokens"] + split["ephemeral_5m_input_tokens"]
    )


async def test_cache_is_per_model(http: aiohttp.ClientSession, emu: RunningEmulator) -> None:
    await send(http, emu, cached_body(model="claude-sonnet-4-6"))
    other = await send(http, emu, cached_body(model="claude-opus-4-1"))
    assert other["cache_read_input_tokens"] == 0
    alias = await send(http, emu, cached_body(model="claude-opus-4-1-20250805"))
    assert alias["cache_read_input_tokens"] > 0  # an alias and its dated id share entries


async def test_count_tokens_of_claude_code_fixture(http: aiohttp.ClientSession, emu: RunningEmulator) -> None:
    fixture = load_real_client_fixture("039_cc_count_tokens_tools")
    async with http.post(
        emu.base_url + fixture["raw_path"],
        data=orjson.dumps(fixture["body"]),
        headers=replay_headers(fixture),
    ) as response:
        assert response.status == 200
        counted = (await response.json())["input_tokens"]
    body = {**fixture["body"], "max_tokens": 16}
    assert counted == total(await send(http, emu, body))
