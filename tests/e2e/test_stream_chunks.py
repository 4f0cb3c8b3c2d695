"""Streams stay streams: whatever an upstream's SSE looks like and however it is cut into writes,
the gateway forwards exactly the upstream's bytes and observes the same usage as an event-by-event
parser would (the oracle of ``tests/unit/test_stream_observer.py``).

A scripted upstream on loopback writes each generated stream in the generated pieces (with a
scheduler pass between writes, so the gateway mostly reads them as separate chunks); the gateway
runs in a background event loop; a plain aiohttp client reads the raw body.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.http_writer import StreamWriter
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gateway.app import create_app
from gateway.config import Settings
from gateway.metrics import GatewayMetrics
from gateway.process import running
from tests.support.threaded import LoopThread
from tests.unit.test_stream_observer import cut, error_first, oracle, streams

KEY = "sk-gw-stream-chunks-5b1e"
UPSTREAM_KEY = "sk-upstream-stream-chunks-9d03"


@dataclass
class Scripted:
    """The upstream: answers each streaming request with the next scripted list of writes."""

    script: list[list[bytes] | bytes] = field(default_factory=list)
    writers: list[object] = field(default_factory=list)  # the upstream's own response writers

    async def messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        assert body.get("stream") is True, "only streams are scripted"
        response = web.StreamResponse(headers={"content-type": "text/event-stream", "request-id": "req_1"})
        await response.prepare(request)
        self.writers.append(request._payload_writer)
        pieces = self.script.pop(0)
        if isinstance(pieces, bytes):  # the whole body and its end in one write
            await response.write_eof(pieces)
            return response
        for piece in pieces:
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

    def relay(self, pieces: list[bytes] | bytes) -> bytes:
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
    # an error before any content is answered as a failure, not relayed (test_error_before_content)
    assume(not error_first(stream))
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


def test_a_stream_cut_mid_event_ends_with_whole_events_and_a_parsable_error_event(stack: Stack) -> None:
    """Half an event never reaches the client: the cut event is dropped, the error event is whole.

    (Before, the error event was appended to the half event: one broken event whose data was not
    JSON, so the client's SDK failed on a parse error instead of reporting the upstream's cut.)
    """
    start = (
        b'event: message_start\ndata: {"type":"message_start","message":{"usage":{"output_tokens":1}}}\n\n'
    )
    content = b'event: content_block_start\ndata: {"type":"content_block_start","index":0}\n\n'
    delta = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{}}\n\n'
    body = stack.relay([start, content + delta[:30], delta[30:45]])  # then the upstream ends
    assert body.startswith(start + content)
    tail = body[len(start + content) :]
    assert tail.startswith(b"event: error\ndata: ") and tail.endswith(b"\n\n"), tail
    error = orjson.loads(tail[len(b"event: error\ndata: ") :])
    assert error["type"] == "error" and error["error"]["type"] == "api_error"


def test_a_stream_that_arrives_whole_leaves_in_one_write(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Headers, the stream and the chunked terminator go to the client in one socket write.

    Each write to a loopback peer costs a system call and a wake-up of the reader: a stream the
    upstream delivered in one piece (the common case for short answers) is sent in one, not three
    (headers, body, end).
    """
    stream = b"".join(
        b"event: %s\ndata: %s\n\n" % (name.encode(), orjson.dumps({"type": name, **extra}))
        for name, extra in [
            ("message_start", {"message": {"usage": {"input_tokens": 3, "output_tokens": 1}}}),
            ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
            ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "hi"}}),
            ("content_block_stop", {"index": 0}),
            ("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
            ("message_stop", {}),
        ]
    )
    # keyed by the writer objects themselves (kept alive: an id() could be reused by a new writer)
    writes: defaultdict[StreamWriter, list[bytes]] = defaultdict(list)
    write, writelines = StreamWriter._write, StreamWriter._writelines
    stack.upstream.writers.clear()

    def record_write(self: StreamWriter, chunk: bytes) -> None:
        writes[self].append(bytes(chunk))
        write(self, chunk)

    def record_writelines(self: StreamWriter, chunks: Iterable[bytes]) -> None:
        chunks = [bytes(c) for c in chunks]
        writes[self].append(b"".join(chunks))
        writelines(self, chunks)

    monkeypatch.setattr(StreamWriter, "_write", record_write)
    monkeypatch.setattr(StreamWriter, "_writelines", record_writelines)
    assert stack.relay(stream) == stream
    monkeypatch.undo()
    sent = [
        made
        for writer, made in writes.items()
        if not any(writer is mine for mine in stack.upstream.writers) and made[0].startswith(b"HTTP/1.1 200")
    ]
    assert len(sent) == 1, sent  # the gateway's response to the test client
    assert len(sent[0]) == 1, f"{len(sent[0])} writes: {sent[0]!r}"
    assert b"message_stop" in sent[0][0] and sent[0][0].endswith(b"0\r\n\r\n")
