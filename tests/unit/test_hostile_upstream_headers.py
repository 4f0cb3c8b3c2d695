"""Upstream response headers the gateway cannot pass on as they are.

A header value with a control character (``request-id: req_\\x01...``) is accepted by aiohttp's
client parser but refused by its server writer; relayed, it failed the whole answer after the
upstream's status was accounted (a 500 with a traceback for a 200, a broken chunked body for a
stream). Such a header is dropped; the answer goes through.
"""

from __future__ import annotations

import logging
from pathlib import Path

import orjson
import pytest

from gateway.streaming.sse import encode_event
from tests.providers.bedrock_harness import apply_aws_env, isolated_aws_files
from tests.support.raw_upstream import ScriptedUpstream, Seen, http_answer, post, scripted_gateway
from tests.support.sse_answers import message_start

pytestmark = pytest.mark.timeout(60)

MESSAGE = {
    "id": "msg_h",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "fine"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 3, "output_tokens": 1},
}
BLK = {"type": "text", "text": ""}
STREAM = b"".join(
    [
        message_start("claude-sonnet-4-5"),
        encode_event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": BLK}),
        encode_event(
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "fine"}},
        ),
        encode_event("content_block_stop", {"type": "content_block_stop", "index": 0}),
        encode_event("message_stop", {"type": "message_stop"}),
    ]
)
HOSTILE = {"request-id": "req_\x01abc", "x-upstream-note": "a\x7fb", "anthropic-ratelimit-tokens-limit": "50"}
SAMPLE = {"provider": "anthropic", "model": "claude-sonnet-4-5", "status_class": "2xx"}


def unhandled(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "unhandled error" in r.getMessage()]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_header_with_a_control_character_is_dropped_not_the_answer(
    stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    def answer(seen: Seen) -> bytes:
        if stream:
            return http_answer(200, STREAM, {"content-type": "text/event-stream", **HOSTILE})
        return http_answer(200, orjson.dumps(MESSAGE), {"content-type": "application/json", **HOSTILE})

    with caplog.at_level(logging.ERROR):
        async with scripted_gateway(ScriptedUpstream(answer)) as (server, metrics):
            status, headers, body = await post(server, stream=stream)
            labels = {**SAMPLE, "stream": str(stream).lower()}
            samples = metrics.registry.get_sample_value("gateway_requests_total", labels)
    assert status == 200, body
    assert (b"event: message_stop" in body) if stream else (orjson.loads(body) == MESSAGE)
    assert "request-id" not in headers and "x-upstream-note" not in headers
    assert headers["anthropic-ratelimit-tokens-limit"] == "50"  # the others are still relayed
    assert samples == 1
    assert unhandled(caplog) == []


async def test_bedrock_headers_with_a_control_character_are_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    env = {
        "GATEWAY_PROVIDER": "bedrock",
        "AWS_REGION": "us-east-1",
        "AWS_BEARER_TOKEN_BEDROCK": "bedrock-key",
        "ANTHROPIC_BEDROCK_BASE_URL": "{upstream}",
        **isolated_aws_files(tmp_path),
    }
    apply_aws_env(monkeypatch, env)
    hostile = {
        "content-type": "application/json",
        "x-amzn-RequestId": "r\x02x",
        "x-amzn-bedrock-input-token-count": "3\x0b",
    }

    def answer(seen: Seen) -> bytes:
        if len(upstream.requests) == 1:  # a success, then a throttling error
            return http_answer(200, orjson.dumps(MESSAGE), hostile)
        throttled = {**hostile, "x-amzn-ErrorType": "ThrottlingException", "retry-after": "1\x01"}
        return http_answer(429, b'{"message": "Too many requests"}', throttled)

    upstream = ScriptedUpstream(answer)
    with caplog.at_level(logging.ERROR):
        async with scripted_gateway(upstream, env) as (server, _):
            status, headers, body = await post(server)
            assert status == 200 and orjson.loads(body) == MESSAGE, body
            assert "request-id" not in headers and "x-amzn-bedrock-input-token-count" not in headers
            status, headers, body = await post(server)
            assert status == 429 and orjson.loads(body)["error"]["type"] == "rate_limit_error", body
            assert "\x01" not in headers.get("retry-after", "")
    assert unhandled(caplog) == []


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_an_infinite_retry_hint_is_bounded_not_a_500(stream: bool, caplog: pytest.LogCaptureFixture) -> None:
    """``retry-after-ms: inf`` made the gateway's own ``retry-after`` (``math.ceil``) raise."""
    overloaded = b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'
    hint = {"content-type": "application/json", "retry-after-ms": "inf"}
    with caplog.at_level(logging.ERROR):
        async with scripted_gateway(ScriptedUpstream(lambda seen: http_answer(529, overloaded, hint))) as (
            server,
            _,
        ):
            status, headers, body = await post(server, stream=stream)
    assert status == 529 and orjson.loads(body) == orjson.loads(overloaded)
    assert headers["retry-after-ms"] == "600000" and headers["retry-after"] == "600"  # the request deadline
    assert unhandled(caplog) == []
