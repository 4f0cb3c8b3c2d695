from __future__ import annotations

import anthropic
import httpx2 as httpx  # the SDK's HTTP library
import orjson
import pytest

from gateway.streaming.replay import message_to_sse
from gateway.streaming.usage import StreamObserver
from gateway.streaming.watchdog import IdleAction, IdleWatchdog


def test_watchdog_sequence() -> None:
    dog = IdleWatchdog(warn_after=45, abort_after=90, ping_every=15, last_data=0, last_write=0)
    assert dog.next_deadline() == 15
    assert dog.due(15) == [IdleAction.PING]
    dog.wrote(15)
    assert dog.next_deadline() == 30
    dog.wrote(30)
    assert dog.due(45) == [IdleAction.WARN, IdleAction.PING]
    dog.wrote(45)
    assert dog.due(50) == []  # warned once only
    assert dog.next_deadline() == 60
    dog.data_received(55)  # data resets the silence clock and re-arms the warning
    assert dog.next_deadline() == 60
    assert dog.due(100) == [IdleAction.WARN, IdleAction.PING]
    assert dog.due(145) == [IdleAction.ABORT]


@pytest.mark.parametrize("last", [13957.779051072, 0.1, 1e6 + 0.3, 7.7])
def test_something_is_due_at_the_deadline(last: float) -> None:
    """Woken at ``next_deadline()``, the reader must find an action: ``now - last >= 0.05`` is
    False for ``now = last + 0.05`` with the first value (rounding), which made the guard wait
    zero seconds and ask again, forever on a clock that only moves when the loop is idle."""
    dog = IdleWatchdog(warn_after=0.15, abort_after=0.3, ping_every=0.05, last_data=last, last_write=last)
    for _ in range(10):
        now = dog.next_deadline()
        actions = dog.due(now)
        assert actions, now
        if IdleAction.ABORT in actions:
            break
        dog.wrote(now)
    assert actions == [IdleAction.ABORT]


MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-6",
    "content": [
        {"type": "thinking", "thinking": "let me think " * 40, "signature": "sig=="},
        {"type": "text", "text": "Here you go. " * 50},
        {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.py", "n": [1, 2]}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 12,
        "output_tokens": 345,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 7,
        "cache_creation": {"ephemeral_5m_input_tokens": 7, "ephemeral_1h_input_tokens": 0},
    },
}


def test_replay_is_accumulated_back_by_the_sdk() -> None:
    body = b"".join(message_to_sse(MESSAGE))

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})

    client = anthropic.Anthropic(
        api_key="k",
        base_url="http://replay.test",
        http_client=httpx.Client(transport=httpx.MockTransport(handler)),
    )
    with client.messages.stream(model="claude-sonnet-4-6", max_tokens=10, messages=[]) as stream:
        final = stream.get_final_message()
    dumped = final.model_dump(exclude_none=True)
    for block in dumped["content"]:
        block.pop("parsed_output", None)
        block.pop("citations", None)
    assert dumped["content"] == MESSAGE["content"]
    assert final.stop_reason == "tool_use"
    assert final.usage.output_tokens == 345 and final.usage.cache_read_input_tokens == 100


def test_replay_usage_observed_like_a_stream() -> None:
    observer = StreamObserver()
    for frame in message_to_sse(MESSAGE):
        observer.feed(frame)
    assert observer.finished and observer.stop_reason == "tool_use"
    assert observer.usage.output_tokens == 345 and observer.usage.cache_write_5m_tokens == 7
    assert orjson.loads(next(iter(message_to_sse(MESSAGE))).split(b"data: ")[1])["message"]["content"] == []


@pytest.mark.parametrize("content", [[], [{"type": "redacted_thinking", "data": "xyz"}]])
def test_replay_edge_blocks(content: list[dict[str, object]]) -> None:
    frames = list(message_to_sse({**MESSAGE, "content": content, "stop_reason": "end_turn"}))
    assert frames[0].startswith(b"event: message_start") and frames[-1].startswith(b"event: message_stop")
