"""Streams whose events the SDKs cannot parse, and non-streaming fallback answers that are no Message.

Before: a ``message_start`` or ``message_delta`` whose data was not a JSON object was relayed
(the gateway decodes both, and ignored the failure), so the SDK's stream died on a
``JSONDecodeError`` or ``AttributeError`` instead of an API error it retries; and a fallback
answer of ``[]``, ``null`` or a Message with a ``"usage": "..."`` field failed the request with a
500 and a traceback. Now such an event is a stream failure like a cut (before content: the
fallback, or the next upstream; after it: an ``error`` event instead of the broken event), and a
fallback answer that holds no Message is a ``502 api_error``.
"""

from __future__ import annotations

import logging

import orjson
import pytest

from gateway.streaming.failure import StreamFailure
from gateway.streaming.sse import encode_event
from gateway.streaming.usage import StreamObserver
from tests.support.raw_upstream import ScriptedUpstream, Seen, http_answer, post, scripted_gateway
from tests.support.sse_answers import message_start

pytestmark = pytest.mark.timeout(60)

MODEL = "claude-sonnet-4-5"
MESSAGE = {
    "id": "msg_fb",
    "type": "message",
    "role": "assistant",
    "model": MODEL,
    "content": [{"type": "text", "text": "from the fallback"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 3, "output_tokens": 4},
}
START = message_start(MODEL)
BLOCK = encode_event(
    "content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
)
DELTA = encode_event(
    "content_block_delta",
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "streamed"}},
)
STOP = encode_event("message_stop", {"type": "message_stop"})


def answers(stream: bytes, fallback: bytes = orjson.dumps(MESSAGE), later: bytes = b"") -> ScriptedUpstream:
    """``stream`` (then ``later``, in a write of its own) for the streaming request, ``fallback``
    (a 200) for the non-streaming one."""

    def answer(seen: Seen) -> bytes | list[bytes]:
        if orjson.loads(seen.body).get("stream"):
            head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
            return [head + stream, later] if later else head + stream
        return http_answer(200, fallback, {"content-type": "application/json"})

    return ScriptedUpstream(answer)


def unhandled(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "unhandled error" in r.getMessage()]


@pytest.mark.parametrize(
    "start",
    [b"event: message_start\ndata: {garbage\n\n", encode_event("message_start", {"type": "message_start", "message": []})],
    ids=["not-json", "message-not-an-object"],
)
async def test_a_malformed_message_start_falls_back_before_content(start: bytes) -> None:
    upstream = answers(start + BLOCK + DELTA + STOP)
    async with scripted_gateway(upstream) as (server, _):
        status, headers, body = await post(server, stream=True)
    assert status == 200 and headers["x-gateway-fallback"] == "non_streaming"
    assert b"from the fallback" in body and b"event: message_stop" in body
    assert b"garbage" not in body and b"streamed" not in body
    assert len(upstream.requests) == 2


async def test_a_malformed_message_delta_after_content_ends_with_an_error_event() -> None:
    broken = b"event: message_delta\ndata: [1, 2\n\n"
    async with scripted_gateway(answers(START + BLOCK + DELTA, later=broken + STOP)) as (server, _):
        status, _, body = await post(server, stream=True)
    assert status == 200 and b"streamed" in body  # content had gone out: no fallback now
    assert b"[1, 2" not in body and b"event: message_stop" not in body
    *_, last = [event for event in body.split(b"\n\n") if event]
    assert last.startswith(b"event: error\n")
    error = orjson.loads(last.split(b"data: ", 1)[1])
    assert error["error"]["type"] == "api_error" and "message_delta" in error["error"]["message"]


@pytest.mark.parametrize("fallback", [b"[]", b"null", b'"x"', b"5"])
async def test_a_fallback_answer_that_is_no_message_is_a_502(
    fallback: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        async with scripted_gateway(answers(START[:20], fallback)) as (server, _):
            status, _, body = await post(server, stream=True)
    assert status == 502, body
    assert orjson.loads(body)["error"] == {"type": "api_error", "message": "non-streaming fallback gave no Message"}
    assert unhandled(caplog) == []


@pytest.mark.parametrize(
    "fields",
    [{"usage": "ab"}, {"usage": [1]}, {"usage": {"output_tokens": "lots"}}, {"usage": True}, {"content": 5}],
)
async def test_a_fallback_message_with_fields_of_the_wrong_kind_is_played_back(
    fields: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        async with scripted_gateway(answers(START[:20], orjson.dumps({**MESSAGE, **fields}))) as (server, _):
            status, _, body = await post(server, stream=True)
    assert status == 200 and body.rstrip().endswith(b'data: {"type":"message_stop"}'), body
    assert unhandled(caplog) == []


def test_the_observer_does_not_judge_an_event_it_did_not_read() -> None:
    """An event over ``MAX_EVENT_BYTES`` is dispatched without its data: no failure for that."""
    observer = StreamObserver()
    observer._notable(b"message_delta", b"")
    observer._notable(b"message_start", b"")
    assert observer.message_started
    with pytest.raises(StreamFailure, match="message_delta event that is not a JSON object"):
        observer._notable(b"message_delta", b"not json")


async def test_an_error_event_of_any_size_is_answered_within_bounds(caplog: pytest.LogCaptureFixture) -> None:
    """Its type and message were taken whole: a 5,000-character type was the client's ``error.type``
    and the access line's, a 500 KB message the answer's and the log's (a few such requests filled
    the 4 MiB log buffer, and other requests' access lines were dropped)."""
    huge = {"type": "error", "error": {"type": "invalid_request_error", "message": "m" * 500_000}}
    garbage = {"type": "error", "error": {"type": "x" * 5000, "message": "what"}}
    with caplog.at_level(logging.INFO):
        async with scripted_gateway(answers(START + encode_event("error", huge))) as (server, _):
            status, _, body = await post(server, stream=True)
        assert status == 400 and len(orjson.loads(body)["error"]["message"]) == 4096
        async with scripted_gateway(answers(START + encode_event("error", garbage))) as (server, _):
            status, headers, body = await post(server, stream=True)
    assert status == 200 and headers["x-gateway-fallback"] == "non_streaming"  # no type: an api_error
    assert b"x" * 65 not in body
    assert max(len(record.getMessage()) for record in caplog.records) < 10_000
