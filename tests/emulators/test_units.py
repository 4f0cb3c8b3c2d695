"""Unit tests of the wire-independent parts: tokens, limits, schema values, scenarios, events."""

from __future__ import annotations

import json
from typing import Any

import pytest

from emulators import ApiError, EmulatorConfig, ManualClock, ModelOutput, PromptCache
from emulators.cache_model import CacheUsage
from emulators.catalog import DEFAULT_CATALOG, sdk_model_ids
from emulators.events import Turn, render_message, render_stream, split_words
from emulators.limits import apply_limits, cut_utf8
from emulators.prompt import flatten_prompt
from emulators.scenarios import find_markers, select_scenario, strip_markers
from emulators.schema_values import example_value
from emulators.tokens import (
    BLOCK_OVERHEAD,
    IMAGE_TOKENS,
    MESSAGE_OVERHEAD,
    REQUEST_OVERHEAD,
    TOOL_OVERHEAD,
    content_block_tokens,
    json_tokens,
    text_tokens,
    tool_tokens,
)
from emulators.validation import validate_body


def test_text_tokens_is_ceil_utf8_bytes_over_four() -> None:
    assert [text_tokens(s) for s in ("", "a", "abcd", "abcde", "é", "日本語")] == [0, 1, 1, 2, 1, 3]


def test_block_and_tool_tokens() -> None:
    assert content_block_tokens({"type": "text", "text": "abcdefgh"}) == BLOCK_OVERHEAD + 2
    assert content_block_tokens({"type": "image", "source": {}}) == BLOCK_OVERHEAD + IMAGE_TOKENS
    result = {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "abcd"}]}
    assert content_block_tokens(result) == BLOCK_OVERHEAD + BLOCK_OVERHEAD + 1
    marked = {"type": "text", "text": "abcd", "cache_control": {"type": "ephemeral"}}
    assert content_block_tokens(marked) == content_block_tokens({"type": "text", "text": "abcd"})
    tool = {"name": "t", "input_schema": {"type": "object"}}
    assert tool_tokens(tool) == TOOL_OVERHEAD + json_tokens(tool)


def test_flattened_prompt_total() -> None:
    body: Any = {
        "tools": [{"name": "t", "input_schema": {"type": "object"}}],
        "system": "abcd",
        "messages": [
            {"role": "user", "content": "abcdefgh"},
            {"role": "assistant", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]},
        ],
    }
    prompt = flatten_prompt(body)
    assert [b.path for b in prompt.blocks] == [
        "tools.0",
        "system",
        "messages.0.content",
        "messages.1.content.0",
        "messages.1.content.1",
    ]
    expected = (
        REQUEST_OVERHEAD
        + tool_tokens(body["tools"][0])
        + BLOCK_OVERHEAD
        + 1
        + MESSAGE_OVERHEAD
        + BLOCK_OVERHEAD
        + 2
        + MESSAGE_OVERHEAD
        + BLOCK_OVERHEAD
        + 1
        + BLOCK_OVERHEAD
        + 1
    )
    assert prompt.total_tokens == expected
    assert prompt.breakpoints == ()


def test_cut_utf8_never_splits_a_character() -> None:
    assert cut_utf8("aé日", 3) == "aé"
    assert cut_utf8("aé日", 5) == "aé"
    assert cut_utf8("aé日", 6) == "aé日"


def _text_output(*texts: str) -> ModelOutput:
    return ModelOutput(tuple({"type": "text", "text": t} for t in texts), "end_turn")


def test_limits() -> None:
    cut = apply_limits(_text_output("abcdefghij", "later"), max_tokens=2)
    assert cut.content == ({"type": "text", "text": "abcdefgh"},) and cut.stop_reason == "max_tokens"
    stopped = apply_limits(
        _text_output("one END two", "later"), max_tokens=100, stop_sequences=["END", "one"]
    )
    assert stopped.content == ({"type": "text", "text": ""},)
    assert (stopped.stop_reason, stopped.stop_sequence) == ("stop_sequence", "one")
    tool = ModelOutput(
        (
            {"type": "text", "text": "ab"},
            {"type": "tool_use", "id": "x", "name": "t", "input": {"a": "long value"}},
        ),
        "tool_use",
    )
    dropped = apply_limits(tool, max_tokens=2)
    assert [b["type"] for b in dropped.content] == ["text"] and dropped.stop_reason == "max_tokens"
    assert apply_limits(tool, max_tokens=100) == tool


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"type": "string"}, "v example"),
        ({"type": "string", "enum": ["a", "b"]}, "a"),
        ({"type": "integer", "minimum": 5}, 5),
        ({"type": "number", "exclusiveMinimum": 0}, 1.0),
        ({"type": "boolean"}, True),
        ({"type": ["null", "string"]}, "v example"),
        ({"anyOf": [{"type": "integer"}, {"type": "string"}]}, 1),
        ({"type": "array", "items": {"type": "string"}, "minItems": 2}, ["v example", "v example"]),
        (
            {"type": "object", "properties": {"a": {"type": "string"}, "b": {"const": 3}}, "required": ["b"]},
            {"b": 3},
        ),
        ({"properties": {"a": {"default": "d"}}}, {"a": "d"}),
    ],
)
def test_example_values(schema: dict[str, Any], value: Any) -> None:
    assert example_value(schema, "v") == value


def test_scenario_selection() -> None:
    assert select_scenario("plain").name == "text"
    assert select_scenario("x [[scenario:thinking]] y").explicit
    assert select_scenario("[[scenario:thinking]]", header_scenario="refusal").name == "refusal"
    err = select_scenario("[[scenario:error:529]]")
    assert (err.name, err.error_status) == ("error", 529)
    agent = select_scenario("[[scenario:agent]] [[tools: a , b]] [[tool:c]]")
    assert agent.tools == ("a", "b") and agent.tool == "c"
    assert select_scenario("", header_tools="x,y").tools == ("x", "y")
    assert find_markers("[[scenario:text]]") == {"scenario": "text"}
    assert strip_markers("a [[scenario:text]]b") == "a b"
    with pytest.raises(ApiError) as info:
        select_scenario("[[scenario:error:200]]")
    assert info.value.status == 400


def test_stream_events_rebuild_the_message() -> None:
    output = ModelOutput(
        (
            {"type": "thinking", "thinking": "a b c d e f g", "signature": "sig"},
            {"type": "text", "text": "one two three four five six seven"},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "t",
                "input": {"key": "a value that is long enough"},
            },
        ),
        "tool_use",
    )
    turn = Turn("msg_emu_1", "m", output, CacheUsage(10, 20, 30, 40))
    events = render_stream(turn)
    assert events[0]["type"] == "message_start" and events[-1] == {"type": "message_stop"}
    assert events[0]["message"]["usage"]["cache_creation"] == {
        "ephemeral_5m_input_tokens": 30,
        "ephemeral_1h_input_tokens": 40,
    }
    rebuilt: list[dict[str, Any]] = []
    for event in events[1:-2]:
        if event["type"] == "content_block_start":
            assert event["index"] == len(rebuilt)
            rebuilt.append(dict(event["content_block"]))
            if rebuilt[-1]["type"] == "tool_use":
                rebuilt[-1]["partial"] = ""
        elif event["type"] == "content_block_delta":
            block, delta = rebuilt[event["index"]], event["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
            else:
                block["partial"] += delta["partial_json"]
    rebuilt[2]["input"] = json.loads(rebuilt[2].pop("partial"))
    assert tuple(rebuilt) == output.content
    message = render_message(turn)
    assert message["content"] == list(output.content)
    delta = events[-2]
    assert delta["usage"] == {
        "input_tokens": 10,
        "cache_creation_input_tokens": 70,
        "cache_read_input_tokens": 20,
        "output_tokens": message["usage"]["output_tokens"],
    }


def test_stream_error_cuts_after_first_delta() -> None:
    output = ModelOutput(
        ({"type": "text", "text": "a b c d e f g h"},), "end_turn", stream_error=ApiError(529)
    )
    events = render_stream(Turn("msg_emu_1", "m", output, CacheUsage(1)))
    assert [e["type"] for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "error",
    ]
    assert events[-1]["error"] == {"type": "overloaded_error", "message": "Overloaded"}


def test_split_words_round_trips() -> None:
    for text in ("", "one", "  lead and trail  ", "a b c d e f g"):
        assert "".join(split_words(text)) == text
    assert len(split_words("a b c d e f g")) == 3


def test_prompt_cache_directly() -> None:
    clock = ManualClock()
    cache = PromptCache(clock)
    spec = DEFAULT_CATALOG.resolve("claude-opus-4-1")
    assert spec is not None and spec.min_cacheable_tokens == 1024
    body = {
        "model": spec.id,
        "max_tokens": 5,
        "system": [{"type": "text", "text": "x" * 8_000, "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "hi"}],
    }
    prompt = validate_body(body, "messages", EmulatorConfig(clock=clock)).prompt
    peek = cache.apply(spec, prompt, write=False)
    assert peek.cache_creation_5m > 0 and len(cache) == 0
    first = cache.apply(spec, prompt)
    assert first == peek and first.total_input_tokens == prompt.total_tokens
    (entry,) = cache.entries()
    assert entry.prefix_tokens == first.cache_creation_5m and entry.expires_at == clock.time() + 300
    second = cache.apply(spec, prompt)
    assert second.cache_read_input_tokens == first.cache_creation_5m
    assert cache.entries()[0].reads == 1
    cache.clear()
    assert len(cache) == 0


def test_catalog_contains_sdk_models() -> None:
    for model_id in sdk_model_ids():
        assert DEFAULT_CATALOG.resolve(model_id) is not None
    ids = [m.id for m in DEFAULT_CATALOG]
    assert len(ids) == len(set(ids))


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        EmulatorConfig(chunk_delay_s=-1)
    with pytest.raises(ValueError):
        ManualClock().advance(-1)
