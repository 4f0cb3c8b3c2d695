"""Error answers a client must not get as the upstream (or a proxy in front of it) sent them.

Before: the first party's 4xx/5xx bodies were relayed byte for byte, so a CDN's or an egress
proxy's HTML page (on a plain-http upstream through ``HTTP_PROXY`` the proxy's 403 page with its
user name), an empty body or JSON of another shape reached the SDK as the error, and an upstream
that echoed the gateway's own credential (or a signed URL) handed it to every client; the cloud
providers' originals, logged for the operator, kept the echoed credential too.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.streaming.sse import encode_event
from tests.providers.bedrock_harness import apply_aws_env, isolated_aws_files
from tests.support.raw_upstream import (
    UPSTREAM_KEY,
    ScriptedUpstream,
    Seen,
    http_answer,
    post,
    scripted_gateway,
)
from tests.support.sse_answers import message_start

pytestmark = pytest.mark.timeout(60)

PAGE = b"<html><head><title>502 Bad Gateway</title></head><body>cloudflare edge 7f</body></html>"
SIGNED = "https://bucket.s3.amazonaws.com/log?X-Amz-Credential=AKIAEXAMPLE&X-Amz-Signature=deadbeef42"


def echo(seen: Seen) -> str:
    """What the upstream quotes back: the credential it was sent, and a signed URL."""
    return f"invalid x-api-key {seen.header('x-api-key')}; details at {SIGNED}"


@pytest.mark.parametrize(
    ("status", "content_type", "body", "what"),
    [
        (502, "text/html", PAGE, "an HTML page"),
        (500, None, b"", "an empty body"),
        (429, "text/plain", b"slow down", "a body (text/plain) that is not an API error"),
        (500, "application/json", b'{"message": "Internal server error"}', "(application/json) that"),
    ],
    ids=["html", "empty", "text", "other-json"],
)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_an_error_body_that_is_not_an_api_error_is_replaced(
    status: int, content_type: str | None, body: bytes, what: str, stream: bool
) -> None:
    headers = {} if content_type is None else {"content-type": content_type}
    upstream = ScriptedUpstream(lambda seen: http_answer(status, body, headers))
    async with scripted_gateway(upstream) as (server, _):
        seen_status, seen_headers, seen_body = await post(server, stream=stream)
    assert seen_status == status  # the status is the upstream's; the body is ours
    assert seen_headers["content-type"] == "application/json"
    error = orjson.loads(seen_body)
    assert error["type"] == "error"
    assert error["error"]["type"] == ("rate_limit_error" if status == 429 else "api_error")
    message = error["error"]["message"]
    assert f"the upstream answered {status} with" in message and what in message
    assert b"cloudflare" not in seen_body and b"slow down" not in seen_body


async def test_an_api_error_is_relayed_as_it_came_but_an_echoed_credential_is_not() -> None:
    plain = b'{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 9 > 8"}}'

    def answer(seen: Seen) -> bytes:
        if len(upstream.requests) == 1:
            return http_answer(400, plain, {"content-type": "application/json"})
        error = {"type": "error", "error": {"type": "permission_error", "message": echo(seen)}}
        return http_answer(403, orjson.dumps(error), {"content-type": "application/json"})

    upstream = ScriptedUpstream(answer)
    async with scripted_gateway(upstream) as (server, _):
        status, _, body = await post(server)
        assert status == 400 and body == plain  # byte for byte: clients match this wording
        status, _, body = await post(server)
    assert status == 403
    message = orjson.loads(body)["error"]["message"]
    assert UPSTREAM_KEY not in message and "deadbeef42" not in message
    assert message.startswith("invalid x-api-key ***; details at https://bucket.s3.amazonaws.com/log?")


async def test_an_upstream_401_names_the_gateways_credential_and_is_not_to_be_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The first party's 401 refused the gateway's own key (a client's never goes upstream).
    Before, it was relayed as it came (``invalid x-api-key``, no ``x-should-retry``): Claude Code
    told the developer to fix their own key, after retrying it for about three minutes."""

    def answer(seen: Seen) -> bytes:
        error = {"type": "error", "error": {"type": "authentication_error", "message": echo(seen)}}
        error["request_id"] = "req_upstream_1"
        return http_answer(401, orjson.dumps(error), {"content-type": "application/json"})

    with caplog.at_level(logging.WARNING):
        async with scripted_gateway(ScriptedUpstream(answer)) as (server, _):
            status, headers, body = await post(server)
    assert status == 401 and headers["x-should-retry"] == "false"
    answer_json = orjson.loads(body)
    assert answer_json["request_id"] == "req_upstream_1"
    assert answer_json["error"] == {
        "type": "authentication_error",
        "message": "The gateway's upstream credential was rejected (the client's key was accepted).",
    }
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "invalid x-api-key ***" in logged  # the upstream's wording, for the operator
    assert UPSTREAM_KEY not in logged and "deadbeef42" not in logged


async def test_a_stream_error_event_before_content_does_not_echo_the_credential(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def answer(seen: Seen) -> bytes:
        error = {"type": "error", "error": {"type": "invalid_request_error", "message": echo(seen)}}
        events = message_start("claude-sonnet-4-5") + encode_event("error", error)
        return http_answer(200, events, {"content-type": "text/event-stream"})

    with caplog.at_level(logging.INFO):
        async with scripted_gateway(ScriptedUpstream(answer)) as (server, _):
            status, _, body = await post(server, stream=True)
    assert status == 400 and b"invalid x-api-key ***" in body
    assert UPSTREAM_KEY.encode() not in body and b"deadbeef42" not in body
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "invalid x-api-key ***" in logged and UPSTREAM_KEY not in logged  # (the relay's warning)


async def test_a_plain_http_proxys_refusal_is_named_as_possibly_the_proxys() -> None:
    """``HTTP_PROXY`` forwards a plain-http request: its own 403 page looks like the upstream's."""
    page = b"<html><body><h1>Forbidden</h1>squid ERR_ACCESS_DENIED user=alice</body></html>"
    proxy = ScriptedUpstream(lambda seen: http_answer(403, page, {"content-type": "text/html"}))
    env = {"ANTHROPIC_BASE_URL": "http://api.internal.example:8080", "HTTP_PROXY": "{upstream}"}
    async with scripted_gateway(proxy, env) as (server, _):
        status, _, body = await post(server)
    assert proxy.requests[0].head.startswith(b"POST http://api.internal.example:8080/v1/messages ")
    assert status == 403 and b"alice" not in body
    message = orjson.loads(body)["error"]["message"]
    assert message.startswith("the upstream answered 403 with an HTML page")
    assert f"egress proxy {proxy.url.removeprefix('http://')}" in message


async def test_a_cloud_error_that_echoes_the_credential_is_redacted_in_the_log_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    token = "ABSKQmVkcm9ja0FQSUtleS1leGFtcGxlLXRva2Vu"
    env = {
        "GATEWAY_PROVIDER": "bedrock",
        "AWS_REGION": "us-east-1",
        "AWS_BEARER_TOKEN_BEDROCK": token,
        "ANTHROPIC_BEDROCK_BASE_URL": "{upstream}",
        **isolated_aws_files(tmp_path),
    }
    apply_aws_env(monkeypatch, env)

    def answer(seen: Seen) -> bytes:
        message = f"bad token {seen.header('authorization')} (key {token}) see {SIGNED}"
        headers = {"content-type": "application/json", "x-amzn-ErrorType": "ValidationException"}
        return http_answer(400, orjson.dumps({"message": message}), headers)

    with caplog.at_level(logging.INFO):
        async with scripted_gateway(ScriptedUpstream(answer), env) as (server, _):
            status, _, body = await post(server)
    assert status == 400 and token.encode() not in body
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "bad token Bearer ***" in logged  # the original is still logged, for the operator
    assert token not in logged and "deadbeef42" not in logged


@pytest.mark.parametrize("path", ["/v1/messages/count_tokens", "/v1/models", "/v1/messages"])
@pytest.mark.parametrize(
    ("status", "body"),
    [(200, b"<html>sign in to the proxy</html>"), (200, b"[1]"), (204, b""), (201, b"created")],
    ids=["html", "json-list", "204", "201"],
)
async def test_a_success_whose_body_is_not_a_json_object_is_a_502(
    path: str, status: int, body: bytes
) -> None:
    """Only Messages answers were checked (and only a 200): a token count or a model list of
    ``<html>...`` reached the SDK, which returned the string or failed on it."""
    answer = http_answer(status, body, {"content-type": "text/html" if b"<" in body else "application/json"})
    async with scripted_gateway(ScriptedUpstream(lambda seen: answer)) as (server, _):
        seen_status, headers, seen_body = await post(server, path=path)
    assert seen_status == 502, seen_body
    error = orjson.loads(seen_body)["error"]
    assert error["type"] == "api_error"
    assert f"upstream answered {status} with a body that is not" in error["message"]
    assert headers["x-should-retry"] == "true"


async def test_a_token_count_and_a_model_list_still_go_through() -> None:
    answers = {b"count_tokens": b'{"input_tokens": 5}', b"models": b'{"data": [], "has_more": false}'}

    def answer(seen: Seen) -> bytes:
        key = b"count_tokens" if b"count_tokens" in seen.head else b"models"
        return http_answer(200, answers[key], {"content-type": "application/json"})

    async with scripted_gateway(ScriptedUpstream(answer)) as (server, _):
        assert (await post(server, path="/v1/messages/count_tokens"))[2] == answers[b"count_tokens"]
        assert (await post(server, path="/v1/models"))[2] == answers[b"models"]


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (b"", "upstream unreachable: api.internal.example:8080 (through the egress proxy {proxy}): "),
        (b"\x16\x03 no http\r\n\r\n", "(through the egress proxy {proxy}) answered with invalid HTTP"),
        ([b""] * 20, "upstream did not answer within 0.3s (through the egress proxy {proxy})"),
    ],
    ids=["closed", "not-http", "silent"],
)
async def test_a_failure_through_the_proxy_names_the_proxy(answer: bytes | list[bytes], words: str) -> None:
    """A proxy that closed the connection, answered garbage or hung was reported as the upstream's
    doing alone (``upstream unreachable: ...``, which README promises means no proxy involved)."""
    proxy = ScriptedUpstream(lambda seen: answer)
    env = {
        "ANTHROPIC_BASE_URL": "http://api.internal.example:8080",
        "HTTP_PROXY": "{upstream}",
        "GATEWAY_FIRST_BYTE_TIMEOUT_S": "0.3",
    }
    async with scripted_gateway(proxy, env) as (server, _):
        status, _, body = await post(server)
    assert status in (502, 504), body
    assert words.format(proxy=proxy.url.removeprefix("http://")) in orjson.loads(body)["error"]["message"]


@pytest.mark.parametrize(
    "json_escaping",
    [orjson.dumps, lambda value: orjson.dumps(value).replace(b"&", b"\\u0026")],  # Go's encoder: \u0026
    ids=["plain", "go-escaped"],
)
async def test_a_redacted_api_error_is_still_json(json_escaping: Any) -> None:
    """The redaction runs over the body's bytes: a signed URL quoted in the message (``\\"https://
    ...?sig=...\\"``) lost the backslash of its closing quote with the signature, so the client got
    a body that is not JSON; with ``&`` written ``\\u0026`` the later parameters were not redacted."""
    message = f'could not fetch "{SIGNED}": 403'
    error = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    body = json_escaping(error)
    upstream = ScriptedUpstream(lambda seen: http_answer(400, body, {"content-type": "application/json"}))
    async with scripted_gateway(upstream) as (server, _):
        status, _, relayed = await post(server)
    assert status == 400 and b"deadbeef42" not in relayed and b"AKIAEXAMPLE" not in relayed
    relayed_message = orjson.loads(relayed)["error"]["message"]  # still JSON
    assert relayed_message.startswith('could not fetch "https://bucket.s3.amazonaws.com/log?X-Amz-Credential=***')
    assert relayed_message.endswith('X-Amz-Signature=***": 403')
