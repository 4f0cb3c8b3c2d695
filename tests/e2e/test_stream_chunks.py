"""Streams stay streams: whatever an upstream's SSE looks like and however it is cut into writes,
the gateway forwards exactly the upstream's bytes and observes the same usage as an event-by-event
parser would (the oracle of ``tests/unit/test_stream_observer.py``).

A scripted upstream on loopback writes each generated stream in the generated pieces (with a
scheduler pass between writes, so the gateway mostly reads them as separate chunks); the gateway
runs in a background event loop; a plain aiohttp client reads the raw body.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field

import aiohttp
import orjson
import pytest
from aiohttp import web
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.server import create_app
from gateway.service import running
from tests.support.threaded import LoopThread
from tests.unit.test_stream_observer import cut, oracle, streams

KEY = "sk-gw-stream-chunks-5b1e"
UPSTREAM_KEY = "sk-upstream-stream-chunks-9d03"


@dataclass
class Scripted:
    """The upstream: answers each streaming request with the next scripted list of writes."""

    script: list[list[bytes]] = field(default_factory=list)

    async def messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        assert body.get("stream") is True, "only streams are scripted"
        response = web.StreamResponse(headers={"content-type": "text/event-stream", "request-id": "req_1"})
        await response.prepare(request)
        for piece in self.script.pop(0):
            await response.write(piece)
            await asyncio.sleep(0)
        await response.write_eof()
        return response


@dataclass
class Stack:
    thread: LoopThread
    upstream: Scripted
    base_url: str
    metrics: GatewayMetrics

    def output_tokens(self) -> float:
        return sum(
            sample.value
            for metric in self.metrics.registry.collect()
            if metric.name == "gateway_tokens"
            for sample in metric.samples
            if sample.name == "gateway_tokens_total" and sample.labels.get("kind") == "output"
        )

    def relay(self, pieces: list[bytes]) -> bytes:
        self.upstream.script.append(pieces)

        async def call() -> bytes:
            async with aiohttp.ClientSession() as session:
                payload = {"model": "claude-sonnet-4-6", "max_tokens": 16, "stream": True, "messages": []}
                async with session.post(
                    f"{self.base_url}/v1/messages", json=payload, headers={"x-api-key": KEY}
                ) as response:
                    assert response.status == 200, await response.text()
                    return await response.read()

        return self.thread.run(call())


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    thread = LoopThread()
    try:
        upstream = Scripted()
        app = web.Application()
        app.router.add_post("/v1/messages", upstream.messages)
        server = thread.enter(running(app, "127.0.0.1", 0))
        environ = {
            "GATEWAY_API_KEYS": KEY,
            "ANTHROPIC_API_KEY": UPSTREAM_KEY,
            "ANTHROPIC_BASE_URL": server.base_url,
            "GATEWAY_MAX_RETRIES": "0",
        }
        metrics = GatewayMetrics()
        gateway = thread.enter(
            running(create_app(Settings.from_environ(environ), metrics=metrics), "127.0.0.1", 0)
        )
        yield Stack(thread, upstream, gateway.base_url, metrics)
    finally:
        thread.close()


@given(streams(), st.lists(st.integers(min_value=0), max_size=12))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_client_gets_exactly_the_upstream_bytes(stack: Stack, stream: bytes, points: list[int]) -> None:
    pieces = [piece for piece in cut(stream, points) if piece]
    expected = oracle([stream])
    assume(expected.message_stopped or expected.error_type is not None)  # complete streams only
    before = stack.output_tokens()
    assert stack.relay(pieces) == stream
    assert stack.output_tokens() - before == expected.usage.output_tokens


def test_a_stream_ending_after_content_gets_an_error_event_after_the_upstream_bytes(stack: Stack) -> None:
    start = (
        b'event: message_start\ndata: {"type":"message_start","message":{"usage":{"output_tokens":1}}}\n\n'
    )
    content = b'event: content_block_start\ndata: {"type":"content_block_start","index":0}\n\n'
    body = stack.relay([start, content[:20], content[20:]])
    assert body.startswith(start + content)
    tail = body[len(start + content) :]
    assert tail.startswith(b"event: error\ndata: ")
    assert orjson.loads(tail[len(b"event: error\ndata: ") :])["error"]["type"] == "api_error"
