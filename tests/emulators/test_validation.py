"""Validation over raw HTTP: status codes, error types and the real API's messages."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import orjson
import pytest

from emulators import DEFAULT_API_KEY, EmulatorConfig, RunningEmulator, run_emulator
from tests.support.emulator_sdk import MODEL

VALID: dict[str, Any] = {"model": MODEL, "max_tokens": 32, "messages": [{"role": "user", "content": "hi"}]}
HEADERS = {
    "x-api-key": DEFAULT_API_KEY,
    "anthropic-version": "2023-06-01",
    "content-type": "application/json",
}


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def post(
    http: aiohttp.ClientSession,
    emu: RunningEmulator,
    body: Any = None,
    *,
    path: str = "/v1/messages",
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
) -> tuple[int, dict[str, Any], dict[str, str]]:
    data = raw if raw is not None else orjson.dumps(VALID if body is None else body)
    async with http.post(
        emu.base_url + path, data=data, headers=HEADERS if headers is None else headers
    ) as r:
        return r.status, orjson.loads(await r.read()), dict(r.headers)


def error_of(payload: dict[str, Any]) -> tuple[str, str]:
    assert payload["type"] == "error" and payload["request_id"].startswith("req_emu_")
    return payload["error"]["type"], payload["error"]["message"]


@pytest.mark.parametrize("version", ["2023-06-01", anthropic._constants.ANTHROPIC_API_VERSION])
async def test_both_versions_accepted(
    http: aiohttp.ClientSession, emu: RunningEmulator, version: str
) -> None:
    status, _, _ = await post(http, emu, headers={**HEADERS, "anthropic-version": version})
    assert status == 200


async def test_missing_and_unknown_version(http: aiohttp.ClientSession, emu: RunningEmulator) -> None:
    headers = {k: v for k, v in HEADERS.items() if k != "anthropic-version"}
    status, payload, response_headers = await post(http, emu, headers=headers)
    assert status == 400
    assert error_of(payload) == ("invalid_request_error", "anthropic-version: header is required")
    assert payload["request_id"] == response_headers["request-id"]
    status, payload, _ = await post(http, emu, headers={**HEADERS, "anthropic-version": "2020-01-01"})
    assert status == 400 and error_of(payload)[0] == "invalid_request_error"


@pytest.mark.parametrize(
    ("auth", "expected"),
    [
        ({"x-api-key": DEFAULT_API_KEY}, 200),
        ({"authorization": f"Bearer {DEFAULT_API_KEY}"}, 200),
        ({"x-api-key": "sk-wrong"}, 401),
        ({"authorization": "Bearer sk-wrong"}, 401),
        ({"authorization": f"Basic {DEFAULT_API_KEY}"}, 401),
        ({}, 401),
    ],
)
async def test_auth(
    http: aiohttp.ClientSession, emu: RunningEmulator, auth: dict[str, str], expected: int
) -> None:
    headers = {"anthropic-version": "2023-06-01", "content-type": "application/json", **auth}
    status, payload, _ = await post(http, emu, headers=headers)
    assert status == expected
    if expected == 401:
        assert error_of(payload)[0] == "authentication_error"


async def test_beta_query_string_is_ignored(http: aiohttp.ClientSession, emu: RunningEmulator) -> None:
    status, _, _ = await post(http, emu, path="/v1/messages?beta=true")
    assert status == 200
    count = {k: v for k, v in VALID.items() if k != "max_tokens"}
    status, payload, _ = await post(http, emu, count, path="/v1/messages/count_tokens?beta=true")
    assert status == 200 and payload["input_tokens"] > 0
    assert [r.path for r in emu.requests] == ["/v1/messages?beta=true", "/v1/messages/count_tokens?beta=true"]


async def test_claude_code_betas_accepted(http: aiohttp.ClientSession, emu: RunningEmulator) -> None:
    betas = (
        "claude-code-20250219,context-1m-2025-08-07,interleaved-thinking-2025-05-14,"
        "redact-thinking-2026-02-12,thinking-token-count-2026-05-13,context-management-2025-06-27,"
        "prompt-caching-scope-2026-01-05,mid-conversation-system-2026-04-07,advanced-tool-use-2025-11-20,"
        "effort-2025-11-24,extended-cache-ttl-2025-04-11,structured-outputs-2025-12-15,"
        "token-counting-2024-11-01, tool-search-tool-2025-10-19,web-search-2025-03-05,request-tags-2026-08-21"
    )
    status, payload, _ = await post(http, emu, headers={**HEADERS, "anthropic-beta": betas})
    assert status == 200, payload


async def test_unknown_beta_rejected_unless_disabled(
    http: aiohttp.ClientSession, emu: RunningEmulator
) -> None:
    headers = {**HEADERS, "anthropic-beta": "prompt-caching-2024-07-31,bogus-2030-01-01"}
    status, payload, _ = await post(http, emu, headers=headers)
    assert (status, error_of(payload)) == (
        400,
        ("invalid_request_error", "Unsupported beta header: bogus-2030-01-01"),
    )
    async with run_emulator(EmulatorConfig(check_betas=False)) as lenient:
        status, _, _ = await post(http, lenient, headers=headers)
    assert status == 200


BAD_BODIES: list[tuple[str, Any, str]] = [
    ("no max_tokens", {"model": MODEL, "messages": VALID["messages"]}, "max_tokens: Field required"),
    ("no messages", {"model": MODEL, "max_tokens": 5}, "messages: Field required"),
    ("no model", {"max_tokens": 5, "messages": VALID["messages"]}, "model: Field required"),
    ("extra key", {**VALID, "stream_options": {}}, "stream_options: Extra inputs are not permitted"),
    (
        "bad role",
        {**VALID, "messages": [{"role": "tool", "content": "x"}]},
        "messages.0.role: Input should be 'user', 'assistant' or 'system'",
    ),
    ("empty messages", {**VALID, "messages": []}, "messages: at least one message is required"),
    ("max_tokens 0", {**VALID, "max_tokens": 0}, "max_tokens: Input should be greater than or equal to 1"),
    (
        "max_tokens too big",
        {**VALID, "max_tokens": 64_001},
        "max_tokens: 64001 > 64000, which is the maximum allowed number of output tokens "
        "for claude-sonnet-4-6",
    ),
    (
        "cache type",
        {**VALID, "system": [{"type": "text", "text": "s", "cache_control": {"type": "persistent"}}]},
        "system.0.cache_control.type: Input should be 'ephemeral'",
    ),
    (
        "cache ttl",
        {
            **VALID,
            "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral", "ttl": "2h"}}],
        },
        "system.0.cache_control.ttl: Input should be '5m' or '1h'",
    ),
    (
        "cache extra",
        {**VALID, "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral", "x": 1}}]},
        "system.0.cache_control.x: Extra inputs are not permitted",
    ),
    (
        "ttl order",
        {
            **VALID,
            "system": [
                {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "b", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
            ],
        },
        "system.1.cache_control.ttl: a ttl='1h' must not come after a ttl='5m' cache_control block",
    ),
    (
        "thinking budget",
        {**VALID, "max_tokens": 2000, "thinking": {"type": "enabled", "budget_tokens": 4000}},
        "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at "
        "https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size",
    ),
    (
        "unknown scenario",
        {**VALID, "messages": [{"role": "user", "content": "[[scenario:dance]]"}]},
        "Unknown emulator scenario 'dance'; known scenarios: agent, max_tokens, "
        "model_context_window_exceeded, pause_turn, refusal, stop_sequence, stream_error, text, thinking, "
        "tool_use, error:<status>",
    ),
    (
        "tool_use with server tools only",
        {
            **VALID,
            "messages": [{"role": "user", "content": "[[scenario:tool_use]]"}],
            "tools": [{"type": "web_search_20250305", "name": "web_search"}],
        },
        "emulator scenario 'tool_use' requires at least one custom tool in `tools`",
    ),
]


@pytest.mark.parametrize(
    ("body", "message"), [(b, m) for _, b, m in BAD_BODIES], ids=[i for i, _, _ in BAD_BODIES]
)
async def test_bad_bodies(http: aiohttp.ClientSession, emu: RunningEmulator, body: Any, message: str) -> None:
    status, payload, _ = await post(http, emu, body)
    assert (status, error_of(payload)) == (400, ("invalid_request_error", message))


@pytest.mark.parametrize("count", [4, 5, 6])
async def test_cache_control_limit_counts_every_location(
    http: aiohttp.ClientSession, emu: RunningEmulator, count: int
) -> None:
    marker = {"type": "ephemeral"}
    tools = [{"name": "t", "input_schema": {"type": "object"}, "cache_control": marker}]
    system = [{"type": "text", "text": "s", "cache_control": marker}]
    nested = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [{"type": "text", "text": "r", "cache_control": marker}],
    }
    blocks = [nested] + [{"type": "text", "text": str(i), "cache_control": marker} for i in range(count - 3)]
    body = {**VALID, "tools": tools, "system": system, "messages": [{"role": "user", "content": blocks}]}
    status, payload, _ = await post(http, emu, body)
    if count <= 4:
        assert status == 200, payload
    else:
        assert (
            error_of(payload)[1]
            == f"A maximum of 4 blocks with cache_control may be provided. Found {count}."
        )
    auto = {
        **body,
        "cache_control": {"type": "ephemeral"},
        "messages": [{"role": "user", "content": [*blocks, {"type": "text", "text": "tail"}]}],
    }
    status, payload, _ = await post(http, emu, auto)
    assert status == 400 and error_of(payload)[1].endswith(f"Found {count + 1}.")


async def test_scope_and_1h_ttl_are_accepted(http: aiohttp.ClientSession, emu: RunningEmulator) -> None:
    system = [
        {
            "type": "text",
            "text": "static",
            "cache_control": {"type": "ephemeral", "ttl": "1h", "scope": "global"},
        },
        {"type": "text", "text": "dynamic", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
    ]
    status, payload, _ = await post(http, emu, {**VALID, "system": system})
    assert status == 200, payload


async def test_ttl_order_check_can_be_disabled(http: aiohttp.ClientSession) -> None:
    system = [
        {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "b", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
    ]
    async with run_emulator(EmulatorConfig(enforce_ttl_order=False)) as lenient:
        status, _, _ = await post(http, lenient, {**VALID, "system": system})
    assert status == 200


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b""])
async def test_invalid_json(http: aiohttp.ClientSession, emu: RunningEmulator, raw: bytes) -> None:
    status, payload, _ = await post(http, emu, raw=raw)
    assert status == 400 and error_of(payload)[0] == "invalid_request_error"
    assert emu.requests[-1].body == raw


async def test_count_tokens_validation(http: aiohttp.ClientSession, emu: RunningEmulator) -> None:
    path = "/v1/messages/count_tokens"
    status, payload, _ = await post(http, emu, {"model": MODEL}, path=path)
    assert (status, error_of(payload)[1]) == (400, "messages: Field required")
    status, payload, _ = await post(http, emu, {**VALID}, path=path)
    assert (status, error_of(payload)[1]) == (400, "max_tokens: Extra inputs are not permitted")
    status, payload, _ = await post(
        http, emu, {"model": "claude-nope", "messages": VALID["messages"]}, path=path
    )
    assert (status, error_of(payload)) == (404, ("not_found_error", "model: claude-nope"))


async def test_unknown_route_and_method(http: aiohttp.ClientSession, emu: RunningEmulator) -> None:
    async with http.get(emu.base_url + "/api/hello", headers=HEADERS) as response:
        assert response.status == 404
        assert error_of(await response.json())[0] == "not_found_error"
        assert response.headers["request-id"].startswith("req_emu_")
    async with http.get(emu.base_url + "/v1/messages", headers=HEADERS) as response:
        assert response.status == 405
        assert error_of(await response.json())[0] == "invalid_request_error"


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
async def test_an_undecodable_body_is_a_400_not_a_5xx(
    http: aiohttp.ClientSession, emu: RunningEmulator, coding: str
) -> None:
    """A body that does not decode under its Content-Encoding is a malformed request (a 5xx would
    be retried by clients and gateways: issue 13 saw one request become 11)."""
    status, payload, _ = await post(
        http, emu, raw=b"plain, not compressed", headers={**HEADERS, "content-encoding": coding}
    )
    assert status == 400
    assert error_of(payload)[0] == "invalid_request_error"
    assert emu.requests[-1].body == b""  # recorded, without the body it could not read
