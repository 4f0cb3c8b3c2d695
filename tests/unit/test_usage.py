from __future__ import annotations

import orjson

from gateway.streaming.sse import encode_event
from gateway.streaming.usage import StreamObserver, Usage, usage_from_message


def _stream(*events: dict[str, object]) -> bytes:
    return b"".join(encode_event(str(e["type"]), e) for e in events)


START = {
    "type": "message_start",
    "message": {
        "id": "msg_1",
        "usage": {
            "input_tokens": 10,
            "output_tokens": 1,
            "cache_creation_input_tokens": 50,
            "cache_read_input_tokens": 7,
            "cache_creation": {"ephemeral_5m_input_tokens": 20, "ephemeral_1h_input_tokens": 30},
        },
    },
}


def test_stream_usage_is_cumulative_and_overwrites() -> None:
    ticks = iter([1.0, 2.0, 3.0])
    observer = StreamObserver(clock=lambda: next(ticks))
    body = _stream(
        START,
        {"type": "ping"},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 9, "input_tokens": 11},
        },
        {"type": "message_stop"},
    )
    for i in range(0, len(body), 13):
        observer.feed(body[i : i + 13])
    assert observer.usage == Usage(11, 9, 7, 20, 30)
    assert observer.stop_reason == "tool_use"
    assert observer.first_content_at == 1.0
    assert observer.content_seen
    assert observer.finished and observer.message_started


def test_error_event_finishes_the_stream() -> None:
    observer = StreamObserver()
    observer.feed(_stream(START, {"type": "error", "error": {"type": "overloaded_error", "message": "x"}}))
    assert observer.finished and observer.error_type == "overloaded_error"
    assert not observer.message_stopped


def test_stream_without_terminal_event_is_not_finished() -> None:
    observer = StreamObserver()
    observer.feed(_stream(START))
    assert not observer.finished


def test_message_usage_without_ttl_breakdown_counts_as_5m() -> None:
    body = orjson.dumps(
        {
            "stop_reason": "end_turn",
            "usage": {
                "input_tokens": 3,
                "output_tokens": 4,
                "cache_creation_input_tokens": 100,
                "cache_read_input_tokens": 5,
            },
        }
    )
    usage, stop = usage_from_message(body)
    assert usage == Usage(3, 4, 5, 100, 0)
    assert usage.cache_creation_input_tokens == 100
    assert stop == "end_turn"


def test_garbage_bodies_are_not_messages_and_bad_fields_give_empty_usage() -> None:
    assert usage_from_message(b"not json") is None  # the relay answers 502 (not a Message)
    assert usage_from_message(b"[1]") is None
    observed = usage_from_message(b'{"usage": {"input_tokens": "x", "output_tokens": true}}')
    assert observed is not None and observed[0] == Usage()
