"""Upstream answers the gateway cannot use as they are: a whole (non-streaming) answer cut off
before its end, longer than ``GATEWAY_MAX_UPSTREAM_BODY_BYTES`` (declared or not, compressed or
not) or stalled for ``GATEWAY_UPSTREAM_READ_TIMEOUT_S``; an answer that is not valid HTTP.

The upstream is a raw TCP server on loopback (it must send what a well-behaved HTTP server never
would: a short body under a longer ``Content-Length``, a chunked body without end, a bad status
line); the client is aiohttp against the whole gateway. Each is the upstream's failure: an
Anthropic-shaped 502 ``api_error`` (504 ``timeout_error`` for the stall) counted in
``gateway_upstream_errors_total``, with ``x-should-retry`` saying whether a retry can help, and no
traceback; an oversized answer is not read past the limit. A body within the limit, chunked and
gzip-compressed, still arrives whole.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from emulators.bedrock_config import DEFAULT_ACCESS_KEY_ID, DEFAULT_SECRET_ACCESS_KEY
from gateway.app import create_app
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import RunningServer, running
from tests.providers.bedrock_harness import apply_aws_env, isolated_aws_files
from tests.support.local_app import serving_raw

pytestmark = pytest.mark.timeout(60)

KEY = "sk-gw-bodies"
LIMIT = 64 * 1024
READ_TIMEOUT_S = 0.5
MESSAGE: dict[str, Any] = {
    "id": "msg_bodies",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "x" * 20_000}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 3, "output_tokens": 5000},
}
Writer = Callable[[asyncio.StreamWriter], Awaitable[None]]


@dataclass
class RawUpstream:
    """Answers every request with ``answer``; ``written`` counts the body bytes it got out, and
    ``gone`` is set once the gateway closed a connection it was still writing to."""

    answer: Writer | None = None
    url: str = ""
    written: int = 0
    gone: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                assert self.answer is not None
                await self.answer(writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            self.gone.set()
        finally:
            writer.close()

    def head(self, writer: asyncio.StreamWriter, *fields: str) -> None:
        lines = ["HTTP/1.1 200 OK", "content-type: application/json", *fields]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())

    async def body(self, writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(data)
        await writer.drain()
        self.written += len(data)


@pytest.fixture
async def upstream() -> AsyncIterator[RawUpstream]:
    raw = RawUpstream()
    async with serving_raw(raw.handle) as raw.url:
        yield raw


async def ask(server: RunningServer, path: str = "/v1/messages") -> tuple[int, dict[str, str], Any]:
    body = {"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    async with (
        aiohttp.ClientSession() as client,
        client.post(
            f"{server.base_url}{path}",
            json=body,
            headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
            allow_redirects=False,  # a redirect the gateway relayed would show as such
        ) as response,
    ):
        return response.status, dict(response.headers), orjson.loads(await response.read())


def gateway(env: dict[str, str], metrics: GatewayMetrics) -> Any:
    settings = Settings.from_environ(
        {
            "GATEWAY_API_KEYS": KEY,
            "GATEWAY_MAX_RETRIES": "0",
            "GATEWAY_MAX_UPSTREAM_BODY_BYTES": str(LIMIT),
            "GATEWAY_UPSTREAM_READ_TIMEOUT_S": str(READ_TIMEOUT_S),
            **env,
        }
    )
    return running(create_app(settings, metrics=metrics), "127.0.0.1", 0)


def first_party(upstream: RawUpstream) -> dict[str, str]:
    return {"ANTHROPIC_API_KEY": "sk-upstream", "ANTHROPIC_BASE_URL": upstream.url}


def upstream_errors(metrics: GatewayMetrics, provider: str = "anthropic", kind: str = "api_error") -> float:
    labels = {"provider": provider, "type": kind}
    return metrics.registry.get_sample_value("gateway_upstream_errors_total", labels) or 0.0


def assert_502(answer: tuple[int, dict[str, str], Any], words: str, retry: str) -> None:
    status, headers, body = answer
    assert status == 502, body
    assert body["type"] == "error" and body["error"]["type"] == "api_error"
    assert words in body["error"]["message"]
    assert headers["x-should-retry"] == retry
    assert "x-client-request-id" in headers


async def test_an_answer_cut_off_before_its_length_is_a_502_to_retry(
    upstream: RawUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    async def cut(writer: asyncio.StreamWriter) -> None:
        upstream.head(writer, "content-length: 50000")  # within the limit
        await upstream.body(writer, b'{"id": "msg_cut", ' + b" " * 1000)
        writer.close()  # the rest never comes

    upstream.answer = cut
    metrics = GatewayMetrics()
    with caplog.at_level(logging.ERROR):
        async with gateway(first_party(upstream), metrics) as server:
            assert_502(await ask(server), "cut off before its end", "true")
    assert upstream_errors(metrics) == 1
    assert not [r for r in caplog.records if "unhandled error" in r.getMessage()]


@pytest.mark.parametrize(
    "body", [b"<html><body>Please sign in to the proxy</body></html>", b"", b"this is not json", b"[1, 2]"]
)
async def test_a_200_that_is_not_a_message_is_a_502_to_retry(upstream: RawUpstream, body: bytes) -> None:
    """A proxy's login page, an empty body, bytes that are not a JSON object: relayed as a 200 they
    left the SDK to fail on parsing (and counted as a success)."""

    async def page(writer: asyncio.StreamWriter) -> None:
        upstream.head(writer, f"content-length: {len(body)}")
        await upstream.body(writer, body)

    upstream.answer = page
    metrics = GatewayMetrics()
    async with gateway(first_party(upstream), metrics) as server:
        assert_502(await ask(server), "answered 200 with a body that is not a Message", "true")
    assert upstream_errors(metrics) == 1


async def test_a_declared_length_over_the_limit_is_refused_unread(upstream: RawUpstream) -> None:
    async def declared(writer: asyncio.StreamWriter) -> None:
        upstream.head(writer, f"content-length: {LIMIT * 100}")
        for _ in range(100):
            await upstream.body(writer, b" " * LIMIT)

    upstream.answer = declared
    metrics = GatewayMetrics()
    async with gateway(first_party(upstream), metrics) as server:
        assert_502(await ask(server), f"({LIMIT * 100} bytes) exceeds {LIMIT} bytes", "false")
        await asyncio.wait_for(upstream.gone.wait(), 10)  # the gateway closed the connection
    assert upstream.written < LIMIT * 100
    assert upstream_errors(metrics) == 1


async def test_an_endless_chunked_answer_is_read_up_to_the_limit_only(upstream: RawUpstream) -> None:
    async def endless(writer: asyncio.StreamWriter) -> None:
        upstream.head(writer, "transfer-encoding: chunked")
        piece = b" " * 16384
        while True:  # until the gateway hangs up
            await upstream.body(writer, b"4000\r\n" + piece + b"\r\n")

    upstream.answer = endless
    metrics = GatewayMetrics()
    async with gateway(first_party(upstream), metrics) as server:
        assert_502(await ask(server), f"exceeds {LIMIT} bytes", "false")
        await asyncio.wait_for(upstream.gone.wait(), 10)
    # what it wrote before the gateway hung up: the limit, plus what sockets buffer on the way
    assert upstream.written < LIMIT + 8 * 1024 * 1024
    assert upstream_errors(metrics) == 1


async def test_a_compressed_answer_is_bounded_by_its_decoded_size(upstream: RawUpstream) -> None:
    bomb = gzip.compress(b" " * (LIMIT * 200))  # ~13 KB on the wire, 12.5 MiB decoded

    async def compressed(writer: asyncio.StreamWriter) -> None:
        upstream.head(writer, "content-encoding: gzip", f"content-length: {len(bomb)}")
        await upstream.body(writer, bomb)

    upstream.answer = compressed
    metrics = GatewayMetrics()
    async with gateway(first_party(upstream), metrics) as server:
        assert_502(await ask(server), f"exceeds {LIMIT} bytes", "false")
    assert len(bomb) < LIMIT and upstream_errors(metrics) == 1


async def test_an_answer_within_the_limit_arrives_whole(upstream: RawUpstream) -> None:
    encoded = gzip.compress(orjson.dumps(MESSAGE))

    async def chunked_gzip(writer: asyncio.StreamWriter) -> None:
        upstream.head(writer, "content-encoding: gzip", "transfer-encoding: chunked")
        for at in range(0, len(encoded), 1000):
            piece = encoded[at : at + 1000]
            await upstream.body(writer, f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        await upstream.body(writer, b"0\r\n\r\n")

    upstream.answer = chunked_gzip
    metrics = GatewayMetrics()
    async with gateway(first_party(upstream), metrics) as server:
        for _ in range(2):  # the connection goes back to the pool and serves again
            status, _, body = await ask(server)
            assert status == 200 and body == MESSAGE
    assert upstream_errors(metrics) == 0


def bedrock(upstream: RawUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = {
        "GATEWAY_PROVIDER": "bedrock",
        "AWS_REGION": "us-east-1",
        "ANTHROPIC_BEDROCK_BASE_URL": upstream.url,
        "AWS_ACCESS_KEY_ID": DEFAULT_ACCESS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": DEFAULT_SECRET_ACCESS_KEY,
        **isolated_aws_files(tmp_path),
    }
    apply_aws_env(monkeypatch, env)  # botocore reads its credentials from the environment
    return env


async def test_bedrock_answers_are_bounded_too(
    upstream: RawUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def declared(writer: asyncio.StreamWriter) -> None:
        upstream.head(writer, f"content-length: {LIMIT * 2}")
        await upstream.body(writer, b" " * (LIMIT * 2))

    upstream.answer = declared
    metrics = GatewayMetrics()
    async with gateway(bedrock(upstream, tmp_path, monkeypatch), metrics) as server:
        status, headers, body = await ask(server)
    assert status == 502 and body["error"]["type"] == "api_error", body
    assert f"exceeds {LIMIT} bytes" in body["error"]["message"]
    assert headers["x-should-retry"] == "false"
    assert upstream_errors(metrics, "bedrock") == 1


async def test_a_bedrock_answer_that_stalls_is_a_504(
    upstream: RawUpstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def stalled(writer: asyncio.StreamWriter) -> None:
        upstream.head(writer, "content-length: 5000")
        await upstream.body(writer, b'{"id": "msg_stalled", ')
        await asyncio.sleep(30)

    upstream.answer = stalled
    metrics = GatewayMetrics()
    async with gateway(bedrock(upstream, tmp_path, monkeypatch), metrics) as server:
        status, headers, body = await ask(server)
    assert status == 504 and body["error"]["type"] == "timeout_error", body
    assert "went silent" in body["error"]["message"] and headers["x-should-retry"] == "true"
    assert upstream_errors(metrics, "bedrock", kind="timeout_error") == 1


async def test_an_answer_that_stalls_mid_body_is_a_504_after_the_read_timeout(upstream: RawUpstream) -> None:
    async def stalled(writer: asyncio.StreamWriter) -> None:
        upstream.head(writer, "content-length: 5000")
        await upstream.body(writer, b'{"id": "msg_stalled", ')
        await asyncio.sleep(30)  # the rest would come far too late

    upstream.answer = stalled
    metrics = GatewayMetrics()
    async with gateway(first_party(upstream), metrics) as server:
        started = asyncio.get_running_loop().time()
        status, headers, body = await ask(server)
        waited = asyncio.get_running_loop().time() - started
    assert status == 504 and body["error"]["type"] == "timeout_error", body
    assert "went silent" in body["error"]["message"] and headers["x-should-retry"] == "true"
    assert READ_TIMEOUT_S <= waited < READ_TIMEOUT_S + 5
    assert upstream_errors(metrics, kind="timeout_error") == 1


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (b"HTTZ/9 nonsense\r\n\r\n", "Bad status line"),
        (
            b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * 100_000 + b"\r\ncontent-length: 2\r\n\r\n{}",
            "Got more than",
        ),
        (
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            "Invalid character in chunk size",
        ),
    ],
    ids=["bad-status-line", "oversized-header", "bad-chunk-size"],
)
async def test_an_answer_that_is_not_http_is_a_502(
    upstream: RawUpstream, caplog: pytest.LogCaptureFixture, answer: bytes, reason: str
) -> None:
    async def invalid(writer: asyncio.StreamWriter) -> None:
        await upstream.body(writer, answer)
        writer.close()

    upstream.answer = invalid
    metrics = GatewayMetrics()
    with caplog.at_level(logging.ERROR):
        async with gateway(first_party(upstream), metrics) as server:
            status, headers, body = await ask(server)
    assert status == 502 and body["error"]["type"] == "api_error", body
    message = body["error"]["message"]
    assert "answered with invalid HTTP" in message and reason in message
    assert "aaaa" not in message and "nonsense" not in message  # named, not quoted
    assert headers["x-should-retry"] == "true"
    assert upstream_errors(metrics) == 1
    assert not [r for r in caplog.records if "unhandled error" in r.getMessage()]


async def test_an_error_answer_cut_off_keeps_its_status(upstream: RawUpstream) -> None:
    async def cut_overloaded(writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 529 Overloaded\r\ncontent-type: application/json\r\ncontent-length: 5000\r\n\r\n"
        )
        await upstream.body(writer, b'{"type": "error", "error": {"type": "overloaded_error", ')
        writer.close()

    upstream.answer = cut_overloaded
    metrics = GatewayMetrics()
    async with gateway(first_party(upstream), metrics) as server:
        status, _, body = await ask(server)
    assert status == 529, body  # the status line said what failed; the body is ours
    assert body["error"]["type"] == "overloaded_error"
    assert "answered 529" in body["error"]["message"] and "cut off" in body["error"]["message"]
    assert upstream_errors(metrics, kind="overloaded_error") == 1


@pytest.mark.parametrize("status", [301, 307, 308])
async def test_a_redirect_is_neither_followed_nor_relayed(upstream: RawUpstream, status: int) -> None:
    # e.g. an http:// base URL answered with a redirect to https://: relayed, a client that follows
    # redirects (the Python SDK does) would take its gateway key and prompt to the Location
    arrived: list[int] = []

    async def redirect(writer: asyncio.StreamWriter) -> None:
        arrived.append(1)
        location = "https://elsewhere.example:8443/v1/messages?key=secret-in-query"
        lines = [f"HTTP/1.1 {status} Moved", f"location: {location}", "content-length: 0"]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await writer.drain()

    upstream.answer = redirect
    metrics = GatewayMetrics()
    async with gateway(first_party(upstream), metrics) as server:
        status_seen, headers, body = await ask(server)
    assert status_seen == 502 and body["error"]["type"] == "api_error", body
    message = body["error"]["message"]
    assert f"answered {status}" in message and "elsewhere.example:8443" in message
    assert "secret-in-query" not in message and "location" not in headers
    assert headers["x-should-retry"] == "false" and len(arrived) == 1  # not followed, not retried
    assert upstream_errors(metrics) == 1
