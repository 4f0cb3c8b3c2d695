"""The accumulator: complete blocks out of stream events; tool input JSON parsed once per block."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

import loop.stream
from loop.outcome import ApiErrorInfo, ToolUse
from loop.stream import TurnAccumulator
from loop.testing import FakeResponse, text, thinking, tool_use


def accumulate(events: list[dict[str, Any]]) -> tuple[TurnAccumulator, list[ToolUse]]:
    accumulator = TurnAccumulator()
    completed = [t for t in (accumulator.feed(e) for e in events) if t is not None]
    return accumulator, completed


def test_blocks_are_rebuilt_exactly() -> None:
    response = FakeResponse.of(
        thinking("let me think about it", signature="c2ln"),
        text("Reading the file now."),
        tool_use("read_file", {"path": "src/a.py", "lines": [1, 2], "deep": {"x": "é"}}, id="toolu_1"),
        chunk_chars=3,
    )
    accumulator, completed = accumulate(response.events())
    outcome = accumulator.outcome()
    assert list(outcome.content) == list(response.blocks)
    assert completed == [
        ToolUse("toolu_1", "read_file", {"path": "src/a.py", "lines": [1, 2], "deep": {"x": "é"}})
    ]
    assert outcome.stop_reason == "tool_use" and outcome.complete and outcome.error is None
    assert outcome.message_id == "msg_fake_1"


def test_tool_input_is_parsed_once_at_block_stop(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[str] = []
    real_loads = orjson.loads

    def counting_loads(data: str) -> Any:
        parsed.append(data)
        return real_loads(data)

    monkeypatch.setattr(loop.stream.orjson, "loads", counting_loads)
    big = {"content": "x" * 5000}
    response = FakeResponse.of(tool_use("write_file", big, id="toolu_1"), chunk_chars=16)
    events = response.events()
    deltas = [e for e in events if e.get("delta", {}).get("type") == "input_json_delta"]
    assert len(deltas) > 300
    _, completed = accumulate(events)
    assert len(parsed) == 1 and completed[0].input == big


def test_usage_is_cumulative_and_overwritten_by_message_delta() -> None:
    response = FakeResponse.of(
        text("hi"),
        usage={
            "input_tokens": 12,
            "cache_read_input_tokens": 300,
            "cache_creation_input_tokens": 40,
            "output_tokens": 9,
        },
    )
    usage = accumulate(response.events())[0].outcome().usage
    assert (usage.input_tokens, usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (
        12,
        300,
        40,
    )
    assert usage.output_tokens == 9


def test_unsigned_thinking_is_dropped_and_incomplete_blocks_are_not_kept() -> None:
    response = FakeResponse.of(thinking("no signature", signature=""), text("answer"), text("cut off here"))
    events = response.events()
    last_stop = max(i for i, e in enumerate(events) if e["type"] == "content_block_stop")
    outcome = accumulate(events[:last_stop])[0].outcome()  # the third block never stops
    assert list(outcome.content) == [text("answer")]
    assert not outcome.complete


def test_malformed_tool_json_is_reported_not_raised() -> None:
    block = tool_use("read_file", {}, id="toolu_bad", raw_json='{"path": "a')
    outcome = accumulate(FakeResponse.of(block).events())[0].outcome()
    (call,) = outcome.tool_uses
    assert call.input is None and call.input_error is not None and "not valid JSON" in call.input_error
    assert outcome.content[0]["input"] == {}


def test_non_object_tool_json() -> None:
    block = tool_use("read_file", {}, id="toolu_list", raw_json="[1, 2]")
    (call,) = accumulate(FakeResponse.of(block).events())[0].outcome().tool_uses
    assert call.input is None and call.input_error == "the tool input must be a JSON object, got list"


def test_empty_tool_json_is_an_empty_input() -> None:
    block = tool_use("list_directory", {}, id="toolu_e", raw_json="")
    (call,) = accumulate(FakeResponse.of(block).events())[0].outcome().tool_uses
    assert call.input == {}


def test_error_event_mid_stream() -> None:
    response = FakeResponse.of(
        text("hello there"), fail_after=3, error_type="overloaded_error", error_message="Overloaded"
    )
    outcome = accumulate(response.events())[0].outcome()
    assert outcome.error == ApiErrorInfo("overloaded_error", "Overloaded", None)
    assert not outcome.complete and outcome.content == ()


def test_http_error_event_carries_the_status() -> None:
    outcome = accumulate(FakeResponse.http_error(529, "overloaded_error", "Overloaded").events())[0].outcome()
    assert outcome.error == ApiErrorInfo("overloaded_error", "Overloaded", 529)


def test_citations_and_unknown_block_types_are_kept() -> None:
    citation = {
        "type": "char_location",
        "cited_text": "x",
        "document_index": 0,
        "start_char_index": 0,
        "end_char_index": 1,
    }
    events = [
        {"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 1}}},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "text", "text": "", "citations": None},
        },
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "cited"}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "citations_delta", "citation": citation},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "redacted_thinking", "data": "abc"},
        },
        {"type": "content_block_stop", "index": 1},
        {"type": "ping"},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}},
        {"type": "message_stop"},
    ]
    outcome = accumulate(events)[0].outcome()
    assert list(outcome.content) == [
        {"type": "text", "text": "cited", "citations": [citation]},
        {"type": "redacted_thinking", "data": "abc"},
    ]
